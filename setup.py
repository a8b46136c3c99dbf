"""Builds the kernel's C core with cffi at install; everything else is declared in pyproject.toml."""

from setuptools import setup

setup(cffi_modules=["kernel_service/_core/_ffi_build.py:ffibuilder"])
