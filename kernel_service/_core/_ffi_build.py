"""Builds the C core with cffi in API mode at install time (setup.py's cffi_modules)."""

from __future__ import annotations

import os
from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
DECLARATIONS = (HERE / "moirai_core_decls.h").read_text()
SOURCES = ("moirai_core.c", "moirai_rows.c", "moirai_scatter.c", "moirai_behavior.c")

ffibuilder = FFI()
ffibuilder.cdef(DECLARATIONS)
ffibuilder.set_source(
    "kernel_service._core._moirai_core",
    '#include <stddef.h>\n#include <stdint.h>\n#include "moirai_core_decls.h"\n',
    sources=[os.path.relpath(HERE / name) for name in SOURCES],
    include_dirs=[os.path.relpath(HERE)],
    # EGBE_KERNEL_CFLAGS overrides the optimization flags (e.g. "-O0 -g" for a debug build).
    extra_compile_args=os.environ.get("EGBE_KERNEL_CFLAGS", "-O3 -std=c11 -Wall -Wextra -Winit-self").split(),
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
