#!/usr/bin/env bash
# Re-records traces.jsonl: a venv of its own (.venv, not committed), the pinned framework, this project.
set -euo pipefail
cd "$(dirname "$0")"
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q -r requirements.txt -e ../../../..
.venv/bin/python record.py "$@"
