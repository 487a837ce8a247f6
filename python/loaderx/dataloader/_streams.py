"""The Loader's streams, checked: names, one reader per binding, equal record
counts, and what the resume state records about them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Generic, TypeVar, cast

from ..errors import InvalidArgumentError
from ..protocols import Reader
from ..zrecord._reader import StoreReader
from ._state import JSON, plain, store_identity

B = TypeVar("B")  # what one reader's gather returns


class Streams(Generic[B]):
    """The validated streams: names, per-binding readers, and what the resume state
    records about them."""

    def __init__(self, streams: object) -> None:
        if not isinstance(streams, Mapping):
            raise TypeError(
                f"streams must be a dict of name -> list of readers, got {type(streams).__name__}"
            )
        items = cast("Mapping[object, object]", streams)
        if not items:
            raise InvalidArgumentError("streams is empty; name at least one stream")
        names: list[str] = []
        lists: list[list[Reader[B]]] = []
        width: int | None = None
        length: int | None = None
        for name, readers in items.items():
            if not isinstance(name, str):
                raise TypeError(f"stream names must be str, got {name!r}")
            if not isinstance(readers, Sequence) or isinstance(readers, (str, bytes)):
                raise TypeError(
                    f"stream {name!r} must be a list of readers (one per binding), "
                    f"got {type(readers).__name__}"
                )
            bindings = list(cast("Sequence[object]", readers))
            if not bindings:
                raise InvalidArgumentError(
                    f"stream {name!r} has no readers; each stream needs >= 1 binding"
                )
            if width is not None and len(bindings) != width:
                raise InvalidArgumentError(
                    f"stream {name!r} has {len(bindings)} bindings but {names[0]!r} has "
                    f"{width}; all binding lists must be equally long"
                )
            width = len(bindings)
            for r in bindings:
                if not isinstance(r, Reader):
                    raise TypeError(
                        f"stream {name!r} holds a {type(r).__name__}, "
                        "not an open Dense or Ragged reader"
                    )
                n = len(cast("Reader[B]", r))
                if length is not None and n != length:
                    raise InvalidArgumentError(
                        f"stream {name!r} has {n} records but {names[0]!r} has {length}; "
                        "aligned streams need equal record counts"
                    )
                length = n
            names.append(name)
            lists.append(cast("list[Reader[B]]", bindings))
        assert width is not None and length is not None
        self.names, self.lists, self.width, self.length = names, lists, width, length
        # Every reader a store's: their gathers can be begun ahead by the
        # consumer, with no worker thread in between.
        self.stores_only = all(isinstance(r, StoreReader) for readers in lists for r in readers)
        self.stores: list[list[int | str | None]] = [
            [store_identity(r, f"stream {n!r} binding {i}") for i, r in enumerate(readers)]
            for n, readers in zip(names, lists, strict=True)
        ]

    def state(self) -> dict[str, JSON]:
        """Per stream name: its record count and each binding's store identity."""
        return {
            name: {"records": self.length, "stores": list(stores)}
            for name, stores in zip(self.names, self.stores, strict=True)
        }

    def check(self, got: object) -> None:
        """Raises ValueError naming the first difference between a state's
        ``streams`` entry and these streams."""
        if not isinstance(got, Mapping):
            raise InvalidArgumentError(
                f"the state's 'streams' is {got!r}, not a dict of stream name -> records and stores"
            )
        theirs = cast("Mapping[object, object]", got)
        mine = self.state()
        if set(theirs) != set(mine):
            raise InvalidArgumentError(
                f"the state was taken with streams {sorted(map(str, theirs))}, "
                f"this loader reads {sorted(mine)}"
            )
        for name, entry in mine.items():
            want = cast("dict[str, JSON]", entry)
            found = theirs[name]
            if not isinstance(found, Mapping):
                raise InvalidArgumentError(f"the state's stream {name!r} is {found!r}, not a dict")
            fields = cast("Mapping[object, object]", found)
            if fields.get("records") != want["records"]:
                raise InvalidArgumentError(
                    f"stream {name!r} had {fields.get('records')!r} records when the state "
                    f"was taken, this loader's has {want['records']}"
                )
            stores = plain(fields.get("stores"), f"the state's stream {name!r} stores")
            mine_stores = cast("list[JSON]", want["stores"])
            if not isinstance(stores, list) or len(stores) != len(mine_stores):
                count = len(stores) if isinstance(stores, list) else stores
                raise InvalidArgumentError(
                    f"stream {name!r} had {count!r} bindings when the state was taken, "
                    f"this loader has {len(mine_stores)}"
                )
            for i, (a, b) in enumerate(zip(stores, mine_stores, strict=True)):
                if a != b:
                    raise InvalidArgumentError(
                        f"stream {name!r} binding {i} read store {a!r} when the state was "
                        f"taken, this loader's reads store {b!r}"
                    )
