"""The lines ``otel-tooleval serve`` writes to stderr: every one made safe for a terminal.

Agent names, session ids, span names and a next hop's answers reach serve's log lines; an
ESC[31m, an OSC 8 hyperlink or a bidirectional override among them would recolour the
terminal, plant a link or reorder what an operator reads. ``EscapingFormatter`` escapes
them in the final text of every record, whoever logged it (serve, uvicorn, the OTel SDK's
exporters), as the table and inspect outputs do (:func:`outputs.text.one_line`): a message
stays one line, a traceback keeps its line breaks.
"""

from __future__ import annotations

import logging

from ..outputs.text import one_line, readable

__all__ = ["EscapingFormatter"]


class EscapingFormatter(logging.Formatter):
    """A ``logging.Formatter`` whose output has no C0 or C1 control character (tabs and line
    breaks of tracebacks aside), no DEL and no bidirectional override or isolate: each is
    written as a visible ``\\xNN`` or ``\\uNNNN``."""

    def format(self, record: logging.LogRecord) -> str:
        record.message = record.getMessage()
        if self.usesTime():
            record.asctime = self.formatTime(record, self.datefmt)
        # The message is one line: a line break in it would let a value forge a line (a
        # trailing one, as uvicorn ends its exception message with, forges nothing).
        parts = [one_line(self.formatMessage(record).rstrip("\r\n"))]
        # Not record.exc_text: another handler's formatter may have cached it unescaped.
        if record.exc_info:
            parts.append(readable(self.formatException(record.exc_info)))
        elif record.exc_text:
            parts.append(readable(record.exc_text))
        if record.stack_info:
            parts.append(readable(self.formatStack(record.stack_info)))
        return "\n".join(parts)
