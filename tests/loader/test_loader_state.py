"""The Loader's resume state: plain JSON data that survives JSON, pickle and
torch.save, names the streams and stores it was taken from, and is refused by a
loader that reads anything else."""

import io
import json
import pickle

import numpy as np
import pytest

from conftest import host
from loaderx.allocator import host as host_alloc
from loaderx.dataloader import STATE_VERSION, Loader
from loaderx.sampler import Sampler
from loaderx.zrecord import Dense

N = 97


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("state")
    with Dense.create(root / "label", np.int64, (), codec="raw") as w:
        w.append(np.arange(N, dtype=np.int64))
    with Dense.create(root / "x", np.float32, (3,), codec="zstd") as w:
        w.append(np.arange(3 * N, dtype=np.float32).reshape(N, 3))
    with Dense.create(root / "short", np.int64, (), codec="raw") as w:
        w.append(np.arange(N - 1, dtype=np.int64))
    readers = {name: Dense.open(root / name) for name in ("label", "x", "short")}
    yield readers
    for r in readers.values():
        r.close()


class Named:
    """A reader that names its store through the given attributes."""

    def __init__(self, reader, **attrs):
        self.reader = reader
        for k, v in attrs.items():
            setattr(self, k, v)

    def __len__(self):
        return len(self.reader)

    def gather(self, positions):
        return self.reader.gather(positions)


class Configured:
    """A custom sampler whose config() returns the given value."""

    def __init__(self, config, batch_size=4):
        self._value, self.batch_size, self.step = config, batch_size, 0

    def next(self):
        out = np.arange(self.step * self.batch_size, (self.step + 1) * self.batch_size) % N
        self.step += 1
        return out.astype(np.uint64)

    def seek(self, step):
        self.step = step

    def config(self):
        return self._value


def ident(reader):
    """What the state records for a loaderx reader: its header checksum, where
    readers expose one."""
    return getattr(reader, "header_checksum", None)


def iid(seed=5):
    return Sampler(N, 8, Sampler.Mode.IID, seed=seed)


def ids(shards):
    return [host(s["label"]).tolist() for s in shards]


def only_json_types(value):
    if isinstance(value, dict):
        return all(isinstance(k, str) and only_json_types(v) for k, v in value.items())
    if isinstance(value, list):
        return all(only_json_types(v) for v in value)
    return value is None or type(value) in (bool, int, str)


def test_the_state_names_the_step_sampler_and_streams(stores):
    lab, x = stores["label"], stores["x"]
    with Loader({"label": [lab] * 2, "x": [x] * 2}, iid(), workers=2) as loader:
        for _ in range(3):
            next(loader)
        state = loader.state_dict()
    assert STATE_VERSION == 3
    assert state == {
        "version": 3,
        "step": 3,
        "seed": 0,
        "sampler": [N, 8, "IID", 5],
        "streams": {
            "label": {"records": N, "stores": [ident(lab)] * 2},
            "x": {"records": N, "stores": [ident(x)] * 2},
        },
    }
    assert only_json_types(state)


def test_each_state_is_a_fresh_object(stores):
    with Loader({"label": [stores["label"]]}, iid(), workers=0) as loader:
        first = loader.state_dict()
        first["streams"]["label"]["stores"].append("edited")
        first["sampler"].append("edited")
        assert loader.state_dict() == {
            "version": 3,
            "step": 0,
            "seed": 0,
            "sampler": [N, 8, "IID", 5],
            "streams": {"label": {"records": N, "stores": [ident(stores["label"])]}},
        }


def roundtrip_json(state):
    return json.loads(json.dumps(state))


def roundtrip_pickle(state):
    return pickle.loads(pickle.dumps(state))


def roundtrip_torch(state):
    torch = pytest.importorskip("torch")
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


@pytest.mark.parametrize("roundtrip", [roundtrip_json, roundtrip_pickle, roundtrip_torch])
@pytest.mark.parametrize("workers", [0, 2])
def test_a_state_resumes_exactly_after_a_roundtrip(stores, roundtrip, workers):
    st = {"label": [stores["label"]] * 2, "x": [stores["x"]] * 2}
    with Loader(st, iid(), workers=workers) as a:
        for _ in range(40):
            next(a)
        state = a.state_dict()
        want = [ids(next(a)) for _ in range(10)]
    restored = roundtrip(state)
    with Loader(st, iid(), workers=workers) as b:
        b.load_state_dict(restored)
        assert [ids(next(b)) for _ in range(10)] == want
        assert b.state_dict()["step"] == 50
    assert restored == state


def test_store_identities_come_from_identity_then_header_checksum(stores):
    lab = stores["label"]
    readers = [
        Named(lab, identity=7, header_checksum=8),
        Named(lab, header_checksum=2**64 - 1),
        Named(lab, identity="store-a"),
        Named(lab, identity=b"\x00\xab"),
        Named(lab, header_checksum=lambda: 12),
        lab,
    ]
    with Loader({"label": readers}, Configured(None, batch_size=6), workers=0) as loader:
        stores_seen = loader.state_dict()["streams"]["label"]["stores"]
    assert stores_seen == [7, 2**64 - 1, "store-a", "00ab", 12, ident(lab)]


def test_an_identity_that_is_not_an_int_str_or_bytes_is_refused(stores):
    with pytest.raises(
        TypeError,
        match="stream 'label' binding 1: the reader's store identity is a float; "
        "expected an int, a str or bytes",
    ):
        Loader(
            {"label": [stores["label"], Named(stores["label"], identity=1.5)]},
            Configured(None),
        )


def mismatch_cases(stores):
    lab, x, short = stores["label"], stores["x"], stores["short"]
    base = {"label": [Named(lab, identity="a"), Named(lab, identity="b")]}
    return base, [
        (
            {"label": base["label"], "x": [x, x]},
            iid(),
            "the state was taken with streams ['label'], this loader reads ['label', 'x']",
        ),
        (
            {"renamed": base["label"]},
            iid(),
            "the state was taken with streams ['label'], this loader reads ['renamed']",
        ),
        (
            {"label": [short, short]},
            iid(),
            f"stream 'label' had {N} records when the state was taken, this loader's has {N - 1}",
        ),
        (
            {"label": [Named(lab, identity="a")] * 4},
            iid(),
            "stream 'label' had 2 bindings when the state was taken, this loader has 4",
        ),
        (
            {"label": [Named(lab, identity="a"), Named(lab, identity="c")]},
            iid(),
            "stream 'label' binding 1 read store 'b' when the state was taken, "
            "this loader's reads store 'c'",
        ),
        (
            {"label": [lab, lab]},
            iid(),
            "stream 'label' binding 0 read store 'a' when the state was taken, "
            f"this loader's reads store {ident(lab)!r}",
        ),
        (
            base,
            iid(seed=6),
            "the state was taken with sampler [97, 8, 'IID', 5], "
            "this loader's sampler is [97, 8, 'IID', 6]",
        ),
        (
            base,
            Sampler(N, 8, Sampler.Mode.CYCLIC, seed=5),
            "the state was taken with sampler [97, 8, 'IID', 5], "
            "this loader's sampler is [97, 8, 'CYCLIC', 5]",
        ),
    ]


def test_a_state_from_other_streams_stores_or_sampler_is_refused(stores):
    base, cases = mismatch_cases(stores)
    with Loader(base, iid(), workers=0) as a:
        next(a)
        state = roundtrip_json(a.state_dict())
    for st, sampler, message in cases:
        with Loader(st, sampler, workers=0) as b:
            with pytest.raises(ValueError) as info:
                b.load_state_dict(state)
            assert str(info.value) == message
            # Nothing moved: the refused loader starts at step 0.
            assert b.state_dict()["step"] == 0
    with Loader(base, iid(), workers=0) as c:
        c.load_state_dict(state)
        assert c.state_dict()["step"] == 1


@pytest.mark.parametrize("version", [1, 2, 4, "3", 3.0, True, None])
def test_unknown_versions_are_refused(stores, version):
    with Loader({"label": [stores["label"]]}, iid(), workers=0) as loader:
        state = {**loader.state_dict(), "step": 4, "version": version}
        with pytest.raises(ValueError) as info:
            loader.load_state_dict(state)
        why = " (version 2 states do not record the loader's seed)" if version == 2 else ""
        assert str(info.value) == (
            f"loader state version {version!r} is not supported; this loader reads version 3" + why
        )
        missing = loader.state_dict()
        del missing["version"]
        with pytest.raises(ValueError, match="loader state version None is not supported"):
            loader.load_state_dict(missing)


def test_a_state_without_streams_is_refused(stores):
    with Loader({"label": [stores["label"]]}, iid(), workers=0) as loader:
        with pytest.raises(ValueError) as info:
            loader.load_state_dict(
                {"version": 3, "step": 3, "seed": 0, "sampler": [N, 8, "IID", 5]}
            )
        assert str(info.value) == "the state has no 'streams'; it was not made by state_dict()"
        with pytest.raises(ValueError) as info:
            loader.load_state_dict({**loader.state_dict(), "streams": ["label"]})
        assert str(info.value) == (
            "the state's 'streams' is ['label'], not a dict of stream name -> records and stores"
        )


def test_a_custom_sampler_config_is_stored_as_json(stores):
    config = ("custom", 4, {"seed": np.int64(3), "shuffle": True, "parts": (1, 2)})
    with Loader({"label": [stores["label"]]}, Configured(config), workers=0) as a:
        next(a)
        state = a.state_dict()
    assert state["sampler"] == ["custom", 4, {"seed": 3, "shuffle": True, "parts": [1, 2]}]
    assert type(state["sampler"][2]["seed"]) is int
    with Loader({"label": [stores["label"]]}, Configured(config), workers=0) as b:
        b.load_state_dict(roundtrip_json(state))
        assert host(next(b)[0]["label"]).tolist() == [4, 5, 6, 7]


@pytest.mark.parametrize(
    "config,what",
    [
        (("custom", 0.5), "a float (0.5)"),
        ({1: "a"}, None),
        (("custom", object()), "an object"),  # was "a object (<object object at 0x...>)"
        (("custom", {1, 2}), "a set"),
    ],
)
def test_a_custom_sampler_config_that_is_not_json_is_a_type_error(stores, config, what):
    with Loader({"label": [stores["label"]]}, Configured(config), workers=0) as loader:
        with pytest.raises(TypeError) as info:
            loader.state_dict()
    message = str(info.value)
    if what is None:
        assert message == "the sampler's config() has the key 1; resume states use str keys only"
    else:
        assert message == (
            f"the sampler's config() holds {what}; resume states hold only dict, list, str, "
            "int, bool and None, so that they survive JSON"
        )


def test_a_sampler_without_config_is_recorded_as_none(stores):
    class Plain:
        def __init__(self):
            self.step = 0

        def next(self):
            self.step += 1
            return np.arange(self.step, self.step + 4, dtype=np.int64)

        def seek(self, step):
            self.step = step

    with Loader({"label": [stores["label"]]}, Plain(), workers=0) as a:
        next(a)
        next(a)
        state = a.state_dict()
    assert state["sampler"] is None and state["step"] == 2
    with Loader({"label": [stores["label"]]}, Plain(), workers=0) as b:
        b.load_state_dict(roundtrip_json(state))
        assert host(next(b)[0]["label"]).tolist() == [3, 4, 5, 6]


def test_loaderx_readers_are_identified_by_their_header_checksum(stores, tmp_path):
    if not hasattr(Dense, "header_checksum"):
        pytest.skip("this build's readers expose no header_checksum")
    lab = stores["label"]
    # Same record count and dtype as label, other records: only the identity differs.
    with Dense.create(tmp_path / "other", np.int64, (), codec="raw") as w:
        w.append(np.arange(N, dtype=np.int64)[::-1].copy())
    with Dense.open(tmp_path / "other") as other, Dense.open(lab.path) as reopened:
        assert isinstance(lab.header_checksum, int)
        assert reopened.header_checksum == lab.header_checksum
        assert other.header_checksum != lab.header_checksum
        bound = lab.bind(host_alloc.Allocator())
        with Loader({"label": [lab, bound]}, iid(), workers=0) as a:
            next(a)
            state = roundtrip_json(a.state_dict())
        assert state["streams"]["label"]["stores"] == [lab.header_checksum] * 2
        with Loader({"label": [reopened, reopened]}, iid(), workers=0) as b:
            b.load_state_dict(state)
            assert b.state_dict()["step"] == 1
        with Loader({"label": [lab, other]}, iid(), workers=0) as c:
            with pytest.raises(ValueError) as info:
                c.load_state_dict(state)
        assert str(info.value) == (
            f"stream 'label' binding 1 read store {lab.header_checksum} when the state was "
            f"taken, this loader's reads store {other.header_checksum}"
        )


def deep(depth):
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize("where", ["sampler", "streams", "extra"])
def test_a_state_nested_too_deep_is_refused_before_it_is_read(stores, where):
    with Loader({"label": [stores["label"]]}, iid(), workers=0) as loader:
        state = loader.state_dict()
        if where == "streams":
            state["streams"]["label"]["stores"] = deep(5000)
        else:
            state[where] = deep(5000)
        with pytest.raises(ValueError) as info:
            loader.load_state_dict(state)
        assert type(info.value).__name__ == "InvalidArgumentError"
        assert str(info.value) == (
            "the state nests dicts and lists more than 32 deep; it was not made by state_dict()"
        )
        cyclic = loader.state_dict()
        cyclic["streams"]["label"]["stores"].append(cyclic)
        with pytest.raises(ValueError, match="nests dicts and lists more than 32 deep"):
            loader.load_state_dict(cyclic)
        # A state as state_dict() makes it still resumes.
        loader.load_state_dict({**loader.state_dict(), "step": 2})
        assert loader.state_dict()["step"] == 2


def test_a_custom_sampler_config_nested_too_deep_is_refused(stores):
    with Loader({"label": [stores["label"]]}, Configured(deep(5000)), workers=0) as loader:
        with pytest.raises(ValueError) as info:
            loader.state_dict()  # was a RecursionError
    assert str(info.value) == (
        "the sampler's config() nests dicts and lists more than 32 deep; a resume state holds it"
    )
