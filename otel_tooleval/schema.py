"""The JSON Schema of the whole config file (``otel-tooleval schema``), for editors.

Each grader family contributes the schema of its entries; ``name`` and ``agents``, which every
entry may carry, are added here. Definitions of different families are kept apart by prefixing
their names, so two families may each have a model called ``Match``.
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter

from .config import (
    EmitConfig,
    GradingConfig,
    GuardConfig,
    LimitsConfig,
    RunsConfig,
    SessionsConfig,
)
from .graders.registry import GraderFamily, families
from .mappings import ConventionEntry

__all__ = ["config_schema", "entry_schema"]

_SHARED = {
    "name": {"type": "string", "minLength": 1, "description": "unique name of this grader"},
    "agents": {"type": "array", "items": {"type": "string"},
               "description": "grade only runs of these agent names"},
}


def _prefixed(schema: dict[str, Any], prefix: str, defs: dict[str, Any]) -> dict[str, Any]:
    """Move ``schema``'s ``$defs`` into ``defs`` under ``prefix``, rewriting its references."""
    own = schema.pop("$defs", {})

    def rewrite(node: Any) -> Any:
        if isinstance(node, dict):
            out = {k: rewrite(v) for k, v in node.items()}
            ref = out.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                out["$ref"] = f"#/$defs/{prefix}{ref[len('#/$defs/'):]}"
            return out
        if isinstance(node, list):
            return [rewrite(v) for v in node]
        return node

    for name, sub in own.items():
        defs[prefix + name] = rewrite(sub)
    return rewrite(schema)  # type: ignore[no-any-return]


def entry_schema(family: GraderFamily, defs: dict[str, Any]) -> dict[str, Any] | None:
    """One family's entry schema with the shared keys, or None if it has no schema."""
    if family.schema is None:
        return None
    schema = _prefixed(family.schema(), f"{family.type}.", defs)
    props = schema.setdefault("properties", {})
    for key, sub in _SHARED.items():
        props.setdefault(key, sub)
    schema.setdefault("title", family.type)
    return schema


def case_schema(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``cases:`` section (docs/cases.md): each case's id, match, expect and graders."""
    text = {"type": "string", "minLength": 1}
    scalar = {"type": ["string", "number"]}
    match = {"type": "object", "minProperties": 1, "maxProperties": 1,
             "additionalProperties": False,
             "description": "how the case finds its run: exactly one way (default: the "
                            "root attribute tooleval.case.id equal to the case's id)",
             "properties": {
                 "attribute": {"anyOf": [scalar, {
                     "type": "object", "additionalProperties": False,
                     "properties": {"key": {**text, "default": "tooleval.case.id"},
                                    "value": scalar}}]},
                 "first_user_message": {**text, "description": "the run's first user "
                                        "message, exactly (after strip)"},
                 "first_user_message_regex": {**text, "description": "an RE2 pattern searched "
                                              "in the run's first user message"}}}
    return {"type": "array", "description": "eval cases: each run matched to its case is "
                                             "graded by the case's expectations",
            "items": {"type": "object", "required": ["id"], "additionalProperties": False,
                      "properties": {
                          "id": {**text, "description": "unique id of the case"},
                          "description": {"type": "string"},
                          "match": match,
                          "expect": {"type": "object", "description": "per configured grader "
                                     "name, the keys this case sets on it (mappings merged, "
                                     "anything else replaced)",
                                     "additionalProperties": {"type": "object"}},
                          "graders": {"type": "array", "items": {"anyOf": entries},
                                      "description": "graders of this case only"}}}}


def config_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a complete config file."""
    defs: dict[str, Any] = {}
    entries = [s for f in families() if (s := entry_schema(f, defs)) is not None]
    sections = {}
    for key, model in (("runs", RunsConfig), ("limits", LimitsConfig), ("emit", EmitConfig),
                       ("grading", GradingConfig), ("guard", GuardConfig)):
        sections[key] = _prefixed(model.model_json_schema(), f"{key}.", defs)
    sections["conventions"] = _prefixed(
        TypeAdapter(list[ConventionEntry]).json_schema(), "conventions.", defs)
    sessions = _prefixed(SessionsConfig.model_json_schema(), "sessions.", defs)
    sessions["properties"]["graders"] = {
        "type": "array",
        "description": "graders of whole sessions: entries of any family as under graders:, "
                       "seeing the session's calls in run order; with turns: [...] (one "
                       "entry's keys per run) or, for tool_trajectory_avg_score, "
                       "expected_invocations: [[...], ...] (docs/sessions.md)",
        "items": {"anyOf": [*entries, {"type": "object", "anyOf": [
            {"required": ["turns"]}, {"required": ["expected_invocations"]}]}]}}
    sections["sessions"] = sessions
    sections["cases"] = case_schema(entries)
    sections["conventions"]["description"] = (
        "your own mappings of spans no built-in convention reads: which are runs, model "
        "calls and tool calls, and where a call's name, arguments and result are")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "otel-tooleval configuration",
        "type": "object",
        "additionalProperties": False,
        "anyOf": [{"required": ["graders"]}, {"required": ["guard"]},
                  {"required": ["sessions"]}],
        "properties": {
            "graders": {"type": "array", "items": {"anyOf": entries}, "minItems": 1,
                        "description": "graders, each in the shape of its seed tool "
                                       "(at least one)"},
            **sections,
        },
        "$defs": defs,
    }
