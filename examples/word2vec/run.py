"""Run the whole word2vec example: prepare the stores, train each framework on both
layouts with a checkpoint halfway, resume each run from its checkpoint in a new
process, then compare and plot (report.py).

Every step is a subprocess of this interpreter, so the frameworks asked for must be
importable here. When Torch and JAX live in different environments, run this once
with each, naming the same --out: the stores are reused when their configuration
matches, and the report covers every run present.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# reduced: what CI runs, about 60k examples (the first files of the stdlib in path
# order); full: every docstring of the stdlib.
PRESETS = {
    "reduced": {
        "prepare": ["--max-words", "60000", "--vocab", "2048"],
        "train": ["--steps", "300", "--dim", "32"],
        "checkpoint_at": 150,
    },
    "full": {
        "prepare": ["--vocab", "4096"],
        "train": ["--steps", "2000", "--dim", "64"],
        "checkpoint_at": 1000,
    },
}


def run(script: str, *args: str) -> None:
    cmd = [sys.executable, str(HERE / script), *args]
    print("$", " ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, check=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=sorted(PRESETS), default="reduced")
    ap.add_argument("--frameworks", nargs="+", choices=["torch", "jax"], default=["torch", "jax"])
    ap.add_argument("--out", type=Path, help="default data/word2vec/SIZE")
    ap.add_argument("--no-plot", action="store_true")
    args = ap.parse_args(argv)
    preset = PRESETS[args.size]
    out = str(args.out or Path("data/word2vec") / args.size)
    k = str(preset["checkpoint_at"])

    try:
        run("prepare.py", "--out", out, *preset["prepare"])
        for fw in args.frameworks:
            for layout in ("dense", "ragged"):
                common = ["--data", out, "--framework", fw, "--layout", layout, *preset["train"]]
                run("train.py", *common, "--checkpoint-at", k)
                ckpt = f"{out}/runs/{fw}-{layout}/checkpoint-{k}"
                resumed = f"{out}/runs/{fw}-{layout}-resumed"
                run("train.py", *common, "--resume", ckpt, "--run-dir", resumed)
        run("report.py", "--data", out, *(["--no-plot"] if args.no_plot else []))
    except subprocess.CalledProcessError as e:
        sys.exit(e.returncode)


if __name__ == "__main__":
    main()
