"""Keeps the test suite inside its repository.

A user's clone has nothing beside it: a test that reads the specification folder kept beside a
development checkout (or any other sibling of the checkout) passes on a developer's machine and
fails in every fresh clone. An audit hook sees
every file the test process opens or lists; a path that leaves the repository for one of its
siblings is recorded, and the autouse fixture in ``tests/conftest.py`` fails the test that did
it. Siblings that hold the running interpreter (a virtual environment next to the checkout) or
the temporary directory are not the project's input and are allowed.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

__all__ = ["REPO", "escapes", "install", "take_escapes"]

REPO = Path(__file__).resolve().parents[2]
_OUTSIDE = REPO.parent
_ALLOWED_TOPS = frozenset(
    top for top in (
        _OUTSIDE / Path(p).resolve().relative_to(_OUTSIDE).parts[0]
        for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, tempfile.gettempdir()}
        if Path(p).resolve().is_relative_to(_OUTSIDE)
        and Path(p).resolve() != _OUTSIDE
    )
)
_seen: list[str] = []
_installed = False


def escapes(path: object) -> bool:
    """Whether opening ``path`` reads a sibling of the repository (a folder beside the checkout)."""
    if isinstance(path, int):
        return False   # a file descriptor: already open
    try:
        raw = os.fsdecode(path)   # type: ignore[arg-type]
    except TypeError:
        return False
    target = Path(os.path.abspath(raw))
    if target.is_relative_to(REPO) or not target.is_relative_to(_OUTSIDE) or target == _OUTSIDE:
        return False
    top = _OUTSIDE / target.relative_to(_OUTSIDE).parts[0]
    if top in _ALLOWED_TOPS:
        return False
    # A checkout at the top of the file system has /usr, /etc ... as its "siblings": they are
    # the system's, not the project's, so there the fence stands down.
    return _OUTSIDE != Path(_OUTSIDE.anchor)


def _hook(event: str, args: tuple[object, ...]) -> None:
    if event in ("open", "os.listdir", "os.scandir") and args and escapes(args[0]):
        _seen.append(os.fsdecode(args[0]))   # type: ignore[arg-type]


def install() -> None:
    """Start watching (once per process; audit hooks cannot be removed)."""
    global _installed
    if not _installed:
        sys.addaudithook(_hook)
        _installed = True


def take_escapes() -> list[str]:
    """The paths outside the repository opened since the last call."""
    out = list(_seen)
    _seen.clear()
    return out
