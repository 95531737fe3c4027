"""MLflow tracing exported over OTLP (scope ``mlflow.tracing.provider``).

Every attribute value is JSON text, the span type too (``mlflow.spanType = "\\"TOOL\\""``); a
tool span is named after the tool, with ``mlflow.spanInputs`` / ``mlflow.spanOutputs``.
"""

from __future__ import annotations

from .spec import Convention, KindMarker, ToolConvention

__all__ = ["CONVENTION"]

CONVENTION = Convention(
    name="mlflow",
    markers=(KindMarker("mlflow.spanType", agents=frozenset({'"AGENT"'}),
                        models=frozenset({'"CHAT_MODEL"', '"LLM"'})),),
    tools=(ToolConvention("mlflow", None, ("mlflow.spanInputs",), ("mlflow.spanOutputs",),
                          when=("mlflow.spanType", '"TOOL"')),),
    outputs=("mlflow.spanOutputs",),
)
