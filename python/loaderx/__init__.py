"""loaderx: typed, immutable on-disk record containers (``loaderx.zrecord``) and a
stateless, resumable data loader (``loaderx.sampler``, ``loaderx.dataloader``)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("loaderx")
except PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0+unknown"

__all__ = ["__version__"]
