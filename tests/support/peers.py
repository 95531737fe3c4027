"""The peer graders (LangChain agentevals, DeepEval, Ragas) in an interpreter of their own.

Differential tests run the same cases through a peer's real API and through ours. The peers are
kept out of the project's dependencies (their own pins would fight ours): ``.ci/run`` installs
them, at the versions PEER-GRADERS.md was read from, into ``.peers-venv`` and points
``TOOLEVAL_PEERS_PYTHON`` at its interpreter. Without it the differential tests skip, saying how
to install; with ``TOOLEVAL_REQUIRE_PEERS`` set (CI) they fail instead.

A peer script lives beside its test data (``tests/data/peers/<peer>/run_peer.py``): it reads a
JSON list of cases on stdin and writes a JSON list of verdicts on stdout, one per case.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

#: The versions PEER-GRADERS.md describes; .ci/run installs exactly these. ragas 0.4.3 imports
#: ``langchain_community.chat_models.vertexai``, which langchain-community 0.4 removed.
PEER_PINS = ("agentevals==0.0.9", "deepeval==4.3.1", "ragas==0.4.3", "langchain-community<0.4")
INSTALL = ("python3 -m venv .peers-venv && .peers-venv/bin/pip install "
           + " ".join(f'"{pin}"' for pin in PEER_PINS)
           + " && export TOOLEVAL_PEERS_PYTHON=$PWD/.peers-venv/bin/python")
#: Keep the peers quiet and offline: no telemetry, no tracking, no update checks.
PEER_ENV = {"DEEPEVAL_TELEMETRY_OPT_OUT": "YES", "DEEPEVAL_UPDATE_WARNING_OPT_IN": "NO",
            "RAGAS_DO_NOT_TRACK": "true", "LANGCHAIN_TRACING_V2": "false",
            "ERROR_REPORTING": "NO", "NO_PROXY": "*", "no_proxy": "*"}


def peers_python() -> str:
    """The interpreter that has the peers, or a skip (a failure in CI) saying how to get one."""
    path = os.environ.get("TOOLEVAL_PEERS_PYTHON", "")
    if path and os.access(path, os.X_OK):
        return path
    problem = (f"TOOLEVAL_PEERS_PYTHON={path} is not an executable" if path
               else "TOOLEVAL_PEERS_PYTHON is not set")
    message = f"{problem}; the differential tests need the peer graders: {INSTALL}"
    if os.environ.get("TOOLEVAL_REQUIRE_PEERS", "") not in ("", "0"):
        pytest.fail(f"{message} (TOOLEVAL_REQUIRE_PEERS is set: did .ci/run's install of the "
                    "peers fail? See its output above the tests)", pytrace=False)
    pytest.skip(message)


def run_peer(script: Path, cases: list[Any], *, timeout: float = 600) -> list[Any]:
    """``cases`` through ``script`` in the peers' interpreter; its verdicts, one per case.

    The script runs in a scratch working directory of its own (peers write caches and
    ``.deepeval`` folders where they run) with the environment trimmed to what it needs.
    """
    python = peers_python()
    env = {k: v for k, v in os.environ.items()
           if k in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT")}
    env.update(PEER_ENV)
    workdir = Path(tempfile.mkdtemp(prefix="tooleval-peer-"))
    env["HOME"] = str(workdir)
    proc = subprocess.run([python, str(script)], input=json.dumps(cases), capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=workdir, check=False)
    if proc.returncode != 0:
        raise AssertionError(f"{script.name} failed (exit {proc.returncode}):\n"
                             f"{proc.stderr[-4000:]}")
    verdicts: list[Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    if len(verdicts) != len(cases):
        raise AssertionError(f"{script.name}: {len(verdicts)} verdicts for {len(cases)} cases")
    return verdicts
