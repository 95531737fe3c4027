"""Haystack's native tracing (``haystack.*`` keys; the scope is the application's tracer).

An agent is the component whose ``haystack.component.type`` is ``Agent`` (its name is the
component's ``haystack.component.name``); each agent step (``haystack.agent.step``) is one
model response; tools are ``haystack.agent.step.tool`` spans. The model call itself is the
step's child ``haystack.agent.step.llm``, known by the key its response is recorded under
(``haystack.agent.step.llm.output``): a model span nested in the step's, which therefore counts
no step of its own, and whose response is the step's (``trajectory._responses``: a model span
that records no response reads it from the model spans nested in it).
"""

from __future__ import annotations

from .spec import MODEL, Convention, KindMarker, ToolConvention

__all__ = ["CONVENTION"]

CONVENTION = Convention(
    name="haystack",
    markers=(KindMarker("haystack.component.type", agents=frozenset({"Agent"}), frames=False),
             KindMarker("haystack.agent.step", present=MODEL, frames=False),
             KindMarker("haystack.agent.step.llm.output", present=MODEL, frames=False)),
    tools=(ToolConvention(
        "haystack", "haystack.tool.name", ("haystack.agent.step.tool.input",),
        ("haystack.agent.step.tool.output",)),),
    agent_names=("haystack.component.name",),
    outputs=("haystack.component.output",),
)
