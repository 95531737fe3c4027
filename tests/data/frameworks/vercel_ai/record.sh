#!/usr/bin/env bash
# Re-records traces.jsonl (and legacy/traces.jsonl): the pinned AI SDK (package-lock.json) in
# node_modules beside this script, then record.mjs, which starts ../scripted_openai.py on a free
# 127.0.0.1 port itself.
set -euo pipefail
cd "$(dirname "$0")"
export DO_NOT_TRACK=1
npm ci --no-audit --no-fund --loglevel=error
node record.mjs
node record.mjs legacy
