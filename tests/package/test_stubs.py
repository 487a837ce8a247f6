"""python/loaderx/_native.pyi describes the extension it stands for.

The stub is executed (with postponed annotations) so that its annotations can be
resolved, then held against the real module three ways: the same names; for
every function and method, the parameter names, kinds and defaults PyO3 reports
in ``__text_signature__``; and for every constant, property and method, a value
the real module produced, checked against the annotated type. Every call goes
through ``Native.call``, which also checks the arguments against the stub's
parameter types, and records what it exercised: a member nothing exercises fails
the suite, so a new stub entry needs a line in ``exercise`` below.
"""

from __future__ import annotations

import ast
import collections.abc
import gc
import inspect
import os
import pathlib
import types
import typing

import numpy as np
import pytest
import typing_extensions
import xxhash

from loaderx import _native

STUB_PATH = pathlib.Path(inspect.getfile(_native)).with_name("_native.pyi")
KEPT_DUNDERS = {
    "__dlpack__",
    "__dlpack_device__",
    "__array_interface__",
    "__len__",
    "__next__",
    "__iter__",
    "__new__",
}
Py_TPFLAGS_BASETYPE = 1 << 10


def load_stub(source: str | None = None) -> types.ModuleType:
    """The stub as a module whose annotations resolve."""
    module = types.ModuleType("loaderx._native_stub")
    text = STUB_PATH.read_text() if source is None else source
    exec(
        compile("from __future__ import annotations\n" + text, str(STUB_PATH), "exec"), vars(module)
    )
    return module


def stub_classes(stub: types.ModuleType) -> dict[str, type]:
    return {
        name: obj
        for name, obj in vars(stub).items()
        if isinstance(obj, type) and obj.__module__ == stub.__name__
    }


def stub_functions(stub: types.ModuleType) -> dict[str, types.FunctionType]:
    return {
        name: obj
        for name, obj in vars(stub).items()
        if isinstance(obj, types.FunctionType) and obj.__module__ == stub.__name__
    }


def stub_constants(stub: types.ModuleType) -> dict[str, object]:
    """Annotated module names, without the stub's own type aliases."""
    hints = typing.get_type_hints(stub)
    return {name: t for name, t in hints.items() if t is not typing.TypeAlias}


def stub_members(cls: type) -> dict[str, object]:
    """The functions, static methods and properties a stub class declares."""
    return {
        name: obj
        for name, obj in vars(cls).items()
        if isinstance(obj, (types.FunctionType, staticmethod, property))
    }


def function_of(member: object) -> types.FunctionType:
    if isinstance(member, staticmethod):
        return member.__func__
    if isinstance(member, property):
        return member.fget
    assert isinstance(member, types.FunctionType)
    return member


STUB = load_stub()


# ---- the type checker -------------------------------------------------------------


def mismatch(value: object, annotation: object, stub: types.ModuleType, owner: str | None) -> str:
    """Why `value` is not of the stub type `annotation` (an empty string when it
    is). Names of the stub's own classes stand for the real module's classes;
    ``Self`` stands for `owner`."""
    classes = stub_classes(stub)
    if annotation is object or annotation is typing.Any:
        return ""
    if annotation is None or annotation is type(None):
        return "" if value is None else f"{value!r} is not None"
    if annotation is typing_extensions.Self or annotation is getattr(typing, "Self", None):
        assert owner is not None, "Self outside a class"
        annotation = classes[owner]
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Union or origin is types.UnionType:
        reasons = [mismatch(value, a, stub, owner) for a in args]
        return "" if "" in reasons else f"{value!r} is none of {annotation}: {'; '.join(reasons)}"
    if origin is tuple:
        if not isinstance(value, tuple):
            return f"{value!r} is a {type(value).__name__}, not a tuple"
        items = args[:1] * len(value) if len(args) == 2 and args[1] is Ellipsis else args
        if len(items) != len(value):
            return f"{value!r} has {len(value)} items, not {len(items)}"
        return next(
            (m for v, a in zip(value, items, strict=True) if (m := mismatch(v, a, stub, owner))), ""
        )
    if origin is dict:
        if not isinstance(value, dict):
            return f"{value!r} is a {type(value).__name__}, not a dict"
        return next(
            (
                m
                for k, v in value.items()
                if (m := mismatch(k, args[0], stub, owner) or mismatch(v, args[1], stub, owner))
            ),
            "",
        )
    if origin in (list, collections.abc.Sequence):
        if not isinstance(value, origin):
            return f"{value!r} is a {type(value).__name__}, not a {origin.__name__}"
        return next((m for v in value if (m := mismatch(v, args[0], stub, owner))), "")
    if origin is np.ndarray:
        if not isinstance(value, np.ndarray):
            return f"{value!r} is a {type(value).__name__}, not a NumPy array"
        (scalar,) = typing.get_args(args[1])
        ok = issubclass(value.dtype.type, scalar)
        return "" if ok else f"an array of {value.dtype} is not one of {scalar.__name__}"
    if origin is np.dtype:
        if not isinstance(value, np.dtype):
            return f"{value!r} is a {type(value).__name__}, not a NumPy dtype"
        ok = issubclass(value.type, args[0])
        return "" if ok else f"dtype {value} is not one of {args[0].__name__}"
    if origin is collections.abc.Callable:
        # Only callability can be checked without calling it.
        return "" if callable(value) else f"{value!r} is not callable"
    if origin is os.PathLike:
        return "" if isinstance(value, os.PathLike) else f"{value!r} is not os.PathLike"
    assert origin is None, f"the checker does not know {annotation}"
    assert isinstance(annotation, type), f"the checker does not know {annotation!r}"
    if annotation.__module__ == stub.__name__:
        annotation = getattr(_native, annotation.__name__)
    if annotation is int and isinstance(value, bool):
        return f"{value!r} is a bool, not an int"
    if isinstance(value, annotation):
        return ""
    return f"{value!r} is a {type(value).__module__}.{type(value).__qualname__}, not {annotation}"


class Native:
    """Calls into the real module through the stub's signatures, checking each
    argument and result against the stub's types, and records what it exercised."""

    def __init__(self, stub: types.ModuleType = STUB) -> None:
        self.stub = stub
        self.exercised: set[tuple[str | None, str]] = set()
        self.errors: list[str] = []

    def _check(self, what: str, value: object, annotation: object, owner: str | None) -> None:
        reason = mismatch(value, annotation, self.stub, owner)
        if reason:
            self.errors.append(f"{what}: {reason}")

    def _signature(self, owner: str | None, name: str) -> tuple[inspect.Signature, dict]:
        if owner is None:
            func = stub_functions(self.stub)[name]
        else:
            func = function_of(stub_members(stub_classes(self.stub)[owner])[name])
        return inspect.signature(func), typing.get_type_hints(func, vars(self.stub))

    def call(self, target: object, name: str, *args: object, **kwargs: object) -> object:
        """`target.name(*args, **kwargs)`; `target` is the module, a class or an
        instance, and the stub entry is the one of the same class name."""
        if target is _native:
            owner, bound_to = None, ()
        elif isinstance(target, type):
            owner, bound_to = target.__name__, (target,) if name == "__new__" else ()
        else:
            owner, bound_to = type(target).__name__, (target,)
        sig, hints = self._signature(owner, name)
        what = f"{owner + '.' if owner else ''}{name}"
        bound = sig.bind(*bound_to, *args, **kwargs)
        for param, value in list(bound.arguments.items())[len(bound_to) :]:
            self._check(f"{what}({param}=)", value, hints[param], owner)
        if name == "__new__":
            result = target(*args, **kwargs)
        else:
            result = getattr(target, name)(*args, **kwargs)
        self._check(f"{what}()", result, hints["return"], owner)
        self.exercised.add((owner, name))
        return result

    def get(self, target: object, name: str) -> object:
        """`target.name` for a property."""
        owner = type(target).__name__
        prop = stub_members(stub_classes(self.stub)[owner])[name]
        assert isinstance(prop, property), f"{owner}.{name} is not a property in the stub"
        value = getattr(target, name)
        hint = typing.get_type_hints(prop.fget, vars(self.stub))["return"]
        self._check(f"{owner}.{name}", value, hint, owner)
        self.exercised.add((owner, name))
        return value

    def every_member(self) -> set[tuple[str | None, str]]:
        out: set[tuple[str | None, str]] = {(None, f) for f in stub_functions(self.stub)}
        for cls_name, cls in stub_classes(self.stub).items():
            out |= {(cls_name, m) for m in stub_members(cls)}
        return out


# ---- exercising every member ----------------------------------------------------------


RECORDS = [np.arange(n, dtype=np.int32) * (n + 1) for n in (3, 0, 5, 2, 7, 1, 4, 6, 2, 9)]
DENSE = np.arange(10 * 2 * 3, dtype=np.float32).reshape(10, 2, 3)


def exercise_writers(nat: Native, root: pathlib.Path, codec: str, dictionary: bytes | None):
    """Writes a Dense and a Ragged store with `codec` through the native Writer."""
    dense = nat.call(
        _native.Writer, "create_dense", root / "dense", "float32", [2, 3], codec, 2, dictionary
    )
    nat.call(dense, "append_dense", DENSE, len(DENSE))
    assert nat.call(dense, "__len__") == 10 and nat.get(dense, "closed") is False
    nat.call(dense, "close")
    assert nat.get(dense, "closed") is True

    values = np.concatenate(RECORDS)
    cu = np.zeros(len(RECORDS) + 1, dtype=np.int32)
    np.cumsum([len(r) for r in RECORDS], out=cu[1:])
    shapes = np.array([[len(r)] for r in RECORDS], dtype=np.uint64)
    nat.call(_native, "check_ragged", values, cu, shapes, 4, 1)
    ragged = nat.call(
        _native.Writer, "create_ragged", str(root / "ragged"), "int32", 1, codec, 3, dict=dictionary
    )
    nat.call(ragged, "append_ragged", values, cu, shapes, release_source=False)
    nat.call(ragged, "close")

    dropped = nat.call(
        _native.Writer, "create_ragged", root / "dropped", "int32", 1, codec, 1, dictionary
    )
    nat.call(dropped, "abort")
    assert not (root / "dropped").exists()


def exercise_store(nat: Native, root: pathlib.Path, codec: str, dictionary: bytes | None):
    host = nat.call(_native.Allocator, "host", 1 << 20)
    dense = nat.call(_native.Store, "open", root / "dense")
    assert nat.call(dense, "__len__") == 10
    assert nat.get(dense, "kind") == "dense" and nat.get(dense, "dtype") == "float32"
    assert nat.get(dense, "item_shape") == [2, 3] and nat.get(dense, "ndim") == 2
    assert nat.get(dense, "codec") == codec and nat.get(dense, "data_shards") == 2
    assert nat.get(dense, "path") == root / "dense"
    assert nat.get(dense, "format_version") == _native.FORMAT_VERSION
    assert isinstance(nat.get(dense, "header_checksum"), int)
    assert nat.get(dense, "checked") is False
    assert nat.call(dense, "attrs") is None
    assert nat.call(dense, "dictionary") == dictionary
    nat.call(dense, "verify")
    nat.call(dense, "verify_files")
    sizes = nat.get(dense, "data_file_sizes")
    assert len(sizes) == 2 and sum(sizes) == sum(
        os.path.getsize(root / "dense" / f"data-00{k}.bin") for k in range(2)
    )
    assert nat.get(dense, "index_bytes") == os.path.getsize(root / "dense" / "index.bin")
    nat.call(dense, "verify_records", 2, 7)
    logical, stored = nat.call(dense, "record_sizes", 1, 4)
    assert logical.tolist() == [24, 24, 24] and logical.dtype == stored.dtype == np.uint64
    batch = nat.call(dense, "gather_dense", np.array([4, 0, 4], dtype=np.int64), host)
    one = nat.call(dense, "get_dense", 7, host)
    assert (np.from_dlpack(batch) == DENSE[[4, 0, 4]]).all()
    assert (np.from_dlpack(one) == DENSE[7]).all()
    tally = nat.call(_native.Tally, "__new__")
    nat.call(dense, "gather_dense", np.array([1, 2], dtype=np.int64), host, tally)
    assert nat.get(tally, "bytes") == 2 * DENSE[0].nbytes
    assert nat.get(dense, "url") is None
    assert nat.call(dense, "traffic") == (0, 0)
    assert nat.call(_native, "is_url", "s3://bucket/store") is True
    assert nat.call(_native, "is_url", str(root / "dense")) is False
    url = (root / "uploaded").as_uri()
    nat.call(_native, "upload", root / "dense", url, {})
    remote = nat.call(_native.Store, "open_url", url, {"retries": 1}, root / "cache", 1 << 20)
    assert nat.get(remote, "url") == url
    got = nat.call(remote, "gather_dense", np.array([4, 0, 4], dtype=np.int64), host)
    assert (np.from_dlpack(got) == DENSE[[4, 0, 4]]).all()
    fetched, from_cache = nat.call(remote, "traffic")
    assert fetched >= DENSE[[4, 0, 4]].nbytes and from_cache >= 0
    pending = nat.call(remote, "begin", np.array([2, 5], dtype=np.uint64), host)
    got = nat.call(remote, "finish_dense", pending)
    assert (np.from_dlpack(got) == DENSE[[2, 5]]).all()
    assert nat.get(pending, "ready") is True and nat.get(pending, "work_ns") is None
    nat.call(pending, "cancel")  # once finished, a no-op
    assert nat.call(remote, "warm", np.array([1, 3], dtype=np.uint64)) == 1  # one step begun
    nat.call(remote, "cancel_warm")
    assert nat.call(dense, "warm", np.array([1], dtype=np.int64)) == 1  # nothing to fetch
    ahead = nat.call(dense, "begin", np.array([6, 1], dtype=np.int64), host)
    got = nat.call(dense, "finish_dense", ahead)
    assert (np.from_dlpack(got) == DENSE[[6, 1]]).all()
    assert nat.get(ahead, "ready") is True and nat.get(ahead, "work_ns") >= 0
    base = (root / "published").as_uri()
    nat.call(_native, "upload", root / "dense", f"{base}/.parts/a/x", {})
    counts = nat.call(
        _native, "concat_urls", base, [([f"{base}/.parts/a/x"] * 2, f"{base}/x", b"")], {}
    )
    assert counts == [2 * len(DENSE)]
    assert nat.call(_native, "remove_prefix", f"{base}/.parts", {}) > 0
    assert sorted(os.listdir(root / "published")) == ["x"]
    assert nat.call(_native, "occupied", base, [f"{base}/x", f"{base}/y"], {}) == [f"{base}/x"]
    job = f"{base}/{_native.PARTS_DIR}-0123456789ab"
    nat.call(_native, "put_object", f"{job}/heartbeat", b"0\n", {})
    assert nat.call(_native, "clean_jobs", base, 3600.0, {}) == []  # still beating
    assert nat.call(_native, "clean_jobs", base, 0.0, {}) == [job]
    assert sorted(os.listdir(root / "published")) == ["x"]

    ragged = nat.call(_native.Store, "open", str(root / "ragged"), checked=True)
    assert nat.get(ragged, "kind") == "ragged" and nat.get(ragged, "ndim") == 1
    assert nat.get(ragged, "item_shape") == [] and nat.get(ragged, "checked") is True
    values, cu, shapes = nat.call(
        ragged, "gather_ragged", np.array([9, 1, 4], dtype=np.uint64), host
    )
    parts = nat.call(values, "_split", cu, shapes)
    assert [np.from_dlpack(p).tolist() for p in parts] == [RECORDS[i].tolist() for i in (9, 1, 4)]
    lengths = nat.call(ragged, "record_lengths", 2, 5)
    assert lengths.dtype == np.uint64 and lengths.tolist() == [len(RECORDS[i]) for i in (2, 3, 4)]
    url = (root / "uploaded-ragged").as_uri()
    nat.call(_native, "upload", root / "ragged", url, {})
    remote = nat.call(_native.Store, "open_url", url, {})
    pending = nat.call(remote, "begin", np.array([3, 0], dtype=np.int64), host)
    values, cu, shapes = nat.call(remote, "finish_ragged", pending)
    parts = nat.call(values, "_split", cu, shapes)
    assert [np.from_dlpack(p).tolist() for p in parts] == [RECORDS[i].tolist() for i in (3, 0)]
    return batch


def exercise_tensor(nat: Native, t: object) -> None:
    assert nat.get(t, "shape") == (3, 2, 3) and nat.get(t, "ndim") == 3
    assert nat.get(t, "dtype") == np.float32 and nat.get(t, "nbytes") == 72
    assert nat.get(t, "device") == nat.call(t, "__dlpack_device__") == (_native.DL_CPU, 0)
    assert nat.call(t, "__len__") == 3
    nat.call(t, "__dlpack__")
    nat.call(t, "__dlpack__", stream=None, max_version=(1, 0), dl_device=(1, 0), copy=False)
    wrapped = nat.call(_native.DLTensor, "_from_array", np.arange(6, dtype=np.uint16))
    assert np.from_dlpack(wrapped).tolist() == [0, 1, 2, 3, 4, 5]
    imported = nat.call(_native.DLTensor, "_from_dlpack", np.arange(3, dtype=np.int8))
    assert np.asarray(imported).tolist() == [0, 1, 2]
    interface = nat.get(wrapped, "__array_interface__")
    assert interface["typestr"] == "<u2" and interface["shape"] == (6,)


def exercise_allocators(nat: Native, library: pathlib.Path) -> None:
    host = nat.call(_native.Allocator, "host")
    region = nat.call(host, "allocate", 100)
    assert nat.get(region, "size") == 100 and nat.get(region, "address") % _native.ALIGN == 0
    assert nat.get(region, "device") == nat.get(host, "dl_device") == (_native.DL_CPU, 0)
    assert nat.call(host, "stats") == (1, 4096, 0)  # live bytes count the size class
    del region
    gc.collect()
    assert nat.call(host, "stats") == (0, 0, 4096)
    assert nat.get(host, "library") is None and nat.get(host, "closed") is False
    nat.call(host, "close")
    assert nat.get(host, "closed") is True

    gpu = nat.call(_native.Allocator, "device", "cuda", library, 0, 0)
    assert nat.get(gpu, "library") == str(library)
    assert nat.get(gpu, "dl_device") == (_native.DL_CUDA, 0)
    nat.call(gpu, "close")


def exercise_sampler(nat: Native) -> None:
    s = nat.call(_native.Sampler, "__new__", 10, 4, 0, 7)
    assert nat.call(s, "__iter__") is s
    assert nat.call(s, "next").tolist() == [0, 1, 2, 3]
    assert nat.call(s, "__next__").tolist() == [4, 5, 6, 7]
    nat.call(s, "seek", 5)
    assert nat.call(s, "_state") == (10, 4, 0, 7, 5)
    m = nat.call(_native.MixtureSampler, "__new__", [(0, 3), (10, 12)], [1, 0.0], 4, [0, 1], 7)
    assert nat.call(m, "__iter__") is m
    assert nat.call(m, "next").tolist() == [0, 1, 2, 0]
    assert nat.call(m, "__next__").tolist() == [1, 2, 0, 1]
    nat.call(m, "seek", 5)
    assert nat.call(m, "_state") == ([(0, 3), (10, 12)], [1, 0], 4, [0, 1], 7, 5)
    w = nat.call(_native.WindowedSampler, "__new__", 10, 100, 0, 10, 30, 3, 0)
    assert nat.call(w, "__iter__") is w
    assert nat.call(w, "next").tolist() == [7, 8, 6]
    assert nat.call(w, "__next__").tolist() == [2, 1, 0]
    nat.call(w, "seek", 5)
    assert nat.call(w, "_state") == (10, 100, 0, 10, 30, 3, 0, 5)
    assert nat.call(w, "_geometry") == (1, 3, 4)
    lengths = np.array([3, 1, 4], dtype=np.uint64)
    p = nat.call(_native.PackingSampler, "__new__", lengths, 4, 2, 0, 7, "truncate")
    assert nat.call(p, "__iter__") is p
    assert nat.call(p, "next").tolist() == [0, 1, 2]
    assert nat.get(p, "pack_offsets").tolist() == [0, 2, 3]
    assert nat.call(p, "__next__").tolist() == [0, 1, 2]
    nat.call(p, "seek", 5)
    state = nat.call(p, "_state")
    assert state[0] == 3 and state[2:] == (4, 2, 0, 7, "truncate", 5)
    assert nat.call(p, "_lengths").tolist() == [3, 1, 4]
    assert nat.call(p, "_plan") == (2, 8, 2)
    assert nat.call(p, "_positions") is None and nat.call(p, "_positions_xxh3") is None
    chosen = np.array([2, 0], dtype=np.uint64)
    q = nat.call(_native.PackingSampler, "__new__", lengths[chosen], 4, 1, 0, 7, "truncate", chosen)
    assert nat.call(q, "_positions").tolist() == [2, 0]
    assert nat.call(q, "_positions_xxh3") == xxhash.xxh3_64_intdigest(
        chosen.astype("<u8").tobytes()
    )


def exercise_functions(nat: Native, root: pathlib.Path) -> bytes:
    err = nat.call(_native, "out_of_range", 12, 10)
    assert "12" in str(err)
    assert nat.call(_native, "numpy_dtype", "complex64") == np.complex64
    samples = np.frombuffer(
        b"".join(bytes([i % 7]) * 400 + b"loaderx" * 60 for i in range(40)), np.uint8
    )
    sizes = [len(samples) // 40] * 40
    dictionary = nat.call(_native, "train_dictionary", samples, sizes, 1024)
    assert 0 < len(dictionary) <= 1024
    assert nat.call(_native, "encoded_size", "raw", samples, sizes) == len(samples)
    squeezed = nat.call(_native, "encoded_size", "zstd_dict", samples, sizes, dict=dictionary)
    assert 0 < squeezed < len(samples)
    build = nat.call(_native.BuildDir, "__new__", root / "built")
    staged = nat.get(build, "path")
    assert staged.parent == root and staged.exists()
    nat.call(build, "publish")
    assert (root / "built").is_dir() and not staged.exists()
    dropped = nat.call(_native.BuildDir, "__new__", str(root / "dropped-build"))
    nat.call(dropped, "discard")
    assert not nat.get(dropped, "path").exists()
    assert nat.call(_native, "clean_stale", root) == []
    part = nat.call(_native.Writer, "create_dense", root / "part", "uint8", [2], "raw", 1)
    nat.call(part, "append_dense", np.arange(6, dtype=np.uint8), 3)
    nat.call(part, "close")
    seen: list[tuple[int, int]] = []
    summary = nat.call(
        _native,
        "concat",
        [root / "part", str(root / "part")],
        root / "joined",
        b"{}",
        False,
        True,
        lambda done, total: seen.append((done, total)),
    )
    assert summary[:6] == (root / "joined", 6, 2, 0, 2, 12) and seen[-1] == (6, 6)
    threads = nat.call(_native, "thread_count")
    nat.call(_native, "set_threads", threads)
    assert nat.call(_native, "data_file_name", 7) == "data-007.bin"
    return dictionary


def test_every_stub_member_returns_its_annotated_type(tmp_path, fake_runtime):
    nat = Native()
    dictionary = exercise_functions(nat, tmp_path)
    for codec in _native.CODECS:
        root = tmp_path / codec
        root.mkdir()
        used = dictionary if codec == "zstd_dict" else None
        exercise_writers(nat, root, codec, used)
        batch = exercise_store(nat, root, codec, used)
        exercise_tensor(nat, batch)
    exercise_allocators(nat, fake_runtime)
    exercise_sampler(nat)
    assert nat.errors == []
    assert nat.every_member() - nat.exercised == set(), "stub members nothing exercises"


def test_the_checker_tells_a_path_from_a_str(tmp_path):
    _native.Writer.create_dense(tmp_path / "s", "uint8", [], "raw", 1).close()
    store = _native.Store.open(tmp_path / "s")
    good = STUB_PATH.read_text()
    bad = load_stub(
        good.replace("    def path(self) -> Path: ...", "    def path(self) -> str: ...", 1)
    )
    assert Native(STUB).get(store, "path") == tmp_path / "s"
    nat = Native(bad)
    nat.get(store, "path")
    assert nat.errors == [
        f"Store.path: {tmp_path / 's'!r} is a pathlib.PosixPath, not <class 'str'>"
    ]


@pytest.mark.parametrize(
    "value, annotation, reason",
    [
        (3, "int", ""),
        (True, "int", "True is a bool, not an int"),
        ((1, 2), "tuple[int, int]", ""),
        ((1, "2"), "tuple[int, ...]", "'2' is a builtins.str, not <class 'int'>"),
        ((1,), "tuple[int, int]", "(1,) has 1 items, not 2"),
        ([1, 2], "list[int]", ""),
        ({"a": 1}, "dict[str, object]", ""),
        ({1: 1}, "dict[str, object]", "1 is a builtins.int, not <class 'str'>"),
        ([("a", 1)], "dict[str, object]", "[('a', 1)] is a list, not a dict"),
        ((1, 2), "list[int]", "(1, 2) is a tuple, not a list"),
        (None, "bytes | None", ""),
        (b"x", "bytes | None", ""),
        (
            "x",
            "bytes | None",
            "'x' is none of bytes | None: 'x' is a builtins.str, not "
            "<class 'bytes'>; 'x' is not None",
        ),
        (np.zeros(2, np.uint64), "npt.NDArray[np.uint64]", ""),
        (np.zeros(2, np.int64), "npt.NDArray[np.uint64]", "an array of int64 is not one of uint64"),
        (np.zeros(2, np.int64), "npt.NDArray[np.generic]", ""),
        (np.dtype("float32"), "np.dtype[np.generic]", ""),
        (pathlib.Path("p"), "Path", ""),
    ],
)
def test_the_checker(value, annotation, reason):
    assert mismatch(value, eval(annotation, vars(STUB)), STUB, None) == reason


def test_the_checker_maps_stub_classes_to_the_module():
    sampler = _native.Sampler(4, 2, 0, 0)
    assert mismatch(sampler, STUB.Sampler, STUB, None) == ""
    assert mismatch(sampler, typing_extensions.Self, STUB, "Sampler") == ""
    assert mismatch(sampler, STUB.Store, STUB, None).endswith(
        "is a loaderx._native.Sampler, not <class 'loaderx._native.Store'>"
    )


def test_constants_have_their_annotated_types():
    constants = stub_constants(STUB)
    assert set(constants) == {
        "DTYPES", "CODECS", "DICTIONARY_CODECS", "FORMAT_VERSION", "DEFAULT_DATA_SHARDS",
        "MAX_DATA_SHARDS", "MAX_DATA_FILES", "NEWEST_FORMAT_VERSION", "PARTS_DIR",
        "MAX_NDIM",
        "MAX_RECORD_BYTES", "MAX_RAGGED_ELEMENTS",
        "MAX_ATTRS_BYTES", "HEADER_FILE", "INDEX_FILE", "INDEX_SUMS_FILE", "DICT_FILE",
        "ATTRS_FILE", "SIZES_STEP_RECORDS", "VERIFY_STEP_BYTES", "ZSTD_LEVEL", "ALIGN",
        "DEFAULT_IDLE_LIMIT", "DL_CPU", "DL_CUDA", "DL_ROCM", "MAX_THREADS", "SAMPLER_MODES",
        "SAMPLER_LAST_STEP", "PACK_WINDOW", "LOADERX_STORAGE_OPTIONS", "DEFAULT_CACHE_BLOCK_BYTES",
        "DEFAULT_CACHE_MAX_BYTES", "DEFAULT_MAX_CONCURRENCY", "MAX_CONCURRENCY", "MAX_RETRIES",
        "DEFAULT_WINDOW_BYTES", "INDEX_BLOCK_BYTES", "DEFAULT_INDEX_MEMORY_BYTES",
    }  # fmt: skip
    for name, annotation in constants.items():
        assert mismatch(getattr(_native, name), annotation, STUB, None) == "", name


def test_the_rules_python_reads_from_the_native_module():
    # The values the format and the sampler define (docs/FORMAT.md, docs/sampler.md).
    assert [_native.data_file_name(i) for i in (0, 7, 254)] == [
        "data-000.bin",
        "data-007.bin",
        "data-254.bin",
    ]
    assert (_native.HEADER_FILE, _native.INDEX_FILE, _native.INDEX_SUMS_FILE) == (
        "header.bin",
        "index.bin",
        "index.sum",
    )
    assert (_native.DICT_FILE, _native.ATTRS_FILE) == ("dict.bin", "attrs.json")
    assert _native.DICTIONARY_CODECS == ("zstd_dict",)
    assert _native.SAMPLER_MODES == ("SEQUENTIAL", "IID", "CYCLIC")
    assert _native.SAMPLER_LAST_STEP == 2**64 - 1
    assert _native.DEFAULT_WINDOW_BYTES == 256 * 2**20
    assert _native.MAX_RAGGED_ELEMENTS == 2**31 - 1
    assert (_native.SIZES_STEP_RECORDS, _native.VERIFY_STEP_BYTES) == (2**20, 64 << 20)
    assert (_native.DL_CPU, _native.DL_CUDA, _native.DL_ROCM) == (1, 2, 10)
    assert (_native.MAX_THREADS, _native.MAX_CONCURRENCY, _native.MAX_RETRIES) == (1024, 1024, 100)


def runtime_parameters(obj: object, is_method: bool) -> list[tuple[str, object, object]]:
    sig = inspect.signature(obj)
    params = list(sig.parameters.values())[1 if is_method else 0 :]
    return [(p.name, p.kind.name, p.default) for p in params]


def stub_parameters(func: types.FunctionType, is_method: bool) -> list[tuple[str, object, object]]:
    params = list(inspect.signature(func).parameters.values())[1 if is_method else 0 :]
    return [(p.name, p.kind.name, p.default) for p in params]


def same_parameters(stub: list, runtime: list) -> bool:
    """Names, kinds and defaults; a default the stub writes as ``...`` matches any."""
    if [(n, k) for n, k, _ in stub] != [(n, k) for n, k, _ in runtime]:
        return False
    for (_, _, s), (_, _, r) in zip(stub, runtime, strict=True):
        if (s is inspect.Parameter.empty) != (r is inspect.Parameter.empty):
            return False
        if s is not Ellipsis and s != r:
            return False
    return True


def signature_pairs():
    """(stub function, runtime callable, whether both take self/cls first)."""
    for name, func in stub_functions(STUB).items():
        yield name, func, getattr(_native, name), False
    for cls_name, cls in stub_classes(STUB).items():
        real = getattr(_native, cls_name)
        for name, member in stub_members(cls).items():
            if isinstance(member, property):
                continue
            if name == "__new__":  # PyO3 puts the constructor's signature on the class
                yield f"{cls_name}.__new__", member, real, True
                continue
            runtime = inspect.getattr_static(real, name)
            runtime = runtime.__func__ if isinstance(runtime, staticmethod) else runtime
            yield (
                f"{cls_name}.{name}",
                function_of(member),
                runtime,
                not isinstance(member, staticmethod),
            )


@pytest.mark.parametrize("name, func, runtime, is_method", list(signature_pairs()))
def test_parameters_match_the_text_signature(name, func, runtime, is_method):
    if getattr(runtime, "__text_signature__", None) is None:
        pytest.skip(f"PyO3 gives {name} no signature")
    runtime_is_method = is_method and not isinstance(runtime, type)
    stub = stub_parameters(func, is_method)
    real = runtime_parameters(runtime, runtime_is_method)
    assert same_parameters(stub, real), f"{name}: stub {stub} != runtime {real}"


def test_final_classes_are_the_ones_python_cannot_subclass():
    tree = ast.parse(STUB_PATH.read_text())
    final = {
        node.name
        for node in tree.body
        if isinstance(node, ast.ClassDef)
        and any(isinstance(d, ast.Name) and d.id == "final" for d in node.decorator_list)
    }
    sealed = {
        name
        for name in stub_classes(STUB)
        if not getattr(_native, name).__flags__ & Py_TPFLAGS_BASETYPE
    }
    assert final == sealed


def stub_names():
    out = {name: set(stub_members(cls)) for name, cls in stub_classes(STUB).items()}
    out.update({name: None for name in stub_functions(STUB)})
    out.update({name: None for name in stub_constants(STUB)})
    return out


def module_names():
    out = {}
    for name in dir(_native):
        if name.startswith("__"):
            continue
        obj = getattr(_native, name)
        if isinstance(obj, type):
            members = set(vars(obj)) if not issubclass(obj, Exception) else set()
            out[name] = {m for m in members if not m.startswith("__") or m in KEPT_DUNDERS}
        else:
            out[name] = None
    return out


def test_stub_names_match_the_extension():
    assert stub_names() == module_names()
