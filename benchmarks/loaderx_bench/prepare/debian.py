"""Debian packages as data sources: fetched with ``apt-get download`` into a cache
directory and unpacked with ``dpkg-deb -x`` into a directory of their own; nothing is
installed on the system. Also the walk over an unpacked package's files."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from loaderx_bench.prepare.outputs import sha256_file
from loaderx_bench.prepare.progress import log

_apt_updated = False


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw)


def _apt_update() -> None:
    global _apt_updated
    if _apt_updated:
        return
    log("  apt-get update")
    _run(["apt-get", "update", "-q"])
    _apt_updated = True


def _cached_deb(cache: Path, pkg: str) -> Path | None:
    hits = sorted(cache.glob(f"{pkg}_*.deb"))
    return hits[-1] if hits else None


def apt_candidate(pkg: str) -> str | None:
    """Candidate version apt would download, or None if apt does not know the package."""
    try:
        out = _run(["apt-cache", "policy", pkg]).stdout
    except (subprocess.CalledProcessError, FileNotFoundError):
        return None
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("Candidate:"):
            v = line.split(":", 1)[1].strip()
            return None if v in ("", "(none)") else v
    return None


def fetch_deb(pkg: str, cache: Path) -> Path:
    """Return the path of ``pkg``'s .deb in ``cache``, downloading it with apt-get if absent.

    Raises RuntimeError if apt cannot provide the package.
    """
    cache.mkdir(parents=True, exist_ok=True)
    hit = _cached_deb(cache, pkg)
    if hit is not None:
        return hit
    if shutil.which("apt-get") is None:
        raise RuntimeError("apt-get is not available on this machine")
    if apt_candidate(pkg) is None:
        _apt_update()
    try:
        _run(["apt-get", "download", pkg], cwd=cache)
    except subprocess.CalledProcessError as e:
        if not _apt_updated:
            _apt_update()
            try:
                _run(["apt-get", "download", pkg], cwd=cache)
            except subprocess.CalledProcessError as e2:
                raise RuntimeError(f"apt-get download {pkg} failed: {e2.stderr.strip()}") from e2
        else:
            raise RuntimeError(f"apt-get download {pkg} failed: {e.stderr.strip()}") from e
    hit = _cached_deb(cache, pkg)
    if hit is None:
        raise RuntimeError(f"apt-get download {pkg} produced no .deb")
    log(f"  downloaded {hit.name} ({hit.stat().st_size / 1e6:.1f} MB)")
    return hit


def deb_field(deb: Path, field: str) -> str:
    return _run(["dpkg-deb", "-f", str(deb), field]).stdout.strip()


def unpack_deb(deb: Path, dest_root: Path) -> Path:
    """Unpack ``deb`` with ``dpkg-deb -x`` into ``dest_root/<deb stem>`` (once) and return it."""
    dest = dest_root / deb.stem
    stamp = dest / ".unpacked"
    if stamp.exists():
        return dest
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    _run(["dpkg-deb", "-x", str(deb), str(dest)])
    stamp.write_text(deb.name + "\n")
    return dest


def get_package(pkg: str, cache: Path) -> tuple[Path, dict]:
    """Download (cached) and unpack ``pkg``; return (unpacked root, info dict)."""
    deb = fetch_deb(pkg, cache / "debs")
    root = unpack_deb(deb, cache / "unpacked")
    info = {
        "package": deb_field(deb, "Package"),
        "version": deb_field(deb, "Version"),
        "deb": deb.name,
        "deb_sha256": sha256_file(deb),
    }
    return root, info


def first_available(candidates: list[str]) -> str | None:
    """First package name in ``candidates`` that apt offers (updating the lists once if needed)."""
    for attempt in range(2):
        for pkg in candidates:
            if apt_candidate(pkg) is not None:
                return pkg
        if attempt == 0 and shutil.which("apt-get") is not None:
            _apt_update()
    return None


# --------------------------------------------------------------------------- unpacked files


def relpath_str(p: Path, root: Path) -> str:
    return p.relative_to(root).as_posix()


def unique_files(paths) -> list[Path]:
    """Sorted regular files, without symlinks and without a second path to the same file
    (Debian packages link directories, e.g. python3.11-doc/html -> ../python3.11/html)."""
    seen: set[Path] = set()
    out = []
    for p in sorted(paths):
        if p.is_symlink() or not p.is_file():
            continue
        real = p.resolve()
        if real in seen:
            continue
        seen.add(real)
        out.append(p)
    return out
