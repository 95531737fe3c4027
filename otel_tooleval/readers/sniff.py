"""What a file that is not a trace file looks like, told from its first bytes.

``grade`` and ``inspect`` read OTLP/JSON, OTLP protobuf and Jaeger JSON. A newcomer's first
tries are often something else: the config passed where the traces go (the arguments
swapped), the ``ConsoleSpanExporter``'s output copied from a terminal, a YAML, HTML or Python
file. Read as JSON lines, each gives one ``invalid JSON`` problem per line; ``not_traces``
names the kind of file instead, in one line that says what to do.
"""

from __future__ import annotations

import json
import re

__all__ = ["READS", "not_traces", "trace_kind"]

#: What the readers take, for messages.
READS = "OTLP/JSON (JSON lines or one document), OTLP protobuf or Jaeger JSON"

_FILE_EXPORTER = ("record OTLP/JSON instead: OTLPJsonFileExporter('traces.jsonl') from "
                  "otel_tooleval.file_exporter (docs/file-exporter.md), or the collector's "
                  "file exporter")
# ConsoleSpanExporter writes ReadableSpan.to_json(): pretty-printed objects, one after another,
# with a "context" holding "trace_id": "0x..." (OTLP/JSON has "traceId" in hex, no 0x).
_CONSOLE = re.compile(r'"context":\s*\{\s*"trace_id":\s*"0x[0-9a-f]{32}"')
_CONFIG_KEY = re.compile(r"^(graders|guard|sessions)\s*:", re.MULTILINE)
_YAML_KEY = re.compile(r"^[A-Za-z_][\w.-]*\s*:(\s|$)")
_PYTHON = re.compile(r"^(\"\"\"|'''|import [\w.]+|from [\w.]+ import |def \w+\(|class \w+[(:]|"
                     r"async def \w+\(|#!.*python)")


def _text(head: bytes) -> str:
    return head[:16 * 1024].decode("utf-8", errors="replace").lstrip("\ufeff \t\r\n")


def trace_kind(head: bytes) -> str | None:
    """The kind of trace file ``head`` (a file's first bytes) starts: ``OTLP/JSON``,
    ``Jaeger JSON`` or ``ConsoleSpanExporter output``; None for anything else."""
    text = _text(head)
    if _CONSOLE.search(text):
        return "ConsoleSpanExporter output"
    if not text.startswith(("{", "[")):
        return None
    first = text.split("\n", 1)[0]
    try:
        doc = json.loads(first)
    except (ValueError, RecursionError):   # cut off at the head's end, or nested too deep
        doc = None
    if isinstance(doc, list) and doc:
        doc = doc[0]
    if isinstance(doc, dict):
        if "resourceSpans" in doc:
            return "OTLP/JSON"
        if isinstance(doc.get("data"), list):
            return "Jaeger JSON"
        return None
    # A pretty-printed document: its first keys tell.
    if re.match(r'[{\[]\s*"resourceSpans"', text):
        return "OTLP/JSON"
    if re.match(r'\{\s*"data"\s*:\s*\[\s*\{\s*"traceID"', text):
        return "Jaeger JSON"
    return None


def not_traces(head: bytes, name: str) -> str | None:
    """One line saying what the file ``name`` looks like and what to do, when its first bytes
    ``head`` show a kind of file that is not traces; None when it may be traces (a trace file
    with a bad first line is the readers' to report, line by line)."""
    text = _text(head)
    if not text:
        return None
    if _CONSOLE.search(text):
        return (f"{name}: looks like ConsoleSpanExporter output (spans printed one after "
                f"another), which otel-tooleval does not read; {_FILE_EXPORTER}")
    if text.startswith(("{", "[")):
        if re.match(r'\{\s*"(graders|guard)"\s*:', text):
            return _swapped(name, "an otel-tooleval config in JSON")
        return None
    lower = text[:200].lower()
    if lower.startswith(("<!doctype html", "<html")) or "<html" in lower:
        return (f"{name}: looks like an HTML page (a saved report?), not traces; give the "
                f"trace file, {READS}")
    if lower.startswith(("<?xml", "<testsuite")):
        return (f"{name}: looks like XML (a JUnit report?), not traces; give the trace file, "
                f"{READS}")
    lines = [line for line in text.split("\n")[:50]
             if line.strip() and not line.lstrip().startswith("#") or line.startswith("#!")]
    if lines and _PYTHON.match(lines[0]):
        return (f"{name}: looks like Python source, not traces; run it with "
                f"OTLPJsonFileExporter('traces.jsonl') (otel_tooleval.file_exporter) on its "
                f"tracer provider, then grade traces.jsonl")
    if _CONFIG_KEY.search(text):
        return _swapped(name, "an otel-tooleval config (graders:)")
    if lines and (_YAML_KEY.match(lines[0]) or lines[0].startswith(("---", "- "))):
        return f"{name}: looks like YAML, not traces; otel-tooleval reads {READS}"
    return None


def _swapped(name: str, what: str) -> str:
    return (f"{name}: looks like {what}, not traces: are the arguments swapped? "
            f"otel-tooleval grade TRACES.jsonl --config {name}")
