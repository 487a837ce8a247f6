"""Finding a GPU runtime library without importing any framework.

Each runtime is searched in a fixed order, and the first place that has it wins:
a copy already loaded into this process, an explicit override variable, the
toolkit's home variables, a runtime owned by an installed Python package (read
from the package's file list with ``importlib.metadata``, never by importing
it), fixed install directories, and last the system loader's own search. Two
different package-owned copies are an error rather than a guess.
"""

from __future__ import annotations

import ctypes
import importlib.metadata as metadata
import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import DeviceError


@dataclass(frozen=True)
class RuntimeSpec:
    name: str  # as users know it: "HIP", "CUDA"
    stem: str  # the library's file name before any version suffix
    override: str  # the variable naming the library outright
    homes: tuple[str, ...]  # variables naming a toolkit root
    home_dirs: tuple[str, ...]  # library directories under a toolkit root
    packages: tuple[str, ...]  # distributions that may ship the library
    fixed_dirs: tuple[str, ...]
    sonames: tuple[str, ...]  # names for the system loader, in order


HIP = RuntimeSpec(
    name="HIP",
    stem="libamdhip64.so",
    override="LOADERX_HIP_LIBRARY",
    homes=("ROCM_PATH", "ROCM_HOME"),
    home_dirs=("lib",),
    packages=("rocm-sdk-core", "torch"),
    fixed_dirs=("/opt/rocm/lib",),
    sonames=("libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6"),
)

CUDA = RuntimeSpec(
    name="CUDA",
    stem="libcudart.so",
    override="LOADERX_CUDA_LIBRARY",
    homes=("CUDA_HOME", "CUDA_PATH"),
    home_dirs=("lib64", "lib"),
    packages=(
        "nvidia-cuda-runtime",
        "nvidia-cuda-runtime-cu13",
        "nvidia-cuda-runtime-cu12",
        "nvidia-cuda-runtime-cu11",
        "torch",
    ),
    fixed_dirs=(),
    sonames=("libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"),
)


def _is_runtime(spec: RuntimeSpec, name: str) -> bool:
    return name == spec.stem or name.startswith(spec.stem + ".")


def _loaded(spec: RuntimeSpec) -> str | None:
    """The path of a copy this process has already mapped."""
    try:
        maps = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return None
    for line in maps:
        parts = line.split(maxsplit=5)
        path = parts[5] if len(parts) == 6 else ""
        if path.startswith("/") and _is_runtime(spec, os.path.basename(path)):
            return path
    return None


def _in_dir(spec: RuntimeSpec, directory: str | Path) -> str | None:
    """The runtime in `directory`: the unversioned name, else the shortest
    versioned one (the soname a build links against)."""
    try:
        names = sorted(
            (n for n in os.listdir(directory) if _is_runtime(spec, n)), key=lambda n: (len(n), n)
        )
    except OSError:
        return None
    return os.path.join(directory, names[0]) if names else None


def _package_owned(spec: RuntimeSpec) -> list[str]:
    """Distinct copies shipped by installed distributions, by real path."""
    found: dict[str, str] = {}
    for dist_name in spec.packages:
        try:
            dist = metadata.distribution(dist_name)
        except metadata.PackageNotFoundError:
            continue
        for f in dist.files or ():
            if _is_runtime(spec, f.name):
                path = os.path.realpath(str(dist.locate_file(f)))
                if os.path.isfile(path):
                    found.setdefault(path, dist_name)
    return list(found)


def _system(spec: RuntimeSpec) -> str | None:
    """The first soname the system loader can open."""
    for name in spec.sonames:
        try:
            ctypes.CDLL(name)
        except OSError:
            continue
        return name
    return None


def find(spec: RuntimeSpec) -> str:
    """The library to load for `spec`, by the order in the module docstring."""
    looked: list[str] = []
    path = _loaded(spec)
    if path:
        return path
    looked.append("this process's loaded libraries")
    override = os.environ.get(spec.override)
    if override:
        if not os.path.isfile(override):
            raise DeviceError(f"{spec.override}={override!r} is not a file")
        return override
    looked.append(spec.override)
    for var in spec.homes:
        root = os.environ.get(var)
        if root:
            for sub in spec.home_dirs:
                path = _in_dir(spec, os.path.join(root, sub))
                if path:
                    return path
        looked.append(var)
    owned = _package_owned(spec)
    if len(owned) > 1:
        raise DeviceError(
            f"several installed packages ship a {spec.name} runtime: {', '.join(owned)}; "
            f"set {spec.override} to the one to use"
        )
    if owned:
        return owned[0]
    looked.append(f"the packages {', '.join(spec.packages)}")
    for directory in spec.fixed_dirs:
        path = _in_dir(spec, directory)
        if path:
            return path
        looked.append(directory)
    name = _system(spec)
    if name:
        return name
    looked.append(f"the system loader ({', '.join(spec.sonames)})")
    raise DeviceError(
        f"no {spec.name} runtime found; looked in {'; '.join(looked)}. "
        f"Set {spec.override} to the library's path."
    )
