"""``ConfigError``: a configuration (or a case set) that cannot be used, every problem listed.

Kept apart from ``config`` so that the modules ``config`` imports (``cases``) can raise it too;
``otel_tooleval.config.ConfigError`` is this class.
"""

from __future__ import annotations

from .graders.registry import Problem

__all__ = ["ConfigError"]


class ConfigError(ValueError):
    """A configuration that cannot be used; ``problems`` lists every problem found."""

    def __init__(self, problems: list[Problem], source: str | None = None, *,
                 what: str = "otel-tooleval config") -> None:
        self.problems = problems
        self.source = source
        head = f"invalid {what}{f' ({source})' if source else ''}"
        lines = [p.render() for p in problems]
        super().__init__(head + ":\n  " + "\n  ".join(lines) if len(lines) > 1
                         else f"{head}: {lines[0] if lines else 'unknown problem'}")
