"""Record the Strands run of ../strands/record.py with the latest GenAI semantic conventions.

OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental moves Strands' tool arguments and results
from per-message span events to gen_ai.tool.call.arguments / gen_ai.tool.call.result attributes
and gen_ai.client.inference.operation.details events. Writes traces.jsonl in this folder.
"""

import os
import runpy
from pathlib import Path

os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
os.chdir(Path(__file__).resolve().parent)
runpy.run_path(str(Path(__file__).resolve().parent.parent / "strands" / "record.py"),
               run_name="__main__")
