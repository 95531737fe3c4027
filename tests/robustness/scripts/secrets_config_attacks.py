"""Issue 26, defects 5 and 10: config files as an attack, against ``check``, ``grade`` and
``serve``.

For each attack (an alias bomb in a grader's ``args``, a FIFO, ``/dev/zero``, a folder, YAML
and JSON nested 100,000 deep) runs each command as a subprocess under a memory cap
(address space CAP_GIB, default 2) and a time limit (LIMIT_S, default 5; killed after), and
prints its exit status, seconds, peak RSS and the last line of its stderr.

    python tests/robustness/scripts/secrets_config_attacks.py [LIMIT_S] [CAP_GIB]

Only 127.0.0.1 (serve listens on ephemeral ports of 127.0.0.1, forwards nowhere).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GRADER = ("graders:\n  - name: workflow\n    type: tool_trajectory\n    mode: in_order\n"
          "    expected:\n      - tool: search\n        args:\n")


def attacks(where: Path) -> dict[str, Path]:
    bomb = where / "bomb.yaml"
    levels = ['          l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    levels += [f"          l{i}: &l{i} [{','.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
    bomb.write_text(GRADER + "\n".join(levels) + "\n")
    fifo = where / "fifo.yaml"
    os.mkfifo(fifo)
    deep_yaml = where / "deep.yaml"
    deep_yaml.write_text(GRADER + "          a: " + "[" * 100_000 + "]" * 100_000 + "\n")
    deep_json = where / "deep.json"
    deep_json.write_text('{"graders": [{"name": "w", "type": "tool_trajectory", "expected": '
                         '[{"tool": "s", "args": {"a": ' + "[" * 100_000 + "]" * 100_000
                         + "}}]}]}")
    folder = where / "folder"
    folder.mkdir()
    return {"alias bomb": bomb, "FIFO": fifo, "/dev/zero": Path("/dev/zero"),
            "folder": folder, "YAML 100,000 deep": deep_yaml, "JSON 100,000 deep": deep_json}


def run(args: list[str], cwd: Path, limit: float, cap: int) -> tuple[str, float, float, str]:
    def capped() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    with tempfile.TemporaryFile() as err:
        started = time.monotonic()
        process = subprocess.Popen(
            [sys.executable, "-m", "otel_tooleval.cli", *args], cwd=cwd, env=env,
            stdout=subprocess.DEVNULL, stderr=err,
            preexec_fn=capped)  # noqa: PLW1509 - this script starts no threads
        while True:
            pid, code, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                status = str(os.waitstatus_to_exitcode(code))
                break
            if time.monotonic() - started > limit:
                process.kill()
                _, code, usage = os.wait4(process.pid, 0)
                status = f"killed after {limit:g} s"
                break
            time.sleep(0.02)
        process.returncode = 0   # reaped above
        took = time.monotonic() - started
        err.seek(0)
        lines = err.read().decode(errors="replace").strip().splitlines()
    return status, took, usage.ru_maxrss / 1024, (lines[-1] if lines else "")[:150]


def main() -> int:
    limit = float(sys.argv[1]) if len(sys.argv) > 1 else 5.0
    cap = int(float(sys.argv[2]) * (1 << 30)) if len(sys.argv) > 2 else 2 << 30
    with tempfile.TemporaryDirectory() as name:
        where = Path(name)
        traces = where / "traces.jsonl"
        traces.write_text("")
        for attack, path in attacks(where).items():
            for command in (["check", str(path)],
                            ["grade", str(traces), "--config", str(path)],
                            ["serve", "--config", str(path), "--grpc", "127.0.0.1:0",
                             "--http", "127.0.0.1:0", "--forward", "none"]):
                status, took, rss, last = run(command, where, limit, cap)
                print(f"{attack:18} {command[0]:5} exit {status:>16} {took:5.2f} s "
                      f"{rss:7.0f} MiB  {last}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
