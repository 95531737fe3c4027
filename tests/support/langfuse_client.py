"""Run by ``tests/test_langfuse_sink.py`` with the langfuse package's own interpreter (its
virtual environment, ``.ci/run``): never imported by the tests, and imports nothing of ours.

Reads ``{"url", "public_key", "secret_key", "bodies"}`` as JSON on stdin. Each body (what the
sink POSTed: a list of scores, or one score) is parsed the way the package parses its API's
objects (``parse_obj_as``) into its ``CreateScoreRequest``, whose unknown fields land in
``model_extra``; then the package's own API client sends the parsed scores to ``url`` as its
``scores.create`` does. Writes ``{"version", "problems", "fields"}`` as JSON on stdout:
``problems`` lists every field the model does not know, or a body that did not parse.
"""

from __future__ import annotations

import json
import sys

import langfuse
from langfuse.api.client import LangfuseAPI
from langfuse.api.core.pydantic_utilities import parse_obj_as
from langfuse.api.scores.types.create_score_request import CreateScoreRequest


def main() -> None:
    job = json.load(sys.stdin)
    client = LangfuseAPI(base_url=job["url"], username=job["public_key"],
                         password=job["secret_key"])
    problems: list[str] = []
    fields: list[dict[str, object]] = []
    for body in job["bodies"]:
        items = body if isinstance(body, list) else [body]
        scores = []
        for item in items:
            try:
                score = parse_obj_as(CreateScoreRequest, item)
            except Exception as error:  # noqa: BLE001 - reported, not raised
                problems.append(f"{item.get('name')}: {error}")
                continue
            if score.model_extra:
                problems.append(f"{score.name}: unknown fields {sorted(score.model_extra)}")
            scores.append(score)
            fields.append({"name": score.name, "data_type": str(score.data_type.value),
                           "value": score.value, "trace_id": score.trace_id,
                           "observation_id": score.observation_id,
                           "session_id": score.session_id})
        client.scores.create(request=scores)
    json.dump({"version": langfuse.__version__, "problems": problems, "fields": fields},
              sys.stdout)


if __name__ == "__main__":
    main()
