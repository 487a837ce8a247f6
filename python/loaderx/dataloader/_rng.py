"""The random generators a two-argument transform gets, and the StepInfo that
carries them: derived from the loader's seed, the step and a record's place in
the global batch only, so that augmentation repeats with any number of workers,
bindings or processes, and after a resume."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from .._schema import check_int
from ..errors import InvalidArgumentError

MAX_SEED = 2**64 - 1


def step_rng(seed: int, step: int) -> np.random.Generator:
    """The random generator a transform gets for `step` of a loader with `seed`:
    NumPy's Philox4x64-10 with the 128-bit key ``(seed, step)`` (two 64-bit words,
    ``seed`` first) and the counter at 0. Each (seed, step) pair is its own key,
    so the streams of different steps never overlap, and a step's stream depends
    on nothing else: not on the workers, the steps before it or a resume."""
    s = check_int(seed, "seed", 0, MAX_SEED)
    t = check_int(step, "step", 0, MAX_SEED)
    return np.random.Generator(np.random.Philox(key=s | t << 64))


def record_rng(seed: int, step: int, index: int) -> np.random.Generator:
    """The random generator of the record at place `index` of the global batch of
    `step` (``0 <= index < batch size``), for a loader with `seed`: NumPy's
    Philox4x64-10 with the key of ``step_rng(seed, step)`` and the 256-bit counter
    starting at the words ``(0, index, 1, 0)``. Its stream never meets the step's
    (whose counter's third word is 0) nor another record's (another second word)
    before 2**64 blocks, and it depends on nothing but the three numbers: not on
    the processes, the bindings or the workers that share the batch."""
    s = check_int(seed, "seed", 0, MAX_SEED)
    t = check_int(step, "step", 0, MAX_SEED)
    i = check_int(index, "index", 0, MAX_SEED)
    return np.random.Generator(np.random.Philox(key=s | t << 64, counter=i << 64 | 1 << 128))


class StepInfo:
    """What a two-argument transform receives with each step's shards.

    ``step`` is the step number (the one ``state_dict()`` counts); ``positions``
    the part of the sampler's global batch this process gathered (a read-only
    copy, before the split into bindings: the whole batch with one process);
    ``offset`` the place of ``positions[0]`` in the global batch and
    ``batch_size`` the global batch's size; ``process_index`` and
    ``process_count`` the loader's. ``rng`` is a NumPy Generator derived from the
    loader's seed and the step only (``step_rng(seed, step)``, the same in every
    process), created on first use; ``record_rng(j)`` one for the record at
    ``positions[j]``, derived from the seed, the step and ``offset + j``.

    ``pack_offsets`` is None unless the sampler draws packs (a
    ``loaderx.sampler.PackingSampler``): then it is a tuple with one read-only
    ``int64`` array per binding of this process, that binding's pack offsets
    relative to its own records (pack ``k`` of binding ``i`` is its records
    ``pack_offsets[i][k]`` to ``pack_offsets[i][k + 1]``), and ``positions``,
    ``offset`` and ``batch_size`` count records, not packs."""

    __slots__ = (
        "step",
        "positions",
        "offset",
        "batch_size",
        "process_index",
        "process_count",
        "pack_offsets",
        "_seed",
        "_rng",
    )

    step: int
    positions: npt.NDArray[np.integer]
    offset: int
    batch_size: int
    process_index: int
    process_count: int
    pack_offsets: tuple[npt.NDArray[np.int64], ...] | None

    def __init__(
        self,
        step: int,
        positions: npt.NDArray[np.integer],
        seed: int,
        *,
        offset: int = 0,
        batch_size: int | None = None,
        process_index: int = 0,
        process_count: int = 1,
        pack_offsets: tuple[npt.NDArray[np.int64], ...] | None = None,
    ) -> None:
        self.step = step
        self.positions = positions
        self.offset = offset
        self.batch_size = len(positions) if batch_size is None else batch_size
        self.process_index = process_index
        self.process_count = process_count
        self.pack_offsets = pack_offsets
        self._seed = seed
        self._rng: np.random.Generator | None = None

    @property
    def seed(self) -> int:
        """The loader's seed."""
        return self._seed

    @property
    def rng(self) -> np.random.Generator:
        """This step's generator: the same object on every access within the step."""
        if self._rng is None:
            self._rng = step_rng(self._seed, self.step)
        return self._rng

    def record_rng(self, j: int) -> np.random.Generator:
        """A new generator for the record at ``positions[j]``:
        ``record_rng(seed, step, offset + j)``. It is the same for that record of
        the global batch with any number of processes, bindings or workers."""
        n = len(self.positions)
        i = check_int(j, "j", 0)
        if i >= n:
            raise InvalidArgumentError(f"j must be in 0..{n - 1} (this step's positions), got {i}")
        return record_rng(self._seed, self.step, self.offset + i)

    def __repr__(self) -> str:
        where = ""
        if self.process_count != 1:
            where = (
                f", offset={self.offset}, batch_size={self.batch_size}, "
                f"process={self.process_index}/{self.process_count}"
            )
        if self.pack_offsets is not None:
            where += f", packs={sum(len(o) - 1 for o in self.pack_offsets)}"
        return (
            f"StepInfo(step={self.step}, positions={len(self.positions)}{where}, seed={self._seed})"
        )
