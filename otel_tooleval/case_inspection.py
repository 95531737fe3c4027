"""Which case a run matched and why, for ``otel-tooleval inspect`` (docs/cases.md).

The case is found exactly as ``grade`` finds it (``CaseSet.match``); this module only says why:
the attribute ``key=value`` the run carries, or its first user message equal to a case's text or
searched by a case's regex. A run that matches no case is given its nearest case, by a cheap
similarity (``difflib``'s ratio) of the run's first user message to each case's text or regex
pattern, and of the run's value of each attribute a case matches on to that case's value, with
what the run would need for that case to match it.

The nearest case costs one linear comparison (``quick_ratio``) per case and the full ratio for
the best ten; it is worked out for the first ``MAX_NEAREST`` unmatched runs only, so that a
large unmatched input stays quick to inspect.
"""

from __future__ import annotations

import difflib
import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .cases import Ambiguous, Case, CaseSet, first_user_message_of
from .model import AgentRun

__all__ = ["MAX_NEAREST", "CaseFinding", "Nearest", "explain_case", "nearest_case"]

#: Unmatched runs given a nearest case; past them, ``CaseFinding.nearest`` stays None.
MAX_NEAREST = 100
_MESSAGE_CHARS = 2000     # the part of a long message compared (difflib is quadratic)
_SHORTLIST = 10           # message cases given the full ratio, the best by quick_ratio
_WHY_CHARS = 120          # the part of the message quoted in a regex match's reason


@dataclass(frozen=True, slots=True)
class Nearest:
    """The case an unmatched run comes closest to, and what the run would need."""

    case: str
    way: str
    similarity: float
    needs: str

    def to_dict(self) -> dict[str, Any]:
        return {"case": self.case, "way": self.way, "similarity": round(self.similarity, 3),
                "needs": self.needs}


@dataclass(slots=True)
class CaseFinding:
    """A run's case: ``status`` is ``matched``, ``no case`` or ``ambiguous``; ``why`` one
    reason per matching case (``matched``: one; ``ambiguous``: each case's)."""

    status: str
    first_user_message: str | None
    cases: tuple[str, ...] = ()
    why: tuple[str, ...] = ()
    nearest: Nearest | None = None
    #: For a run with no case: the attributes cases match on, and the run's value of each
    #: (None: the run does not carry it).
    attributes: dict[str, str | None] = field(default_factory=dict)

    @property
    def case(self) -> str | None:
        return self.cases[0] if self.status == "matched" else None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status, "case": self.case,
                               "cases": list(self.cases), "why": list(self.why),
                               "first_user_message": self.first_user_message}
        if self.status == "no case":
            out["nearest"] = self.nearest.to_dict() if self.nearest is not None else None
            out["attributes"] = dict(self.attributes)
        return out


def _attribute(run: AgentRun, key: str) -> str | None:
    value = run.root_attributes.get(key)
    if value is None:
        return None
    return value if isinstance(value, str) else str(value)


def _why(case: Case, run: AgentRun, message: str | None) -> str:
    m = case.match
    if m.way == "attribute":
        assert m.key is not None
        return f"attribute {m.key}={_attribute(run, m.key)!r}"
    if m.way == "first_user_message":
        return f"first user message equals {m.value!r}"
    shown = message if message is None or len(message) <= _WHY_CHARS else (
        message[:_WHY_CHARS - 1] + "…")
    return f"first user message {shown!r} matches regex {m.value!r}"


def explain_case(cases: CaseSet, run: AgentRun, *, nearest: bool = True) -> CaseFinding:
    """The run's case as ``grade`` finds it, with why; for no case, its nearest (``nearest``)
    and its values of the attributes the cases match on."""
    found = cases.match(run)
    message = first_user_message_of(run)
    if isinstance(found, Ambiguous):
        return CaseFinding("ambiguous", message, found.ids,
                           tuple(f"{c.id}: {_why(c, run, message)}" for c in found.cases))
    if found is not None:
        return CaseFinding("matched", message, (found.id,), (_why(found, run, message),))
    keys = {c.match.key for c in cases.cases if c.match.key is not None}
    return CaseFinding("no case", message,
                       nearest=nearest_case(cases.cases, run, message) if nearest else None,
                       attributes={k: _attribute(run, k) for k in sorted(keys)})


def nearest_case(cases: Sequence[Case], run: AgentRun, message: str | None) -> Nearest | None:
    """The most similar case (ties: the first in the set): message cases by the run's first
    user message against their text or pattern, attribute cases by the run's value of their
    key against theirs. None when the run has neither a message nor any such attribute."""
    text = message[:_MESSAGE_CHARS] if message is not None else None
    by_message = difflib.SequenceMatcher(autojunk=False)
    if text is not None:
        by_message.set_seq2(text)      # the matcher caches what it learns of seq2
    # Message cases are ranked by quick_ratio (a bound on ratio, linear), and only the
    # best _SHORTLIST get the full (quadratic) ratio.
    ranked: list[tuple[float, int, Case]] = []
    best: tuple[float, Case] | None = None
    for n, case in enumerate(cases):
        m = case.match
        if m.way == "attribute":
            assert m.key is not None
            have = _attribute(run, m.key)
            if have is None:
                continue
            ratio = difflib.SequenceMatcher(None, have[:_MESSAGE_CHARS], m.value,
                                            autojunk=False).ratio()
            if best is None or ratio > best[0]:
                best = (ratio, case)
        elif text is not None:
            by_message.set_seq1(m.value[:_MESSAGE_CHARS])
            ranked.append((-by_message.quick_ratio(), n, case))
    for _, _, case in heapq.nsmallest(_SHORTLIST, ranked):
        by_message.set_seq1(case.match.value[:_MESSAGE_CHARS])
        ratio = by_message.ratio()
        if best is None or ratio > best[0]:
            best = (ratio, case)
    if best is None:
        return None
    ratio, case = best
    m = case.match
    if m.way == "attribute":
        needs = (f"attribute {m.key}={m.value!r} on the run's root "
                 f"(it has {m.key}={_attribute(run, m.key or '')!r})")
    elif m.way == "first_user_message":
        needs = f"first user message {m.value!r} (exactly, after strip)"
    else:
        needs = f"a first user message that regex {m.value!r} finds"
    return Nearest(case.id, m.way, ratio, needs)
