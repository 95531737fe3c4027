"""The aggregate gates of an ``aggregate`` object, as every output lists them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Gate", "aggregate_gates"]


@dataclass(frozen=True, slots=True)
class Gate:
    """One aggregate gate: a grader's micro-average over all runs, or over one group."""

    grader: str
    group: str | None
    summary: Mapping[str, Any]

    @property
    def passed(self) -> bool:
        return self.summary.get("passed_aggregate") is True

    @property
    def selection(self) -> Mapping[str, Any]:
        value = self.summary.get("tool_selection")
        return value if isinstance(value, Mapping) else {}


def aggregate_gates(aggregate: Mapping[str, Any]) -> list[Gate]:
    """Every summary that carries ``passed_aggregate``.

    When the aggregate is grouped the groups gate (``aggregate.aggregate_passed``), so only
    theirs are listed; ``group`` reads ``<group_by>=<key>``.
    """
    groups = aggregate.get("groups")
    if isinstance(groups, Mapping):
        by = aggregate.get("group_by", "group")
        scopes: list[tuple[str | None, Any]] = [(f"{by}={key}", s) for key, s in groups.items()]
    else:
        scopes = [(None, aggregate)]
    gates = []
    for group, scope in scopes:
        graders = scope.get("graders") if isinstance(scope, Mapping) else None
        if not isinstance(graders, Mapping):
            continue
        for name, summary in graders.items():
            if isinstance(summary, Mapping) and "passed_aggregate" in summary:
                gates.append(Gate(str(name), group, summary))
    return gates
