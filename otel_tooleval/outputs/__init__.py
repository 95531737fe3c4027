"""The output formats of ``otel-tooleval grade``: table, JSON, JUnit XML and HTML."""

from __future__ import annotations

from .html_report import HtmlWriter, render_html
from .json_doc import JsonWriter, render_json
from .junit import JunitWriter, render_junit
from .stream import ReportWriter, run_key
from .table import TableWriter, render_table

__all__ = ["HtmlWriter", "JsonWriter", "JunitWriter", "ReportWriter", "TableWriter",
           "render_html", "render_json", "render_junit", "render_table", "run_key"]
