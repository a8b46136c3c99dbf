"""HTN methods compiled to flat arrays, so plan selection and stepping are a few numpy operations."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from kernel_service.behavior.htn import MethodLibrary

NO_METHOD = -1


@dataclass(frozen=True)
class CompiledMethods:
    """Method i's steps are step_kind[offset[i] : offset[i] + length[i]]; methods keep library order."""

    library: MethodLibrary
    step_kind: NDArray[np.uint8]
    offset: NDArray[np.int32]
    length: NDArray[np.int32]
    family: NDArray[np.uint32]
    requires: NDArray[np.uint32]
    excludes: NDArray[np.uint32]
    priority_bp: NDArray[np.int32]

    @classmethod
    def compile(cls, library: MethodLibrary) -> CompiledMethods:
        lengths = [len(m.steps) for m in library.methods]
        return cls(
            library=library,
            step_kind=np.array([s.action_kind for m in library.methods for s in m.steps], dtype=np.uint8),
            offset=np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int32),
            length=np.array(lengths, dtype=np.int32),
            family=np.array([m.family for m in library.methods], dtype=np.uint32),
            requires=np.array([m.requires_mask for m in library.methods], dtype=np.uint32),
            excludes=np.array([m.excludes_mask for m in library.methods], dtype=np.uint32),
            priority_bp=np.array([m.priority * 100 for m in library.methods], dtype=np.int32),
        )

    def select(self, family: NDArray[np.uint32], tag_mask: NDArray[np.uint32]) -> NDArray[np.int16]:
        """Vectorized `MethodLibrary.decompose`: the first applicable method in ranked order, else -1."""
        chosen = np.full(len(family), NO_METHOD, dtype=np.int16)
        for index in range(len(self.family)):
            applies = (
                (chosen == NO_METHOD)
                & (family == self.family[index])
                & ((tag_mask & self.requires[index]) == self.requires[index])
                & ((tag_mask & self.excludes[index]) == 0)
            )
            chosen[applies] = index
        return chosen
