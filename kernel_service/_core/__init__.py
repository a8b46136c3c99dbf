"""The compiled C tick core: exposes only cffi's `ffi` and `lib` (built at install from moirai_core.c)."""

from kernel_service._core._moirai_core import ffi, lib

__all__ = ["ffi", "lib"]
