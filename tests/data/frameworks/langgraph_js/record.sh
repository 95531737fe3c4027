#!/usr/bin/env bash
# Re-records traces.jsonl: the pinned LangChain.js packages and OpenInference instrumentation
# (package-lock.json) in node_modules beside this script, then record.mjs, which starts
# ../scripted_openai.py on a free 127.0.0.1 port itself.
set -euo pipefail
cd "$(dirname "$0")"
export DO_NOT_TRACK=1 LANGCHAIN_TRACING_V2=false LANGSMITH_TRACING=false
npm ci --no-audit --no-fund --loglevel=error
node record.mjs
