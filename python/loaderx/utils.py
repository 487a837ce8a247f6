"""Helpers around Zrecord stores that are not part of reading or writing one.

``train_dict`` builds the zstd dictionary that ``codec="zstd_dict"`` needs. Stores
never train one on their own: a dictionary should describe settled data, so it is
trained once, explicitly, and can then be reused by any number of stores.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypeAlias, cast

import numpy as np

from . import _native
from ._host import host_numpy, on_host
from ._schema import check_dtype, check_int
from .errors import InvalidArgumentError
from .zrecord import Dense, DenseWriter, DLTensor, Ragged, RaggedBatch, RaggedWriter

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["DEFAULT_DICT_SIZE", "CodecAdvice", "DictSource", "codec_advice", "train_dict"]

# One record per element: a record array or DLTensor, or every record of a batch.
DictRecord: TypeAlias = "npt.NDArray[np.generic] | DLTensor | RaggedBatch"
# What train_dict samples: records stacked along axis 0, a packed batch, an open
# store, or a finite iterable of records.
DictSource: TypeAlias = (
    "npt.NDArray[np.generic] | DLTensor | RaggedBatch | Dense | Ragged | Iterable[DictRecord]"
)
# Sampled record bytes.
_Bytes: TypeAlias = "npt.NDArray[np.uint8]"

#: zstd's own default dictionary size (``zstd --train``): 112 KiB.
DEFAULT_DICT_SIZE = 112 * 1024
#: zstd refuses smaller dictionaries (ZDICT_DICTSIZE_MIN).
MIN_DICT_SIZE = 256
#: zstd's trainer keeps a quarter of the samples aside to score candidate
#: dictionaries; below about eight samples it has nothing to split.
MIN_SAMPLES = 8
#: zstd recommends sample bytes of about 100x the dictionary size; reading more
#: adds training time without a better dictionary.
SAMPLE_RATIO = 100
#: Below 10x the dictionary would mostly be a copy of the samples.
MIN_RATIO = 10
#: A record larger than this contributes one window of this many bytes. Dictionaries
#: matter for small records; for large ones, many windows from many records
#: describe the corpus better than a few whole records.
MAX_PIECE = 128 * 1024
#: Bytes of records read from a store per batch while sampling.
_READ_BYTES = 8 * 1024**2
#: Probe size used to estimate a Ragged store's mean record size.
_PROBE = 256
#: Fixed seed: the same input always gives the same dictionary.
_SEED = 0x7A_D1C7


def train_dict(source: DictSource, *, size: int | None = None) -> bytes:
    """Trains a zstd dictionary for ``codec="zstd_dict"`` from representative records.

    `source` is a NumPy array or loaderx DLTensor (records along axis 0), a packed
    ``RaggedBatch``, an open ``Dense`` or ``Ragged`` store, or a finite iterable of
    NumPy arrays / DLTensors (one record each). Each record is one training sample.

    Large sources are sampled, never read whole: about ``100 * size`` bytes of
    records, spread evenly over a store or array (one seeded pick per stratum), or
    a seeded uniform subset of an iterable. Records over 128 KiB contribute one
    128 KiB window each. The result depends only on the records and `size`.

    `size` is the dictionary's upper bound in bytes. By default it is 112 KiB,
    capped at a tenth of the sampled bytes for small corpora; an explicit size needs
    at least ``10 * size`` sampled bytes.

    Raises TypeError for an unsupported source or record type and ValueError when
    there are too few records (fewer than 8) or bytes to train on, or when zstd
    cannot build a dictionary from them.
    """
    requested = None if size is None else check_int(size, "size", MIN_DICT_SIZE)
    budget = SAMPLE_RATIO * (DEFAULT_DICT_SIZE if requested is None else requested)
    rng = np.random.default_rng(_SEED)
    pieces = _sample(source, budget, rng)
    return _train(pieces, requested)


# ---- sampling ------------------------------------------------------------------


def _sample(source: DictSource, budget: int, rng: np.random.Generator) -> list[_Bytes]:
    """Up to about `budget` bytes of records from `source`, as uint8 arrays."""
    if isinstance(source, (DenseWriter, RaggedWriter)):
        raise TypeError(
            "train_dict cannot read a writer; close() it and pass the opened store "
            "(Dense.open / Ragged.open)"
        )
    if isinstance(source, Dense):
        store = source
        return _spread_sample(
            len(store),
            store.dtype,
            store.item_shape,
            lambda pos: _rows(np.from_dlpack(store[pos])),
            budget,
            rng,
        )
    if isinstance(source, Ragged):
        return _ragged_store_sample(source, budget, rng)
    if isinstance(source, RaggedBatch):
        return _ragged_batch_sample(source, budget, rng)
    if isinstance(source, (np.ndarray, DLTensor)):
        # An ndarray of any element type, which _host checks.
        arr = _host(cast("npt.NDArray[np.generic] | DLTensor", source), "source")
        if arr.ndim == 0:
            raise InvalidArgumentError(
                "a 0-dimensional array holds no records; records lie along axis 0"
            )
        return _spread_sample(
            arr.shape[0],
            arr.dtype,
            arr.shape[1:],
            lambda pos: _rows(np.ascontiguousarray(arr[pos])),
            budget,
            rng,
        )
    if isinstance(source, (str, bytes, bytearray, memoryview, dict)) or not isinstance(
        source, Iterable
    ):
        raise TypeError(
            "train_dict takes a NumPy array, a RaggedBatch, an open Dense or Ragged store "
            f"or an iterable of NumPy records, got {type(cast(object, source)).__name__}"
        )
    return _iterable_sample(source, budget, rng)


def _host(a: npt.NDArray[np.generic] | DLTensor, what: str) -> npt.NDArray[np.generic]:
    """A NumPy view of a host array or DLTensor of a storable dtype."""
    arr = host_numpy(a, what)
    check_dtype(arr.dtype)
    return arr


def _bytes_of(a: npt.NDArray[np.generic]) -> _Bytes:
    """The C-order bytes of `a` as a 1-D uint8 array (a view when contiguous)."""
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


def _rows(batch: npt.NDArray[np.generic]) -> list[_Bytes]:
    """The records of a stacked batch as uint8 rows."""
    n = batch.shape[0]
    flat = _bytes_of(batch)
    return list(flat.reshape(n, flat.size // n if n else 0))


def _window(record: _Bytes, itemsize: int, rng: np.random.Generator) -> _Bytes:
    """The record, or one seeded MAX_PIECE window of it (element-aligned)."""
    if record.size <= MAX_PIECE:
        return record
    start = int(rng.integers(0, (record.size - MAX_PIECE) // itemsize + 1)) * itemsize
    return record[start : start + MAX_PIECE]


def _strata(n: int, k: int, rng: np.random.Generator) -> npt.NDArray[np.int64]:
    """`k` increasing positions in 0..n-1, one seeded pick in each of k equal
    strata: evenly spread, yet not in lockstep with any period of the data."""
    if k >= n:
        return np.arange(n, dtype=np.int64)
    edges = np.arange(k + 1, dtype=np.int64) * n // k
    width = edges[1:] - edges[:-1]
    return edges[:-1] + (rng.random(k) * width).astype(np.int64)


def _sample_count(n: int, piece_bytes: float, budget: int) -> int:
    """How many records of about `piece_bytes` sampled bytes fill the budget."""
    if piece_bytes <= 0:
        return n
    return min(n, max(MIN_SAMPLES, math.ceil(budget / piece_bytes)))


def _read_spread(
    n: int,
    k: int,
    per_read: int,
    read: Callable[[npt.NDArray[np.int64]], list[_Bytes]],
    itemsize: int,
    budget: int,
    rng: np.random.Generator,
) -> list[_Bytes]:
    """Reads `k` evenly spread records, `per_read` positions per call."""
    pos = _strata(n, k, rng)
    pieces: list[_Bytes] = []
    total = 0
    for lo in range(0, len(pos), per_read):
        for record in read(pos[lo : lo + per_read]):
            piece = _window(record, itemsize, rng).copy()  # let the batch go
            pieces.append(piece)
            total += piece.size
        if total > 2 * budget:  # a Ragged size estimate far off: stop reading
            break
    return pieces


def _spread_sample(
    n: int,
    dtype: np.dtype,
    item_shape: tuple[int, ...],
    read: Callable[[npt.NDArray[np.int64]], list[_Bytes]],
    budget: int,
    rng: np.random.Generator,
) -> list[_Bytes]:
    """Evenly spread records of one fixed shape (arrays and Dense stores)."""
    record_bytes = dtype.itemsize * math.prod(item_shape)
    k = _sample_count(n, min(record_bytes, MAX_PIECE), budget)
    per_read = max(1, _READ_BYTES // max(record_bytes, 1))
    return _read_spread(n, k, per_read, read, dtype.itemsize, budget, rng)


def _split(values: npt.NDArray[np.generic], cu_seqlens: npt.NDArray[np.generic]) -> list[_Bytes]:
    """Packed records as uint8 arrays, one per record."""
    flat = _bytes_of(values)
    edges = cu_seqlens.astype(np.int64) * values.dtype.itemsize
    return [flat[a:b] for a, b in zip(edges[:-1], edges[1:], strict=True)]


def _ragged_store_sample(store: Ragged, budget: int, rng: np.random.Generator) -> list[_Bytes]:
    """Evenly spread records of a Ragged store. Record sizes are unknown before
    reading, so a probe of up to 256 spread records estimates the mean first."""
    n = len(store)
    itemsize = store.dtype.itemsize

    def read(pos: npt.NDArray[np.int64]) -> list[_Bytes]:
        batch = store[pos]
        return _split(np.from_dlpack(batch.values), np.from_dlpack(batch.cu_seqlens))

    probe = read(_strata(n, min(n, _PROBE), np.random.default_rng(_SEED + 1)))
    sizes = np.array([r.size for r in probe], dtype=np.float64)
    mean_piece = float(np.minimum(sizes, MAX_PIECE).mean()) if len(sizes) else 0.0
    mean_record = float(sizes.mean()) if len(sizes) else 0.0
    k = _sample_count(n, mean_piece, budget)
    per_read = max(1, int(_READ_BYTES // max(mean_record, 1.0)))
    return _read_spread(n, k, per_read, read, itemsize, budget, rng)


def _ragged_batch_sample(batch: RaggedBatch, budget: int, rng: np.random.Generator) -> list[_Bytes]:
    """Evenly spread records of a packed host batch (all sizes known up front)."""
    on_host(batch.values, "the RaggedBatch", "transfer it to the host explicitly")
    values = np.from_dlpack(batch.values)
    cu = np.from_dlpack(batch.cu_seqlens)
    itemsize = values.dtype.itemsize
    sizes = np.diff(cu.astype(np.int64)) * itemsize
    n = len(sizes)
    mean_piece = float(np.minimum(sizes, MAX_PIECE).mean()) if n else 0.0
    records = _split(values, cu)
    k = _sample_count(n, mean_piece, budget)
    return _read_spread(n, k, n or 1, lambda pos: [records[i] for i in pos], itemsize, budget, rng)


def _records_of(item: DictRecord, i: int, checked: set[np.dtype]) -> Iterator[tuple[_Bytes, int]]:
    """The record(s) one iterable element stands for, as bytes, with their itemsize.
    `checked` remembers dtypes already validated."""
    if type(item) is np.ndarray and item.dtype in checked:  # the common case, fast
        yield _bytes_of(item), item.dtype.itemsize
        return
    if isinstance(item, RaggedBatch):
        values = _host(item.values, f"record {i}")
        for r in _split(values, np.from_dlpack(item.cu_seqlens)):
            yield r, values.dtype.itemsize
        return
    if not isinstance(item, (np.ndarray, DLTensor)):
        raise TypeError(
            f"record {i} is a {type(item).__name__}; train_dict's iterable must yield "
            "NumPy arrays (or loaderx DLTensors)"
        )
    a = _host(item, f"record {i}")
    checked.add(a.dtype)
    yield _bytes_of(a), a.dtype.itemsize


def _uniforms(rng: np.random.Generator) -> Iterator[float]:
    """An endless stream of uniform floats, drawn in blocks (one draw per record
    would dominate the sampling time)."""
    while True:
        yield from rng.random(4096).tolist()


def _iterable_sample(
    records: Iterable[DictRecord], budget: int, rng: np.random.Generator
) -> list[_Bytes]:
    """A seeded uniform subset of an iterable's records within the byte budget.

    Each record draws a random key; the records with the smallest keys whose
    bytes fit the budget are kept (bottom-k sampling), so memory stays bounded
    by the budget however long the iterable is. Kept records stay in input order.
    """
    heap: list[tuple[float, int, _Bytes]] = []  # (-key, order, piece): max-heap of keys
    keys = _uniforms(rng)
    checked: set[np.dtype] = set()
    total = 0
    order = 0
    for i, item in enumerate(records):
        for record, itemsize in _records_of(item, i, checked):
            key = next(keys)
            order += 1
            size = min(record.size, MAX_PIECE)
            full = total + size > budget and len(heap) >= MIN_SAMPLES
            if full and key >= -heap[0][0]:
                continue  # it would be the first record dropped again
            piece = _window(record, itemsize, rng).copy()  # the producer may reuse memory
            heapq.heappush(heap, (-key, order, piece))
            total += piece.size
            while total > budget and len(heap) > MIN_SAMPLES:
                total -= heapq.heappop(heap)[2].size
    return [piece for _, _, piece in sorted(heap, key=lambda e: e[1])]


# ---- training ------------------------------------------------------------------


def _train(pieces: list[_Bytes], requested: int | None) -> bytes:
    """Checks that the samples can train a dictionary, then asks zstd."""
    pieces = [p for p in pieces if p.size]
    total = sum(p.size for p in pieces)
    if len(pieces) < MIN_SAMPLES:
        raise InvalidArgumentError(
            f"train_dict needs at least {MIN_SAMPLES} non-empty records to train on, "
            f"got {len(pieces)}; a corpus this small gains nothing from a dictionary "
            "(use codec='zstd')"
        )
    if requested is None:
        size = min(DEFAULT_DICT_SIZE, total // MIN_RATIO)
        if size < MIN_DICT_SIZE:
            raise InvalidArgumentError(
                f"the records hold only {total} bytes; a dictionary needs at least "
                f"{MIN_RATIO * MIN_DICT_SIZE} bytes of samples (use codec='zstd')"
            )
    else:
        size = requested
        if total < MIN_RATIO * size:
            raise InvalidArgumentError(
                f"{total} bytes of samples are too few for a {size}-byte dictionary: "
                f"it needs at least {MIN_RATIO * size} ({MIN_RATIO}x; zstd works best "
                f"near {SAMPLE_RATIO}x); pass a smaller size= or more records"
            )
    data = np.concatenate(pieces)
    try:
        return _native.train_dictionary(data, [p.size for p in pieces], size)
    except ValueError as e:
        raise InvalidArgumentError(
            f"zstd could not train a dictionary of up to {size} bytes from {len(pieces)} "
            f"samples ({total} bytes): {e}; try more varied records or a smaller size="
        ) from None


#: A codec "pays" when the stored bytes are at most this fraction of the raw ones.
PAYS = 0.95
#: Below this mean record size, zstd frames carry more tables than data and a
#: dictionary is the remedy; above it, a codec that saves nothing is best dropped.
SMALL_RECORD = 4096
#: Below this mean record size no per-record codec pays: a frame's header and
#: checksum alone take several bytes.
TINY_RECORD = 32
#: Fewer records than this give a dictionary too little to learn from.
DICT_RECORDS = 1000
#: A raw store whose records zstd shrinks by this factor should be compressed.
COMPRESSIBLE = 2.0


@dataclass(frozen=True)
class CodecAdvice:
    """The codec to use instead of a store's, and why."""

    codec: Literal["raw", "zstd", "zstd_dict"]
    reason: str


def codec_advice(
    codec: str,
    records: int,
    raw_bytes: int,
    stored_bytes: int,
    zstd_ratio: float | None = None,
) -> CodecAdvice | None:
    """The one rule behind the converter's and ``loaderx info``'s codec advice,
    for a store of `records` records of `raw_bytes` logical bytes stored in
    `stored_bytes`. `zstd_ratio` is what plain zstd achieves (raw / stored) on a
    sample of a raw store's records, when known.

    A compressing codec that does not pay (stores more than ``PAYS`` of the raw
    bytes): records under ``TINY_RECORD`` bytes cannot be compressed one by one
    (``raw``); plain zstd on records under ``SMALL_RECORD`` bytes, with at least
    ``DICT_RECORDS`` of them to train on, wants ``zstd_dict``; otherwise the data
    does not compress (``raw``). A raw store whose sample zstd shrinks by
    ``COMPRESSIBLE`` or more wants ``zstd``. None when the codec fits."""
    if raw_bytes == 0 or records == 0:
        return None
    mean = raw_bytes / records
    if codec == "raw":
        if zstd_ratio is None or zstd_ratio < COMPRESSIBLE:
            return None
        return CodecAdvice(
            "zstd",
            f"zstd shrinks a sample of the records {zstd_ratio:.1f}x; codec='zstd' would "
            f"store about {raw_bytes / zstd_ratio:,.0f} bytes instead of {raw_bytes:,}",
        )
    if stored_bytes <= PAYS * raw_bytes:
        return None
    if mean < TINY_RECORD:
        return CodecAdvice(
            "raw", "records this small cannot be compressed one by one; use codec='raw'"
        )
    if codec == "zstd" and mean < SMALL_RECORD and records >= DICT_RECORDS:
        return CodecAdvice(
            "zstd_dict",
            "records this small gain nothing from plain zstd; codec='zstd_dict' "
            "(a dictionary trained from the records) fits many small similar records, "
            "or use codec='raw'",
        )
    return CodecAdvice(
        "raw", "the data does not compress (already-encoded files?); codec='raw' reads faster"
    )
