"""Record the ADK run of ../adk/record.py with ADK's legacy telemetry schema (version 1).

ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1 brings back the span format of ADK 1.x (an `invocation`
root, `call_llm` spans, tool content in gcp.vertex.agent.tool_call_args / tool_response), with
content on by ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS (its default, stated). Writes traces.jsonl in
this folder.
"""

import os
import runpy
from pathlib import Path

os.environ["ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN"] = "1"
os.environ["ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS"] = "true"
os.chdir(Path(__file__).resolve().parent)
runpy.run_path(str(Path(__file__).resolve().parent.parent / "adk" / "record.py"),
               run_name="__main__")
