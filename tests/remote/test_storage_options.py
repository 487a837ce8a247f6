"""storage_options as Python hands them over: the dict as given (no value turned
into a string), refused by the native side naming the key, kept typed in a
reader's pickle, and described by the StorageOptions TypedDict."""

import pickle
import pickletools
import typing

import numpy as np
import pytest

from conftest import host
from loaderx import _native
from loaderx.zrecord import Dense, StorageOptions

DATA = np.arange(40, dtype=np.int16).reshape(10, 4)


@pytest.fixture
def url(tmp_path):
    with Dense.create(tmp_path / "s", np.int16, (4,), codec="raw") as w:
        w.append(DATA)
    return (tmp_path / "s").as_uri()


def test_values_of_no_option_type_and_names_that_are_no_str_are_refused(url):
    with pytest.raises(TypeError) as e:
        Dense.open(url, storage_options={"retries": [1]})  # type: ignore[dict-item]
    assert str(e.value) == 'storage option "retries" must be a str, bool, int or float, got list'
    with pytest.raises(TypeError) as e:
        Dense.open(url, storage_options={"retries": None})  # type: ignore[dict-item]
    assert str(e.value) == (
        'storage option "retries" must be a str, bool, int or float, got NoneType'
    )
    with pytest.raises(TypeError) as e:
        Dense.open(url, storage_options={3: "x"})  # type: ignore[dict-item]
    assert str(e.value) == "storage option names are str, got int"
    with pytest.raises(TypeError) as e:
        Dense.open(url, storage_options=[("retries", 2)])  # type: ignore[arg-type]
    assert str(e.value) == "storage_options must be a dict, got list"


def test_a_pickled_reader_keeps_the_values_as_given(url):
    with Dense.open(url, storage_options={"retries": 2, "retry_backoff": 0.25}) as r:
        data = pickle.dumps(r, protocol=2)
    # Memo writes (BINPUT) between the opcodes say nothing about the values.
    ops = [(op.name, arg) for op, arg, _ in pickletools.genops(data) if op.name != "BINPUT"]
    at = ops.index(("BINUNICODE", "retries"))
    assert ops[at + 1] == ("BININT1", 2)
    at = ops.index(("BINUNICODE", "retry_backoff"))
    assert ops[at + 1] == ("BINFLOAT", 0.25)
    with pickle.loads(data) as again:
        assert host(again[[9, 0]]).tolist() == DATA[[9, 0]].tolist()


def test_the_typed_dict_names_every_loaderx_option_each_optional():
    hints = typing.get_type_hints(StorageOptions)
    assert set(_native.LOADERX_STORAGE_OPTIONS) <= set(hints)
    assert StorageOptions.__optional_keys__ == frozenset(hints)
    assert hints["retries"] == int | str
    assert hints["from_env"] == bool | str
    assert hints["retry_backoff"] == int | float | str
    assert (hints["aws_region"], hints["allow_http"]) == (str, bool | str)
