"""Sessions: runs of one conversation graded together (docs/sessions.md)."""

from __future__ import annotations

from .keys import DEFAULT_KEYS, session_key
from .model import Session, SessionKey, SessionReport, SessionRun
from .settings import SessionsConfig
from .turns import SessionGrader, TurnsGrader

__all__ = ["DEFAULT_KEYS", "Session", "SessionGrader", "SessionKey", "SessionReport",
           "SessionRun", "SessionsConfig", "TurnsGrader", "session_key"]
