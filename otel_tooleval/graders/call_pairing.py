"""The pairing of expected entries with calls behind ``tool-call-args`` and ``tool-call-output``
(and the reference calls of ``trajectory_match``): ``max_matching``, and the indexes that give
each expected entry its candidate calls without comparing it with every call of its tool.

Runs repeat themselves (the same file read again, the same tests run) and so do expected lists
as long as the run, so the work is done per class: expected entries with equal criteria share
one candidate list, calls with equal arguments are one class, and the predicate is asked once
per (entry class, call class) pair, or not at all where a lookup by a canonical key answers it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from ..model import AgentRun

__all__ = ["ArgsIndex", "json_key", "max_matching"]

_EMPTY: list[int] = []

#: Up to this many entries the entry-by-entry search runs as is: it pairs exactly as the search
#: on classes does, and for a handful of entries setting up the classes costs more than it saves.
PLAIN_ENTRIES = 24


def max_matching(candidates: Sequence[Sequence[int]]) -> list[int | None]:
    """Pair each entry with at most one of its candidate calls, every call used at most once,
    pairing as many entries as possible (augmenting paths, breadth first).

    Returns, per entry, the paired call position or None. Entries are taken in order; an entry
    takes the first of its candidates still free, else the shortest augmenting path found
    breadth first (candidates tried in the order given), so earlier calls are preferred where
    the maximum allows a choice.

    Entries that share one candidate list (the same object) are one class, and the search works
    on classes: a paired call is never freed again, so each class keeps a cursor on its first
    candidate that may be free; a search scans each class's list at most once (another entry
    of a class already scanned would reach nothing new), and stops once every class that shares
    a call with it and holds a call is queued (the rest would queue nothing); and once a search from a class has
    failed, its later entries are not searched (a free entry without an augmenting path never
    gets one later, and an entry with the same candidates would reach only what it reached).
    The pairs are exactly those of the entry-by-entry search (``_plain_matching``, which runs
    as is up to ``PLAIN_ENTRIES`` entries).
    """
    if len(candidates) <= PLAIN_ENTRIES:
        return _plain_matching(candidates)
    slot: dict[int, int] = {}                  # id of a candidate list -> its class
    lists: list[Sequence[int]] = []
    classes: list[int] = []                    # per entry, its class
    for mine in candidates:
        k = slot.get(id(mine))
        if k is None:
            k = slot[id(mine)] = len(lists)
            lists.append(mine)
        classes.append(k)
    cursor = [0] * len(lists)                  # per class: its candidates before are all paired
    failed = [False] * len(lists)
    holds = [False] * len(lists)               # per class: one of its entries is paired
    listed: dict[int, list[int]] = {}          # call -> the classes listing it (when searching)
    near: dict[int, list[int] | None] = {}     # class -> the classes sharing a call with it
    paired: list[int | None] = [None] * len(candidates)
    owner: dict[int, int] = {}                 # call -> entry paired with it

    def first_free(k: int) -> int | None:
        mine, i = lists[k], cursor[k]
        while i < len(mine) and mine[i] in owner:
            i += 1
        cursor[k] = i
        return mine[i] if i < len(mine) else None

    def neighbours(k: int) -> list[int] | None:
        """The classes sharing a call with class ``k`` (the only ones its scan can queue), or
        None where they would cost more to list than scanning does."""
        if k in near:
            return near[k]
        if not listed:
            for m, mine in enumerate(lists):
                for c in mine:
                    listed.setdefault(c, []).append(m)
        found: set[int] = set()
        budget = 4 * len(lists[k]) + 8
        for c in lists[k]:
            budget -= len(listed[c])
            if budget < 0:
                near[k] = None
                return None
            found.update(listed[c])
        near[k] = sorted(found)
        return near[k]

    for root, k in enumerate(classes):
        if failed[k]:
            continue
        mine, i = lists[k], cursor[k]          # first_free(k), inline: the common case
        while i < len(mine) and mine[i] in owner:
            i += 1
        cursor[k] = i
        if i < len(mine):
            paired[root], owner[mine[i]] = mine[i], root
            holds[k] = True
            continue
        parent: dict[int, int] = {}            # entry -> entry whose scan reached its call
        seen = {k}                             # classes queued (their first entry scans)
        queue = [root]
        end = last = None
        for entry in queue:
            scanned = classes[entry]
            free = first_free(scanned)
            if free is not None:
                end, last = free, entry
                break
            # The classes this scan could still queue: those sharing a call with it that hold
            # a call and are not queued yet; once all are, the rest of the scan is idle.
            others = neighbours(scanned)
            left = -1 if others is None else sum(
                1 for m in others if holds[m] and m not in seen)
            if left == 0:
                continue
            for c in lists[scanned]:           # all paired: queue their owners' classes
                other = owner[c]
                if classes[other] not in seen:
                    seen.add(classes[other])
                    parent[other] = entry
                    queue.append(other)
                    left -= 1
                    if left == 0:
                        break
        if end is None or last is None:
            failed[k] = True
            continue
        holds[k] = True                        # the root is paired; the others stay paired
        call: int | None = end
        entry = last
        while call is not None:                # flip the path back to the root
            previous = paired[entry]
            paired[entry], owner[call] = call, entry
            if entry == root:
                break
            call, entry = previous, parent[entry]
    return paired


def _plain_matching(candidates: Sequence[Sequence[int]]) -> list[int | None]:
    """``max_matching`` entry by entry: each entry takes its first free candidate, else the
    first augmenting path found breadth first; an entry whose candidate list (the same object)
    failed before is not searched again."""
    paired: list[int | None] = [None] * len(candidates)
    owner: dict[int, int] = {}
    failed: set[int] = set()                   # ids of candidate lists whose search failed
    for root, mine in enumerate(candidates):
        if failed and id(mine) in failed:
            continue
        free = next((c for c in mine if c not in owner), None)
        if free is not None:
            paired[root], owner[free] = free, root
            continue
        reached: dict[int, int] = {}           # call -> entry it was reached from
        queue = [root]
        end = None
        for entry in queue:
            for c in candidates[entry]:
                if c in reached:
                    continue
                reached[c] = entry
                if c not in owner:
                    end = c
                    break
                queue.append(owner[c])
            if end is not None:
                break
        if end is None:
            failed.add(id(mine))
        while end is not None:                 # flip the path back to the root
            entry = reached[end]
            previous = paired[entry]
            paired[entry], owner[end] = end, entry
            end = None if entry == root else previous
    return paired


def json_key(value: Any) -> Hashable | None:
    """A hashable key of a JSON value, equal for two values exactly when ``same_value`` holds
    (``1`` and ``1.0`` alike, ``true`` apart from ``1``, objects in any key order); None for a
    value it cannot vouch for (NaN, anything but plain JSON types), to be compared directly."""
    cls = value.__class__
    if cls is str:
        return value                           # type: ignore[no-any-return]
    if cls is dict:
        if all(v.__class__ is str for v in value.values()):
            if all(k.__class__ is str for k in value):
                return ("d", frozenset(value.items()))
            return None
        items = []
        for k, v in value.items():
            sub = json_key(v)
            if sub is None or k.__class__ is not str:
                return None
            items.append((k, sub))
        return ("d", frozenset(items))
    if cls is int or (cls is float and not math.isnan(value)):
        return ("n", value)                    # 1 == 1.0 and hash(1) == hash(1.0): one key
    if cls is bool:
        return ("b", value)
    if value is None:
        return ("z",)
    if cls is list or cls is tuple:
        subs = []
        for v in value:
            sub = json_key(v)
            if sub is None:
                return None
            subs.append(sub)
        return ("l", tuple(subs))
    return None


def _size(held: Any) -> int:
    return 0 if held is None else len(held) if held.__class__ is list else 1


class ArgsIndex:
    """A run's calls of some tools in classes of equal arguments, to find the calls an expected
    ``{name, args}`` entry matches (equal arguments, or ``subset``: the entry's keys present with
    equal values) by lookup.

    ``matches(expected, arguments)`` is the predicate itself; it is asked only for arguments
    without a key (``json_key``: NaN, values that are not plain JSON), on either side.
    """

    def __init__(self, run: AgentRun, names: Sequence[str], subset: bool,
                 matches: Callable[[Mapping[str, Any], Any], bool]) -> None:
        self.subset = subset
        self.matches = matches
        #: tool -> arguments' key -> call positions (ascending) of the calls with those arguments
        self.keyed: dict[str, dict[Hashable, Sequence[int]]] = {}
        #: tool -> arguments' key -> the arguments
        self.values: dict[str, dict[Hashable, Any]] = {}
        #: tool -> [(arguments, call positions)] of the classes without a key
        self.odd: dict[str, list[tuple[Any, Sequence[int]]]] = {}
        #: subset only: tool -> (argument name, value's key) -> the key of the arguments
        #: holding it, or a list of them when several do
        self.postings: dict[str, dict[Hashable, Any]] = {}
        calls = run.calls
        by_class = run.argument_classes()
        for name in names:
            classes = by_class.get(name)
            if not classes:
                continue
            keyed: dict[Hashable, Sequence[int]] = {}
            values: dict[Hashable, Any] = {}
            merged = []
            for members in classes.values():  # (a call's index is its position in the run)
                args = calls[members[0]].arguments
                if args is None:
                    args = {}                  # no recorded arguments: called without any
                key = json_key(args) if args.__class__ is dict else None
                if key is None:
                    self.odd.setdefault(name, []).append((args, members))
                elif key in keyed:             # equal arguments written differently
                    keyed[key] = [*keyed[key], *members]  # a new list: the run's are shared
                    merged.append(key)
                else:
                    keyed[key], values[key] = members, args
            for key in merged:
                keyed[key] = sorted(keyed[key])
            self.keyed[name], self.values[name] = keyed, values
            if subset:                         # a key alone until a second one holds it
                postings: dict[Hashable, Any] = {}
                for key in keyed:
                    for pair in key[1]:        # type: ignore[index]
                        held = postings.get(pair)
                        if held is None:
                            postings[pair] = key
                        elif held.__class__ is list:
                            held.append(key)
                        else:
                            postings[pair] = [held, key]
                self.postings[name] = postings

    def candidates(self, name: str, args: Mapping[str, Any], key: Hashable | None
                   ) -> Sequence[int]:
        """The positions of the calls of ``name`` that ``args`` (whose ``json_key`` is ``key``)
        matches, ascending. The list may be shared (with other entries asking for the same,
        with the run's classes): do not change it."""
        keyed = self.keyed.get(name, {})
        found: list[Sequence[int]]
        if key is None:                        # nothing to look up by: every class asked
            values = self.values.get(name, {})
            found = [p for k, p in keyed.items() if self.matches(args, values[k])]
        elif not self.subset:
            hit = keyed.get(key)
            found = [] if hit is None else [hit]
        elif not args:                         # no key to check: every call with arguments
            found = list(keyed.values())
        else:
            pairs: frozenset[Any] = key[1]     # type: ignore[index]
            postings = self.postings.get(name, {})
            rarest = min(pairs, key=lambda pair: _size(postings.get(pair))) if len(pairs) > 1 \
                else next(iter(pairs))
            holders: Any = postings.get(rarest)
            if holders is None:
                found = []
            elif holders.__class__ is not list:
                found = [keyed[holders]] if pairs <= holders[1] else []
            else:
                found = [keyed[k] for k in holders if pairs <= k[1]]
        odd = self.odd.get(name)
        if odd:
            found.extend(p for a, p in odd if self.matches(args, a))
        if not found:
            return _EMPTY
        if len(found) == 1:
            return found[0]
        return sorted(j for positions in found for j in positions)
