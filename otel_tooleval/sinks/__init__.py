"""Sinks: backends that take the verdicts through their own APIs (Phoenix annotations,
Langfuse scores), fed the same reports the log events are built from.

A sink never blocks and never raises into the caller: ``submit`` enqueues or counts a drop;
the HTTP sinks share one delivery engine (``sinks.delivery``).
"""

from .base import SINK_FIELDS, Sink, build_sinks
from .delivery import Delivery, DeliverySettings

__all__ = ["SINK_FIELDS", "Delivery", "DeliverySettings", "Sink", "build_sinks"]
