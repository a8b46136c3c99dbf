"""Builds the C core with cffi in API mode at install time (setup.py's cffi_modules)."""

from __future__ import annotations

import os
from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
DECLARATIONS = (HERE / "moirai_core_decls.h").read_text()
SOURCES = ("moirai_core.c", "moirai_rows.c", "moirai_scatter.c", "moirai_behavior.c")

# EGBE_CORE_SANITIZE=1 builds the core with AddressSanitizer and UBSan, every finding fatal (a test
# build: tests/kernel_service/test_sanitized_core.py loads it into a Python host with libasan preloaded).
SANITIZE = (
    ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-g"]
    if os.environ.get("EGBE_CORE_SANITIZE") == "1"
    else []
)

ffibuilder = FFI()
ffibuilder.cdef(DECLARATIONS)
ffibuilder.set_source(
    "kernel_service._core._moirai_core",
    '#include <stddef.h>\n#include <stdint.h>\n#include "moirai_core_decls.h"\n',
    sources=[os.path.relpath(HERE / name) for name in SOURCES],
    include_dirs=[os.path.relpath(HERE)],
    # EGBE_KERNEL_CFLAGS overrides the optimization flags (e.g. "-O0 -g" for a debug build).
    extra_compile_args=os.environ.get("EGBE_KERNEL_CFLAGS", "-O3 -std=c11 -Wall -Wextra -Winit-self").split()
    + SANITIZE,
    extra_link_args=SANITIZE,
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
