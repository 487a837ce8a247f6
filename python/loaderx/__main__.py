"""The ``loaderx`` command line (also ``python -m loaderx``).

Subcommands (``loaderx COMMAND --help`` for their options; docs/cli.md has
examples and the ``--json`` schema):

``info PATH...``
    Each store at PATH, or every store under a directory PATH (a converted root):
    kind, dtype, shape, records, codec, data files, logical and stored bytes,
    compression ratio, elements per record (Ragged), attributes and codec advice.
    Sizes come from the index; no record is read, except a small sample of a raw
    store's records to estimate what zstd would save. ``--json`` prints one JSON
    document.
``verify PATH...``
    Re-hashes and decodes every record of each store (with a progress bar on a
    terminal); a damaged store is reported with its file and record.
``convert SRC DEST``
    Writes a dataset (a ``save_to_disk`` directory, a ``.parquet`` or ``.arrow``
    file, or a Hugging Face Hub id) as stores under DEST, through
    ``loaderx.converter``; needs the ``converter`` extra.
``concat PART... DEST``
    Publishes at DEST one store holding the records of the PART stores, in the
    order given, without decoding a record (``loaderx.zrecord.concat``: data
    files hard-linked, or copied with ``--copy`` or across filesystems).
``clean DIR...``
    Removes the build directories killed writers left in each DIR (never a live
    writer's) and prints one ``removed PATH`` line for each.
``bench PATH``
    Random-gather throughput of one store on this machine, in records/s and MiB/s
    of logical (decoded) bytes.

A PATH that is a URL (``s3://``, ``https://``...) goes to the readers' ``open``
unchanged; ``info`` and ``verify`` pass it the storage options given with
``-o KEY=VALUE`` (repeatable; docs/remote.md).

Exit status: 0 when everything succeeded; 1 when a store or source failed to
open, read, verify or convert (the others are still processed); 2 for a usage
error (a bad option, or a ``clean`` DIR that is not a directory it can list).
"""

from __future__ import annotations

import sys

from ._cli import main
from ._cli._common import find_stores
from ._cli.info import store_info

__all__ = ["find_stores", "main", "store_info"]

if __name__ == "__main__":
    sys.exit(main())
