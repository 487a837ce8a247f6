"""upload never destroys its source and leaves nothing of a replaced store; a
store URL means exactly the key written, or open and upload refuse it saying
why, never acting on another key (file:// and s3:// through moto)."""

import os
import re
import urllib.parse
import urllib.request

import numpy as np
import pytest

from conftest import host
from loaderx import _native
from loaderx.errors import InvalidArgumentError
from loaderx.zrecord import Dense, upload

VALUES = np.arange(60, dtype=np.int32).reshape(20, 3)


def make_store(path, shards=1, values=VALUES, attrs=None, codec="raw", dict_bytes=None):
    with Dense.create(
        path,
        np.int32,
        (3,),
        codec=codec,
        data_shards=shards,
        attrs=attrs,
        dict_bytes=dict_bytes,
    ) as w:
        w.append(values)
    return path


def snapshot(directory):
    """Every file under `directory`, by relative path, with its bytes."""
    out = {}
    for root, _, files in os.walk(directory):
        for name in files:
            p = os.path.join(root, name)
            with open(p, "rb") as f:
                out[os.path.relpath(p, directory)] = f.read()
    return out


def bucket_keys(moto_s3, bucket):
    """The keys moto holds in `bucket` (moto answers unsigned listings)."""
    with urllib.request.urlopen(f"{moto_s3.url}/{bucket}?list-type=2", timeout=30) as r:
        body = r.read().decode()
    return sorted(urllib.parse.unquote(k) for k in re.findall(r"<Key>([^<]*)</Key>", body))


# --- upload never destroys its source ------------------------------------------


def destinations(tmp_path, src):
    """Ways of naming `src` (or a place inside it) as the upload's destination,
    with the source path to upload from."""
    (tmp_path / "link").symlink_to(src)
    (tmp_path / "parent-link").symlink_to(src.parent)
    return {
        "itself": (src, src.as_uri()),
        "itself with a trailing slash": (src, src.as_uri() + "/"),
        "a link to it": (src, (tmp_path / "link").as_uri()),
        "a link to its parent": (src, (tmp_path / "parent-link" / src.name).as_uri()),
        "itself, uploaded through a link": (tmp_path / "link", src.as_uri()),
        "a directory inside it": (src, (src / "inner").as_uri()),
        "a directory inside it, through a link": (src, (tmp_path / "link" / "a" / "b").as_uri()),
    }


WAYS = [
    "itself",
    "itself with a trailing slash",
    "a link to it",
    "a link to its parent",
    "itself, uploaded through a link",
    "a directory inside it",
    "a directory inside it, through a link",
]


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("overwrite", [True, False])
def test_uploading_a_store_onto_itself_is_refused_before_anything_changes(tmp_path, way, overwrite):
    src = make_store(tmp_path / "data" / "src", shards=2, attrs={"k": 1})
    local, url = destinations(tmp_path, src)[way]
    before = snapshot(src)
    place = "lies inside" if "inside" in way else "is"
    with pytest.raises(InvalidArgumentError) as e:
        upload(local, url, overwrite=overwrite)
    assert f": {place} the store being uploaded ({local}); " in str(e.value)
    assert snapshot(src) == before
    with Dense.open(src) as r:
        assert host(r[:]).tolist() == VALUES.tolist()
        r.verify()


def test_an_upload_beside_its_source_is_not_refused(tmp_path):
    src = make_store(tmp_path / "src")
    # A sibling whose name starts with the source's is not inside it.
    upload(src, (tmp_path / "src2").as_uri())
    with Dense.open((tmp_path / "src2").as_uri()) as r:
        assert host(r[:]).tolist() == VALUES.tolist()


def rich_store(path):
    """A store with three data files, a dictionary and attributes."""
    return make_store(
        path,
        shards=3,
        values=VALUES + 1,
        attrs={"a": [1, 2]},
        codec="zstd_dict",
        dict_bytes=bytes(range(256)) * 8,
    )


def plain_files():
    return sorted(
        [
            _native.HEADER_FILE,
            _native.INDEX_FILE,
            _native.INDEX_SUMS_FILE,
            _native.data_file_name(0),
        ]
    )


def test_an_overwrite_leaves_no_file_of_the_replaced_store_file_url(tmp_path):
    dest = tmp_path / "dest"
    upload(rich_store(tmp_path / "rich"), dest.as_uri())
    assert len(os.listdir(dest)) == 8
    upload(make_store(tmp_path / "plain"), dest.as_uri(), overwrite=True)
    assert sorted(os.listdir(dest)) == plain_files()
    with Dense.open(dest.as_uri()) as r:
        assert host(r[:]).tolist() == VALUES.tolist()
        r.verify()


def test_an_overwrite_leaves_no_file_of_the_replaced_store_s3(tmp_path, moto_s3, s3_bucket):
    opts = moto_s3.storage_options()
    url = f"s3://{s3_bucket}/runs/x"
    # A neighbour whose key starts with the store's is not the store's.
    upload(rich_store(tmp_path / "rich"), url, storage_options=opts)
    upload(make_store(tmp_path / "n"), url + "-2", storage_options=opts)
    upload(make_store(tmp_path / "plain"), url, storage_options=opts, overwrite=True)
    keys = bucket_keys(moto_s3, s3_bucket)
    assert [k for k in keys if k.startswith("runs/x/")] == [f"runs/x/{n}" for n in plain_files()]
    assert len([k for k in keys if k.startswith("runs/x-2/")]) == 4
    with Dense.open(url, storage_options=opts) as r:
        assert host(r[:]).tolist() == VALUES.tolist()


def test_an_overwrite_of_a_store_whose_header_is_not_one_leaves_its_other_files(tmp_path):
    dest = tmp_path / "dest"
    upload(rich_store(tmp_path / "rich"), dest.as_uri())
    (dest / _native.HEADER_FILE).write_bytes(b"not a header")
    upload(make_store(tmp_path / "plain"), dest.as_uri(), overwrite=True)
    # Which files the old store had is unknown: nothing else is removed.
    assert len(os.listdir(dest)) == 8
    with Dense.open(dest.as_uri()) as r:
        assert host(r[:]).tolist() == VALUES.tolist()


# --- URLs mean what they say ---------------------------------------------------

# (what follows the store's parent in the URL, the key a URL parser would read
# instead, what the refusal says)
REWRITTEN = [
    ("runs/q?x=1", "runs/q", "holds a query (?...)"),
    ("h#frag", "h", "holds a fragment (#...)"),
    ("a/%2e%2e/b", "b", 'its path segment "%2e%2e" means ".."'),
    ("a/../b", "b", 'its path segment ".." means ".."'),
    ("q\x01", "q", "holds the control character U+0001"),
    ("q\n", "q", "holds the control character U+000A"),
    ("q ", "q", "begins or ends with white space"),
    ("r\tq", "rq", "holds the control character U+0009"),
]


@pytest.mark.parametrize(("written", "other", "why"), REWRITTEN)
def test_a_rewritten_file_url_is_refused_by_upload_writing_nothing(tmp_path, written, other, why):
    src = make_store(tmp_path / "src")
    root = tmp_path / "root"
    root.mkdir()
    with pytest.raises(InvalidArgumentError) as e:
        upload(src, root.as_uri() + "/" + written)
    assert why in str(e.value)
    assert snapshot(root) == {}


@pytest.mark.parametrize(("written", "other", "why"), REWRITTEN)
def test_a_rewritten_file_url_is_refused_by_open_never_opening_another_store(
    tmp_path, written, other, why
):
    root = tmp_path / "root"
    make_store(root / other)
    with pytest.raises(InvalidArgumentError) as e:
        Dense.open(root.as_uri() + "/" + written)
    assert why in str(e.value)


def test_rewritten_s3_urls_are_refused_by_upload_and_open(tmp_path, moto_s3, s3_bucket):
    opts = moto_s3.storage_options()
    src = make_store(tmp_path / "src")
    for written, _, why in REWRITTEN:
        with pytest.raises(InvalidArgumentError) as e:
            upload(src, f"s3://{s3_bucket}/{written}", storage_options=opts)
        assert why in str(e.value)
    assert bucket_keys(moto_s3, s3_bucket) == []
    for _, other, _ in REWRITTEN:
        upload(src, f"s3://{s3_bucket}/{other}", storage_options=opts, overwrite=True)
    for written, _, why in REWRITTEN:
        with pytest.raises(InvalidArgumentError) as e:
            Dense.open(f"s3://{s3_bucket}/{written}", storage_options=opts)
        assert why in str(e.value)


@pytest.mark.parametrize("suffix", ["", "/", "//"])
def test_a_bucket_without_a_key_is_refused_by_upload_and_open(tmp_path, moto_s3, s3_bucket, suffix):
    opts = moto_s3.storage_options()
    src = make_store(tmp_path / "src")
    url = f"s3://{s3_bucket}{suffix}"
    with pytest.raises(InvalidArgumentError, match="names a bucket but no key in it"):
        upload(src, url, storage_options=opts)
    assert bucket_keys(moto_s3, s3_bucket) == []
    for name in plain_files():
        moto_s3.put_object(s3_bucket, name, (src / name).read_bytes())
    with pytest.raises(InvalidArgumentError, match="names a bucket but no key in it"):
        Dense.open(url, storage_options=opts)


def test_keys_written_percent_encoded_are_read_and_written_exactly(tmp_path, moto_s3, s3_bucket):
    opts = moto_s3.storage_options()
    src = make_store(tmp_path / "src")
    # %3F and %23 are a key's ? and #; %20 is its space.
    url = f"s3://{s3_bucket}/runs/q%3Fx=1/h%23f/a%20b"
    upload(src, url, storage_options=opts)
    assert bucket_keys(moto_s3, s3_bucket) == [f"runs/q?x=1/h#f/a b/{n}" for n in plain_files()]
    with Dense.open(url, storage_options=opts) as r:
        assert host(r[:]).tolist() == VALUES.tolist()
    local = tmp_path / "q?x=1 #f"
    upload(src, local.as_uri())
    assert sorted(os.listdir(local)) == plain_files()
