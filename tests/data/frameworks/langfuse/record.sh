#!/usr/bin/env bash
# Re-record traces.jsonl: a venv beside this script with the pinned versions, then record.py.
set -euo pipefail
cd "$(dirname "$0")"
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q -r requirements.txt -e ../../../..
.venv/bin/python record.py
