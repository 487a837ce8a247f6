"""The files convert opens itself: regular files only, each checked without
blocking, so that a FIFO or a device where a file was expected is an error
naming it instead of a hang or an endless read."""

from __future__ import annotations

import errno
import os
import stat

from ..errors import InvalidArgumentError


def file_kind(mode: int) -> str:
    """What a file of `st_mode` `mode` is, in words."""
    for test, what in (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return what
    return "a special file"


def read_regular_file(path: str, limit: int) -> bytes:
    """The bytes of the regular file at `path`, at most `limit` of them. The open
    does not block (a FIFO's would wait for a writer), and anything but a regular
    file, or a file larger than `limit`, is an OSError saying so, unread."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, f"it is {file_kind(st.st_mode)}, not a regular file")
        if st.st_size > limit:
            raise OSError(errno.EFBIG, f"it holds {st.st_size:,} bytes, more than {limit:,}")
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:  # grew since the check
        raise OSError(errno.EFBIG, f"it holds more than {limit:,} bytes")
    return data


def check_regular_files(path: str) -> None:
    """Refuses a source `path` that is not a regular file or a directory, or a
    directory (a save_to_disk one, and each split in it) holding anything but
    regular files and directories, before a reader opens any of them."""
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        _refuse_unless_regular(path, st.st_mode)
        return
    for top in [path, *(e.path for e in os.scandir(path) if e.is_dir())]:
        for entry in os.scandir(top):
            try:
                mode = entry.stat().st_mode  # the link's target, for a link
            except FileNotFoundError:
                continue  # a dangling link is for the reader to report
            if not stat.S_ISDIR(mode):
                _refuse_unless_regular(entry.path, mode)


def _refuse_unless_regular(path: str, mode: int) -> None:
    if not stat.S_ISREG(mode):
        raise InvalidArgumentError(
            f"{path}: is {file_kind(mode)}; convert reads regular files and directories only"
        )
