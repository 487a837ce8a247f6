"""The Loader: one global batch per step, split across reader bindings.

Each step draws one global index array from the sampler, divides it into
contiguous zero-copy views (one per binding position), gathers every named stream
at each position with the same view, and hands the list of shard dicts to the
transform. Batches reach the consumer in step order with any number of workers,
so ``state_dict()`` / ``load_state_dict()`` resume exactly. See docs/loader.md.

``Loader`` holds the configuration; the step state and the worker threads live in
its one ``LoaderIterator``, which ``iter(loader)`` returns every time.

A transform that takes a second argument gets a ``StepInfo``: the step, the
positions this process gathered and random generators derived from the loader's
seed, the step and (per record) the record's place in the global batch, so that
random augmentation is the same with any number of workers, after a resume and,
per record, with any number of processes.

With several processes (data-parallel training), every process draws the same
global batch and gathers only its contiguous slice; its bindings split that
slice. The process's rank and the process count come from the arguments, else
from a JAX or torch.distributed runtime that is already initialised, else 0 of 1.

A sampler that draws packs (``loaderx.sampler.PackingSampler``) is split by whole
packs instead of by records, and ``StepInfo.pack_offsets`` gives each binding's
packs (docs/loader.md, "Packed steps").
"""

from __future__ import annotations

from ._loader import Loader, LoaderIterator
from ._rng import StepInfo, record_rng, step_rng
from ._state import STATE_VERSION
from ._stats import LoaderStats, QueueStats, StageStats, format_stats

__all__ = [
    "Loader",
    "LoaderIterator",
    "LoaderStats",
    "QueueStats",
    "STATE_VERSION",
    "StageStats",
    "StepInfo",
    "format_stats",
    "record_rng",
    "step_rng",
]

for _public in (
    Loader,
    LoaderIterator,
    LoaderStats,
    QueueStats,
    StageStats,
    StepInfo,
    format_stats,
    record_rng,
    step_rng,
):
    _public.__module__ = __name__
del _public
