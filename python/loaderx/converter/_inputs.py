"""What ``convert`` is given: the dataset's splits, the column options, and
every column's plan, with every problem reported at once."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from .._schema import DICTIONARY_CODECS, check_dtype, codec_problem
from ..errors import InvalidArgumentError
from ._arrow import field_types
from ._plan import Plan, Refused, plan_column
from ._report import Layout

if TYPE_CHECKING:
    import pyarrow as pa
    from datasets import (  # pyright: ignore[reportMissingTypeStubs]
        Dataset,
    )


_WHAT_TO_PASS = (
    "convert takes a datasets.Dataset, a datasets.DatasetDict (or a dict of split "
    "name to Dataset) or a pyarrow.Table"
)


def _not_a_dataset(obj: object, where: str = "") -> TypeError:
    kind = type(obj).__name__
    if kind in ("IterableDataset", "IterableDatasetDict"):
        hint = "materialize it first (for example with Dataset.from_generator)"
    elif isinstance(obj, Mapping):
        hint = (
            "for a dict of columns, pass datasets.Dataset.from_dict(columns, "
            "features=datasets.Features({...})) so that each column's type is declared"
        )
    elif isinstance(obj, np.ndarray):
        hint = (
            "for a NumPy array, pass datasets.Dataset.from_dict({'name': array}), or write "
            "it directly with Dense.create(path, array.dtype, array.shape[1:], codec=...)"
        )
    elif isinstance(obj, (str, bytes, os.PathLike)):
        hint = (
            "for a directory written by save_to_disk, pass datasets.load_from_disk(path); "
            "for Parquet files, datasets.Dataset.from_parquet(path)"
        )
    elif kind == "DataFrame":
        hint = "for a pandas DataFrame, pass datasets.Dataset.from_pandas(df)"
    else:
        hint = "build one with datasets.Dataset.from_dict, from_parquet or load_from_disk"
    return TypeError(
        f"{_WHAT_TO_PASS}, not {'an' if kind[0] in 'AEIOU' else 'a'} {kind}{where}: {hint}"
    )


def _is_dataset(obj: object) -> bool:
    return all(hasattr(obj, a) for a in ("features", "with_format", "data", "column_names"))


def _from_table(table: pa.Table) -> Dataset:
    import datasets  # pyright: ignore[reportMissingTypeStubs]
    from datasets.table import InMemoryTable  # pyright: ignore[reportMissingTypeStubs]

    return datasets.Dataset(InMemoryTable(table))


def is_table(dataset: object) -> bool:
    import pyarrow as pa

    return isinstance(dataset, pa.Table)


#: The keys convert writes into every store's attributes.
ATTRS_KEYS = (
    "converter",
    "column",
    "split",
    "feature",
    "arrow_type",
    "source",
    "class_names",
    "decode",
    "utf8",
    "cast_from",
)


def check_extra_attrs(attrs: Mapping[str, Any] | None) -> dict[str, Any]:
    if attrs is None:
        return {}
    if not isinstance(attrs, Mapping):
        raise TypeError(f"attrs must be a dict with str keys, got {type(attrs).__name__}")
    taken = sorted(set(attrs) & set(ATTRS_KEYS))
    if taken:
        raise InvalidArgumentError(
            f"attrs= uses the key(s) {taken}, which convert writes itself; use other names"
        )
    return dict(attrs)


def splits_of(dataset: object) -> dict[str | None, Dataset]:
    """The datasets to convert, by split name (None for a single Dataset)."""
    import pyarrow as pa

    if isinstance(dataset, pa.Table):
        return {None: _from_table(dataset)}
    if _is_dataset(dataset):
        return {None: cast("Dataset", dataset)}
    if type(dataset).__name__ == "DatasetDict" or (
        isinstance(dataset, Mapping)
        and dataset
        and all(_is_dataset(v) for v in cast("Mapping[object, object]", dataset).values())
    ):
        d = cast("Mapping[object, object]", dataset)
        if not d:
            raise InvalidArgumentError("the DatasetDict has no splits")
        out: dict[str | None, Dataset] = {}
        for split, ds in d.items():
            if not _is_dataset(ds):
                raise _not_a_dataset(ds, f" as split {split!r}")
            out[check_name(split, "split")] = cast("Dataset", ds)
        return out
    raise _not_a_dataset(cast(object, dataset))


def _known_nulls(ds: Dataset, column: str) -> int:
    """The column's nulls, where the table holds exactly the dataset's rows (a
    selection or a filter leaves the whole table behind it)."""
    nulls = _null_count(ds, column)
    return nulls if ds.num_rows == len(ds.data) else 0


def _null_count(ds: Dataset, column: str) -> int:
    # datasets' Table wrapper leaves column()'s type open; it is a ChunkedArray.
    col = ds.data.column(column)  # pyright: ignore[reportUnknownMemberType]
    return int(cast("pa.ChunkedArray[pa.Scalar[pa.DataType]]", col).null_count)


#: The most bytes of UTF-8 a column or split name may take: a directory name's
#: limit on the common filesystems.
MAX_NAME_BYTES = 255


def _name_problem(name: object) -> str | None:
    if not isinstance(name, str) or name in ("", ".", ".."):
        return ""
    if "/" in name or "\\" in name:
        # A backslash separates directories on Windows, where the output may be read.
        return ": it holds a path separator"
    if name.startswith("."):
        # Hidden, and `.NAME.tmp-...` is how unpublished build directories are named.
        return ": a name starting with '.' is hidden, and is how build directories are named"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        return ": it holds a control character"
    try:
        size = len(name.encode())
    except UnicodeEncodeError:
        return ": it holds a lone surrogate, which UTF-8 cannot encode"
    if size > MAX_NAME_BYTES:
        return f": it takes {size} bytes of UTF-8, more than a directory name's {MAX_NAME_BYTES}"
    return None


def check_name(name: object, what: str) -> str:
    """`name`, which becomes a directory name, once checked that it can be one that
    opens and lists like any store: not hidden, one component, printable."""
    problem = _name_problem(name)
    if problem is not None:
        fix = "; rename it first (Dataset.rename_column)" if what == "column" else ""
        raise InvalidArgumentError(
            f"{what} {name!r} cannot name a directory of the output{problem}{fix}"
        )
    return cast(str, name)


def names_option(option: Iterable[str] | None, what: str) -> frozenset[str]:
    if option is None:
        return frozenset()
    if isinstance(option, str):
        raise TypeError(f"{what} takes a list of column names, not the string {option!r}")
    return frozenset(option)


def _retype(plan: Plan, dtype: object) -> str | None:
    """Makes `plan` store `dtype` as dtypes= asks, or says why it cannot."""
    if plan.source not in ("number", "nested", "struct"):
        return f"dtypes= applies to columns of numbers, and this one is {plan.feature}"
    try:
        target = check_dtype(dtype)
    except (InvalidArgumentError, TypeError) as e:
        return f"dtypes= gives {dtype!r}: {e}"
    assert plan.dtype is not None
    if target == plan.dtype:
        return None
    if plan.dtype.kind in "fc" and target.kind in "biu":
        return (
            f"dtypes= asks {plan.dtype} values to become {target}, which truncates them; "
            "round them with Dataset.map first"
        )
    if plan.dtype.kind == "c" and target.kind == "f":
        return (
            f"dtypes= asks {plan.dtype} values to become {target}, which drops the imaginary part"
        )
    plan.cast_from, plan.dtype = plan.dtype, target
    return None


def check_codec_option(codec: object) -> None:
    """The ``codec=`` option: a codec name, checked at once, or a dict of column
    to codec, whose names are checked per column with the other column options."""
    if not isinstance(codec, (str, Mapping)):
        raise TypeError(f"codec takes a codec name or a dict of column to codec, not {codec!r}")
    if isinstance(codec, str):
        bad = codec_problem(codec)
        if bad is not None:
            raise InvalidArgumentError(bad)


def _codec_of(codec: str | Mapping[str, str], column: str) -> str | None:
    if isinstance(codec, str):
        return codec
    return codec.get(column)


@dataclass
class Split:
    name: str | None
    ds: Dataset
    from_table: bool = False
    plans: list[Plan] = field(default_factory=lambda: [])


def plan_one(
    c: str,
    t: pa.DataType,
    feature: object,
    where: str,
    problems: dict[str, str],
    *,
    codec: str | Mapping[str, str],
    decode: Layout | None,
    dense: bool,
    utf8: bool,
    dict_bytes: Mapping[str, bytes],
    dtypes: Mapping[str, object],
    nulls: Callable[[], int] = lambda: 0,
) -> Plan | None:
    """The plan of column `c` of Arrow type `t`, or None with its problems added
    to `problems` (one entry per column and problem); `nulls` counts the column's
    nulls where they are known before writing."""
    try:
        check_name(c, "column")
        plan = plan_column(c, t, feature, decode=decode, dense=dense, utf8=utf8)
        n = nulls()
        if n:
            raise Refused(
                f"{n} null value(s); fill them (Dataset.map) or drop those rows "
                "(Dataset.filter): a store has no nulls"
            )
    except Refused as e:
        problems.setdefault(f"column {c!r}", f"column {c!r}{where}: {e}")
        return None
    except InvalidArgumentError as e:
        problems.setdefault(f"column {c!r}", str(e))
        return None
    cc = _codec_of(codec, c)
    if cc is None:
        problems[f"codec {c!r}"] = f"codec= names no codec for column {c!r}"
        return None
    bad_codec = codec_problem(cc)
    if bad_codec is not None:
        problems[f"codec {c!r}"] = f"column {c!r}: {bad_codec}"
        return None
    if c in dict_bytes and cc not in DICTIONARY_CODECS:
        problems[f"dict {c!r}"] = (
            f"dict_bytes= gives a dictionary for column {c!r}, whose codec is {cc!r}"
        )
    if c in dtypes:
        why = _retype(plan, dtypes[c])
        if why is not None:
            problems[f"dtypes {c!r}"] = f"column {c!r}{where}: {why}"
            return None
    plan.codec = cc
    plan.dictionary = dict_bytes.get(c)
    return plan


def plan_splits(
    splits: dict[str | None, Dataset],
    tables: set[int],
    codec: str | Mapping[str, str],
    decode: Mapping[str, Layout],
    dense: frozenset[str],
    utf8: frozenset[str],
    dict_bytes: Mapping[str, bytes],
    dtypes: Mapping[str, object],
) -> list[Split]:
    """Every column's plan, or one InvalidArgumentError naming every column (and
    option) that cannot be converted, with what to do instead."""
    problems: dict[str, str] = {}  # one entry per column and problem, in order
    out: list[Split] = []
    seen: set[str] = set()
    for name, ds in splits.items():
        where = "" if name is None else f" of split {name!r}"
        if len(ds.column_names) == 0:
            problems[f"split{name}"] = f"the dataset{where} has no columns"
        elif len(ds) == 0:
            problems[f"split{name}"] = (
                f"the dataset{where} has no rows; there is nothing to convert"
            )
        split = Split(name, ds, from_table=id(ds) in tables)
        types = field_types(ds.data.schema)
        # Features is an untyped dict of the column's feature objects.
        features = cast("Mapping[str, object]", ds.features)
        for c in ds.column_names:
            seen.add(c)
            plan = plan_one(
                c,
                types[c],
                features.get(c),
                where,
                problems,
                codec=codec,
                decode=decode.get(c),
                dense=c in dense,
                utf8=c in utf8,
                dict_bytes=dict_bytes,
                dtypes=dtypes,
                nulls=functools.partial(_known_nulls, ds, c),
            )
            if plan is not None:
                split.plans.append(plan)
        out.append(split)
    for option, names in (
        ("decode", set(decode)),
        ("dense", dense),
        ("utf8", utf8),
        ("dtypes", set(dtypes)),
    ):
        for c in sorted(names - seen):
            problems[f"{option} {c}"] = f"{option}= names {c!r}, which is not a column"
    if not isinstance(codec, str):
        for c in sorted(set(codec) - seen):
            problems[f"codec {c}"] = f"codec= names {c!r}, which is not a column"
    for c in sorted(set(dict_bytes) - seen):
        problems[f"dict {c}"] = f"dict_bytes= names {c!r}, which is not a column"
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems.values())
        raise InvalidArgumentError(
            f"convert wrote nothing: {len(problems)} column(s) or option(s) need a change:\n{lines}"
        )
    return out
