"""Compare the CBOW runs train.py wrote, check what the example claims, plot the losses.

For every framework with runs in DATA/runs:

  * both layouts' per-step losses agree within --tolerance (same examples in the
    same order, same math up to float summation order);
  * the packed (Ragged) batches moved fewer bytes per step than the padded (Dense)
    ones;
  * a run resumed from a checkpoint (FRAMEWORK-LAYOUT-resumed) ends with the same
    parameters, bit for bit, and the same losses as the uninterrupted run.

Writes DATA/summary.json and, when matplotlib is installed, DATA/loss.png. Exits
with status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

FRAMEWORKS = ("torch", "jax")
LAYOUTS = ("dense", "ragged")
NEIGHBOUR_WORDS = ("file", "list", "error", "true", "thread")


def load(run: Path) -> dict | None:
    f = run / "result.json"
    return json.loads(f.read_text()) if f.exists() else None


def same_bits(a: Path, b: Path) -> bool:
    with np.load(a) as x, np.load(b) as y:
        if sorted(x.files) != sorted(y.files):
            return False
        # Compared as raw bytes: a float comparison would call -0.0 equal to 0.0.
        return all(x[k].tobytes() == y[k].tobytes() for k in x.files)


def neighbours(params: Path, vocab: list[str], words: tuple[str, ...], k: int = 5) -> dict:
    with np.load(params) as z:
        emb = z["inp"].astype(np.float64)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True) + 1e-12
    index = {w: i for i, w in enumerate(vocab)}
    out = {}
    for w in words:
        if w in index:
            sim = emb @ emb[index[w]]
            sim[[0, 1, index[w]]] = -np.inf  # not PAD, UNK or the word itself
            out[w] = [vocab[i] for i in np.argsort(-sim)[:k]]
    return out


def plot(runs: dict[tuple[str, str], dict], path: Path, title: str, cycle: int) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only; no display needed
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(8, 6.5), sharex=True, gridspec_kw={"height_ratios": [2, 1]}
    )
    colors = {"torch": "tab:red", "jax": "tab:blue"}
    styles = {"dense": "-", "ragged": "--"}
    for (fw, layout), r in runs.items():
        steps = np.arange(1, len(r["losses"]) + 1)
        top.plot(
            steps,
            r["losses"],
            styles[layout],
            color=colors[fw],
            lw=1.0,
            alpha=0.8,
            label=f"{fw}, {'padded (Dense)' if layout == 'dense' else 'packed (Ragged)'}",
        )
    steps = max(len(r["losses"]) for r in runs.values())
    for c in range(cycle, steps, cycle):
        # Where the CYCLIC sampler starts a new pass over the records.
        top.axvline(
            c, color="gray", ls=":", lw=1.0, label="new sampler cycle" if c == cycle else None
        )
    top.set_ylabel("training loss (cross-entropy, nats)")
    top.set_title(title, fontsize=10)
    top.legend()
    top.grid(alpha=0.3)
    for fw in FRAMEWORKS:
        if (fw, "dense") in runs and (fw, "ragged") in runs:
            a = np.array(runs[fw, "dense"]["losses"])
            b = np.array(runs[fw, "ragged"]["losses"])
            n = min(len(a), len(b))
            diff = np.abs(a[:n] - b[:n])
            bottom.plot(np.arange(1, n + 1), diff, ".", color=colors[fw], ms=2.5, label=fw)
    # symlog: identical losses (a difference of exactly 0) stay on the plot.
    bottom.set_yscale("symlog", linthresh=1e-7)
    bottom.set_ylabel("|padded - packed| loss")
    bottom.set_xlabel("step")
    bottom.legend()
    bottom.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path("data/word2vec/full"))
    ap.add_argument(
        "--tolerance",
        type=float,
        default=1e-4,
        help="largest |padded - packed| per-step loss difference accepted",
    )
    ap.add_argument("--no-plot", action="store_true")
    args = ap.parse_args(argv)

    runs_dir = args.data / "runs"
    runs = {
        (fw, layout): r
        for fw in FRAMEWORKS
        for layout in LAYOUTS
        if (r := load(runs_dir / f"{fw}-{layout}")) is not None
    }
    if not runs:
        sys.exit(f"no runs under {runs_dir}; run train.py first")
    meta = json.loads((args.data / "meta.json").read_text())
    summary: dict = {"runs": {}, "frameworks": {}, "checks": {}}
    failed: list[str] = []

    def check(name: str, ok: bool) -> None:
        summary["checks"][name] = ok
        print(f"{'PASS' if ok else 'FAIL'}  {name}")
        if not ok:
            failed.append(name)

    for (fw, layout), r in runs.items():
        losses = np.array(r["losses"])
        tenth = max(1, len(losses) // 10)
        first, last = float(losses[:tenth].mean()), float(losses[-tenth:].mean())
        summary["runs"][f"{fw}-{layout}"] = {
            "steps": r["steps"],
            "first_tenth_mean_loss": first,
            "last_tenth_mean_loss": last,
            "final_loss": float(losses[-1]),
            "bytes_per_step": r["bytes_per_step"],
            "bytes_per_step_total": r["bytes_per_step_total"],
            "seconds": r["seconds"],
        }
        print(
            f"{fw:5s} {layout:6s}: {r['steps']} steps, loss {losses[0]:.4f} -> {losses[-1]:.4f} "
            f"(mean of first tenth {first:.4f}, last tenth {last:.4f}); "
            f"{r['bytes_per_step_total']:,.0f} loader bytes per step; {r['seconds']:.1f}s"
        )
        check(f"{fw}-{layout}: losses finite", bool(np.isfinite(losses).all()))
        check(f"{fw}-{layout}: loss decreased", last < first)

    for fw in FRAMEWORKS:
        if (fw, "dense") not in runs or (fw, "ragged") not in runs:
            continue
        dense, ragged = runs[fw, "dense"], runs[fw, "ragged"]
        a, b = np.array(dense["losses"]), np.array(ragged["losses"])
        diff = float(np.abs(a - b).max()) if len(a) == len(b) else float("inf")
        padded, packed = dense["bytes_per_step_total"], ragged["bytes_per_step_total"]
        summary["frameworks"][fw] = {
            "max_abs_loss_difference": diff,
            "identical_steps": int((a == b).sum()) if len(a) == len(b) else 0,
            "padded_bytes_per_step": padded,
            "packed_bytes_per_step": packed,
        }
        print(
            f"{fw}: padded vs packed loss, largest difference {diff:.3g} over {len(a)} steps "
            f"({summary['frameworks'][fw]['identical_steps']} identical); bytes per step "
            f"padded {padded:,.0f}, packed {packed:,.0f} ({packed / padded:.1%})"
        )
        check(f"{fw}: padded and packed losses within {args.tolerance:g}", diff <= args.tolerance)
        check(f"{fw}: packed batches move fewer bytes", packed < padded)

    if ("torch", "dense") in runs and ("jax", "dense") in runs:
        a, b = np.array(runs["torch", "dense"]["losses"]), np.array(runs["jax", "dense"]["losses"])
        if len(a) == len(b):
            d = float(np.abs(a - b).max())
            summary["torch_vs_jax_max_abs_loss_difference"] = d
            print(f"torch vs jax (padded, same initial parameters): largest difference {d:.3g}")

    for fw, layout in runs:
        resumed_dir = runs_dir / f"{fw}-{layout}-resumed"
        resumed = load(resumed_dir)
        if resumed is None:
            continue
        full = runs[fw, layout]
        k = resumed["start"]
        params_ok = same_bits(
            runs_dir / f"{fw}-{layout}" / "params.npz", resumed_dir / "params.npz"
        )
        losses_ok = full["losses"] == resumed["losses"]
        summary["runs"][f"{fw}-{layout}"]["resumed_at"] = k
        print(
            f"{fw}-{layout}: resumed at step {k} in a new process, {resumed['steps']} steps: "
            f"parameters {'bit-identical' if params_ok else 'DIFFER'}, "
            f"losses {'identical' if losses_ok else 'DIFFER'}"
        )
        check(f"{fw}-{layout}: resume bit-exact", params_ok and losses_ok)

    vocab = (args.data / "vocab.txt").read_text().split("\n")[:-1]
    fw, layout = next(iter(runs))
    near = neighbours(runs_dir / f"{fw}-{layout}" / "params.npz", vocab, NEIGHBOUR_WORDS)
    summary["neighbours"] = {"run": f"{fw}-{layout}", "words": near}
    for w, ns in near.items():
        print(f"nearest to {w!r} ({fw}-{layout}): {', '.join(ns)}")

    if not args.no_plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print("no plot: matplotlib is not installed (pip install matplotlib)")
        else:
            r0 = next(iter(runs.values()))["config"]
            title = (
                f"CBOW on Python {meta['corpus']['python']} stdlib docstrings, "
                f"{meta['records']:,} examples\nvocabulary {meta['vocab_size']}, "
                f"window {meta['config']['window']}, batch {r0['batch']}, dim {r0['dim']}"
            )
            plot(runs, args.data / "loss.png", title, meta["records"] // r0["batch"])
            print(f"wrote {args.data / 'loss.png'}")

    summary["failed"] = failed
    (args.data / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    if failed:
        sys.exit(f"{len(failed)} check(s) failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
