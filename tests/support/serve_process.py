"""``otel-tooleval serve`` in a process of its own, for the tests of what only a process has:
signals, and what the command writes to stderr."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator


@contextlib.contextmanager
def serve_process(*args: str) -> Iterator[tuple[subprocess.Popen[str], list[str]]]:
    """``otel-tooleval serve ARGS`` (no ``OTEL_*`` variables), its stderr lines collected as
    they come; yields the process and the lines once it says it listens. On the way out a
    process still running is killed, and the lines it wrote last are waited for."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    process = subprocess.Popen([sys.executable, "-m", "otel_tooleval.cli", "serve", *args],
                               env=env, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(process.stderr.readline, "")),
                              daemon=True)   # type: ignore[union-attr]
    reader.start()
    try:
        deadline = time.monotonic() + 30
        while not any("listening for" in line for line in lines):
            assert process.poll() is None, "".join(lines)
            assert time.monotonic() < deadline, "serve did not start"
            time.sleep(0.05)
        yield process, lines
    finally:
        if process.poll() is None:
            process.kill()
        reader.join(5)
