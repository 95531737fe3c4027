"""The output formats of ``otel-tooleval grade``: table, JSON, JUnit XML and HTML."""

from __future__ import annotations

from .html_report import render_html
from .json_doc import render_json
from .junit import render_junit
from .table import render_table

__all__ = ["render_html", "render_json", "render_junit", "render_table"]
