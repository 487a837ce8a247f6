"""What ``convert`` returns: one report per store written, and the warning
for a codec that did not pay."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias

import numpy as np

Layout: TypeAlias = Literal["dense", "ragged"]


class CodecAdviceWarning(UserWarning):
    """A column's codec did not make its store smaller; the message says what to use."""


@dataclass(frozen=True)
class ColumnReport:
    """One store ``convert`` wrote."""

    split: str | None
    column: str
    path: str
    kind: Layout
    dtype: np.dtype
    #: Dense: the item shape; Ragged: ``None`` for each dimension.
    shape: tuple[int | None, ...]
    codec: str
    records: int
    #: Bytes of the records as arrays (what ``raw`` stores).
    raw_bytes: int
    #: Bytes of the data files (and dictionary) on disk.
    stored_bytes: int
    #: Size of the zstd dictionary, for ``zstd_dict``.
    dict_bytes: int = 0
    #: What to change when the codec did not pay, else ``None``.
    advice: str | None = None


class Conversion(str):
    """What ``convert`` wrote: the published root's path, as a ``str`` (so it is
    used as a path is), carrying one report per store in ``columns``."""

    columns: tuple[ColumnReport, ...]

    def __new__(cls, path: str, columns: tuple[ColumnReport, ...]) -> Conversion:
        self = super().__new__(cls, path)
        self.columns = columns
        return self

    @property
    def path(self) -> str:
        """The root's path as a plain ``str``."""
        return str.__str__(self)

    @property
    def advice(self) -> tuple[str, ...]:
        return tuple(c.advice for c in self.columns if c.advice is not None)

    def summary(self) -> str:
        """One line per store (records, layout, raw and stored bytes), then advice."""
        lines = [f"{self.path}:"]
        for c in self.columns:
            name = c.column if c.split is None else f"{c.split}/{c.column}"
            shape = f"item_shape={c.shape}" if c.kind == "dense" else f"ndim={len(c.shape)}"
            ratio = c.stored_bytes / c.raw_bytes if c.raw_bytes else 1.0
            lines.append(
                f"  {name}: {c.records:,} records, {c.kind} {c.dtype} {shape}, {c.codec}: "
                f"{c.raw_bytes:,} raw bytes -> {c.stored_bytes:,} stored ({ratio:.2f}x)"
            )
        lines.extend(f"  advice: {a}" for a in self.advice)
        return "\n".join(lines)
