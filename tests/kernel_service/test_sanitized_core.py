"""The C core built with AddressSanitizer and UBSan (EGBE_CORE_SANITIZE=1) runs the snapshot fuzz
without a finding.

The build goes to a temporary copy of the kernel package, which shadows the installed one in a
child Python; ASan must be the process's first library, so the child runs with GCC's libasan
preloaded (and leak detection off: the interpreter keeps its objects to the end by design)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _libasan() -> str:
    found = subprocess.run(
        ["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert Path(found).exists(), f"GCC's AddressSanitizer runtime is missing ({found})"
    return found


def test_sanitized_core_runs_the_snapshot_fuzz_clean(tmp_path: Path) -> None:
    shutil.copytree(
        ROOT / "kernel_service",
        tmp_path / "kernel_service",
        ignore=shutil.ignore_patterns("__pycache__", "*.so"),
    )
    env = {**os.environ, "EGBE_CORE_SANITIZE": "1", "EGBE_KERNEL_CFLAGS": "-O1 -std=c11 -Wall -Wextra"}
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import runpy; runpy.run_path('kernel_service/_core/_ffi_build.py')['ffibuilder'].compile()",
        ],
        cwd=tmp_path,
        env=env,
        check=True,
        capture_output=True,
    )
    child = {
        **env,
        "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}",
        "LD_PRELOAD": _libasan(),
        "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",
        "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
    }
    probe = subprocess.run(
        [sys.executable, "-c", "import kernel_service._core as c; print(c.__file__)"],
        cwd=tmp_path,  # the working folder comes first on the child's path: the sanitized copy
        env=child,
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.strip() == str(tmp_path / "kernel_service" / "_core" / "__init__.py")
    fuzz = subprocess.run(
        [sys.executable, "-m", "tests.kernel_service.snapshot_fuzz", "--seed", "31", "--seconds", "20"],
        cwd=tmp_path,
        env=child,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = fuzz.stdout + fuzz.stderr
    assert "Sanitizer" not in output, output[-4000:]
    assert "runtime error" not in output, output[-4000:]
    assert fuzz.returncode == 0, output[-4000:]
    assert "fuzz: " in fuzz.stdout
