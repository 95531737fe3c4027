"""collector-config/ is parsed and checked for the pipelines it must wire (no collector here)."""

from __future__ import annotations

from pathlib import Path

import yaml

CONFIG = Path(__file__).resolve().parents[1] / "collector-config" / "otelcol.yaml"


def test_pipelines_wire_otlp_in_and_jaeger_out() -> None:
    doc = yaml.safe_load(CONFIG.read_text())
    assert set(doc["receivers"]["otlp"]["protocols"]) == {"grpc", "http"}
    pipelines = doc["service"]["pipelines"]
    assert set(pipelines) == {"traces", "logs", "metrics"}
    for pipeline in pipelines.values():
        assert pipeline["receivers"] == ["otlp"]
        assert pipeline["processors"][0] == "memory_limiter", "memory_limiter must come first"
        assert "batch" in pipeline["processors"]
        for name in pipeline["processors"] + pipeline["exporters"]:
            section = "processors" if name in pipeline["processors"] else "exporters"
            assert name in doc[section], f"{name} is used but not defined"
    assert pipelines["traces"]["exporters"] == ["otlp/jaeger"]
    assert doc["exporters"]["otlp/jaeger"]["endpoint"].endswith(":4317")
