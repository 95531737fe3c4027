"""`otel-tooleval schema`: a JSON Schema editors can use, agreeing with load_config."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from otel_tooleval.cli import main
from otel_tooleval.schema import config_schema

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def validator() -> jsonschema.protocols.Validator:
    schema = config_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_cli_prints_the_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out) == config_schema()


def test_example_configs_validate(validator: Any) -> None:
    doc = yaml.safe_load((ROOT / "examples/plain_otel/graders.yaml").read_text())
    validator.validate(doc)


@pytest.mark.parametrize("bad", [
    {"graders": [{"type": "tool-calls", "config": {"required": [{"name": "x", "min_count": "2"}]}}]},
    {"graders": [{"type": "tool-calls", "config": {"required": ["x"]}, "extra": 1}]},
    {"limits": {"queue_size": 0}},
    {"emit": {"spans": True}},
    {"unknown": 1},
])
def test_schema_rejects_what_load_config_rejects(validator: Any, bad: dict[str, Any]) -> None:
    from otel_tooleval import ConfigError, load_config

    assert list(validator.iter_errors(bad)), bad
    with pytest.raises(ConfigError):
        load_config(bad)


def test_string_shorthand_is_valid(validator: Any) -> None:
    validator.validate({"graders": [{"type": "tool-calls", "name": "x", "agents": ["a"],
                                     "config": {"required": ["create", {"name": "bash"}]}}]})


def test_one_of_each_family_validates_and_loads(validator: Any,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    path = ROOT / "examples/all_families.yaml"
    validator.validate(yaml.safe_load(path.read_text()))
    assert main(["check", str(path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    from otel_tooleval.graders.registry import families

    types = [g["type"] for g in doc["graders"]]
    assert sorted(types) == sorted(f.type for f in families())      # each family exactly once
    assert len(types) >= 13                 # the nine tools' families, should the registry shrink
    assert all(g["params"] for g in doc["graders"])


def test_every_family_contributes_an_entry_schema() -> None:
    from otel_tooleval.graders.registry import families

    missing = [f.type for f in families() if f.schema is None]
    assert missing == []


def test_a_conventions_mapping_validates_and_loads(validator: Any) -> None:
    from otel_tooleval import load_config
    from tests.test_user_conventions import CONFIG

    validator.validate(CONFIG)
    assert load_config(CONFIG).policy.conventions is not None


@pytest.mark.parametrize("conventions", [
    [{"scope": "x"}],                                        # maps nothing
    [{"scope": "x", "model": True, "tool": {"name": "a"}}],  # maps two things
    [{"model": True}],                                       # matches every span
    [{"scope": "x", "tool": {"nmae": "a"}}],
    [{"scope": "x", "model": False}],
    {"scope": "x", "model": True},
])
def test_schema_rejects_the_mappings_load_config_rejects(validator: Any,
                                                         conventions: Any) -> None:
    from otel_tooleval import ConfigError, load_config

    bad = {"graders": [{"type": "tool-calls", "config": {"required": ["x"]}}],
           "conventions": conventions}
    assert list(validator.iter_errors(bad)), bad
    with pytest.raises(ConfigError):
        load_config(bad)


def test_a_cases_section_validates_and_loads(validator: Any) -> None:
    from otel_tooleval.config import load_config

    doc = {"graders": [{"name": "trajectory", "type": "tool_trajectory", "mode": "in_order",
                        "expected": [{"tool": "search"}]}],
           "cases": [{"id": "paris", "match": {"first_user_message": "Weather in Paris?"},
                      "expect": {"trajectory": {"expected": [{"tool": "get_weather"}]}}},
                     {"id": "7", "match": {"attribute": {"key": "dataset.item", "value": 7}},
                      "graders": [{"type": "tool-call-order", "tool_calls_order": ["a"]}]},
                     {"id": "by-id"}]}
    assert not list(validator.iter_errors(doc))
    assert load_config(doc).cases is not None
    for bad in ({"id": "x", "match": {"first_user_message": "a", "attribute": "b"}},
                {"id": "x", "match": {"first_message": "a"}}, {"match": {}},
                {"id": "x", "expected": {}}):
        assert list(validator.iter_errors({**doc, "cases": [bad]})), bad
