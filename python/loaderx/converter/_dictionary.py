"""The zstd dictionaries of ``zstd_dict`` columns: trained from evenly spread
records of the largest split that has the column."""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, cast

import numpy as np

from .._schema import DICTIONARY_CODECS
from ..errors import InvalidArgumentError
from ..utils import DEFAULT_DICT_SIZE, SAMPLE_RATIO, train_dict
from ._arrow import batches, one_chunk
from ._inputs import Split
from ._plan import Plan
from ._records import BATCH_ROWS, Records, nbytes, records_of

if TYPE_CHECKING:
    import numpy.typing as npt
    from datasets import (  # pyright: ignore[reportMissingTypeStubs]
        Dataset,
    )


#: Rows read first to estimate a column's record size before sampling it.
_PROBE_ROWS = 256


def _sample_records(ds: Dataset, plan: Plan, positions: npt.NDArray[np.int64]) -> list[Records]:
    # A copy: the sample must not fix a decoded column's shape for the real write.
    probe = dataclasses.replace(plan)
    subset = ds.select(positions.tolist())  # pyright: ignore[reportUnknownMemberType]
    out: list[Records] = []
    row = 0
    for table in batches(subset, BATCH_ROWS):
        for arr in one_chunk(table, plan.column):
            for rows, records in records_of(arr, probe, row):
                out.append(records)
                row += rows
    return out


def _spread(n: int, k: int) -> npt.NDArray[np.int64]:
    """`k` evenly spread positions in 0..n-1 (all of them when k >= n)."""
    if k >= n:
        return np.arange(n, dtype=np.int64)
    return np.arange(k, dtype=np.int64) * n // k


def _train(ds: Dataset, plan: Plan) -> bytes:
    """A zstd dictionary trained from evenly spread records of the column: about
    as many bytes as train_dict samples."""
    n = len(ds)
    probe = _sample_records(ds, plan, _spread(n, _PROBE_ROWS))
    probed = min(n, _PROBE_ROWS)
    mean = max(1.0, sum(nbytes(r) for r in probe) / max(probed, 1))
    k = min(n, max(_PROBE_ROWS, math.ceil(SAMPLE_RATIO * DEFAULT_DICT_SIZE / mean)))
    sample = probe if k == probed else _sample_records(ds, plan, _spread(n, k))
    source: list[Records] | npt.NDArray[np.generic]
    if plan.kind == "dense":
        source = np.concatenate(cast("list[npt.NDArray[np.generic]]", sample))
    else:
        source = sample
    try:
        return train_dict(source)
    except InvalidArgumentError as e:
        raise InvalidArgumentError(
            f"column {plan.column!r}: no zstd dictionary can be trained from it: {e}"
        ) from None


def train_dictionaries(splits: list[Split]) -> None:
    """Trains one dictionary per zstd_dict column without one from dict_bytes=,
    from the largest split that has the column, for every split's store."""
    trained: dict[str, bytes] = {}
    for split in sorted(splits, key=lambda s: -len(s.ds)):
        for plan in split.plans:
            if plan.codec not in DICTIONARY_CODECS or plan.dictionary is not None:
                continue
            if plan.column not in trained:
                trained[plan.column] = _train(split.ds, plan)
            plan.dictionary = trained[plan.column]
