"""One OTLP protocol choice for every front door (otel_tooleval/otlp_protocol.py):
``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``, else ``OTEL_EXPORTER_OTLP_PROTOCOL``, else
``http/protobuf``; ``install()``, ``demo``, the ``tooleval_otlp`` exporter and ``serve`` agree."""

from __future__ import annotations

import io
import logging
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpans
from opentelemetry.sdk._logs.export import ConsoleLogRecordExporter
from opentelemetry.sdk.metrics.export import ConsoleMetricExporter
from opentelemetry.sdk.trace.export import ConsoleSpanExporter

from otel_tooleval import autoconfig, providers
from otel_tooleval.cli import main
from otel_tooleval.otlp_protocol import otlp_traces_protocol
from otel_tooleval.serve import options_from_args

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "otel_tooleval" / "demo" / "graders.yaml"
TRACES, GENERAL = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"

# (OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, OTEL_EXPORTER_OTLP_PROTOCOL, chosen)
CASES = [
    (None, None, "http/protobuf"),
    (None, "grpc", "grpc"),
    ("grpc", "http/protobuf", "grpc"),            # the traces variable wins
    ("http/protobuf", "grpc", "http/protobuf"),
    (None, "http", "http/protobuf"),
]


def set_protocols(monkeypatch: pytest.MonkeyPatch, traces: str | None,
                  general: str | None) -> None:
    for name, value in ((TRACES, traces), (GENERAL, general)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)


def kind(exporter: Any) -> str:
    assert isinstance(exporter, (GrpcSpans, HttpSpans)), type(exporter)
    return "grpc" if isinstance(exporter, GrpcSpans) else "http/protobuf"


@pytest.mark.parametrize("traces,general,expected", CASES)
def test_the_choice(loopback_only: None, monkeypatch: pytest.MonkeyPatch, traces: str | None,
                    general: str | None, expected: str) -> None:
    set_protocols(monkeypatch, traces, general)
    assert otlp_traces_protocol() == expected
    assert otlp_traces_protocol(strict=True) == expected


@pytest.mark.parametrize("traces,general,expected", CASES)
def test_zero_code_exporter(loopback_only: None, monkeypatch: pytest.MonkeyPatch,
                            traces: str | None, general: str | None, expected: str) -> None:
    set_protocols(monkeypatch, traces, general)
    exporter = autoconfig.ToolEvalOTLPSpanExporter()
    try:
        assert kind(exporter.exporter) == expected
    finally:
        exporter.shutdown()


@pytest.mark.parametrize("traces,general,expected", CASES)
def test_install(loopback_only: None, monkeypatch: pytest.MonkeyPatch, traces: str | None,
                 general: str | None, expected: str) -> None:
    set_protocols(monkeypatch, traces, general)
    setup = providers.install(CONFIG, set_global=False)
    try:
        downstream = setup.processor.downstream
        assert kind(getattr(downstream, "span_exporter", None)) == expected
    finally:
        setup.shutdown()


@pytest.mark.parametrize("traces,general,expected", CASES)
def test_demo(loopback_only: None, monkeypatch: pytest.MonkeyPatch, traces: str | None,
              general: str | None, expected: str) -> None:
    """The demo with an endpoint exports through install(): the exporters it gets are recorded,
    then console exporters are used instead (nothing listens)."""
    set_protocols(monkeypatch, traces, general)
    real = providers.otlp_exporters
    chosen: list[str] = []

    def spy(protocol: str | None = None, endpoint: str | None = None) -> Any:
        spans, metrics, logs = real(protocol, endpoint)
        chosen.append(kind(spans))
        for exporter in (spans, metrics, logs):
            exporter.shutdown()
        sink = io.StringIO()
        return (ConsoleSpanExporter(out=sink), ConsoleMetricExporter(out=sink),
                ConsoleLogRecordExporter(out=sink))

    monkeypatch.setattr(providers, "otlp_exporters", spy)
    assert main(["demo", "--endpoint", "http://127.0.0.1:9"]) == 0
    assert chosen == [expected]


@pytest.mark.parametrize("traces,general,expected", CASES)
def test_serve_options(loopback_only: None, monkeypatch: pytest.MonkeyPatch,
                       traces: str | None, general: str | None, expected: str) -> None:
    set_protocols(monkeypatch, traces, general)
    options = options_from_args(str(CONFIG), grpc=None, http=None, forward="none",
                                forward_protocol=None, decision_wait=1.0)
    assert options.forward_protocol == expected
    flag = options_from_args(str(CONFIG), grpc=None, http=None, forward="none",
                             forward_protocol="grpc", decision_wait=1.0)
    assert flag.forward_protocol == "grpc"                 # the flag wins over the variables


@pytest.mark.parametrize("variable", [TRACES, GENERAL])
def test_unsupported_value_library_logs_and_uses_the_default(
        loopback_only: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        variable: str) -> None:
    monkeypatch.setenv(variable, "http/json")
    with caplog.at_level(logging.ERROR, logger="otel_tooleval"):
        exporter = autoconfig.ToolEvalOTLPSpanExporter()
        setup = providers.install(CONFIG, set_global=False)
    try:
        assert kind(exporter.exporter) == "http/protobuf"
        assert kind(getattr(setup.processor.downstream, "span_exporter", None)) == "http/protobuf"
    finally:
        exporter.shutdown()
        setup.shutdown()
    messages = [r.getMessage() for r in caplog.records if r.name == "otel_tooleval.otlp_protocol"]
    assert len(messages) == 2
    assert all(f"{variable}='http/json'" in m and "using http/protobuf" in m for m in messages)
    with pytest.raises(ValueError, match=variable):
        otlp_traces_protocol(strict=True)


@pytest.mark.parametrize("variable", [TRACES, GENERAL])
def test_unsupported_value_serve_exits_two_naming_the_variable(
        loopback_only: None, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], variable: str) -> None:
    monkeypatch.setenv(variable, "carrier-pigeon")
    code = main(["serve", "--config", str(CONFIG), "--forward", "none", "--grpc", "off",
                 "--http", "off"])
    err = capsys.readouterr().err
    assert code == 2
    assert f"{variable}='carrier-pigeon'" in err
    # --forward-protocol makes the variables irrelevant
    assert options_from_args(str(CONFIG), grpc=None, http=None, forward="none",
                             forward_protocol="http/protobuf",
                             decision_wait=1.0).forward_protocol == "http/protobuf"


def test_a_set_traces_variable_hides_the_general_one(
        loopback_only: None, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    set_protocols(monkeypatch, "grpc", "carrier-pigeon")
    with caplog.at_level(logging.ERROR, logger="otel_tooleval"):
        assert otlp_traces_protocol() == "grpc"
    assert otlp_traces_protocol(strict=True) == "grpc"
    assert caplog.records == []
