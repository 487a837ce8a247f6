"""Store attributes: given at creation, covered by the header, read back fresh."""

import json
import math
import os
import pathlib
import pickle

import numpy as np
import pytest

from loaderx import _native
from loaderx.errors import InvalidArgumentError, ZrecordError
from loaderx.zrecord import Dense, Ragged, RaggedBatch

REPO = pathlib.Path(__file__).resolve().parents[2]
GOLDEN = REPO / "crates" / "zrecord" / "tests" / "golden"
DATA = REPO / "tests" / "support" / "data"

ATTRS = {
    "classes": ["cat", "dog", "ünïcode"],
    "tokenizer": {"name": "gpt2", "vocab": 50257, "special": {"eos": 50256}},
    "scale": 0.125,
    "big": 2**70,
    "flag": False,
    "missing": None,
    "nested": [[1, 2], [], [{"a": -1.5e300}]],
}


def dense(path, attrs=None, **kw):
    with Dense.create(path, np.int32, (2,), codec="raw", data_shards=1, attrs=attrs, **kw) as w:
        w.append(np.arange(6, dtype=np.int32).reshape(3, 2))
    return path


def test_dense_and_ragged_keep_their_attributes_exactly(tmp_path):
    dense(tmp_path / "d", ATTRS)
    with Ragged.create(tmp_path / "r", np.int16, ndim=1, codec="zstd", attrs=ATTRS) as w:
        w.append(RaggedBatch.from_records([np.arange(3, dtype=np.int16)]))
    for reader in (Dense.open(tmp_path / "d"), Ragged.open(tmp_path / "r")):
        got = reader.attrs
        assert got == ATTRS
        # JSON types come back as they went in: an int is not a float.
        assert type(got["big"]) is int and type(got["scale"]) is float
        assert type(got["flag"]) is bool
    assert json.loads((tmp_path / "d" / "attrs.json").read_bytes()) == ATTRS


def test_equal_attributes_are_equal_bytes_whatever_their_order(tmp_path):
    dense(tmp_path / "a", {"b": 1, "a": {"y": 2, "x": 3}})
    dense(tmp_path / "b", {"a": {"x": 3, "y": 2}, "b": 1})
    raw = (tmp_path / "a" / "attrs.json").read_bytes()
    assert raw == b'{"a":{"x":3,"y":2},"b":1}'
    assert raw == (tmp_path / "b" / "attrs.json").read_bytes()
    assert Dense.open(tmp_path / "a").header_checksum == Dense.open(tmp_path / "b").header_checksum


def test_attrs_is_a_fresh_dict_each_time(tmp_path):
    r = Dense.open(dense(tmp_path / "d", ATTRS))
    a = r.attrs
    a["classes"].append("bird")
    a["new"] = 1
    assert r.attrs == ATTRS
    assert r.attrs is not r.attrs


@pytest.mark.parametrize("attrs", [None, {}])
def test_no_attributes_read_as_empty_and_write_no_file(tmp_path, attrs):
    r = Dense.open(dense(tmp_path / "d", attrs))
    assert r.attrs == {}
    assert not (tmp_path / "d" / "attrs.json").exists()
    assert r._store().attrs() is None


class Weird:
    pass


cyclic: dict = {}
cyclic["self"] = [cyclic]


def nested(depth):
    """A list `depth` lists deep."""
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize(
    "attrs, error, message",
    [
        ({"x": math.nan}, InvalidArgumentError, "attrs['x'] is nan"),
        ({"a": [1, {"b": -math.inf}]}, InvalidArgumentError, "attrs['a'][1]['b'] is -inf"),
        ({1: "one"}, TypeError, "attrs has the key 1 of type int"),
        ({"a": {None: 1}}, TypeError, "attrs['a'] has the key None"),
        ({"s": {1, 2}}, TypeError, "attrs['s'] is a builtins.set"),
        ({"t": (1, 2)}, TypeError, "attrs['t'] is a builtins.tuple"),
        ({"n": np.int64(3)}, TypeError, "attrs['n'] is a numpy.int64"),
        ({"b": b"raw"}, TypeError, "attrs['b'] is a builtins.bytes"),
        ({"w": Weird()}, TypeError, "attrs['w'] is a test_attrs.Weird"),
        (cyclic, InvalidArgumentError, "attrs['self'][0] contains itself"),
        (
            {"deep": nested(1000)},
            InvalidArgumentError,
            "attrs['deep']" + "[0]" * 99 + " nests dicts and lists more than 100 deep",
        ),
        (
            {"s": ["ok", "x\ud800y"]},
            InvalidArgumentError,
            "attrs['s'][1] holds a lone surrogate ('\\ud800' at position 1), which UTF-8 "
            "cannot encode",
        ),
        ({"k\udc80": 1}, InvalidArgumentError, "attrs key 'k\\udc80' holds a lone surrogate"),
        (
            {"n": [10**4300]},
            InvalidArgumentError,
            "attrs['n'][0] is an integer of more than 4,300 digits, which JSON readers",
        ),
        ({"n": -(10**5000)}, InvalidArgumentError, "attrs['n'] is an integer of more than"),
        ([("a", 1)], TypeError, "attrs must be a dict with str keys, got list"),
        ("{}", TypeError, "attrs must be a dict with str keys, got str"),
    ],
)
def test_refused_attributes_name_the_place_and_create_nothing(tmp_path, attrs, error, message):
    with pytest.raises(error, match=None) as info:
        Dense.create(tmp_path / "d", np.int32, (2,), codec="raw", attrs=attrs)
    assert message in str(info.value)
    assert os.listdir(tmp_path) == []


def test_the_limits_on_depth_and_digits_are_inclusive(tmp_path):
    deepest = {"a": nested(99)}  # the dict, then 99 lists: 100 levels
    biggest = {"n": 10**4300 - 1, "m": -(10**4300 - 1)}
    assert Dense.open(dense(tmp_path / "deep", deepest)).attrs == deepest
    assert Dense.open(dense(tmp_path / "big", biggest)).attrs == biggest
    with pytest.raises(InvalidArgumentError, match="more than 100 deep"):
        dense(tmp_path / "deeper", {"a": nested(100)})
    assert sorted(os.listdir(tmp_path)) == ["big", "deep"]


def test_attributes_too_deep_to_read_are_a_zrecord_error(tmp_path):
    # Another writer's attributes, nested deeper than Python's JSON reader goes.
    raw = b'{"a":' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    w = _native.Writer.create_dense(str(tmp_path / "s"), "int32", [2], "raw", 1, None, raw)
    w.close()
    r = Dense.open(tmp_path / "s")
    with pytest.raises(ZrecordError, match="the attributes nest too deep to be read") as info:
        r.attrs  # noqa: B018
    assert info.value.path == str(tmp_path / "s")


def test_size_limit_is_the_format_s(tmp_path):
    limit = _native.MAX_ATTRS_BYTES
    assert limit == 1 << 20
    overhead = len(json.dumps({"x": ""}, separators=(",", ":")))
    at_limit = {"x": "a" * (limit - overhead)}
    assert Dense.open(dense(tmp_path / "ok", at_limit)).attrs == at_limit
    assert os.path.getsize(tmp_path / "ok" / "attrs.json") == limit
    with pytest.raises(InvalidArgumentError, match="attrs take 1,048,577 bytes of JSON"):
        dense(tmp_path / "over", {"x": "a" * (limit - overhead + 1)})
    assert not (tmp_path / "over").exists()
    # The writer enforces the same limit for callers of the native layer.
    with pytest.raises(InvalidArgumentError, match="at most 1048576 are allowed"):
        _native.Writer.create_dense(
            str(tmp_path / "native"), "int32", [2], "raw", 1, None, b" " * (limit + 1)
        )
    assert sorted(os.listdir(tmp_path)) == ["ok"]


def test_the_header_covers_the_attributes(tmp_path):
    a = Dense.open(dense(tmp_path / "a", {"v": 1}))
    b = Dense.open(dense(tmp_path / "b", {"v": 2}))
    assert a.header_checksum != b.header_checksum
    path = tmp_path / "a" / "attrs.json"
    raw = path.read_bytes()
    path.write_bytes(raw.replace(b"1", b"7"))  # same length, other content
    with pytest.raises(ZrecordError, match="the attributes file checksum mismatch") as info:
        Dense.open(tmp_path / "a")
    assert pathlib.Path(info.value.path) == path
    path.write_bytes(raw + b" ")
    with pytest.raises(ZrecordError, match="the attributes file is 8 bytes but the header says 7"):
        Dense.open(tmp_path / "a")
    path.unlink()
    with pytest.raises(ZrecordError, match="the attributes file is missing"):
        Dense.open(tmp_path / "a")


def test_attributes_that_are_not_a_json_object_are_a_zrecord_error(tmp_path):
    # The native writer does not parse JSON; a store from another writer could
    # hold anything, and reading it says so instead of returning it.
    for name, raw, message in [
        ("list", b"[1, 2]", "the attributes are a JSON list, not an object"),
        ("nan", b'{"x": NaN}', "the attributes are not JSON: NaN is not JSON"),
        ("bytes", b"\xff", "the attributes are not JSON"),
    ]:
        w = _native.Writer.create_dense(str(tmp_path / name), "int32", [2], "raw", 1, None, raw)
        w.close()
        r = Dense.open(tmp_path / name)
        with pytest.raises(ZrecordError, match=message) as info:
            r.attrs  # noqa: B018
        assert info.value.path == str(tmp_path / name)


def test_pickled_readers_keep_their_attributes(tmp_path):
    r = Dense.open(dense(tmp_path / "d", ATTRS))
    again = pickle.loads(pickle.dumps(r))
    assert again.attrs == ATTRS
    assert np.from_dlpack(again[:]).tolist() == [[0, 1], [2, 3], [4, 5]]


def test_a_version_1_store_opens_without_attributes():
    r = Dense.open(GOLDEN / "v1-dense-zstd")
    assert r.format_version == 1
    assert r.attrs == {}
    assert r.shape == (5, 3, 4) and r.dtype == np.uint8
    r.verify()


def test_the_committed_version_2_store_reads_back():
    # Written once by Dense.create (as tests/support/data/README.md shows); a writer that
    # changed the bytes of attrs.json or the header would fail here.
    r = Dense.open(DATA / "dense-attrs-v2")
    assert r.format_version == 2
    assert r.attrs == {
        "classes": ["cat", "dog"],
        "source": "loaderx tests",
        "split": {"train": 3, "test": 1},
        "scale": 0.5,
        "note": None,
    }
    assert np.from_dlpack(r[:]).tolist() == np.arange(24).reshape(4, 2, 3).tolist()
    assert r.header_checksum == 0xBE598A758C84CB1B
    r.verify()
    golden = Ragged.open(GOLDEN / "ragged-raw-attrs")
    assert golden.attrs == {"source": "golden"}
