"""Records one dspy.ReAct run (OpenInference DSPy instrumentor) into traces.jsonl."""

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]
# Nothing phones home: LiteLLM's cost map from the package, not GitHub.
os.environ.update(DO_NOT_TRACK="1", LITELLM_LOCAL_MODEL_COST_MAP="True",
                  DSPY_CACHEDIR=str(HERE / ".venv" / "dspy-cache"))

outside = []  # connections anywhere but 127.0.0.1


def _audit(event, args):
    if event == "socket.connect" and isinstance(args[1], tuple) and args[1][0] not in ("127.0.0.1", "::1"):
        outside.append(args[1])


sys.addaudithook(_audit)

import dspy
from openinference.instrumentation.dspy import DSPyInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from scripted_dspy import serve
from scripted_openai import FINAL_ANSWER, PROMPT, convert_temp, get_weather, lookup_city

from otel_tooleval import OTLPJsonFileExporter

out = HERE / "traces.jsonl"
out.unlink(missing_ok=True)
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(OTLPJsonFileExporter(str(out))))
DSPyInstrumentor().instrument(tracer_provider=provider)

with serve() as (base_url, requests):
    lm = dspy.LM("openai/scripted", api_base=base_url, api_key="scripted", cache=False)
    dspy.configure(lm=lm, adapter=dspy.ChatAdapter())
    weather_agent = dspy.ReAct("question -> answer", tools=[lookup_city, get_weather, convert_temp])
    prediction = weather_agent(question=PROMPT)

provider.force_flush()
provider.shutdown()

print("answer:", prediction.answer)
print("model requests:", len(requests))
assert prediction.answer == FINAL_ANSWER, prediction
# ReAct issues one tool per step, then the built-in finish tool, then the extract call.
assert len(requests) == 6, len(requests)
assert out.exists() and out.stat().st_size > 0
assert not outside, f"connections outside 127.0.0.1: {outside}"
