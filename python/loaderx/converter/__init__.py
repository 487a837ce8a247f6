"""Offline conversion of Hugging Face datasets, Arrow tables and Parquet data into
Zrecord stores.

``convert(dataset, path, codec=...)`` writes every column of an Arrow-backed
``datasets.Dataset`` (or every split of a ``DatasetDict``, or a ``pyarrow.Table``)
as its own store under one root, and publishes the root only when every column is
complete and all columns of a split hold the same number of records::

    path/<column>/              for a Dataset or a Table
    path/<split>/<column>/      for a DatasetDict

It reads Arrow record batches, never decoded Python records. Which store a column
becomes follows from its feature (docs/converter.md has the table):

* numbers and booleans: Dense, ``item_shape=()``; ``ClassLabel``: its integers, with
  the class names in the store's attributes;
* lists whose every level has a declared length (``List(..., length=k)``,
  ``Array2D`` ... ``Array5D``): Dense of that shape;
* lists with a level of undeclared length, nested to any depth (what ``Dataset.map``
  makes of arrays): Ragged with one dimension per level, when every record is a
  regular array (boxes ``List(List(Value("float32"), length=4))`` are ``(n, 4)``
  records, n = 0 included); ``dense=[column]`` asks for Dense when every record has
  the same shape;
* binary values and the encoded files of ``Image``, ``Audio``, ``Video``, ``Pdf``...
  features (whatever ``decode`` says): one Ragged uint8 record per file;
  ``decode={column: "dense" | "ragged"}`` decodes an ``Image`` column with Pillow,
  or an ``Audio`` column with soundfile into ``(frames, channels)`` samples at
  the files' own rate and sample type;
* a struct ``{values: list<number>, shape: fixed_size_list<uint64, ndim>}``: Ragged
  of that ndim;
* strings: refused unless ``utf8=[column]`` asks for their UTF-8 bytes (Ragged uint8).

Everything else (nulls, other structs, lists of strings, dates...) is refused before
anything is written, every such column in one error that says what to do instead.
Nothing is converted silently: dtypes are the source's.

``huggingface(repo, ...)`` resolves a dataset repository to an immutable commit,
downloads it (or finds it in the local hub cache when offline) and returns its
``DatasetDict``. Both need the ``converter`` extra (``datasets`` and ``pyarrow``):
run ``.venv/bin/pip install -e '.[converter]'`` in the loaderx checkout. Install
from the checkout, not by name: the ``loaderx`` package on PyPI is not this code.
"""

from __future__ import annotations

from ._hub import huggingface, load_source
from ._inputs import ATTRS_KEYS
from ._records import BATCH_ROWS, DECODE_ROWS
from ._report import CodecAdviceWarning, ColumnReport, Conversion, Layout
from ._write import convert

__all__ = [
    "ATTRS_KEYS",
    "BATCH_ROWS",
    "DECODE_ROWS",
    "CodecAdviceWarning",
    "ColumnReport",
    "Conversion",
    "Layout",
    "convert",
    "huggingface",
    "load_source",
]

for _public in (CodecAdviceWarning, ColumnReport, Conversion, convert, huggingface, load_source):
    _public.__module__ = __name__
del _public
