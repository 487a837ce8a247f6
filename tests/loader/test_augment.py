"""Deterministic augmentation: a transform with two required parameters gets a
StepInfo with each step's shards (the step, the global batch's positions and a
random generator derived from the loader's seed and the step alone), so random
augmentation is identical with any number of workers and after a resume."""

import json
import subprocess
import sys

import numpy as np
import pytest

from conftest import host
from loaderx.dataloader import Loader, StepInfo, record_rng, step_rng
from loaderx.sampler import Sampler
from loaderx.zrecord import Dense

N = 101
U64_MAX = 2**64 - 1
DATA = np.arange(N * 3, dtype=np.float64).reshape(N, 3)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("augment") / "x"
    with Dense.create(path, np.float64, (3,), codec="zstd") as w:
        w.append(DATA)
    with Dense.open(path) as d:
        yield d


def sampler():
    return Sampler(N, 8, Sampler.Mode.CYCLIC, seed=7)


def augment(shards, step):
    """A random augmentation: Gaussian noise and a random flip per binding."""
    out = []
    for shard in shards:
        x = host(shard["x"])
        noisy = x + step.rng.normal(size=x.shape)
        out.append(noisy[:, ::-1] if step.rng.random() < 0.5 else noisy)
    return step.step, step.positions.tolist(), np.concatenate(out)


def run(store, steps, *, workers, seed=0, state=None):
    with Loader(
        {"x": [store, store]}, sampler(), transform=augment, workers=workers, seed=seed
    ) as ld:
        if state is not None:
            ld.load_state_dict(state)
        return [next(ld) for _ in range(steps)]


def same(a, b):
    return len(a) == len(b) and all(
        s == t and p == q and np.array_equal(x, y)
        for (s, p, x), (t, q, y) in zip(a, b, strict=True)
    )


def test_augmentations_are_identical_with_any_number_of_workers(store):
    runs = {w: run(store, 40, workers=w, seed=11) for w in (0, 1, 2, 4)}
    assert [s for s, _, _ in runs[0]] == list(range(40))
    for w in (1, 2, 4):
        assert same(runs[w], runs[0]), w
    # The noise is the step's generator's, in the transform's order of draws.
    step, positions, x = runs[0][3]
    rng = step_rng(11, 3)
    want = []
    for half in (positions[:4], positions[4:]):
        noisy = DATA[half] + rng.normal(size=(4, 3))
        want.append(noisy[:, ::-1] if rng.random() < 0.5 else noisy)
    assert np.array_equal(x, np.concatenate(want))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_resumed_loader_repeats_the_augmentations(store, workers):
    k, n = 23, 12
    with Loader({"x": [store, store]}, sampler(), transform=augment, workers=workers, seed=5) as a:
        for _ in range(k):
            next(a)
        state = json.loads(json.dumps(a.state_dict()))
        want = [next(a) for _ in range(n)]
    assert state["seed"] == 5 and state["step"] == k
    got = run(store, n, workers=4 - workers, seed=5, state=state)
    assert [s for s, _, _ in got] == list(range(k, k + n))
    assert same(got, want)


def test_other_seeds_give_other_augmentations_of_the_same_batches(store):
    a, b = run(store, 5, workers=0, seed=1), run(store, 5, workers=0, seed=2)
    for (s, p, x), (t, q, y) in zip(a, b, strict=True):
        assert s == t and p == q
        assert not np.array_equal(x, y)
    assert same(run(store, 5, workers=2, seed=1), a)


def test_positions_are_the_samplers_global_batch_as_a_read_only_copy(store):
    seen = []

    def keep(shards, step):
        seen.append((step, [host(s["x"]).copy() for s in shards]))
        return step

    with Loader({"x": [store, store]}, sampler(), transform=keep, workers=2, seed=3) as ld:
        infos = [next(ld) for _ in range(30)]
    reference = sampler()
    for i, info in enumerate(infos):
        assert isinstance(info, StepInfo) and info.step == i and info.seed == 3
        assert info.positions.dtype == np.uint64 and info.positions.shape == (8,)
        # Taken at step i and still batch i after 29 more draws into the same buffer.
        assert info.positions.tolist() == reference.next().tolist()
        assert not info.positions.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            info.positions[0] = 1
    by_step = {info.step: shards for info, shards in seen}
    for info in infos:
        shards = by_step[info.step]
        assert np.array_equal(shards[0], DATA[info.positions[:4].astype(np.int64)])
        assert np.array_equal(shards[1], DATA[info.positions[4:].astype(np.int64)])
    assert repr(infos[2]) == "StepInfo(step=2, positions=8, seed=3)"


def philox4x64_10(counter, key):
    # Philox4x64-10 (Salmon et al., Random123), written out independently.
    mask = 2**64 - 1
    c, k = list(counter), list(key)
    for r in range(10):
        if r:
            k = [(k[0] + 0x9E3779B97F4A7C15) & mask, (k[1] + 0xBB67AE8584CAA73B) & mask]
        p0, p1 = 0xD2E7470EE14C6C93 * c[0], 0xCA5A826395121157 * c[2]
        c = [(p1 >> 64) ^ c[1] ^ k[0], p1 & mask, (p0 >> 64) ^ c[3] ^ k[1], p0 & mask]
    return c


def test_the_generator_is_philox_keyed_by_seed_and_step():
    for seed, step in [(0, 0), (0, 1), (1, 0), (42, 1000), (U64_MAX, U64_MAX)]:
        # NumPy advances the counter before each block: the first is counter 1.
        want = philox4x64_10([1, 0, 0, 0], [seed, step]) + philox4x64_10([2, 0, 0, 0], [seed, step])
        assert step_rng(seed, step).bit_generator.random_raw(8).tolist() == want
    info = StepInfo(9, np.arange(4, dtype=np.uint64), 42)
    assert info.rng is info.rng  # one generator per step, created on first use
    assert info.rng.integers(0, 2**63, 4).tolist() == step_rng(42, 9).integers(0, 2**63, 4).tolist()
    for bad in (-1, 2**64):
        with pytest.raises(ValueError):
            step_rng(bad, 0)
        with pytest.raises(ValueError):
            step_rng(0, bad)


def test_a_records_generator_is_philox_keyed_by_seed_and_step_from_its_own_counter():
    for seed, step, index in [(0, 0, 0), (0, 0, 1), (3, 4, 5), (U64_MAX, U64_MAX, U64_MAX)]:
        # Counter words (0, index, 1, 0), advanced before each block.
        want = [
            *philox4x64_10([1, index, 1, 0], [seed, step]),
            *philox4x64_10([2, index, 1, 0], [seed, step]),
        ]
        assert record_rng(seed, step, index).bit_generator.random_raw(8).tolist() == want
    # Not the step's stream, nor the next record's.
    assert record_rng(1, 2, 0).random() != step_rng(1, 2).random()
    assert record_rng(1, 2, 0).random() != record_rng(1, 2, 1).random()
    for bad in (-1, 2**64):
        for args in ((bad, 0, 0), (0, bad, 0), (0, 0, bad)):
            with pytest.raises(ValueError):
                record_rng(*args)


def test_which_transforms_get_a_step_info(store):
    got = {}

    def one(shards):
        got["one"] = len(shards)
        return "one"

    def optional(shards, scale=2):
        got["optional"] = scale  # a second parameter with a default: called as before
        return "optional"

    def keyword(shards, step, *, extra=1):
        got["keyword"] = type(step).__name__, extra
        return "keyword"

    class Callable2:
        def __call__(self, shards, step):
            got["object"] = step.step  # the second step: 1
            return "object"

    def varargs(*args):
        got["varargs"] = len(args)
        return "varargs"

    transforms = [one, optional, keyword, Callable2(), varargs, lambda s, i: i.step + 100]
    outs = []
    for t in transforms:
        with Loader({"x": [store]}, sampler(), transform=t, workers=0) as ld:
            next(ld)
            outs.append(next(ld))
    assert outs == ["one", "optional", "keyword", "object", "varargs", 101]
    assert got == {
        "one": 1,
        "optional": 2,
        "keyword": ("StepInfo", 1),
        "object": 1,
        "varargs": 1,
    }

    def three(shards, step, more):
        return shards

    def none():
        return None

    def kw_only(shards, *, required):
        return shards

    for t in (three, none, kw_only):
        with pytest.raises(TypeError) as info:
            Loader({"x": [store]}, sampler(), transform=t)
        assert str(info.value).endswith(
            "cannot be called with the shard list alone, nor with the shard list and a StepInfo"
        )
        assert t.__qualname__ in str(info.value)

    class Callable3:
        def __call__(self, shards, step, more):
            return shards

    with pytest.raises(TypeError) as info:
        Loader({"x": [store]}, sampler(), transform=Callable3())
    # A callable object is named by its type, not by its repr (an address).
    assert str(info.value).startswith(
        "transform 'test_which_transforms_get_a_step_info.<locals>.Callable3.__call__'(shards, "
        "step, more) cannot be"
    )


def test_the_seed_is_checked_and_part_of_the_resume_state(store):
    with Loader({"x": [store]}, sampler(), workers=0, seed=U64_MAX) as a:
        next(a)
        assert a.seed == U64_MAX and a.state_dict()["seed"] == U64_MAX
        assert repr(a).endswith(f"seed={U64_MAX}, step=1)")
        state = a.state_dict()
    with Loader({"x": [store]}, sampler(), workers=0, seed=1) as b:
        with pytest.raises(ValueError) as info:
            b.load_state_dict(state)
        assert str(info.value) == (
            f"the state was taken with seed {U64_MAX}, this loader's seed is 1"
        )
        for seed in (None, "1", 1.0, True):
            with pytest.raises(ValueError, match="the state was taken with seed"):
                b.load_state_dict({**state, "seed": seed})
        assert b.state_dict()["step"] == 0
        b.load_state_dict({**state, "seed": 1})
        assert b.state_dict()["step"] == 1
    with Loader({"x": [store]}, sampler()) as default:
        assert default.seed == 0
    for seed, exc in [(-1, ValueError), (2**64, ValueError), ("0", TypeError), (True, TypeError)]:
        with pytest.raises(exc, match="seed"):
            Loader({"x": [store]}, sampler(), seed=seed)


TYPED = """
from loaderx.dataloader import Loader, StepInfo
from loaderx.sampler import Sampler
from loaderx.zrecord import Dense, DLTensor


def flip(shards: list[dict[str, DLTensor]], step: StepInfo) -> float:
    return float(step.rng.random())


def scaled(shards: list[dict[str, DLTensor]], scale: int = 2) -> int:
    return len(shards) * scale


ds = Dense.open("x")
s = Sampler(10, 2, Sampler.Mode.IID)
reveal_type(Loader({"x": [ds]}, s, transform=flip, seed=3))
reveal_type(Loader({"x": [ds]}, s, transform=scaled))
reveal_type(Loader({"x": [ds]}, s, transform=lambda shards, step: str(step.step)))
"""


def test_a_type_checker_infers_what_either_form_returns(tmp_path):
    pytest.importorskip("pyright", reason="pyright comes with the test extra")
    (tmp_path / "use.py").write_text(TYPED)
    (tmp_path / "pyrightconfig.json").write_text(json.dumps({"typeCheckingMode": "strict"}))
    out = subprocess.run(
        [sys.executable, "-m", "pyright", "--outputjson", "--pythonpath", sys.executable],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    messages = [d["message"] for d in json.loads(out.stdout)["generalDiagnostics"]]
    assert [m.split(" is ", 1)[1] for m in messages] == [
        '"Loader[DLTensor, float]"',
        '"Loader[DLTensor, int]"',
        '"Loader[DLTensor, str]"',
    ]
