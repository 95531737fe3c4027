"""`grade --cases FILE` takes another tool's eval set as it is (issue 29): the file is turned
into cases by ``case_imports`` and validated as the config's own ``cases:`` are."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from otel_tooleval import load_config
from otel_tooleval.case_imports import import_cases
from otel_tooleval.config import ConfigError, with_cases

ROOT = Path(__file__).resolve().parent
CASES = ROOT / "data" / "cases"
FILES = {"adk": CASES / "adk" / "travel.evalset.json", "agentv": CASES / "agentv.eval.yaml",
         "deepeval": CASES / "deepeval_goldens.json", "ragas": CASES / "ragas_samples.jsonl",
         "uipath": CASES / "uipath.eval-set.json"}
TRACES = ROOT / "data" / "files" / "traces.otlp.jsonl"
SHARED = {"graders": [{"type": "tool-calls", "config": {"required": [{"name": "."}]}}]}


@pytest.mark.parametrize("fmt", sorted(FILES))
def test_with_cases_reads_each_tools_eval_set(fmt: str) -> None:
    config = with_cases(load_config(SHARED), FILES[fmt])
    assert config.cases is not None
    ids = [case.id for case in config.cases.cases]
    assert ids == [c["id"] for c in import_cases(FILES[fmt])] and ids


def test_a_broken_eval_set_is_a_config_error_naming_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.evalset.json"
    bad.write_text(json.dumps({"eval_set_id": "x", "eval_cases": [{"eval_id": "a"}]}))
    with pytest.raises(ConfigError) as raised:
        with_cases(load_config(SHARED), bad)
    assert str(bad) in str(raised.value) and "eval_cases[0]" in str(raised.value)


def test_grade_cases_with_an_imported_set_reports_each_case(tmp_path: Path) -> None:
    (tmp_path / "g.json").write_text(json.dumps(SHARED))
    done = subprocess.run([sys.executable, "-m", "otel_tooleval.cli", "grade", str(TRACES),
                           "-c", str(tmp_path / "g.json"), "--cases", str(FILES["ragas"]),
                           "-f", "json", "--allow-input-problems"], capture_output=True, text=True, timeout=120,
                          check=False)
    doc = json.loads(done.stdout)
    ids = [c["id"] for c in import_cases(FILES["ragas"])]
    assert [c["id"] for c in doc["cases"]] == ids
    # none of these runs asked the Ragas samples' questions: every case is missing, a failure
    assert {c["status"] for c in doc["cases"]} == {"missing"} and done.returncode == 1
