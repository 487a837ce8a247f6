"""The encoder and the Ragged resize in torch and in JAX.

A backend turns what the loader gathered into a (B, 3, 224, 224) uint8 batch in its
framework, on its device (`dense_images`, `ragged_images`), and encodes such a
batch into (B, 8, 28, 28) float32 latents (`encode`). Batches are taken through
DLPack wherever the allocator placed them: host memory, or CUDA device memory with
`--allocator cuda`. Dense batches are used as they are. A Ragged batch's records are
sliced out of its packed values (views in torch; in JAX, NumPy views on the host or
a jitted slice on a device) and resized by common.resize_crop.

Besides the latents (`to_host`), only a Ragged batch's offsets and shapes (a few
hundred bytes per batch, needed to slice the records) cross back to the host.
"""

from __future__ import annotations

import numpy as np
from common import LATENT, MEAN, STD, encoder_weights, resize_crop, resize_plan

from loaderx.zrecord import DLTensor, RaggedBatch

_DL_CPU = 1


def _layout(batch: RaggedBatch, to_numpy) -> list[tuple[int, tuple[int, int, int]]]:
    """(element offset, (C, H, W)) of each record of a Ragged batch, on the host."""
    if batch.device[0] == _DL_CPU:
        cu, shapes = np.from_dlpack(batch.cu_seqlens), np.from_dlpack(batch.shapes)
    else:
        # Device memory: the host cannot read it, so copy these two small arrays.
        cu, shapes = to_numpy(batch.cu_seqlens), to_numpy(batch.shapes)
    return [(int(a), tuple(int(s) for s in sh)) for a, sh in zip(cu[:-1], shapes, strict=True)]


class TorchBackend:
    name = "torch"

    def __init__(self, device: str) -> None:
        import torch

        self.torch = torch
        self.device = torch.device(device)
        # Full float32 convolutions on the GPU too (cuDNN may otherwise use TF32,
        # whose 10-bit mantissa would break the torch-vs-JAX tolerance).
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        self.layers = [
            (torch.from_numpy(w).to(self.device), torch.from_numpy(b).to(self.device))
            for w, b in encoder_weights()
        ]
        self.mean = torch.from_numpy(MEAN).to(self.device)
        self.std = torch.from_numpy(STD).to(self.device)
        self._plans: dict[tuple[int, int], tuple] = {}

    def _plan(self, h: int, w: int) -> tuple:
        if (h, w) not in self._plans:
            xi, xw, yi, yw, *box = resize_plan(h, w)
            tables = [self.torch.from_numpy(t).to(self.device) for t in (xi, xw, yi, yw)]
            self._plans[(h, w)] = (*tables, *box)
        return self._plans[(h, w)]

    def dense_images(self, t: DLTensor):
        return self.torch.from_dlpack(t)

    def ragged_images(self, batch: RaggedBatch):
        torch = self.torch
        values = torch.from_dlpack(batch.values)
        out = []
        for start, (c, h, w) in _layout(batch, lambda t: torch.from_dlpack(t).cpu().numpy()):
            img = values[start : start + c * h * w].view(c, h, w)  # a view, no copy
            out.append(
                resize_crop(
                    img,
                    *self._plan(h, w),
                    int32=lambda x: x.to(torch.int32),
                    uint8=lambda x: x.to(torch.uint8),
                )
            )
        # The resized batch is new memory: the gathered batch may be released once
        # the default stream has run these kernels, which the next gather's copy on
        # the legacy default stream waits for (docs/allocators.md).
        return torch.stack(out)

    def encode(self, x):
        torch = self.torch
        with torch.inference_mode():
            x = (x.to(torch.float32) - self.mean) / self.std
            for i, (w, b) in enumerate(self.layers):
                x = torch.nn.functional.conv2d(x, w, b, stride=2, padding=1)
                if i < len(self.layers) - 1:
                    x = torch.relu(x)
        assert tuple(x.shape[1:]) == LATENT
        return x

    def to_host(self, x) -> np.ndarray:
        return x.cpu().numpy()


class JaxBackend:
    name = "jax"
    # JAX compiles a function for each shape it sees, and records come in many
    # shapes (45 in the full data set). So the region of a record that the resize
    # reads is padded with zeros up to a multiple of BUCKET rows and columns, and
    # the taps up to 4k + 1, and the resize is compiled once per padded shape (10 in
    # the full data set). The padding is never read: no tap points into it.
    BUCKET = 128

    def __init__(self, device: str) -> None:
        import jax
        import jax.numpy as jnp
        from jax import lax

        self.jax, self.jnp = jax, jnp
        try:
            self.device = jax.devices(device)[0]
        except RuntimeError as e:
            raise SystemExit(f"JAX has no {device} device: {e}") from None
        put = lambda a: jax.device_put(a, self.device)  # noqa: E731
        self.layers = [(put(w), put(b)) for w, b in encoder_weights()]
        mean, std = put(MEAN), put(STD)

        def forward(layers, x):
            x = (x.astype(jnp.float32) - mean) / std
            for i, (w, b) in enumerate(layers):
                x = (
                    lax.conv_general_dilated(
                        x,
                        w,
                        window_strides=(2, 2),
                        padding=((1, 1), (1, 1)),
                        dimension_numbers=("NCHW", "OIHW", "NCHW"),
                        # Full float32 on GPUs too, for the same reason as torch's TF32 switch.
                        precision=lax.Precision.HIGHEST,
                    )
                    + b[None, :, None, None]
                )
                if i < len(layers) - 1:
                    x = jax.nn.relu(x)
            return x

        def unpack(values, layout):
            out = []
            for a, (c, h, w), (y0, y1, x0, x1), (rows, cols) in layout:
                img = lax.slice(values, (a,), (a + c * h * w,)).reshape(c, h, w)
                region = img[:, y0:y1, x0:x1]
                out.append(jnp.pad(region, ((0, 0), (0, rows - (y1 - y0)), (0, cols - (x1 - x0)))))
            return tuple(out)

        def resize(region, xi, xw, yi, yw):
            _, rows, cols = region.shape
            return resize_crop(
                region,
                xi,
                xw,
                yi,
                yw,
                0,
                rows,
                0,
                cols,
                int32=lambda x: x.astype(jnp.int32),
                uint8=lambda x: x.astype(jnp.uint8),
            )

        self._put = put
        self._forward = jax.jit(forward)
        # Slicing records out of a batch's packed values on the device: compiled for
        # each step, because every step's values have another length and layout.
        self._unpack = jax.jit(unpack, static_argnums=1)
        self._resize = jax.jit(resize)
        self._plans: dict[tuple[int, int], tuple] = {}

    def _plan(self, h: int, w: int) -> tuple:
        """(tables on the device, the region (y0, y1, x0, x1), its padded size)."""
        if (h, w) not in self._plans:
            xi, xw, yi, yw, y0, y1, x0, x1 = resize_plan(h, w)
            up = lambda n, q: -(-n // q) * q  # noqa: E731

            def pad_taps(index, weight):
                k = up(index.shape[1] - 1, 4) + 1
                extra = ((0, 0), (0, k - index.shape[1]))
                return np.pad(index, extra).astype(np.int32), np.pad(weight, extra)

            tables = [self._put(t) for t in (*pad_taps(xi, xw), *pad_taps(yi, yw))]
            padded = (up(y1 - y0, self.BUCKET), up(x1 - x0, self.BUCKET))
            self._plans[(h, w)] = (tables, (y0, y1, x0, x1), padded)
        return self._plans[(h, w)]

    def regions(self, batch: RaggedBatch, *, on_device: bool | None = None) -> list:
        """[(padded region, (h, w))] per record, the regions as JAX arrays on this
        backend's device. `on_device` forces the device path on a host batch, so
        that a machine without a GPU can test it."""
        jax = self.jax
        layout = _layout(batch, lambda t: np.asarray(jax.dlpack.from_dlpack(t)))
        shapes = [(h, w) for _, (_, h, w) in layout]
        plans = [self._plan(h, w)[1:] for h, w in shapes]
        if on_device is None:
            on_device = batch.device[0] != _DL_CPU
        if on_device:
            # The host cannot read device memory, so a jitted function slices it.
            values = jax.dlpack.from_dlpack(batch.values)
            spec = tuple((a, s, *p) for (a, s), p in zip(layout, plans, strict=True))
            return list(zip(self._unpack(values, spec), shapes, strict=True))
        # Host memory: slice and pad with NumPy (nothing to compile), then copy each
        # padded region to JAX.
        values = np.from_dlpack(batch.values)
        out = []
        for (a, (c, h, w)), ((y0, y1, x0, x1), (rows, cols)) in zip(layout, plans, strict=True):
            region = np.zeros((c, rows, cols), np.uint8)
            image = values[a : a + c * h * w].reshape(c, h, w)  # a view of the batch
            region[:, : y1 - y0, : x1 - x0] = image[:, y0:y1, x0:x1]
            out.append((self._put(region), (h, w)))
        return out

    def dense_images(self, t: DLTensor):
        return self.jax.dlpack.from_dlpack(t)

    def ragged_images(self, batch: RaggedBatch):
        resized = [self._resize(r, *self._plan(h, w)[0]) for r, (h, w) in self.regions(batch)]
        # JAX runs asynchronously and on its own streams. The gathered batch's memory
        # returns to loaderx's pool when the last array reading it is dropped, and the
        # next gather may refill it at once, so wait until every kernel has finished.
        return self.jnp.stack(resized).block_until_ready()

    def encode(self, x):
        out = self._forward(self.layers, x)
        assert tuple(out.shape[1:]) == LATENT
        return out

    def to_host(self, x) -> np.ndarray:
        # Blocks until the latents are computed, after which the input batch (which
        # may alias a loaderx batch) is no longer read.
        return np.asarray(x)


def make_backend(framework: str, device: str) -> TorchBackend | JaxBackend:
    """`device` is "cpu" or "cuda"."""
    if framework == "torch":
        if device == "cuda":
            import torch

            if not torch.cuda.is_available():
                raise SystemExit("--allocator cuda: torch sees no CUDA device")
        return TorchBackend(device)
    return JaxBackend(device)
