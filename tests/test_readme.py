"""The README and docs/ are runnable: config blocks load, the README's snippet runs, every
`otel-tooleval` command line parses, every relative link points to a file, every python block
compiles and every JSON block parses; the self-contained python blocks run."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from otel_tooleval import load_config
from otel_tooleval.cli import _parser

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]



def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _fenced(lang: str) -> list[tuple[Path, str]]:
    return [(page, block) for page in PAGES
            for block in re.findall(rf"^```{lang}\n(.*?)^```", page.read_text(), re.DOTALL | re.MULTILINE)]


# -- YAML config blocks ---------------------------------------------------------------------------

BLOCKS = [(page, b) for page, b in _fenced("yaml") if "graders:" in b or b.startswith("- type:")]


def test_the_pages_have_config_blocks() -> None:
    # 18 when the README moved to docs/ (the README alone had 6): README 1, config.md 1, the
    # graders index 4 and tool_calls.md 1, the family pages the rest. A floor that catches an
    # extraction that finds nothing, or a page that lost its examples.
    pages = {_rel(p) for p, _ in BLOCKS}
    assert {"README.md", "docs/config.md", "docs/graders/README.md",
            "docs/graders/tool_calls.md", "docs/graders/tool_trajectory.md"} <= pages
    assert len(BLOCKS) >= 15


@pytest.mark.parametrize("page,block", BLOCKS,
                         ids=[f"{_rel(p)}-{i}" for i, (p, _) in enumerate(BLOCKS)])
def test_config_block_loads(page: Path, block: str, tmp_path: Path,
                            monkeypatch: pytest.MonkeyPatch) -> None:
    # A custom grader named by file (`function: my_graders.py:fn`) is the page's python block
    # whose first line is `# my_graders.py`; it is written where the config looks for it.
    for other, code in _fenced("python"):
        first = code.split("\n", 1)[0]
        if other == page and re.fullmatch(r"# \w+\.py", first):
            (tmp_path / first[2:]).write_text(code)
    monkeypatch.chdir(tmp_path)
    doc = yaml.safe_load(block)
    if isinstance(doc, list):       # a bare list of entries, as a seed page writes them
        doc = {"graders": doc}
    if isinstance(doc.get("graders"), list):
        for entry in doc["graders"]:
            entry.pop("agents", None)
    load_config(doc)


# -- the README's "Trace your own agent" ----------------------------------------------------------

def _marked(text: str, marker: str, lang: str) -> str:
    found = re.search(rf"<!-- test: {re.escape(marker)} -->\n```{lang}\n(.*?)^```", text,
                      re.DOTALL | re.MULTILINE)
    assert found, f"no {lang} block marked {marker!r} in README.md"
    return found.group(1)


def test_trace_your_own_agent_snippet_prints_a_verdict(tmp_path: Path) -> None:
    text = README.read_text()
    (tmp_path / "graders.yaml").write_text(_marked(text, "trace-your-own-config", "yaml"))
    (tmp_path / "agent.py").write_text(_marked(text, "trace-your-own", "python"))
    done = subprocess.run([sys.executable, "agent.py"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    # The verdicts the README shows, from on_report ...
    assert "run travel_agent FAIL" in lines
    assert any(re.match(r"\s+pass\s+books-no-secrets\s+1\.00", line) for line in lines)
    assert any(re.match(r"\s+pass\s+workflow\s+1\.00", line) for line in lines)
    assert any(re.match(r"\s+fail\s+order\s+0\.67\s.*'validate_booking'", line) for line in lines)
    assert any(re.match(r"\s+pass\s+at-most-3-calls\s+1\.00", line) for line in lines)
    assert any(re.match(r"\s+pass\s+guard\s+1\.00", line) for line in lines)
    # ... and the root span copy with the verdicts on it, from the console exporter.
    assert '"tooleval.passed": false' in done.stdout
    assert done.stdout.count('"name": "gen_ai.evaluation.result"') == 5   # 4 graders, the guard


# -- `otel-tooleval ...` lines in bash blocks ---------------------------------------------------

def _command_lines() -> list[tuple[Path, str]]:
    found = []
    for page, block in _fenced("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            words = list(lexer)         # comments dropped, `&&` `|` `;` `<` `>` split off
            # Each command of a list or pipeline (`pip install -e . && otel-tooleval demo`).
            while words:
                ends = [i for i, w in enumerate(words) if w in {"&&", "||", "|", ";", "&"}]
                command, words = words[:ends[0]] if ends else words, \
                    words[ends[0] + 1:] if ends else []
                while command and re.match(r"\w+=", command[0]):
                    command.pop(0)      # VAR=value before the command
                if command[:1] != ["otel-tooleval"]:
                    continue
                # Cut at a redirection (`> report.html`, `< traces.json.gz`).
                cut = [i for i, w in enumerate(command) if set(w) <= {"<", ">"}]
                found.append((page, shlex.join(command[1:cut[0] if cut else None])))
    return found


COMMANDS = _command_lines()


def test_the_pages_have_command_lines() -> None:
    assert len(COMMANDS) >= 8
    assert {"grade", "serve", "inspect"} <= {shlex.split(c)[0] for _, c in COMMANDS}


@pytest.mark.parametrize("page,command", COMMANDS, ids=[f"{_rel(p)}: {c}" for p, c in COMMANDS])
def test_command_line_parses(page: Path, command: str) -> None:
    try:
        _parser().parse_args(shlex.split(command))
    except SystemExit as exc:
        pytest.fail(f"{_rel(page)}: `otel-tooleval {command}` does not parse (exit {exc.code})")


# -- relative links -------------------------------------------------------------------------------

def _links() -> list[tuple[Path, str]]:
    found = []
    for page in PAGES:
        text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.DOTALL | re.MULTILINE)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue        # a URL or an anchor on the same page
            found.append((page, target.split("#")[0]))
    return found


LINKS = _links()


def test_the_pages_have_links() -> None:
    assert len(LINKS) >= 40


@pytest.mark.parametrize("page,target", LINKS, ids=[f"{_rel(p)}->{t}" for p, t in LINKS])
def test_relative_link_points_to_a_file(page: Path, target: str) -> None:
    resolved = (page.parent / target).resolve()
    assert resolved.exists(), f"{_rel(page)} links to {target}, which does not exist"


# -- python and JSON blocks -----------------------------------------------------------------------

def _indented(lang: str) -> list[tuple[Path, str]]:
    """Blocks of ``lang``, also those indented inside a list item, dedented."""
    found = []
    for page in PAGES:
        for indent, body in re.findall(rf"^( *)```{lang}\n(.*?)^\1```", page.read_text(),
                                       re.DOTALL | re.MULTILINE):
            found.append((page, textwrap.dedent(body) if indent else body))
    return found


PYTHON = _indented("python")
JSON_BLOCKS = _indented("json")


def test_the_pages_have_python_and_json_blocks() -> None:
    assert len(PYTHON) >= 8 and len(JSON_BLOCKS) >= 3


@pytest.mark.parametrize("page,block", PYTHON, ids=[f"{_rel(p)}#{i}" for i, (p, _) in
                                                    enumerate(PYTHON)])
def test_python_block_compiles(page: Path, block: str) -> None:
    # Every block is at least valid Python; the self-contained ones also run (below and in
    # the tests of the page's subject: test_file_exporter, test_tool_graders).
    compile(block, f"{_rel(page)} block", "exec")


@pytest.mark.parametrize("page,block", JSON_BLOCKS, ids=[f"{_rel(p)}#{i}" for i, (p, _) in
                                                         enumerate(JSON_BLOCKS)])
def test_json_block_parses(page: Path, block: str) -> None:
    json.loads(block)


def _python_block(page: str, starts: str) -> str:
    (block,) = [b for p, b in PYTHON if _rel(p) == page and b.startswith(starts)]
    return block


def test_the_pytest_page_example_passes_under_pytest(tmp_path: Path) -> None:
    (tmp_path / "test_travel_agent.py").write_text(
        _python_block("docs/pytest.md", "# tests/test_travel_agent.py"))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "test_travel_agent.py"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout


def test_the_python_api_page_set_up_runs(tmp_path: Path) -> None:
    # The ten lines, then one agent run through them, graded by the processor they set up.
    (tmp_path / "graders.yaml").write_text(
        "graders:\n  - {name: order, type: tool-call-order, tool_calls_order: [search]}\n")
    script = _python_block("docs/python-api.md", "from opentelemetry import trace") + (
        "tracer = trace.get_tracer('t')\n"
        "with tracer.start_as_current_span('invoke_agent a', attributes={\n"
        "        'gen_ai.operation.name': 'invoke_agent'}):\n"
        "    with tracer.start_as_current_span('execute_tool search', attributes={\n"
        "            'gen_ai.tool.name': 'search'}):\n"
        "        pass\n"
        "print(provider.force_flush(5000), provider._active_span_processor."
        "_span_processors[0].stats()['runs'])\n")
    (tmp_path / "setup.py").write_text(script)
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
           "OTEL_EXPORTER_OTLP_TIMEOUT": "1", "OTEL_BSP_EXPORT_TIMEOUT": "1000"}
    done = subprocess.run([sys.executable, "setup.py"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, check=False, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == "1", done.stdout
