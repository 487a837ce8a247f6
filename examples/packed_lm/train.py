"""Train a small causal language model on packed steps, with Torch or JAX, and
check it against padding and against a resume.

A PackingSampler fills each step with ``--packs`` packs of whole docstrings of at
most ``--budget`` tokens (a longer docstring keeps its first ``--budget`` tokens).
Every step is laid out two ways from the same gathered RaggedBatch:

- **packed**: ``loaderx.packing.to_dense``, ``(packs, budget)`` rows of tokens,
  segment ids (1, 2, ... per record, 0 in padding) and positions within the record;
- **padded**: each record in a row of its own, padded to the step's longest
  record (to a fixed ``(rows, budget)`` shape for JAX, which compiles per shape).

The model: token and position embeddings, one causal self-attention layer whose
mask is block-diagonal by segment (a token sees the earlier tokens of its own
record only), a residual, and a linear layer to the vocabulary; the loss is the
mean cross-entropy of every token's next token within its record. Both layouts
are the same function of the step's records, so their losses agree to float
tolerance. Adam, written out, from NumPy-drawn parameters.

Three runs per framework, each over the same steps: packed, padded, and packed
resumed at ``--checkpoint-at`` from a JSON loader state and the saved parameters
and optimizer state in a new Loader. ``DATA/runs/FRAMEWORK.json`` gets the
per-step losses, the fill and the comparisons, ``FRAMEWORK-final.npz`` and
``FRAMEWORK-resumed.npz`` the final parameters of the packed and resumed runs.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from loaderx.dataloader import Loader, StepInfo
from loaderx.packing import to_dense
from loaderx.sampler import PackingSampler, Sampler
from loaderx.zrecord import Ragged

PARAMS = ("tok", "pos", "wq", "wk", "wv", "wo", "out")
BETAS, EPS = (0.9, 0.999), 1e-8
ROW_BUCKET = 16  # JAX's padded layout rounds its row count up to a multiple of this


def init_params(vocab: int, budget: int, dim: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)

    def normal(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) / math.sqrt(shape[0])).astype(np.float32)

    return {
        "tok": normal(vocab, dim),
        "pos": normal(budget, dim),
        "wq": normal(dim, dim),
        "wk": normal(dim, dim),
        "wv": normal(dim, dim),
        "wo": normal(dim, dim),
        "out": normal(dim, vocab),
    }


def layouts(budget: int, bucket: int):
    """The loader's two-argument transform: the step's packed and padded layouts."""

    def transform(shards: list[dict[str, Any]], step: StepInfo) -> dict[str, Any]:
        assert step.pack_offsets is not None
        batch, offsets = shards[0]["tokens"], step.pack_offsets[0]
        n = len(step.positions)
        kept = np.minimum(np.diff(np.from_dlpack(batch.cu_seqlens)), budget)
        longest = int(kept.max()) if bucket == 1 else budget
        rows = n if bucket == 1 else -(-n // bucket) * bucket
        padded = to_dense(batch, np.arange(n + 1), longest)
        if rows > n:  # all-padding rows: no token, no target
            padded = {k: np.pad(v, ((0, rows - n), (0, 0))) for k, v in padded.items()}
        return {"packed": to_dense(batch, offsets, budget), "padded": padded, "step": step.step}

    return transform


def numpy_targets(rows: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Each token's next token, and whether it is in the same record."""
    tokens, seg = rows["tokens"], rows["segment_ids"]
    nxt = np.zeros_like(tokens)
    nxt[:, :-1] = tokens[:, 1:]
    same = np.zeros(seg.shape, np.float32)
    same[:, :-1] = (seg[:, :-1] > 0) & (seg[:, 1:] == seg[:, :-1])
    return nxt, same


@functools.cache
def framework(name: str, lr: float):
    """(step function, to NumPy) for Torch or JAX: step(params, opt, rows) -> loss."""
    if name == "torch":
        import torch

        torch.use_deterministic_algorithms(True)
        # A model this small gains nothing from threads, which would compete with
        # the loader's workers.
        torch.set_num_threads(1)

        def loss_t(p: dict[str, Any], tokens, seg, pos, nxt, same):
            h = p["tok"][tokens] + p["pos"][pos]
            q, k, v = h @ p["wq"], h @ p["wk"], h @ p["wv"]
            t = tokens.shape[1]
            causal = torch.ones(t, t, dtype=torch.bool).tril()
            mask = (seg[:, :, None] == seg[:, None, :]) & causal
            att = (q @ k.transpose(1, 2)) / math.sqrt(q.shape[-1])
            att = att.masked_fill(~mask, float("-inf")).softmax(-1)
            logits = (h + (att @ v) @ p["wo"]) @ p["out"]
            ce = torch.nn.functional.cross_entropy(
                logits.flatten(0, 1), nxt.flatten().long(), reduction="none"
            )
            return (ce * same.flatten()).sum() / same.sum()

        def step_t(params, opt, rows):
            nxt, same = numpy_targets(rows)
            p = {k: torch.from_numpy(v).requires_grad_() for k, v in params.items()}
            args = [
                torch.from_numpy(rows[k]).long() for k in ("tokens", "segment_ids", "positions")
            ]
            loss = loss_t(p, *args, torch.from_numpy(nxt), torch.from_numpy(same))
            loss.backward()
            grads = {k: v.grad.numpy() for k, v in p.items()}
            return float(loss.detach()), adam(params, opt, grads, lr)

        return step_t

    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", False)

    def loss_j(p, tokens, seg, pos, nxt, same):
        h = p["tok"][tokens] + p["pos"][pos]
        q, k, v = h @ p["wq"], h @ p["wk"], h @ p["wv"]
        t = tokens.shape[1]
        causal = jnp.tril(jnp.ones((t, t), bool))
        mask = (seg[:, :, None] == seg[:, None, :]) & causal
        att = jnp.einsum("bid,bjd->bij", q, k) / math.sqrt(q.shape[-1])
        att = jax.nn.softmax(jnp.where(mask, att, -jnp.inf), axis=-1)
        logits = (h + jnp.einsum("bij,bjd->bid", att, v) @ p["wo"]) @ p["out"]
        logp = jax.nn.log_softmax(logits, axis=-1)
        ce = -jnp.take_along_axis(logp, nxt[..., None], axis=-1)[..., 0]
        return (ce * same).sum() / same.sum()

    grad = jax.jit(jax.value_and_grad(loss_j))

    def step_j(params, opt, rows):
        nxt, same = numpy_targets(rows)
        args = [rows[k] for k in ("tokens", "segment_ids", "positions")]
        loss, g = grad(params, *args, nxt, same)
        grads = {k: np.asarray(v) for k, v in g.items()}
        return float(loss), adam(params, opt, grads, lr)

    return step_j


def adam(params, opt, grads, lr: float):
    """One Adam update in NumPy float32, the same bits whichever framework took
    the gradients."""
    t = opt["t"] + 1
    b1, b2 = BETAS
    new_p, new_m, new_v = {}, {}, {}
    for k in PARAMS:
        m = np.float32(b1) * opt["m"][k] + np.float32(1 - b1) * grads[k]
        v = np.float32(b2) * opt["v"][k] + np.float32(1 - b2) * grads[k] * grads[k]
        m_hat = m / np.float32(1 - b1**t)
        v_hat = v / np.float32(1 - b2**t)
        new_p[k] = (params[k] - np.float32(lr) * m_hat / (np.sqrt(v_hat) + np.float32(EPS))).astype(
            np.float32
        )
        new_m[k], new_v[k] = m.astype(np.float32), v.astype(np.float32)
    return new_p, {"t": t, "m": new_m, "v": new_v}


def new_opt(params):
    return {
        "t": 0,
        "m": {k: np.zeros_like(v) for k, v in params.items()},
        "v": {k: np.zeros_like(v) for k, v in params.items()},
    }


def loader(data: Path, args, bucket: int):
    tokens = Ragged.open(data / "tokens")
    sampler = PackingSampler(
        tokens.lengths(), args.budget, args.packs, Sampler.Mode.CYCLIC, seed=args.seed
    )
    return Loader(
        {"tokens": [tokens]},
        sampler,
        transform=layouts(args.budget, bucket),
        workers=2,
        seed=args.seed,
    ), sampler


def train(data: Path, args, layout: str, steps: range, start=None, checkpoint: Path | None = None):
    """Losses of `steps`; the final parameters. `start` resumes from a checkpoint
    directory; `checkpoint` saves one after step ``args.checkpoint_at``."""
    meta = json.loads((data / "meta.json").read_text())
    step_fn = framework(args.framework, args.lr)
    bucket = 1 if args.framework == "torch" else ROW_BUCKET
    ld, _ = loader(data, args, bucket)
    if start is None:
        params = init_params(meta["vocab_size"], args.budget, args.dim, args.seed)
        opt = new_opt(params)
    else:
        ld.load_state_dict(json.loads((start / "loader.json").read_text()))
        saved = np.load(start / "state.npz")
        params = {k: saved[f"p.{k}"] for k in PARAMS}
        opt = {
            "t": int(saved["t"]),
            "m": {k: saved[f"m.{k}"] for k in PARAMS},
            "v": {k: saved[f"v.{k}"] for k in PARAMS},
        }
    losses = []
    with ld:
        for s in steps:
            batch = next(ld)
            assert batch["step"] == s
            loss, (params, opt) = step_fn(params, opt, batch[layout])
            losses.append(loss)
            if checkpoint is not None and s + 1 == args.checkpoint_at:
                checkpoint.mkdir(parents=True, exist_ok=True)
                (checkpoint / "loader.json").write_text(json.dumps(ld.state_dict()))
                arrays = {f"p.{k}": v for k, v in params.items()}
                arrays |= {f"m.{k}": v for k, v in opt["m"].items()}
                arrays |= {f"v.{k}": v for k, v in opt["v"].items()}
                np.savez(checkpoint / "state.npz", t=opt["t"], **arrays)
    return losses, params


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--data", type=Path, required=True, help="what prepare.py wrote")
    ap.add_argument("--framework", choices=["torch", "jax"], required=True)
    ap.add_argument("--budget", type=int, default=128, help="tokens per pack")
    ap.add_argument("--packs", type=int, default=8, help="packs per step")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--checkpoint-at", type=int, default=20)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if not 0 < args.checkpoint_at < args.steps:
        ap.error("--checkpoint-at must lie strictly between 0 and --steps")

    t0 = time.perf_counter()
    ckpt = args.data / "runs" / f"{args.framework}-checkpoint"
    packed, final = train(args.data, args, "packed", range(args.steps), checkpoint=ckpt)
    padded, _ = train(args.data, args, "padded", range(args.steps))
    resumed, again = train(
        args.data, args, "packed", range(args.checkpoint_at, args.steps), start=ckpt
    )
    elapsed = time.perf_counter() - t0

    diff = float(np.max(np.abs(np.array(packed) - np.array(padded))))
    exact = all(np.array_equal(final[k], again[k]) for k in PARAMS)
    fill = loader(args.data, args, 1)[1].fill
    result = {
        "framework": args.framework,
        "config": {
            k: getattr(args, k)
            for k in ("budget", "packs", "steps", "checkpoint_at", "dim", "lr", "seed")
        },
        "fill": fill,
        "losses": {"packed": packed, "padded": padded, "resumed": resumed},
        "max_abs_loss_difference": diff,
        "resumed_losses_identical": resumed == packed[args.checkpoint_at :],
        "resumed_parameters_identical": exact,
        "seconds": round(elapsed, 2),
    }
    (args.data / "runs").mkdir(exist_ok=True)
    np.savez(args.data / "runs" / f"{args.framework}-final.npz", **final)
    np.savez(args.data / "runs" / f"{args.framework}-resumed.npz", **again)
    (args.data / "runs" / f"{args.framework}.json").write_text(json.dumps(result, indent=1) + "\n")
    print(
        f"{args.framework}: {args.steps} steps of {args.packs} x {args.budget} tokens "
        f"(fill {fill:.2%}); loss {packed[0]:.3f} -> {packed[-1]:.3f}; "
        f"packed vs padded max |diff| {diff:.2e}; resumed at step {args.checkpoint_at}: "
        f"losses {'identical' if result['resumed_losses_identical'] else 'DIFFER'}, "
        f"parameters {'bit-identical' if exact else 'DIFFER'}; {elapsed:.1f} s"
    )


if __name__ == "__main__":
    main()
