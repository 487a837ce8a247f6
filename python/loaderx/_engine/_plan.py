"""The driver's plan of an engine write: one store per column of the engine's
Arrow schema, under the converter's type rules, every problem reported at once
before any task runs."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from .. import _native
from ..converter._arrow import field_types, is_string, require_pyarrow
from ..converter._inputs import check_codec_option, check_extra_attrs, plan_one
from ..converter._plan import Plan
from ..errors import InvalidArgumentError
from ..zrecord._remote import url_text

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass
class Job:
    """Everything a task needs, sent to it by the engine (so it pickles)."""

    #: Where the result goes: a local path or a URL.
    dest: str
    #: Where the tasks write their parts: inside the driver's build directory
    #: (local) or under a hidden prefix beside the result (object storage).
    parts: str
    plans: list[Plan]
    #: The Arrow type of each column, as planned.
    types: dict[str, str]
    attrs: dict[str, dict[str, Any]]
    storage_options: dict[str, Any] | None
    engine: str
    #: Whether `dest` is a URL (object storage or file://).
    remote: bool = False

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(p.column for p in self.plans)


def _shape_problem(plan: Plan, shape: object) -> str | None:
    """Makes `plan` Dense of `shape`, or says why it cannot be."""
    if not isinstance(shape, Sequence) or isinstance(shape, (str, bytes)):
        return f"shapes= gives {shape!r} for column {plan.column!r}; an item shape is a tuple"
    dims: list[int] = []
    for d in cast("Sequence[object]", shape):
        if isinstance(d, bool) or not isinstance(d, int) or d < 0:
            return f"shapes= gives {shape!r} for column {plan.column!r}; dimensions are ints >= 0"
        dims.append(d)
    if len(dims) != len(plan.dims):
        return (
            f"shapes= gives {len(dims)} dimension(s) for column {plan.column!r}, whose "
            f"{plan.feature} records have {len(plan.dims)}"
        )
    plan.shape = tuple(dims)
    plan.shape_option = "shapes="
    return None


def plan_job(
    schema: pa.Schema,
    dest: str,
    parts: str,
    *,
    engine: str,
    codec: str | Mapping[str, str],
    shapes: Mapping[str, Sequence[int]] | None,
    dict_bytes: Mapping[str, bytes] | None,
    attrs: Mapping[str, Any] | None,
    storage_options: Mapping[str, Any] | None,
) -> Job:
    """The plan of writing a table of `schema`: numbers become Dense stores,
    lists of numbers, binary and strings (their UTF-8 bytes) Ragged ones, and
    `shapes` makes a list column Dense of that item shape."""
    require_pyarrow()
    check_codec_option(codec)
    shapes = dict(shapes or {})
    dictionaries = dict(dict_bytes or {})
    extra = check_extra_attrs(attrs)
    types = field_types(schema)
    problems: dict[str, str] = {}
    if not types:
        problems["columns"] = "the data has no columns"
    plans: list[Plan] = []
    for c, t in types.items():
        plan = plan_one(
            c,
            t,
            None,
            "",
            problems,
            codec=codec,
            decode=None,
            dense=c in shapes,
            utf8=is_string(t),
            dict_bytes=dictionaries,
            dtypes={},
        )
        if plan is None:
            continue
        if c in shapes:
            why = _shape_problem(plan, shapes[c])
            if why is not None:
                problems[f"shapes {c!r}"] = why
                continue
        if plan.codec == "zstd_dict" and plan.dictionary is None:
            problems[f"dict {c!r}"] = (
                f"column {c!r}: zstd_dict needs its dictionary in dict_bytes= (train one "
                "with loaderx.utils.train_dict on a sample of the column's records): "
                "the tasks must share it, and training one would pass records through "
                "the driver"
            )
            continue
        plans.append(plan)
    for option, names in (("shapes", shapes), ("dict_bytes", dictionaries)):
        for c in sorted(set(names) - set(types)):
            problems[f"{option} {c}"] = f"{option}= names {c!r}, which is not a column"
    if not isinstance(codec, str):
        for c in sorted(set(codec) - set(types)):
            problems[f"codec {c}"] = f"codec= names {c!r}, which is not a column"
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems.values())
        raise InvalidArgumentError(
            f"{engine}.write wrote nothing: {len(problems)} column(s) or option(s) need a "
            f"change:\n{lines}"
        )
    return Job(
        dest=dest,
        parts=parts,
        plans=plans,
        types={c: str(t) for c, t in types.items()},
        attrs={
            p.column: {
                "converter": f"loaderx.{engine}.write",
                "column": p.column,
                "arrow_type": str(types[p.column]),
                **({"utf8": True} if is_string(types[p.column]) else {}),
                **extra,
            }
            for p in plans
        },
        storage_options=None if storage_options is None else dict(storage_options),
        engine=engine,
        remote=is_url(dest),
    )


def is_url(root: str) -> bool:
    return _native.is_url(root)


def destination(root: str | os.PathLike[str], storage_options: object) -> str:
    """The result's local path, absolute, or its URL without a trailing slash."""
    if isinstance(root, str) and is_url(root):
        return url_text(root).rstrip("/")
    if storage_options is not None:
        raise InvalidArgumentError(
            f"storage_options= is for a URL root (s3://, gs://, file://...), and {root!r} "
            "is a local path"
        )
    return os.path.abspath(os.fspath(root))
