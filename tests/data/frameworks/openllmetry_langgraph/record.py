"""Record a LangGraph ReAct agent traced by OpenLLMetry's LangChain instrumentation.

The agent (langgraph.prebuilt.create_react_agent, name="weather_agent") uses langchain-openai's
ChatOpenAI pointed at the scripted model on 127.0.0.1; opentelemetry-instrumentation-langchain
(Traceloop's OpenLLMetry) turns LangChain's callbacks into spans, content capture on
(TRACELOOP_TRACE_CONTENT=true). Writes traces.jsonl beside this file.
"""

import os
import sys
from pathlib import Path

# No telemetry or tracing that leaves the machine; content capture on.
os.environ["TRACELOOP_TRACE_CONTENT"] = "true"
os.environ["TRACELOOP_TELEMETRY"] = "false"
os.environ["LANGSMITH_TRACING"] = "false"
os.environ["LANGCHAIN_TRACING_V2"] = "false"
os.environ["DO_NOT_TRACK"] = "1"
os.environ.pop("OTEL_SDK_DISABLED", None)

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import scripted_openai
from opentelemetry import trace
from opentelemetry.instrumentation.langchain import LangchainInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from scripted_openai import FINAL_ANSWER, PROMPT, serve

from otel_tooleval import OTLPJsonFileExporter

OUT = HERE / "traces.jsonl"
OUT.unlink(missing_ok=True)
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(OTLPJsonFileExporter(OUT)))
trace.set_tracer_provider(provider)
LangchainInstrumentor().instrument(tracer_provider=provider)

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent

tools = [tool(scripted_openai.lookup_city), tool(scripted_openai.get_weather),
         tool(scripted_openai.convert_temp)]

with serve() as (base_url, requests):
    model = ChatOpenAI(base_url=base_url, api_key="scripted", model="scripted")
    agent = create_react_agent(model, tools, name="weather_agent")
    state = agent.invoke({"messages": [("user", PROMPT)]})
    answer = state["messages"][-1].content

provider.force_flush()
provider.shutdown()

assert answer == FINAL_ANSWER, answer
assert len(requests) == 4, f"{len(requests)} model requests"
assert OUT.exists() and OUT.stat().st_size, OUT
print(f"ok: {answer!r}, {len(requests)} model requests, {OUT.name} written")
