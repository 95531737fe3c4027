"""Reading the small local files a user names on the command line: config files, bearer
token files, TLS certificates and keys.

Each is read only when it is a regular file no larger than a cap, so that a path naming a
FIFO (which would block the reader until a writer comes), a device (``/dev/zero`` never
ends), a folder, or a file of gigabytes is refused at once with a reason, instead of hanging
or filling memory. The file is opened without blocking (``O_NONBLOCK``, which a FIFO without
a writer would otherwise wait on) and checked with ``fstat`` on the descriptor that is read,
so what is checked is what is read.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

__all__ = ["FileRefused", "LocalFile", "access_problem", "read_local_file"]


class FileRefused(Exception):
    """The file was not read; ``reason`` says why in words (without the path); ``kind`` is
    what the path is when it is not a regular file ("a FIFO (named pipe)"); ``missing`` is
    True when there is nothing at the path."""

    def __init__(self, reason: str, *, kind: str | None = None, missing: bool = False
                 ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.kind = kind
        self.missing = missing


@dataclass(frozen=True, slots=True)
class LocalFile:
    """The bytes of a file and its ``fstat`` before and after they were read."""

    data: bytes
    before: os.stat_result
    after: os.stat_result

    @property
    def identity(self) -> tuple[int, ...]:
        """Device, inode, size, modification and change times, after the read."""
        return _identity(self.after)

    @property
    def steady(self) -> bool:
        """True when nothing about the file changed while it was read (size, times, inode)
        and all of it was read."""
        return _identity(self.before) == _identity(self.after) and (
            len(self.data) == self.after.st_size)


def _identity(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a plain file"


def _size(limit: int) -> str:
    return f"{limit // (1024 * 1024)} MiB" if limit % (1024 * 1024) == 0 else f"{limit} bytes"


def read_local_file(path: str | os.PathLike[str], *, max_bytes: int) -> LocalFile:
    """All of the regular file at ``path`` (symbolic links followed), at most ``max_bytes``.

    Raises:
        FileRefused: no such file, not readable, not a regular file (a folder, a FIFO, a
            device, a socket), or larger than ``max_bytes``; the reason names which.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
                     | getattr(os, "O_NOCTTY", 0))
    except IsADirectoryError:
        raise FileRefused("a folder, not a file", kind="a folder") from None
    except FileNotFoundError:
        raise FileRefused("cannot read it (no such file)", missing=True) from None
    except OSError as exc:
        raise FileRefused(f"cannot read it ({exc.strerror or exc})") from None
    try:
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode):
            kind = _kind(before.st_mode)
            raise FileRefused(f"{kind}, not a file", kind=kind)
        if before.st_size > max_bytes:
            raise FileRefused(f"{before.st_size} bytes, larger than the {_size(max_bytes)} "
                              "allowed")
        os.set_blocking(fd, True)
        chunks: list[bytes] = []
        got = 0
        while True:   # to the end, one byte past the cap at most: the file may be growing
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
            if got > max_bytes:
                raise FileRefused(f"grew past the {_size(max_bytes)} allowed while being read")
        after = os.fstat(fd)
    except OSError as exc:
        raise FileRefused(f"cannot read it ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    return LocalFile(b"".join(chunks), before, after)


def access_problem(st: os.stat_result, what: str) -> tuple[str | None, str | None]:
    """What the permission bits of a secret file (a token file, a private key) allow others.

    Returns ``(refusal, warning)``: a refusal when anyone may write it (anyone could put in
    their own token or key; ``ssh`` refuses such files too), else a warning when the group or
    others may read it (or the group may write it), else ``(None, None)``. Each says the mode
    and the ``chmod`` that fixes it.
    """
    mode = stat.S_IMODE(st.st_mode)
    if mode & stat.S_IWOTH:
        return (f"anyone may write it (mode {mode:04o}), so anyone could put in {what}; "
                "chmod o-w it (600 is best)"), None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        return None, (f"the group or others may read it (mode {mode:04o}); chmod 600 it "
                      "unless another user must read it")
    return None, None
