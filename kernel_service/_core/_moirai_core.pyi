# The cffi-compiled module: `ffi` builds and casts C data, `lib` holds moirai_tick.
from typing import Any

ffi: Any
lib: Any
