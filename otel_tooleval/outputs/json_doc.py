"""``grade --format json``: the one document of ARCHITECTURE.md."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..model import RunReport
from .calls import call_to_dict

__all__ = ["json_text", "render_json"]

_SURROGATE = re.compile("[\ud800-\udfff]")


def render_json(reports: Sequence[RunReport], aggregate: Mapping[str, Any], *,
                include_calls: bool = False) -> str:
    """``{"runs": [RunReport.to_dict(), ...], "aggregate": aggregate}`` and a newline.

    With ``include_calls`` each run also has ``calls``: every tool call as
    :func:`calls.call_to_dict` gives it (``grade --include-calls``).

    One run per line, so line tools (``grep``, ``head``, diffs) work on the document; that
    layout also keeps json's C encoder (indentation would take the pure-Python one, four
    times slower). Keys keep the order of ``to_dict`` and of ``aggregate``. Text is not
    ASCII-escaped, except lone surrogates (JSON input may hold them; UTF-8 cannot), which are
    written as JSON escapes so the output always encodes and parses back to the same strings.
    A non-finite number, which JSON cannot express, is written as null.
    """
    runs = ",\n".join(_dumps(_run_dict(report, include_calls)) for report in reports)
    text = (f'{{"runs": [\n{runs}\n],\n' if runs else '{"runs": [],\n') + \
        f'"aggregate": {_dumps(aggregate)}}}\n'
    return _escape_surrogates(text)


def json_text(value: Any) -> str:
    """``value`` as one line of JSON, written as :func:`render_json` writes its parts."""
    return _escape_surrogates(_dumps(value))


def _run_dict(report: RunReport, include_calls: bool) -> dict[str, Any]:
    doc = report.to_dict()
    if include_calls:
        doc["calls"] = [call_to_dict(call) for call in report.run.calls]
    return doc


def _escape_surrogates(text: str) -> str:
    if _SURROGATE.search(text):
        text = _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return text


def _dumps(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, default=str)
    except ValueError:      # NaN or infinity somewhere: rare, so only then walk the value
        return json.dumps(_finite(value), ensure_ascii=False, default=str)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
