"""A run's session key: the first present of the configured attributes on the run's spans."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .model import SessionKey

__all__ = ["DEFAULT_KEYS", "key_in", "session_key"]

#: The OTel GenAI conversation id, then OpenInference's session id.
DEFAULT_KEYS = ("gen_ai.conversation.id", "session.id")


def key_in(attributes: Mapping[str, Any], keys: Sequence[str]) -> SessionKey | None:
    """The first of ``keys`` that ``attributes`` holds as a non-empty value."""
    for key in keys:
        value = attributes.get(key)
        if value is None or value == "" or isinstance(value, bool):
            continue
        if isinstance(value, (str, int, float)):
            return SessionKey(str(value), key)
    return None


def session_key(root: Mapping[str, Any], spans: Iterable[Mapping[str, Any]],
                keys: Sequence[str]) -> SessionKey | None:
    """The run's session key: read from its root first, else from the first of its other
    spans (``spans``, their attributes) that carries one of ``keys``."""
    found = key_in(root, keys)
    if found is not None:
        return found
    for attributes in spans:
        found = key_in(attributes, keys)
        if found is not None:
            return found
    return None
