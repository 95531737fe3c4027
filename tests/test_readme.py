"""The README and docs/ are runnable: config blocks load, the README's snippet runs, every
`otel-tooleval` command line parses, every relative link points to a file."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from otel_tooleval import load_config
from otel_tooleval.cli import _parser

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]

# Command-line options and subcommands being built on other branches. The integrator removes
# this constant (and its use below) after merging them; until then their lines are xfail.
PENDING = {"inspect", "--allow-empty", "--min-runs", "--include-calls"}
# Pages other branches are writing; links to them are allowed to dangle until those merge.
PENDING_PAGES = {"docs/inspect.md", "docs/serve.md", "docs/file-exporter.md"}


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
    # ... and the root span copy with the verdicts on it, from the console exporter.
    assert '"tooleval.passed": false' in done.stdout
    assert done.stdout.count('"name": "gen_ai.evaluation.result"') == 3


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


@pytest.mark.parametrize("page,command", [
    pytest.param(p, c, marks=pytest.mark.xfail(
        reason="built on another branch (PENDING)", strict=False))
    if PENDING & set(shlex.split(c)) else (p, c) for p, c in COMMANDS
], ids=[f"{_rel(p)}: {c}" for p, c in COMMANDS])
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
    if not resolved.exists() and resolved.is_relative_to(ROOT) \
            and _rel(resolved) in PENDING_PAGES:
        pytest.xfail(f"{_rel(resolved)} is written on another branch (PENDING_PAGES)")
    assert resolved.exists(), f"{_rel(page)} links to {target}, which does not exist"
