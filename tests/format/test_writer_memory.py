"""One append of a large memory-mapped source keeps the writer's memory bounded."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

# docs/FORMAT.md ("Writer memory") states this bound.
BOUND_MIB = 64

SCRIPT = textwrap.dedent(
    """
    import sys
    import numpy as np
    from loaderx.zrecord import Dense

    def hwm_kib():
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1])

    src, dst, codec = sys.argv[1:4]
    data = np.load(src, mmap_mode="r")
    before = hwm_kib()
    with Dense.create(dst, data.dtype, data.shape[1:], codec=codec) as w:
        w.append(data)
    print(before, hwm_kib())
    """
)


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_peak_rss_is_bounded_for_a_memory_mapped_source(tmp_path, codec):
    n = 3000  # 3000 x 147 KiB = 430 MiB
    src = tmp_path / "src.npy"
    arr = np.lib.format.open_memmap(src, mode="w+", dtype=np.uint8, shape=(n, 3, 224, 224))
    for i in range(0, n, 500):
        arr[i : i + 500] = np.random.default_rng(i).integers(0, 255, (1, 3, 224, 224), np.uint8)
    arr.flush()
    del arr
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(src), str(tmp_path / "dst"), codec],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    before, after = int(out[0]), int(out[1])
    grew_mib = (after - before) / 1024
    assert grew_mib < BOUND_MIB, f"peak RSS grew by {grew_mib:.0f} MiB appending 430 MiB"
    from loaderx.zrecord import Dense

    with Dense.open(tmp_path / "dst") as ds:
        assert len(ds) == n
        src_arr = np.load(src, mmap_mode="r")
        for i in (0, 499, 500, 2999):
            assert np.array_equal(np.from_dlpack(ds[i]), src_arr[i])
