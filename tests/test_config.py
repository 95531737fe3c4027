"""load_config: every source form, and errors that name the field or line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from otel_tooleval import ConfigError, load_config

TEXT = """
graders:
  - name: must-search
    type: tool-calls
    agents: [researcher]
    config: {required: [search]}
runs: {nested_agents: separate, ignore_tools: [final_result]}
limits: {max_open_runs: 5}
emit: {metrics: false}
"""


def check(cfg: object) -> None:
    (g,) = cfg.graders  # type: ignore[attr-defined]
    assert (g.name, g.type, g.agents) == ("must-search", "tool-calls", frozenset({"researcher"}))
    assert cfg.runs.nested_agents == "separate"  # type: ignore[attr-defined]
    assert cfg.limits.max_open_runs == 5  # type: ignore[attr-defined]
    assert cfg.emit.metrics is False  # type: ignore[attr-defined]
    assert cfg.policy.ignores("final_result") and not cfg.policy.ignores("final_result2")  # type: ignore[attr-defined]


def test_yaml_text_path_json_and_mapping(tmp_path: Path) -> None:
    import yaml

    check(load_config(TEXT))
    (tmp_path / "c.yaml").write_text(TEXT)
    check(load_config(tmp_path / "c.yaml"))
    check(load_config(str(tmp_path / "c.yaml")))
    (tmp_path / "c.json").write_text(json.dumps(yaml.safe_load(TEXT)))
    check(load_config(tmp_path / "c.json"))
    check(load_config(yaml.safe_load(TEXT)))


def test_env_variable_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "c.yaml").write_text(TEXT)
    monkeypatch.setenv("TOOLEVAL_CONFIG", str(tmp_path / "c.yaml"))
    check(load_config(None))
    monkeypatch.delenv("TOOLEVAL_CONFIG")
    assert load_config(None).graders == ()


def test_yaml_syntax_error_names_the_line() -> None:
    with pytest.raises(ConfigError, match=r"line 3, column 8: a ':' where no key can start"):
        load_config("graders: []\nruns: {}\nemit: a: b\n")


def test_missing_file_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config("does/not/exist.yaml")


@pytest.mark.parametrize(("config", "where"), [
    ({"grader": []}, "grader: unknown key"),
    ({"graders": [{"config": {}}]}, "graders[0]: missing 'type'"),
    ({"graders": [{"type": "tool_call"}]}, "graders[0].type: unknown grader type 'tool_call'"),
    ({"graders": [5]}, "graders[0]: a grader entry must be a mapping"),
    ({"graders": [{"type": "tool-calls", "name": "", "config": {"required": ["a"]}}]},
     "graders[0].name: must be a non-empty string"),
    ({"graders": [{"type": "tool-calls", "agents": "a", "config": {"required": ["a"]}}]},
     "graders[0].agents: must be a list"),
    ({"graders": [{"type": "tool-calls", "name": "x", "config": {"required": ["a"]}},
                  {"type": "tool-calls", "name": "x", "config": {"required": ["a"]}}]},
     "graders[1].name: duplicate grader name 'x'"),
    ({"runs": {"root": "("}}, "runs.root:"),
    ({"runs": {"ignore_tools": ["ok", "["]}}, "runs.ignore_tools[1]: invalid regular expression"),
    ({"runs": {"root": "(x"}}, "runs.root: invalid regular expression"),
    ({"runs": {"nested_agents": "flatten"}}, "runs.nested_agents:"),
    ({"limits": {"queue_size": 0}}, "limits.queue_size:"),
    ({"emit": {"spans": True}}, "emit.spans: unknown key"),
    ([1, 2], "the config must be a mapping"),
])
def test_errors_name_the_field(config: object, where: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(config)  # type: ignore[arg-type]
    assert where in str(info.value), str(info.value)


def test_unnamed_graders_get_unique_default_names() -> None:
    cfg = load_config({"graders": [{"type": "tool-calls", "config": {"required": ["a"]}},
                                   {"type": "tool-calls", "config": {"required": ["b"]}}]})
    assert [g.name for g in cfg.graders] == ["tool-calls", "tool-calls-2"]


def test_text_too_long_for_a_path_is_read_as_config_text() -> None:
    # found by hypothesis in CI: Path.is_file() raised ENAMETOOLONG instead of saying no
    import pytest as _pytest

    from otel_tooleval.config import ConfigError, load_config
    with _pytest.raises(ConfigError, match="mapping"):
        load_config("(" * 300 + ")" * 300)


def test_retired_export_timeout_still_loads_with_a_warning() -> None:
    source = {"graders": [{"type": "tool-calls", "config": {"required": ["bash"]}}],
              "limits": {"export_timeout_seconds": 5, "queue_size": 7}}
    with pytest.warns(FutureWarning, match="export_timeout_seconds has no effect"):
        config = load_config(source)
    assert config.limits.queue_size == 7
    assert not hasattr(config.limits, "export_timeout_seconds")
    with pytest.raises(ConfigError, match="limits.export_timeout_second"):
        load_config({**source, "limits": {"export_timeout_second": 5}})   # a typo still fails


@pytest.mark.parametrize("text", ["\x1f", "graders: []\n\x1f", "graders:\x00 []"])
def test_a_control_character_in_yaml_is_a_config_error_in_one_line(text: str) -> None:
    # PyYAML refuses it while the loader is made, before parsing: a ReaderError escaped there
    # (hypothesis found "\x1f" in test_bad_input's mutated configs).
    with pytest.raises(ConfigError) as raised:
        load_config(text)
    assert "control character" in str(raised.value) and "\n" not in str(raised.value)
