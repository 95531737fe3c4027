"""Config files as an attack (issue 26, defects 5 and 10): an alias bomb inside a grader's
``args``, a FIFO, ``/dev/zero``, a folder, YAML and JSON nested 100,000 deep.

Each makes ``otel-tooleval check``, ``grade`` and ``serve`` exit 2 at once with one line that
names the file and the reason, and ``load_config`` (what the processor calls) raise a
``ValueError`` (``ConfigError``) that says the same. Every command runs as a subprocess
under a memory cap and a time limit, so the code before the fix fails these tests (a hang is
a timeout; ``/dev/zero`` a ``MemoryError``) instead of taking the machine.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from otel_tooleval import load_config
from otel_tooleval.config import MAX_CONFIG_DEPTH, MAX_CONFIG_NODES, ConfigError

LIMIT_S = 2.0          # the bound, for one command start to exit
HANG_S = 20            # a command still running after this is killed: the test fails
MEMORY = 1 << 30       # address space of each command: an attack that grows fails fast

GRADER = ("graders:\n  - name: workflow\n    type: tool_trajectory\n    mode: in_order\n"
          "    expected:\n      - tool: search\n        args:\n")


def alias_bomb(tmp_path: Path) -> Path:
    """Nine levels, each a list of nine aliases of the level before: 9**9 values."""
    lines = ['          l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"          l{i}: &l{i} [{','.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
    path = tmp_path / "bomb.yaml"
    path.write_text(GRADER + "\n".join(lines) + "\n")
    return path


def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "graders.yaml"
    os.mkfifo(path)
    return path


def deep_yaml(tmp_path: Path) -> Path:
    path = tmp_path / "deep.yaml"
    path.write_text(GRADER + "          a: " + "[" * 100_000 + "]" * 100_000 + "\n")
    return path


def deep_json(tmp_path: Path) -> Path:
    path = tmp_path / "deep.json"
    path.write_text('{"graders": [{"name": "w", "type": "tool_trajectory", "expected": '
                    '[{"tool": "s", "args": {"a": ' + "[" * 100_000 + "]" * 100_000 + "}}]}]}")
    return path


ATTACKS: dict[str, tuple[Callable[[Path], Path], str]] = {
    "alias-bomb": (alias_bomb, "values once its aliases are expanded"),
    "fifo": (fifo, "is a FIFO (named pipe), not a config file"),
    "dev-zero": (lambda _: Path("/dev/zero"), "is a character device, not a config file"),
    "folder": (lambda tmp_path: tmp_path, "is a folder, not a config file"),
    "deep-yaml": (deep_yaml, f"nested deeper than {MAX_CONFIG_DEPTH} levels"),
    "deep-json": (deep_json, f"nested deeper than {MAX_CONFIG_DEPTH} levels"),
}


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def _run(args: list[str], cwd: Path) -> tuple[int, str, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, *args], check=False, capture_output=True,
                              text=True, timeout=HANG_S, cwd=cwd, env=env, preexec_fn=_capped)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{args}: still running after {HANG_S} s (killed)")
    return done.returncode, done.stderr, time.monotonic() - started


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_check_grade_and_serve_refuse_the_config_in_one_line(attack: str,
                                                             tmp_path: Path) -> None:
    make, reason = ATTACKS[attack]
    path = make(tmp_path)
    traces = tmp_path / "traces.jsonl"
    if attack != "folder":
        traces.write_text("")
    cli = ["-m", "otel_tooleval.cli"]
    for command in (["check", str(path)],
                    ["grade", str(traces), "--config", str(path)],
                    ["serve", "--config", str(path), "--grpc", "127.0.0.1:0", "--http",
                     "127.0.0.1:0", "--forward", "none"]):
        code, err, took = _run(cli + command, tmp_path)
        assert code == 2, (command, err[-2000:])
        assert err.count("\n") == 1 and "Traceback" not in err, err[-2000:]
        assert str(path) in err and reason in err, err
        assert took < LIMIT_S * 3, f"{command[0]} took {took:.1f} s"   # 3x: a loaded machine


PROCESSOR = """
import sys
from pathlib import Path
from otel_tooleval import ToolEvalSpanProcessor, load_config
for source in [sys.argv[1]] + ([Path(sys.argv[1]).read_text()] if sys.argv[2] == "text" else []):
    try:
        ToolEvalSpanProcessor(source)
    except ValueError as exc:
        print(type(exc).__name__, str(exc).replace(chr(10), " "))
    else:
        print("accepted")
"""


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_the_processor_raises_a_config_error_without_hanging(attack: str,
                                                             tmp_path: Path) -> None:
    make, reason = ATTACKS[attack]
    path = make(tmp_path)
    as_text = "text" if attack in ("alias-bomb", "deep-yaml") else "path"
    done = subprocess.run([sys.executable, "-c", PROCESSOR, str(path), as_text],
                          check=False, capture_output=True, text=True, timeout=HANG_S,
                          cwd=tmp_path, preexec_fn=_capped)
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and len(lines) == (2 if as_text == "text" else 1), (
        done.stdout, done.stderr[-2000:])
    for line in lines:
        assert line.startswith("ConfigError ") and reason in line, line


def test_load_config_bounds_yaml_text_in_process() -> None:
    """The bounds themselves, on YAML text (what ``load_config`` takes besides a path)."""
    nine = ",".join(["*a"] * 9)
    fine = (GRADER + '          a: &a ["x", "y"]\n          b: [*a, *a]\n'
            "          c: {<<: {k: v}, j: *a}\n")
    assert load_config(fine).graders[0].name == "workflow"   # small aliases are fine
    levels = ['          l0: &l0 ["a","a","a","a","a","a","a","a","a"]'] + [
        f"          l{i}: &l{i} [{nine.replace('*a', f'*l{i - 1}')}]" for i in range(1, 8)]
    # l5 holds 9**6 values (fine), l6 9**7: refused at its line, 14
    with pytest.raises(ConfigError, match=f"line 14, column .*more than {MAX_CONFIG_NODES:,}"):
        load_config(GRADER + "\n".join(levels) + "\n")
    with pytest.raises(ConfigError, match="alias \\*a is inside the node it names"):
        load_config(GRADER + "          a: &a [1, *a]\n")
    # args sits 6 levels down (the top mapping, graders, the grader, expected, a step, args)
    lists = MAX_CONFIG_DEPTH - 6
    assert load_config(GRADER + "          a: " + "[" * lists + "]" * lists + "\n")
    with pytest.raises(ConfigError, match=f"nested deeper than {MAX_CONFIG_DEPTH} levels"):
        load_config(GRADER + "          a: " + "[" * (lists + 1) + "]" * (lists + 1) + "\n")


@pytest.mark.parametrize("attack", ["alias-bomb", "fifo", "deep-yaml"])
def test_a_case_file_is_read_with_the_configs_bounds(attack: str, tmp_path: Path) -> None:
    """`grade --cases FILE` reads a case file as a config is read: a regular file, YAML
    bounded as it parses (it was a plain yaml.safe_load on whatever the path named)."""
    from otel_tooleval.cases import read_cases

    path = tmp_path / "cases.yaml"
    if attack == "fifo":
        os.mkfifo(path)
    elif attack == "alias-bomb":
        lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
        lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
        path.write_text("\n".join(lines) + "\ncases: []\n")
    else:
        path.write_text("cases: " + "[" * 1000 + "]" * 1000 + "\n")
    began = time.monotonic()
    with pytest.raises(ConfigError):
        read_cases(path)
    assert time.monotonic() - began < 5
