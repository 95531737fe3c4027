"""Argument rules of ``trajectory_match`` (LangChain agentevals' ``tool_args_match_mode`` and
``tool_args_match_overrides``), and the maximum pairing of reference calls with calls.

A rule decides whether a call's arguments match a reference call's. ``exact``, ``ignore`` and a
key-path list are equivalences: each gives every argument set a key, and two match when their
keys are equal, so pairing is counting. ``subset``, ``superset`` and a callable are relations:
pairing is a maximum bipartite matching over the distinct argument sets.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

from .custom import resolve_reference
from .tool_call_checks import max_matching, same_value

__all__ = [
    "ARGS_MODES",
    "ArgsRule",
    "CallLike",
    "canonical",
    "load_matcher",
    "max_pairing",
    "path_value",
    "rule_of",
]

ARGS_MODES = ("exact", "ignore", "subset", "superset")

#: A key path's value where the path leads nowhere (not a JSON value: never equal to null).
ABSENT: Any = object()


def canonical(value: Any) -> Hashable:
    """A hashable key such that two JSON values have equal keys exactly when they are equal
    under value equality (``same_value``): ``1`` and ``1.0`` share a key, ``true`` and ``1``
    do not, object key order is irrelevant."""
    cls = value.__class__
    if cls is str:
        return cast(str, value)
    if cls is bool:
        return ("b", value)
    if cls is int or cls is float:
        return ("n", value)          # 1 == 1.0 and hash(1) == hash(1.0): one key
    if isinstance(value, Mapping):
        return ("d", frozenset((k, canonical(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return ("l", tuple(canonical(v) for v in value))
    if value is None:
        return ("z",)
    if isinstance(value, bool):
        return ("b", bool(value))
    if isinstance(value, (int, float)):
        return ("n", value)
    if isinstance(value, str):
        return str.__str__(value)
    return ("o", type(value).__name__, repr(value))


def path_value(args: Any, parts: Sequence[str]) -> Any:
    """The value at a key path: ``a.b`` walks objects, ``items.0`` indexes lists; ABSENT when
    the path leads nowhere."""
    current = args
    for part in parts:
        if isinstance(current, Mapping):
            if part not in current:
                return ABSENT
            current = current[part]
        elif isinstance(current, list) and part.isdigit():
            index = int(part)
            if index >= len(current):
                return ABSENT
            current = current[index]
        else:
            return ABSENT
    return current


def _subset(call_args: Any, ref_args: Mapping[str, Any]) -> bool:
    """Every key of the call's args is in the reference with an equal value."""
    if not isinstance(call_args, Mapping):
        return False
    return all(k in ref_args and same_value(v, ref_args[k]) for k, v in call_args.items())


def _superset(call_args: Any, ref_args: Mapping[str, Any]) -> bool:
    """Every reference key is in the call's args with an equal value."""
    if not isinstance(call_args, Mapping):
        return not ref_args
    return all(k in call_args and same_value(v, call_args[k]) for k, v in ref_args.items())


@dataclass(frozen=True, slots=True)
class ArgsRule:
    """How one tool's arguments are compared: a mode, key paths, or a callable.

    ``describe`` is what explanations and details call it (never argument values).
    """

    mode: str                                      # exact | ignore | subset | superset | paths | callable
    paths: tuple[tuple[str, ...], ...] = ()
    function: Callable[[Any, Any], Any] | None = None
    describe: str = ""

    @property
    def is_equivalence(self) -> bool:
        return self.mode in ("exact", "ignore", "paths")

    def key(self, args: Any) -> Hashable:
        """Equivalences only: args match when their keys are equal."""
        if self.mode == "ignore":
            return None
        if self.mode == "exact":
            return canonical(args)
        return tuple(("-",) if (v := path_value(args, p)) is ABSENT else canonical(v)
                     for p in self.paths)

    def holds(self, call_args: Any, ref_args: Mapping[str, Any]) -> bool:
        """Whether the call's arguments match the reference call's."""
        mode = self.mode
        if mode == "ignore":
            return True
        if mode == "exact":
            return same_value(call_args, ref_args)
        if mode == "subset":
            return _subset(call_args, ref_args)
        if mode == "superset":
            return _superset(call_args, ref_args)
        if mode == "paths":
            return self.key(call_args) == self.key(ref_args)
        assert self.function is not None
        return bool(self.function(call_args, ref_args))


def rule_of(mode: str, describe: str = "") -> ArgsRule:
    return ArgsRule(mode, describe=describe or mode)


def paths_rule(paths: Sequence[str]) -> ArgsRule:
    return ArgsRule("paths", tuple(tuple(p.split(".")) for p in paths),
                    describe="key paths " + ", ".join(paths))


def load_matcher(reference: str, base_dir: Path | None) -> ArgsRule:
    """The callable a ``module:function`` or ``file.py:function`` override names, as a rule.

    A relative file is read from ``base_dir`` (the config file's folder), as custom graders are.

    Raises:
        ValueError: the reference is malformed, cannot be imported, or names something that
            cannot be called as ``(call_args, reference_args)``.
    """
    obj = resolve_reference(reference, base_dir, f"is neither an args mode "
                            f"({', '.join(ARGS_MODES)}) nor a callable as "
                            "'package.module:function' or 'path/to/file.py:function'")
    if not callable(obj):
        raise TypeError(f"{reference!r} is not callable")
    try:
        inspect.signature(obj).bind(None, None)
    except TypeError:
        raise ValueError(f"{reference!r} must accept (call_args, reference_args)") from None
    except ValueError:
        pass                           # no signature to read (a builtin): trust it
    return ArgsRule("callable", function=obj, describe=reference)


class CallLike(Protocol):
    """What pairing reads of a call (``model.ToolCall`` has it)."""

    @property
    def name(self) -> str: ...

    @property
    def arguments(self) -> Any: ...

    @property
    def raw_arguments(self) -> Any: ...


def _call_classes(calls: Sequence[CallLike], ids: Sequence[int]) -> list[tuple[Any, list[int]]]:
    """The calls ``ids`` grouped by their recorded argument text (equal text, equal args; no
    arguments is one class too), each class with its decoded args; calls whose arguments were
    recorded as other values are classes of their own.
    Decoding and comparing once per distinct text is what keeps long runs cheap."""
    by_text: dict[str | None, list[int]] = {}
    classes: list[tuple[Any, list[int]]] = []
    for j in ids:
        raw = calls[j].raw_arguments
        if raw is None or raw.__class__ is str:
            members = by_text.get(raw)
            if members is not None:
                members.append(j)
                continue
            members = by_text[raw] = [j]
        else:
            members = [j]
        args = calls[j].arguments
        classes.append(({} if args is None else args, members))
    return classes


def max_pairing(refs: Sequence[tuple[str, Mapping[str, Any]]], calls: Sequence[CallLike],
                rule_for: Callable[[str], ArgsRule],
                ref_keys: dict[tuple[str, int], Hashable] | None = None) -> list[int | None]:
    """Pair reference calls with calls of the same name whose args match, each call used at
    most once, as many pairs as possible (never first-come). A call without recorded arguments
    has empty ones.

    Returns, per reference call, the position in ``calls`` of its call or None. Among equal
    maxima, earlier calls go to earlier reference entries. ``ref_keys``, a dict the caller keeps
    for as long as its reference calls live, remembers each one's key (by name and the identity
    of its args) from run to run.
    """
    keys: dict[tuple[str, int], Hashable] = {} if ref_keys is None else ref_keys

    def ref_key(i: int, rule: ArgsRule) -> Hashable:
        name, args = refs[i]
        found: Hashable = keys.get((name, id(args)), ABSENT)
        if found is ABSENT:                       # keys may be None ("ignore")
            found = keys[(name, id(args))] = (rule.key(args) if rule.is_equivalence
                                              else canonical(args))
        return found

    paired: list[int | None] = [None] * len(refs)
    ref_by_name: dict[str, list[int]] = {}
    for i, (name, _) in enumerate(refs):
        ref_by_name.setdefault(name, []).append(i)
    call_by_name: dict[str, list[int]] = {}
    for j, c in enumerate(calls):
        if c.name in ref_by_name:
            call_by_name.setdefault(c.name, []).append(j)
    for name, ref_ids in ref_by_name.items():
        call_ids = call_by_name.get(name)
        if not call_ids:
            continue
        rule = rule_for(name)
        if rule.mode == "ignore":
            for i, j in zip(ref_ids, call_ids):
                paired[i] = j
            continue
        classes = _call_classes(calls, call_ids)
        if rule.is_equivalence:
            buckets: dict[Hashable, list[int]] = {}
            for args, members in classes:
                buckets.setdefault(rule.key(args), []).extend(members)
            taken: dict[Hashable, int] = {}
            for i in ref_ids:
                key = ref_key(i, rule)
                bucket = buckets.get(key)
                if bucket is None:
                    continue
                if len(bucket) > 1 and taken.get(key) is None:
                    bucket.sort()              # classes merged by key: back to call order
                n = taken.get(key, 0)
                if n < len(bucket):
                    paired[i] = bucket[n]
                    taken[key] = n + 1
            continue
        # A relation: one check per distinct (reference args, call args), then a matching.
        shared: dict[Hashable, list[int]] = {}
        candidates: list[list[int]] = []
        for i in ref_ids:
            key = ref_key(i, rule)
            found = shared.get(key)
            if found is None:
                found = sorted(j for args, members in classes
                               if rule.holds(args, refs[i][1]) for j in members)
                shared[key] = found
            candidates.append(found)
        for i, found_call in zip(ref_ids, max_matching(candidates)):
            paired[i] = found_call
    return paired
