"""The suite needs nothing beside the checkout: no specification folder, no sibling folders."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import confine

TESTS = Path(__file__).resolve().parent


def test_reading_a_sibling_of_the_checkout_is_an_escape() -> None:
    outside = confine.REPO.parent
    spec = "spec"   # a sibling folder, as the specification sits beside a session's checkout
    assert confine.escapes(outside / spec / "fixtures" / "spans" / "x.json")
    assert confine.escapes(str(confine.REPO / ".." / spec))
    assert confine.escapes(outside / (confine.REPO.name + "-other") / "data.json")


def test_the_repository_and_scratch_space_are_not() -> None:
    assert not confine.escapes(confine.REPO / "tests" / "data" / "spans")
    assert not confine.escapes(TESTS / "test_self_contained.py")
    assert not confine.escapes(0)


def test_the_fence_sees_an_open_outside(tmp_path: Path) -> None:
    # The audit hook records the attempt even when the file is missing: the open is the escape.
    target = confine.REPO.parent / "spec" / "no-such-file-for-the-fence-test.json"
    confine.take_escapes()
    with pytest.raises(OSError):
        target.open()
    assert confine.take_escapes() == [str(target)]


def test_no_test_source_names_the_shared_folder() -> None:
    # The static twin of the fence, for paths a test builds but only a subprocess opens.
    fence = {Path(__file__).resolve(), Path(confine.__file__).resolve()}   # they name it to ban it
    offenders = []
    for path in TESTS.rglob("*.py"):
        if path.resolve() in fence or any(
                part.startswith(".") or part == "node_modules"
                for part in path.relative_to(TESTS).parts):
            continue   # the fence itself; recorder venvs and packages (not committed)
        text = path.read_text(encoding="utf-8")
        if re.search(r"""(\.\./shared|["']shared["']\s*[,)/]|/\s*["']shared["'])""", text):
            offenders.append(str(path.relative_to(TESTS)))
    assert offenders == [], offenders
