"""YAML parsed with bounds, for every file a user hands in (configs, case files): the nesting
depth and the values a document holds with its aliases expanded are counted as it parses,
before anything is built, so an alias bomb or a document nested 100,000 deep is refused in a
fraction of a second instead of hanging or taking gigabytes."""

from __future__ import annotations

from typing import Any

import yaml

__all__ = ["MAX_CONFIG_DEPTH", "MAX_CONFIG_NODES", "BoundedLoader", "Unbounded"]

MAX_CONFIG_DEPTH = 100
"""The deepest nesting of mappings and lists a config may have (YAML and JSON); deeper ones
are refused before they are built, so a document nested 100,000 deep is a config error, not
a ``RecursionError``."""

MAX_CONFIG_NODES = 1_000_000
"""The most values (scalars, mappings, lists, keys) a YAML config may hold once its aliases
are expanded: anchors and aliases for reuse are fine, an alias bomb (each level repeating
the last one, a billion values from a few lines) is refused before it is built."""


class Unbounded(Exception):
    """A YAML document past ``MAX_CONFIG_DEPTH`` or ``MAX_CONFIG_NODES``."""

    def __init__(self, problem: str, mark: Any) -> None:
        super().__init__(problem)
        self.problem = problem
        self.problem_mark = mark


class BoundedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that counts as it parses, before anything is built: the nesting
    depth, and the values the document holds with every alias expanded (an alias counts as
    the values of the node it names, known when that node ended). Linear in the text; the
    composer's recursion stays within ``MAX_CONFIG_DEPTH`` levels."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._open: list[list[Any]] = []   # [anchor, values so far] of each open collection
        self._sizes: dict[str, int] = {}   # anchor -> values of its node, once ended

    def get_event(self) -> Any:
        event = super().get_event()  # type: ignore[no-untyped-call]
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            if len(self._open) >= MAX_CONFIG_DEPTH:
                raise Unbounded(f"nested deeper than {MAX_CONFIG_DEPTH} levels",
                                 event.start_mark)
            self._open.append([event.anchor, 1])
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            anchor, size = self._open.pop()
            if anchor is not None:
                self._sizes[anchor] = size
            self._add(size, event)
        elif isinstance(event, yaml.AliasEvent):
            if any(anchor == event.anchor for anchor, _ in self._open):
                raise Unbounded(f"alias *{event.anchor} is inside the node it names (a "
                                 "cycle)", event.start_mark)
            self._add(self._sizes.get(str(event.anchor), 1), event)   # unknown: composer says
        elif isinstance(event, yaml.ScalarEvent):
            if event.anchor is not None:
                self._sizes[event.anchor] = 1
            self._add(1, event)
        return event

    def _add(self, size: int, event: Any) -> None:
        if self._open:
            self._open[-1][1] += size
            size = self._open[-1][1]
        if size > MAX_CONFIG_NODES:
            raise Unbounded(f"holds more than {MAX_CONFIG_NODES:,} values once its aliases "
                             "are expanded (an alias bomb?)", event.start_mark)
