"""Train CBOW word embeddings from the stores prepare.py writes, with Torch or JAX,
reading padded (Dense) or packed (Ragged) contexts.

The model: an input embedding table; the mean of a center word's context embeddings
goes through one linear layer (output table and bias) to a softmax over the whole
vocabulary, and the loss is the cross-entropy of the center word. A full softmax
rather than negative sampling: negative sampling draws random negatives every step,
a second random stream that both frameworks and both layouts would have to share
and every checkpoint would have to carry; with a vocabulary of a few thousand
words the full softmax is cheap on a CPU, exact, and the same function of the
batch everywhere. Adam updates every parameter.

Both layouts compute the same function. Padded: gather (B, 2W) embeddings, zero the
PAD slots, sum each row, divide by the number of real words. Packed: gather the
``values`` embeddings and sum each record's segment, given by ``cu_seqlens``
(torch ``index_add_``, JAX ``segment_sum``), divide by the segment length. Only the
order of the float additions differs.

``--checkpoint-at K`` saves the loader's ``state_dict()``, the parameters and the
optimizer state after step K; ``--resume DIR`` starts a fresh process from one and
continues to ``--steps``. The run directory gets ``result.json`` (per-step losses,
bytes per batch, timing) and ``params.npz`` (the final parameters).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from loaderx.dataloader import Loader
from loaderx.sampler import Sampler
from loaderx.zrecord import Dense, Ragged

PARAMS = ("inp", "out_w", "out_b")
BETAS, EPS = (0.9, 0.999), 1e-8


def init_params(vocab: int, dim: int, pad: int, seed: int) -> dict[str, np.ndarray]:
    """word2vec's initialisation, drawn with NumPy so that both frameworks start from
    the same bits: input vectors uniform in +-0.5/dim, output layer zero."""
    rng = np.random.default_rng(seed)
    inp = rng.uniform(-0.5 / dim, 0.5 / dim, (vocab, dim)).astype(np.float32)
    inp[pad] = 0.0
    return {
        "inp": inp,
        "out_w": np.zeros((vocab, dim), np.float32),
        "out_b": np.zeros(vocab, np.float32),
    }


def batch_bytes(shard: dict[str, Any], layout: str) -> dict[str, int]:
    """What the loader delivered for this step, by buffer."""
    out = {"center": shard["center"].nbytes}
    ctx = shard["context"]
    if layout == "dense":
        out["context"] = ctx.nbytes
    else:
        out["values"] = ctx.values.nbytes
        out["cu_seqlens"] = ctx.cu_seqlens.nbytes
        out["shapes"] = ctx.shapes.nbytes
    return out


class TorchCBOW:
    def __init__(self, params: dict[str, np.ndarray], lr: float, pad: int, threads: int):
        import torch

        # Errors out on any operation without a deterministic implementation, so a
        # later change cannot quietly make resume inexact. (On CPU every operation
        # used here is deterministic; on CUDA, index_add_ accumulates in an
        # unspecified order unless this is set.)
        torch.use_deterministic_algorithms(True)
        # One intra-op thread by default: the loader's worker shares the cores, and
        # torch promises equal float results only at an equal thread count, so
        # --threads is part of the configuration a checkpoint must match.
        torch.set_num_threads(threads)
        self.torch = torch
        self.pad = pad
        self.p = {k: torch.nn.Parameter(torch.from_numpy(v.copy())) for k, v in params.items()}
        self.opt = torch.optim.Adam(
            [self.p[k] for k in PARAMS], lr=lr, betas=BETAS, eps=EPS, foreach=False
        )

    def step(self, shard: dict[str, Any], layout: str) -> float:
        torch = self.torch
        F = torch.nn.functional
        center = torch.from_dlpack(shard["center"]).long()  # cross_entropy wants int64
        inp = self.p["inp"]
        if layout == "dense":
            ctx = torch.from_dlpack(shard["context"])  # (B, 2W) int32, no copy
            real = ctx != self.pad
            summed = (F.embedding(ctx, inp) * real.unsqueeze(-1)).sum(dim=1)
            count = real.sum(dim=1)
        else:
            packed = shard["context"]
            values = torch.from_dlpack(packed.values)  # (total,) int32, no copy
            cu = torch.from_dlpack(packed.cu_seqlens)  # (B + 1,) int32
            count = cu[1:] - cu[:-1]
            segment = torch.repeat_interleave(torch.arange(len(count)), count)
            summed = torch.zeros(len(count), inp.shape[1]).index_add_(
                0, segment, F.embedding(values, inp)
            )
        mean = summed / count.unsqueeze(1).to(summed.dtype)
        logits = mean @ self.p["out_w"].T + self.p["out_b"]
        loss = F.cross_entropy(logits, center)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return float(loss.item())

    def params(self) -> dict[str, np.ndarray]:
        return {k: p.detach().numpy().copy() for k, p in self.p.items()}

    def save(self, path: Path) -> None:
        self.torch.save(
            {"params": {k: p.detach() for k, p in self.p.items()}, "optim": self.opt.state_dict()},
            path / "tensors.pt",
        )

    def load(self, path: Path) -> None:
        state = self.torch.load(path / "tensors.pt", weights_only=True)
        with self.torch.no_grad():
            for k, p in self.p.items():
                p.copy_(state["params"][k])
        self.opt.load_state_dict(state["optim"])


class JaxCBOW:
    def __init__(self, params: dict[str, np.ndarray], lr: float, pad: int, bucket: int):
        import jax
        import jax.numpy as jnp

        self.jax, self.jnp = jax, jnp
        self.bucket = bucket
        # Placed explicitly: jit keys its cache on whether an argument is committed
        # to a device, and its outputs are, so uncommitted initial arrays would cost
        # a second compilation at step 2.
        device = jax.devices()[0]
        self.put = lambda a: jax.device_put(a, device)
        self.p = {k: self.put(v) for k, v in params.items()}
        self.m = {k: jnp.zeros_like(v) for k, v in self.p.items()}
        self.v = {k: jnp.zeros_like(v) for k, v in self.p.items()}
        self.t = 0

        def loss_of(p, center, summed, count):
            mean = summed / count[:, None].astype(summed.dtype)
            logits = mean @ p["out_w"].T + p["out_b"]
            logp = jax.nn.log_softmax(logits)
            return -jnp.take_along_axis(logp, center[:, None], axis=1).mean()

        def dense_loss(p, center, ctx):
            real = ctx != pad
            summed = (p["inp"][ctx] * real[..., None]).sum(axis=1)
            return loss_of(p, center, summed, real.sum(axis=1))

        def packed_loss(p, center, values, cu):
            # values is padded to a bucket size, because jit compiles one program per
            # shape; slots past cu[-1] fall in segment B, which is dropped.
            b = cu.shape[0] - 1
            segment = jnp.searchsorted(cu[1:], jnp.arange(values.shape[0]), side="right")
            summed = jax.ops.segment_sum(
                p["inp"][values], segment, num_segments=b + 1, indices_are_sorted=True
            )[:b]
            return loss_of(p, center, summed, cu[1:] - cu[:-1])

        def adam(p, m, v, t, g):
            # The update torch.optim.Adam makes, written out.
            b1, b2 = BETAS
            m = {k: b1 * m[k] + (1 - b1) * g[k] for k in p}
            v = {k: b2 * v[k] + (1 - b2) * g[k] * g[k] for k in p}
            step = lr / (1 - b1**t)
            root = jnp.sqrt(1 - b2**t)
            p = {k: p[k] - step * m[k] / (jnp.sqrt(v[k]) / root + EPS) for k in p}
            return p, m, v

        def make_step(loss_fn):
            def step(p, m, v, t, *batch):
                loss, g = jax.value_and_grad(loss_fn)(p, *batch)
                p, m, v = adam(p, m, v, t, g)
                return p, m, v, loss

            return jax.jit(step)

        self.dense_step = make_step(dense_loss)
        self.packed_step = make_step(packed_loss)

    def step(self, shard: dict[str, Any], layout: str) -> float:
        jnp = self.jnp
        center = jnp.from_dlpack(shard["center"])
        if layout == "dense":
            batch = (center, jnp.from_dlpack(shard["context"]))
            fn = self.dense_step
        else:
            packed = shard["context"]
            values = np.from_dlpack(packed.values)
            cap = max(self.bucket, -(-len(values) // self.bucket) * self.bucket)
            padded = np.zeros(cap, np.int32)
            padded[: len(values)] = values
            batch = (center, jnp.asarray(padded), jnp.from_dlpack(packed.cu_seqlens))
            fn = self.packed_step
        self.t += 1
        t = jnp.float32(self.t)
        self.p, self.m, self.v, loss = fn(self.p, self.m, self.v, t, *batch)
        return float(loss)

    def compiled(self) -> int:
        """Programs jit compiled so far (one per distinct bucket in the packed path)."""
        return self.dense_step._cache_size() + self.packed_step._cache_size()

    def params(self) -> dict[str, np.ndarray]:
        return {k: np.asarray(v).copy() for k, v in self.p.items()}

    def save(self, path: Path) -> None:
        arrays = {f"{kind}.{k}": np.asarray(d[k]) for kind, d in self._state() for k in PARAMS}
        np.savez(path / "tensors.npz", t=np.int64(self.t), **arrays)

    def load(self, path: Path) -> None:
        with np.load(path / "tensors.npz") as z:
            self.t = int(z["t"])
            for kind, d in self._state():
                for k in PARAMS:
                    d[k] = self.put(z[f"{kind}.{k}"])

    def _state(self):
        return (("p", self.p), ("m", self.m), ("v", self.v))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path("data/word2vec/full"))
    ap.add_argument("--framework", choices=["torch", "jax"], required=True)
    ap.add_argument("--layout", choices=["dense", "ragged"], required=True)
    ap.add_argument("--run-dir", type=Path, help="default DATA/runs/FRAMEWORK-LAYOUT")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=0, help="sampler seed and initialisation seed")
    ap.add_argument("--checkpoint-at", type=int, help="save a checkpoint after this step")
    ap.add_argument("--resume", type=Path, help="a checkpoint directory to continue from")
    ap.add_argument("--workers", type=int, default=1, help="loader worker threads")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--bucket", type=int, default=512, help="JAX packed values padding unit")
    args = ap.parse_args(argv)

    meta = json.loads((args.data / "meta.json").read_text())
    vocab, pad = meta["vocab_size"], meta["pad_id"]
    run_dir = args.run_dir or args.data / "runs" / f"{args.framework}-{args.layout}"
    run_dir.mkdir(parents=True, exist_ok=True)
    config = {
        "framework": args.framework,
        "layout": args.layout,
        "batch": args.batch,
        "dim": args.dim,
        "lr": args.lr,
        "seed": args.seed,
        "data": meta["config"],
    }
    if args.framework == "torch":
        config["threads"] = args.threads
    else:
        config["bucket"] = args.bucket

    init = init_params(vocab, args.dim, pad, args.seed)
    if args.framework == "torch":
        model: TorchCBOW | JaxCBOW = TorchCBOW(init, args.lr, pad, args.threads)
    else:
        model = JaxCBOW(init, args.lr, pad, args.bucket)

    stores = args.data / "stores"
    context_store = "context_padded" if args.layout == "dense" else "context_packed"
    reader_type = Dense if args.layout == "dense" else Ragged
    with (
        Dense.open(stores / "center") as center,
        reader_type.open(stores / context_store) as context,
    ):
        sampler = Sampler(len(center), args.batch, Sampler.Mode.CYCLIC, seed=args.seed)
        streams: dict[str, list[Any]] = {"center": [center], "context": [context]}
        loader = Loader(streams, sampler, workers=args.workers, prefetch=2)
        start, losses = 0, []
        if args.resume is not None:
            saved = json.loads((args.resume / "checkpoint.json").read_text())
            if saved["config"] != config:
                sys.exit(f"the checkpoint was made with {saved['config']}, not {config}")
            # Refused unless the state names these stores and this sampler sequence.
            loader.load_state_dict(saved["loader"])
            model.load(args.resume)
            start, losses = saved["loader"]["step"], saved["losses"]
            print(f"[{args.framework}/{args.layout}] resumed at step {start} from {args.resume}")
        totals: dict[str, int] = {}
        t0 = time.perf_counter()
        with loader:
            for step in range(start, args.steps):
                shard = next(loader)[0]  # one binding per stream: one shard
                for k, n in batch_bytes(shard, args.layout).items():
                    totals[k] = totals.get(k, 0) + n
                loss = model.step(shard, args.layout)
                del shard  # lets the loader's pool reuse the batch memory
                if not math.isfinite(loss):
                    sys.exit(f"step {step}: the loss is {loss}")
                losses.append(loss)
                if args.checkpoint_at == step + 1:
                    ckpt = run_dir / f"checkpoint-{step + 1}"
                    ckpt.mkdir(exist_ok=True)
                    model.save(ckpt)
                    state = loader.state_dict()  # its step is step + 1, the next one
                    record = {"config": config, "loader": state, "losses": losses}
                    (ckpt / "checkpoint.json").write_text(json.dumps(record) + "\n")
                    print(f"[{args.framework}/{args.layout}] checkpoint after step {step + 1}")
                if (step + 1) % max(1, args.steps // 10) == 0:
                    print(f"[{args.framework}/{args.layout}] step {step + 1:5d}  loss {loss:.4f}")
        seconds = time.perf_counter() - t0

    n = args.steps - start
    per_step = {k: v / n for k, v in totals.items()} if n else {}
    moved = sum(per_step.values())
    np.savez(run_dir / "params.npz", **model.params())
    result = {
        "config": config,
        "start": start,
        "steps": args.steps,
        "losses": losses,
        "bytes_per_step": per_step,
        "bytes_per_step_total": moved,
        "seconds": seconds,
    }
    if isinstance(model, JaxCBOW):
        result["jit_programs"] = model.compiled()
    (run_dir / "result.json").write_text(json.dumps(result) + "\n")
    parts = " + ".join(f"{k} {v:,.0f}" for k, v in per_step.items())
    print(
        f"[{args.framework}/{args.layout}] {n} steps in {seconds:.1f}s; loader bytes per "
        f"step: {parts} = {moved:,.0f}; final loss {losses[-1]:.4f}"
    )


if __name__ == "__main__":
    main()
