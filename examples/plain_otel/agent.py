"""The demo's travel agent as a standalone program, traced with the plain OpenTelemetry API.

    python examples/plain_otel/agent.py            # graded live; verdicts printed
    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 python examples/plain_otel/agent.py

The agent code (otel_tooleval.demo.agent.run_scripted_agent) uses only `opentelemetry.trace`;
grading is set up by one `install()` call with the config beside this file.
"""

from __future__ import annotations

import os
from pathlib import Path

from opentelemetry import trace

import otel_tooleval
from otel_tooleval.demo.agent import SCRIPTS, run_scripted_agent

HERE = Path(__file__).resolve().parent


def main() -> None:
    reports: list[otel_tooleval.RunReport] = []
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        setup = otel_tooleval.install(HERE / "graders.yaml", service_name="travel-agent",
                                      on_report=reports.append)
        tracer = trace.get_tracer("travel-agent")
        for _, turns in SCRIPTS:
            run_scripted_agent(tracer, turns)
        setup.shutdown()
    else:
        otel_tooleval.demo.run_demo(otel_tooleval.load_config(HERE / "graders.yaml"))
        return
    for report in reports:
        print(report.run.trace_id_hex, "PASS" if report.passed else "FAIL", report.failed)


if __name__ == "__main__":
    main()
