"""Eval sets of other tools, read as cases (docs/cases.md, "Importing").

Five shapes are read as their tools write them: a Google ADK EvalSet (``*.evalset.json`` /
``*.test.json``), agentv's eval YAML (``tests:``, or the older ``evalcases:``), a DeepEval
dataset of goldens (what ``EvaluationDataset.save_as("json")`` writes), a Ragas dataset
(``EvaluationDataset.to_jsonl``) and a UiPath evaluation set. Each item becomes one case dict
in the shape of the ``cases:`` section: its ``id``, ``match`` by the item's first user message
(or by an attribute holding the case id, with ``match_attribute``) and, in ``graders``, an entry
of the item's own family carrying its expectations (the user's config may have none of that
family). Nothing here validates the entries: ``cases.py`` does that as for any case, so an
imported expectation is held to the same rules, and errors, as one written by hand.

The conversion is pure: plain dicts in, plain dicts out. A file that is not one of the shapes,
or one whose items lack what a case needs, raises ``CaseImportError`` naming the file, the
format and the field.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from .local_files import FileRefused, read_local_file

__all__ = ["FORMATS", "MAX_CASES_BYTES", "CaseImportError", "convert", "detect_format",
           "import_cases", "read_case_file"]

#: A case file is read whole; 10,000 cases with their expectations fit well within this.
MAX_CASES_BYTES = 64 * 1024 * 1024
#: What ``detect_format`` answers; ``native`` is the ``cases:`` shape itself (not converted).
FORMATS = ("native", "adk", "agentv", "deepeval", "ragas", "uipath")
#: The attribute an imported case is matched by when ``match_attribute`` is given as True.
CASE_ID_ATTRIBUTE = "tooleval.case.id"

Case = dict[str, Any]


class CaseImportError(ValueError):
    """A case file that cannot be read as cases: ``source`` (the file), ``fmt`` (the format it
    was read as, or None before one was known), ``field`` (where, e.g.
    ``eval_cases[2].conversation``; empty for the whole file) and ``problem`` (in words)."""

    def __init__(self, source: str, problem: str, *, fmt: str | None = None,
                 field: str = "") -> None:
        self.source = source
        self.fmt = fmt
        self.field = field
        self.problem = problem
        where = f" as {_TITLES.get(fmt, fmt)}" if fmt else ""
        at = f"{field}: " if field else ""
        super().__init__(f"cannot read cases from {source}{where}: {at}{problem}")


_TITLES = {"native": "cases", "adk": "an ADK eval set", "agentv": "an agentv eval file",
           "deepeval": "a DeepEval dataset", "ragas": "a Ragas dataset",
           "uipath": "a UiPath evaluation set"}


# ---------------------------------------------------------------------------------------------
# Reading and recognising a file


class _NoAliasLoader(yaml.SafeLoader):
    """Safe YAML without anchors or aliases: an alias can make a few lines stand for billions
    of values once anything walks them (the cases are validated, copied and hashed)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            mark = event.start_mark
            raise yaml.YAMLError(f"line {mark.line + 1}: an alias (*{event.anchor}); write the "
                                 "values out in an imported case file")
        return super().compose_node(parent, index)


def read_case_file(path: str | os.PathLike[str]) -> Any:
    """The parsed content of a case file: JSON (``.json``), JSON Lines (``.jsonl``: a list, one
    item a line, blank lines skipped) or YAML (anything else).

    Raises:
        CaseImportError: the file cannot be read (missing, a folder, over ``MAX_CASES_BYTES``),
            is not UTF-8, or does not parse (the line is named).
    """
    source = str(path)
    try:
        data = read_local_file(path, max_bytes=MAX_CASES_BYTES).data
    except FileRefused as exc:
        raise CaseImportError(source, exc.reason) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CaseImportError(source, f"not UTF-8 text (byte {exc.start})") from None
    name = source.lower()
    try:
        if name.endswith(".jsonl"):
            items = []
            for number, line in enumerate(text.splitlines(), 1):
                if line.strip():
                    try:
                        items.append(json.loads(line))
                    except ValueError as exc:
                        raise CaseImportError(source, f"line {number}: not valid JSON: "
                                                      f"{exc}") from None
            return items
        if name.endswith(".json"):
            return json.loads(text)
        return yaml.load(text, Loader=_NoAliasLoader)  # a SafeLoader
    except RecursionError:
        raise CaseImportError(source, "nested too deep") from None
    except ValueError as exc:
        raise CaseImportError(source, f"not valid JSON: {exc}") from None
    except yaml.YAMLError as exc:
        raise CaseImportError(source, f"not valid YAML: {exc}") from None


def _keys(data: Any) -> set[str]:
    return set(data) if isinstance(data, Mapping) else set()


def detect_format(path: str | os.PathLike[str], data: Any) -> str:
    """Which of ``FORMATS`` the parsed ``data`` of the file at ``path`` is in.

    The file name decides first (``*.evalset.json`` and ``*.test.json`` are ADK's), then the
    keys its tool writes: ``eval_cases`` (ADK), ``tests`` / ``evalcases`` (agentv),
    ``evaluations`` (UiPath), ``goldens`` or items with ``expected_tools`` (DeepEval),
    items with ``user_input`` (Ragas), ``cases`` or items with ``match`` (native).

    Raises:
        CaseImportError: none of them.
    """
    name = Path(path).name.lower()
    keys = _keys(data)
    if name.endswith((".evalset.json", ".test.json")) or keys & {"eval_cases", "evalCases"}:
        return "adk"
    if "cases" in keys:
        return "native"
    if keys & {"tests", "evalcases"}:
        return "agentv"
    if "evaluations" in keys:
        return "uipath"
    if "goldens" in keys:
        return "deepeval"
    if isinstance(data, list) and data and all(isinstance(item, Mapping) for item in data):
        first = _keys(data[0])
        if "match" in first:
            return "native"
        if "user_input" in first:
            return "ragas"
        if "input" in first:
            return "deepeval"
    raise CaseImportError(str(path), (
        "not a case file this reads: expected cases (a list of {id, match, ...} or "
        "{cases: [...]}), an ADK eval set (eval_cases), an agentv eval file (tests), a DeepEval "
        "dataset (goldens with input), a Ragas dataset (JSON Lines with user_input) or a "
        "UiPath evaluation set (evaluations)"))


def import_cases(path: str | os.PathLike[str], *,
                 match_attribute: str | bool | None = None) -> list[Case]:
    """The cases of the file at ``path``, in any of ``FORMATS`` (native cases are returned as
    the file holds them, for ``cases.py`` to validate).

    Args:
        match_attribute: match each imported case by an attribute of the run holding the
            case's id instead of by its first user message: the attribute key, or True for
            ``tooleval.case.id``.

    Raises:
        CaseImportError: the file cannot be read, is in none of the formats, or an item lacks
            what a case needs (named by its field).
    """
    data = read_case_file(path)
    fmt = detect_format(path, data)
    return convert(fmt, data, path, match_attribute=match_attribute)


def convert(fmt: str, data: Any, path: str | os.PathLike[str], *,
            match_attribute: str | bool | None = None) -> list[Case]:
    """``data`` (parsed from ``path``) read as ``fmt``: see ``import_cases``."""
    source = str(path)
    if fmt == "native":
        items = data.get("cases") if isinstance(data, Mapping) else data
        if not isinstance(items, list):
            raise CaseImportError(source, "must be a list of cases", fmt=fmt, field="cases")
        return list(items)
    reader = _READERS.get(fmt)
    if reader is None:
        raise CaseImportError(source, f"unknown format {fmt!r}; one of {', '.join(FORMATS)}")
    key = CASE_ID_ATTRIBUTE if match_attribute is True else match_attribute or None
    return reader(_Reading(source, fmt, Path(path), key), data)


# ---------------------------------------------------------------------------------------------
# Shared pieces


class _Reading:
    """One file being converted: where errors point, and how cases are matched."""

    def __init__(self, source: str, fmt: str, path: Path, attribute: str | None) -> None:
        self.source = source
        self.fmt = fmt
        self.path = path
        self.attribute = attribute

    def error(self, field: str, problem: str) -> CaseImportError:
        return CaseImportError(self.source, problem, fmt=self.fmt, field=field)

    def mapping(self, value: Any, field: str) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.error(field, f"must be an object, got {_kind(value)}")
        return value

    def items(self, value: Any, field: str) -> list[Any]:
        if not isinstance(value, list):
            raise self.error(field, f"must be a list, got {_kind(value)}")
        return value

    def text(self, value: Any, field: str) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.error(field, "must be non-empty text" if isinstance(value, str)
                             else f"must be text, got {_kind(value)}")
        return value

    def case(self, case_id: str, message: str | None, graders: list[dict[str, Any]],
             field: str) -> Case:
        """A case dict, matched by the attribute when asked, else by ``message``."""
        if self.attribute is not None:
            match: dict[str, Any] = {"attribute": {"key": self.attribute, "value": case_id}}
        elif message is None:
            raise self.error(field, "no user message to match a run by; import with "
                                    "match_attribute (the run's attribute holding the case id)")
        else:
            match = {"first_user_message": message.strip()}
        return {"id": case_id, "match": match, "graders": graders}

    def unique(self, cases: list[Case], fields: list[str]) -> list[Case]:
        seen: dict[str, str] = {}
        for case, field in zip(cases, fields):
            if case["id"] in seen:
                raise self.error(field, f"id {case['id']!r} is also the id of "
                                        f"{seen[case['id']]}; ids must be unique")
            seen[case["id"]] = field
        return cases


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "a list", str: "text", bool: "true/false",
            int: "a number", float: "a number"}.get(type(value), type(value).__name__)


def _get(data: Mapping[str, Any], *names: str) -> Any:
    """The first of ``names`` present (a snake_case key and its camelCase alias)."""
    for name in names:
        if name in data:
            return data[name]
    return None


# ---------------------------------------------------------------------------------------------
# Google ADK: EvalSet JSON


def _adk_text(reading: _Reading, content: Any, field: str) -> str:
    """The text of a ``genai`` ``Content``: its text parts, joined by newlines."""
    parts = reading.items(_get(reading.mapping(content, field), "parts"), f"{field}.parts")
    texts = [part["text"] for part in parts
             if isinstance(part, Mapping) and isinstance(part.get("text"), str)]
    if not texts:
        raise reading.error(f"{field}.parts", "holds no text part: the user's message is "
                                              "what a run is matched by")
    return "\n".join(texts)


def _adk_tool_uses(reading: _Reading, data: Any, field: str) -> list[dict[str, Any]]:
    """``intermediate_data``'s ``tool_uses``, or the function calls of its invocation events."""
    if data is None:
        return []
    data = reading.mapping(data, field)
    uses: list[Any]
    events = _get(data, "invocation_events", "invocationEvents")
    if events is not None:
        uses = []
        for e, event in enumerate(reading.items(events, f"{field}.invocation_events")):
            content = reading.mapping(event, f"{field}.invocation_events[{e}]").get("content")
            parts = content.get("parts") if isinstance(content, Mapping) else None
            for part in parts if isinstance(parts, list) else ():
                call = _get(part, "function_call", "functionCall") if isinstance(
                    part, Mapping) else None
                if call is not None:
                    uses.append(call)
    else:
        uses = reading.items(_get(data, "tool_uses", "toolUses") or [], f"{field}.tool_uses")
    out = []
    for u, use in enumerate(uses):
        at = f"{field}.tool_uses[{u}]"
        use = reading.mapping(use, at)
        entry: dict[str, Any] = {"name": reading.text(use.get("name"), f"{at}.name")}
        if use.get("args") is not None:
            entry["args"] = use["args"]
        out.append(entry)
    return out


def _adk_criteria(reading: _Reading) -> Any:
    """``test_config.json`` beside the eval set (as ADK's AgentEvaluator reads it): this
    family's criterion only; None when there is none."""
    config = reading.path.parent / "test_config.json"
    if not config.is_file():
        return None
    try:
        criteria = read_case_file(config).get("criteria") or {}
    except (CaseImportError, AttributeError):
        raise reading.error("test_config.json", f"{config} is not an ADK test config "
                                                "(a JSON object with criteria)") from None
    if not isinstance(criteria, Mapping) or "tool_trajectory_avg_score" not in criteria:
        return None
    return {"tool_trajectory_avg_score": criteria["tool_trajectory_avg_score"]}


def _adk(reading: _Reading, data: Any) -> list[Case]:
    if isinstance(data, list):
        raise reading.error("", "this is ADK's older test-file format (a list of queries); "
                                "convert it with AgentEvaluator.migrate_eval_data_to_new_schema")
    data = reading.mapping(data, "")
    criteria = _adk_criteria(reading)
    cases: list[Case] = []
    fields: list[str] = []
    for c, item in enumerate(reading.items(_get(data, "eval_cases", "evalCases"), "eval_cases")):
        at = f"eval_cases[{c}]"
        item = reading.mapping(item, at)
        eval_id = reading.text(_get(item, "eval_id", "evalId"), f"{at}.eval_id")
        conversation = item.get("conversation")
        if conversation is None:
            raise reading.error(f"{at}.conversation", (
                "missing: a case needs the fixed conversation to match a run by its user "
                "message (a conversation_scenario, played by a simulated user, has none)"))
        invocations = reading.items(conversation, f"{at}.conversation")
        if not invocations:
            raise reading.error(f"{at}.conversation", "is empty")
        for i, invocation in enumerate(invocations):
            inv_at = f"{at}.conversation[{i}]"
            invocation = reading.mapping(invocation, inv_at)
            message = _adk_text(reading, _get(invocation, "user_content", "userContent"),
                                f"{inv_at}.user_content")
            grader: dict[str, Any] = {
                "name": "tool_trajectory_avg_score", "type": "tool_trajectory_avg_score",
                "expected_tool_use": _adk_tool_uses(
                    reading, _get(invocation, "intermediate_data", "intermediateData"),
                    f"{inv_at}.intermediate_data")}
            if criteria is not None:
                grader["criteria"] = criteria
            # Each invocation is one run of the agent; several make one case each.
            case_id = eval_id if len(invocations) == 1 else f"{eval_id}#{i + 1}"
            cases.append(reading.case(case_id, message, [grader], inv_at))
            fields.append(inv_at)
    return reading.unique(cases, fields)


# ---------------------------------------------------------------------------------------------
# agentv: eval YAML


_AGENTV_TRAJECTORY = ("tool_trajectory", "tool-trajectory")
#: agentv's keys that weigh an evaluator in its mean score; nothing is averaged here.
_AGENTV_DROPPED = ("weight",)


def _agentv_evaluators(reading: _Reading, holder: Mapping[str, Any], field: str
                       ) -> list[tuple[dict[str, Any], str]]:
    """The ``tool_trajectory`` entries under ``assert``, ``evaluators`` or
    ``execution.evaluators`` of ``holder`` (other evaluator types are not tool-call graders)."""
    found: list[tuple[Any, str]] = []
    for key in ("assert", "evaluators"):
        if holder.get(key) is not None:
            found += [(e, f"{field}{key}[{n}]")
                      for n, e in enumerate(reading.items(holder[key], f"{field}{key}"))]
    execution = holder.get("execution")
    if isinstance(execution, Mapping):
        for key in ("assert", "evaluators"):
            if execution.get(key) is not None:
                found += [(e, f"{field}execution.{key}[{n}]") for n, e in enumerate(
                    reading.items(execution[key], f"{field}execution.{key}"))]
    out = []
    for entry, at in found:
        entry = reading.mapping(entry, at)
        if entry.get("type") in _AGENTV_TRAJECTORY:
            out.append(({k: v for k, v in entry.items() if k not in _AGENTV_DROPPED}, at))
    return out


def _agentv_message(reading: _Reading, test: Mapping[str, Any], field: str) -> str | None:
    """The first user message of a test's ``input`` (text, or messages) / ``input_messages``."""
    raw = test.get("input_messages", test.get("input"))
    if isinstance(raw, str):
        return raw
    if raw is None:
        return None
    for m, message in enumerate(reading.items(raw, f"{field}.input")):
        message = reading.mapping(message, f"{field}.input[{m}]")
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):   # content blocks: {type: text, value: ...}
            texts = [b.get("value", b.get("text")) for b in content if isinstance(b, Mapping)
                     and b.get("type", "text") == "text"]
            texts = [t for t in texts if isinstance(t, str)]
            if texts:
                return "\n".join(texts)
        raise reading.error(f"{field}.input[{m}].content", "holds no text to match a run by")
    return None


def _agentv(reading: _Reading, data: Any) -> list[Case]:
    data = reading.mapping(data, "")
    key = "tests" if "tests" in data else "evalcases"
    shared = _agentv_evaluators(reading, data, "")
    cases: list[Case] = []
    fields: list[str] = []
    for t, test in enumerate(reading.items(data.get(key), key)):
        at = f"{key}[{t}]"
        test = reading.mapping(test, at)
        graders: list[dict[str, Any]] = []
        names: set[str] = set()
        for entry, _ in shared + _agentv_evaluators(reading, test, f"{at}."):
            entry = dict(entry)
            name = str(entry.get("name") or "tool_trajectory")
            base, n = name, 1
            while name in names:   # agentv leaves names optional; ours are unique per case
                n += 1
                name = f"{base}-{n}"
            names.add(name)
            entry["name"] = name
            graders.append(entry)
        case_id = reading.text(test.get("id"), f"{at}.id")
        cases.append(reading.case(case_id, _agentv_message(reading, test, at), graders, at))
        fields.append(at)
    return reading.unique(cases, fields)


# ---------------------------------------------------------------------------------------------
# DeepEval: goldens


def _deepeval_tool(reading: _Reading, tool: Any, field: str) -> dict[str, Any]:
    """A ``ToolCall`` as DeepEval serialises it (``None`` fields left out); a bare name as
    older datasets write it."""
    if isinstance(tool, str):
        return {"name": reading.text(tool, field)}
    tool = reading.mapping(tool, field)
    renamed = {"inputParameters": "input_parameters"}
    out = {renamed.get(k, k): v for k, v in tool.items() if v is not None}
    reading.text(out.get("name"), f"{field}.name")
    return out


def _deepeval(reading: _Reading, data: Any) -> list[Case]:
    goldens = data.get("goldens") if isinstance(data, Mapping) else data
    field = "goldens" if isinstance(data, Mapping) else ""
    stem = reading.path.name.split(".")[0]
    cases: list[Case] = []
    fields: list[str] = []
    for g, golden in enumerate(reading.items(goldens, field or "the file")):
        at = f"{field}[{g}]"
        golden = reading.mapping(golden, at)
        message = reading.text(golden.get("input"), f"{at}.input")
        tools = _get(golden, "expected_tools", "expectedTools")
        graders = []
        if tools is not None:
            expected = [_deepeval_tool(reading, tool, f"{at}.expected_tools[{n}]")
                        for n, tool in enumerate(reading.items(tools, f"{at}.expected_tools"))]
            graders.append({"name": "tool_correctness", "type": "tool_correctness",
                            "expected_tools": expected})
        name = golden.get("name")
        case_id = name if isinstance(name, str) and name.strip() else f"{stem}-{g + 1}"
        cases.append(reading.case(case_id, message, graders, at))
        fields.append(at)
    return reading.unique(cases, fields)


# ---------------------------------------------------------------------------------------------
# Ragas: samples, one a line


def _ragas_message(reading: _Reading, user_input: Any, field: str) -> str:
    """A single-turn sample's ``user_input`` text, or a multi-turn one's first human message."""
    if isinstance(user_input, str):
        return reading.text(user_input, field)
    for m, message in enumerate(reading.items(user_input, field)):
        message = reading.mapping(message, f"{field}[{m}]")
        if message.get("type") == "human":
            return reading.text(message.get("content"), f"{field}[{m}].content")
    raise reading.error(field, "holds no human message to match a run by")


def _ragas(reading: _Reading, data: Any) -> list[Case]:
    stem = reading.path.name.split(".")[0]
    cases: list[Case] = []
    fields: list[str] = []
    for n, sample in enumerate(reading.items(data, "the file"), 1):
        at = f"line {n}"
        sample = reading.mapping(sample, at)
        message = _ragas_message(reading, sample.get("user_input"), f"{at}: user_input")
        graders = []
        calls = sample.get("reference_tool_calls")
        if calls is not None:
            reference = []
            for c, call in enumerate(reading.items(calls, f"{at}: reference_tool_calls")):
                call = reading.mapping(call, f"{at}: reference_tool_calls[{c}]")
                reading.text(call.get("name"), f"{at}: reference_tool_calls[{c}].name")
                reference.append({k: v for k, v in call.items() if v is not None})
            graders.append({"name": "tool_call_accuracy", "type": "tool_call_accuracy",
                            "reference_tool_calls": reference})
        cases.append(reading.case(f"{stem}-{n}", message, graders, at))
        fields.append(at)
    return reading.unique(cases, fields)


# ---------------------------------------------------------------------------------------------
# UiPath: evaluation set


#: A criteria object's key (the SDK's field, or its camelCase alias) -> our family's type.
_UIPATH_CRITERIA = {"tool_calls_order": "tool-call-order", "toolCallsOrder": "tool-call-order",
                    "tool_calls_count": "tool-call-count", "toolCallsCount": "tool-call-count",
                    "tool_calls": "tool-call-args", "toolCalls": "tool-call-args",
                    "tool_outputs": "tool-call-output", "toolOutputs": "tool-call-output"}
_SNAKE = {"toolCallsOrder": "tool_calls_order", "toolCallsCount": "tool_calls_count",
          "toolCalls": "tool_calls", "toolOutputs": "tool_outputs"}


def _uipath_message(inputs: Any) -> str | None:
    """The agent's input when it is one text (``{"query": "..."}``); else None."""
    if isinstance(inputs, str):
        return inputs
    if isinstance(inputs, Mapping) and len(inputs) == 1:
        (value,) = inputs.values()
        if isinstance(value, str):
            return value
    return None


def _uipath(reading: _Reading, data: Any) -> list[Case]:
    data = reading.mapping(data, "")
    cases: list[Case] = []
    fields: list[str] = []
    for e, item in enumerate(reading.items(data.get("evaluations"), "evaluations")):
        at = f"evaluations[{e}]"
        item = reading.mapping(item, at)
        case_id = reading.text(item.get("id"), f"{at}.id")
        graders = []
        criterias = _get(item, "evaluationCriterias", "evaluation_criterias") or {}
        for evaluator, criteria in reading.mapping(
                criterias, f"{at}.evaluationCriterias").items():
            if not isinstance(criteria, Mapping):
                continue   # null: the evaluator's default criteria, which live in its own file
            families = {_UIPATH_CRITERIA[k] for k in criteria if k in _UIPATH_CRITERIA}
            if not families:
                continue   # an output or LLM evaluator: not a tool-call grader
            if len(families) > 1:
                raise reading.error(f"{at}.evaluationCriterias.{evaluator}", (
                    f"holds the criteria of {len(families)} evaluators "
                    f"({', '.join(sorted(families))}); one evaluator has one kind"))
            entry: dict[str, Any] = {"name": str(evaluator), "type": families.pop()}
            entry.update({_SNAKE.get(str(k), str(k)): v for k, v in criteria.items()})
            graders.append(entry)
        message = _uipath_message(item.get("inputs"))
        if message is None and reading.attribute is None:
            # Several inputs are no one message: match by the run's case id attribute.
            case: Case = {"id": case_id, "match": {"attribute": {
                "key": CASE_ID_ATTRIBUTE, "value": case_id}}, "graders": graders}
        else:
            case = reading.case(case_id, message, graders, at)
        cases.append(case)
        fields.append(at)
    return reading.unique(cases, fields)


_READERS: dict[str, Callable[[_Reading, Any], list[Case]]] = {
    "adk": _adk, "agentv": _agentv, "deepeval": _deepeval, "ragas": _ragas, "uipath": _uipath}
