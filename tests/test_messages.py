"""The model's own requests: ``conventions.messages`` on recorded and written model spans."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from otel_tooleval.conventions.messages import (
    Requested,
    records_messages,
    requested_calls,
    returned_results,
)

DATA = Path(__file__).parent / "data" / "messages"

#: Model spans copied from the recordings in tests/data/frameworks (see each file's ``source``):
#: the response with the two parallel calls, and the last response (text, every result handed
#: back in its input).
RECORDED = sorted(p.stem for p in DATA.glob("*.json"))


def _span(name: str, which: str) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
    doc = json.loads((DATA / f"{name}.json").read_text())[which]
    return doc["attributes"], [(event[0], event[1]) for event in doc["events"]]


def test_recorded_formats_are_all_there() -> None:
    assert len(RECORDED) >= 10


@pytest.mark.parametrize("name", RECORDED)
def test_parallel_calls_in_the_order_issued(name: str) -> None:
    attrs, events = _span(name, "parallel")
    assert requested_calls(attrs, events) == [
        Requested("get_weather", {"city": "Lyon"}, "call_2_0", 0),
        Requested("convert_temp", {"celsius": 21}, "call_2_1", 1),
    ]
    assert records_messages(attrs, events)


@pytest.mark.parametrize("name", RECORDED)
def test_final_answer_requests_nothing_and_hands_back_every_result(name: str) -> None:
    attrs, events = _span(name, "last")
    assert requested_calls(attrs, events) == []
    results = returned_results(attrs, events)
    assert set(results) == {"call_0_0", "call_1_0", "call_2_0", "call_2_1"}
    assert results["call_0_0"] == "Paris"
    assert results["call_1_0"] == {"city": "Paris", "temp_c": 21.0}
    assert results["call_2_0"] == {"city": "Lyon", "temp_c": 18.0}
    # As the framework handed it back: the text "69.8", or the number.
    assert float(results["call_2_1"]) == 69.8


@pytest.mark.parametrize("name", RECORDED)
def test_results_of_the_parallel_response_are_the_earlier_ones(name: str) -> None:
    attrs, events = _span(name, "parallel")
    results = returned_results(attrs, events)
    assert set(results) == {"call_0_0", "call_1_0"}


def test_no_content_recorded_is_none() -> None:
    attrs = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"}
    assert requested_calls(attrs) is None
    assert returned_results(attrs) == {}
    assert not records_messages(attrs)
