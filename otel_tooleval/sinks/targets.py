"""``grade --to phoenix|langfuse``: the named sinks for a CI run, and what they delivered.

Each target's settings come from the config's ``emit.<target>`` section when it has one, else
from the backend's own environment variables alone (the section's defaults), so that
``grade --to phoenix`` annotates traces already in Phoenix with no config change.
"""

from __future__ import annotations

import time
import typing
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from .base import Sink
from .fanout import SinkSet

__all__ = ["DeliveryTargets"]


def _section_model(emit_model: type[BaseModel], name: str) -> type[BaseModel]:
    """The pydantic model of ``emit.<name>`` (its field is ``<Model> | None``)."""
    annotation = emit_model.model_fields[name].annotation
    for arg in typing.get_args(annotation) or (annotation,):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    raise TypeError(f"emit.{name} has no section model")


def build_targets(emit_config: Any, names: Sequence[str]) -> list[Sink]:
    """One sink per name: from ``emit.<name>`` or, without it, the environment. Raises
    ``ValueError`` naming the field when neither gives what the sink needs."""
    sinks: list[Sink] = []
    for name in dict.fromkeys(names):
        section: Any = getattr(emit_config, name, None)
        if section is None:
            try:
                section = _section_model(type(emit_config), name).model_validate({})
            except ValidationError as exc:
                first = exc.errors()[0]
                field = ".".join(str(p) for p in first["loc"])
                raise ValueError(f"--to {name}: emit.{name}.{field}: "
                                 f"{first['msg'].removeprefix('Value error, ')}") from None
        sinks.append(section.build_sink())
    return sinks


class DeliveryTargets(SinkSet):
    """The sinks of ``grade --to``; ``finish`` waits for them and tells what they did."""

    @classmethod
    def for_grade(cls, emit_config: Any, names: Sequence[str]) -> DeliveryTargets:
        return cls(build_targets(emit_config, names))

    def finish(self, timeout_s: float) -> tuple[bool, list[str]]:
        """Deliver what is queued within ``timeout_s``: (all delivered, one line per sink)."""
        ended = self.closing(time.monotonic() + timeout_s)()
        ok = ended
        lines = []
        for sink in self.sinks:
            counts = sink.stats()
            dropped = {k: n for k, n in counts.items() if k.startswith("dropped.") and n}
            ok = ok and not dropped
            text = ", ".join(f"{k} {n}" for k, n in sorted(dropped.items()))
            lines.append(f"{sink.name}: sent {counts.get('sent', 0)}"
                         + (f", {text}" if text else ""))
        return ok, lines
