"""Every key of every collector config in collector-config/ is one its component accepts at the
pinned release (tests/data/collector_keys/components.yaml, written down from the components'
Go config structs), and no setting the collector cannot start without is left to an empty default.

No collector binary runs here; this is the `otelcol-contrib validate` of what can be checked on
paper: unknown keys (the collector refuses them at startup), component types the pinned contrib
distribution does not have, an enabled queue whose default `sizer` is empty (core queuebatch:
`unsupported sizer ""` while the exporter is built), a retry whose default multiplier is 0 (never
exponential), a balancer whose per-backend queues hide failures from it, and `routing_key`
values a signal does not have at that release. Overlays are merged onto their base as the
collector merges several --config files: maps merged key by key, lists and scalars replaced.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.test_collector_config import CONFIG_DIR, OVERLAYS, YAML_FILES, kind_of, merge, rel

KEYS_FILE = Path(__file__).resolve().parent / "data" / "collector_keys" / "components.yaml"
SECTIONS = ("receivers", "processors", "exporters", "extensions", "connectors")
TOP_LEVEL = {*SECTIONS, "service"}

Doc = dict[str, Any]


@cache
def keys_data() -> Doc:
    data: Doc = yaml.safe_load(KEYS_FILE.read_text())
    return data


def schema_problems(where: str, value: Any, schema: Any) -> list[str]:
    """Keys of `value` that `schema` (see components.yaml) does not accept, as `where.key`."""
    if schema is None or schema in ("map", "list") or not isinstance(schema, dict):
        return []
    if value is None:
        return []
    if not isinstance(value, dict):
        return [f"{where}: expected a map of settings, got {value!r}"]
    problems: list[str] = []
    for key, sub in value.items():
        if key not in schema:
            problems.append(f"{where}.{key}: unknown key (not a setting at "
                            f"{keys_data()['release']})")
        else:
            problems += schema_problems(f"{where}.{key}", sub, schema[key])
    return problems


def lookup(cfg: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(cfg, dict):
            return None
        cfg = cfg.get(part)
    return cfg


def default_problems(cid: str, cfg: Doc, spec: Doc) -> list[str]:
    """Settings whose default at the pinned release cannot work and which the file leaves out."""
    problems: list[str] = []
    for dotted, default in (spec.get("defaults") or {}).items():
        parent, _, leaf = dotted.rpartition(".")
        block = lookup(cfg, parent)
        if not isinstance(block, dict) or not block.get("enabled"):
            continue
        if leaf in block:
            continue
        if leaf == "sizer" and default == "":
            problems.append(f"{cid}.{dotted}: required; its default here is empty and the "
                            'exporter fails to build (queue_batch: unsupported sizer "")')
        elif leaf == "multiplier" and default == 0:
            problems.append(f"{cid}.{dotted}: defaults to 0 here, so every wait is "
                            "initial_interval (never exponential): set it")
        elif leaf == "randomization_factor" and default == 0:
            problems.append(f"{cid}.{dotted}: defaults to 0 here (no jitter): set it")
    return problems


def balancer_problems(cid: str, cfg: Doc, signals: set[str], spec: Doc) -> list[str]:
    problems: list[str] = []
    queue = cfg.get("sending_queue") or {}
    sub_queue = lookup(cfg, "protocol.otlp.sending_queue")
    if queue.get("enabled") and not (isinstance(sub_queue, dict)
                                     and sub_queue.get("enabled") is False):
        problems.append(f"{cid}.protocol.otlp.sending_queue: the per-backend queue (on by "
                        "default) accepts at once and drops after its retries, so the top-level "
                        "queue never sees a failure to route again: set enabled: false")
    key = cfg.get("routing_key", "traceID")
    for signal in sorted(signals):
        if key not in spec["routing_keys"].get(signal, []):
            problems.append(f"{cid}.routing_key: {key!r} is not a routing key for {signal} "
                            f"at {keys_data()['release']}")
    return problems


def check_keys(doc: Doc) -> list[str]:
    """Every problem of one (merged) collector config against the pinned release."""
    data = keys_data()
    problems = [f"{key}: unknown top-level section" for key in sorted(set(doc) - TOP_LEVEL)]
    problems += schema_problems("service", doc.get("service"), data["service"])
    signals_of: dict[str, set[str]] = {}
    for name, pipeline in ((doc.get("service") or {}).get("pipelines") or {}).items():
        for cid in (pipeline or {}).get("exporters") or []:
            signals_of.setdefault(cid, set()).add(name.split("/", 1)[0])
    for section in SECTIONS:
        known = data["components"].get(section) or {}
        for cid, cfg in (doc.get(section) or {}).items():
            ctype = cid.split("/", 1)[0]
            spec = known.get(ctype)
            if spec is None:
                problems.append(f"{section}.{cid}: no {section[:-1]} {ctype!r} in "
                                f"{data['release']} (tests/data/collector_keys)")
                continue
            cfg = cfg or {}
            problems += schema_problems(f"{section}.{cid}", cfg, spec["keys"])
            problems += default_problems(f"{section}.{cid}", cfg, spec)
            if ctype == "loadbalancing":
                problems += balancer_problems(f"{section}.{cid}", cfg,
                                              signals_of.get(cid, set()), spec)
    return problems


def collector_docs() -> dict[str, Doc]:
    """Every collector config in collector-config/, overlays merged onto their base."""
    loaded = {rel(path): yaml.safe_load(path.read_text()) for path in YAML_FILES}
    docs = {name: doc for name, doc in loaded.items() if kind_of(doc) == "collector"}
    for name, base in OVERLAYS.items():
        base_name = (Path(name).parent / base).as_posix()
        docs[f"{base_name} + {name}"] = merge(loaded[base_name], loaded[name])
    return docs


def test_the_keys_file_names_its_release_and_sources() -> None:
    data = keys_data()
    assert data["release"].startswith("otelcol-contrib 0.129")
    for section, components in data["components"].items():
        for ctype, spec in components.items():
            assert spec.get("source") and spec.get("checked"), f"{section}.{ctype}"
    for compose in ("docker-compose.yaml", "fleet/docker-compose.yaml"):
        images = [svc.get("image", "") for svc in
                  yaml.safe_load((CONFIG_DIR / compose).read_text())["services"].values()]
        pinned = [i for i in images if "opentelemetry-collector-contrib" in i]
        assert pinned and all(i.endswith(":" + data["release"].split()[1]) for i in pinned)


def test_every_collector_config_is_found() -> None:
    assert set(collector_docs()) == {"otelcol.yaml", "fleet/tier1.yaml", "fleet/tier2.yaml",
                                     "fleet/tier1.yaml + fleet/tier1-sessions.yaml"}


@pytest.mark.parametrize("name", sorted(collector_docs()))
def test_every_key_is_accepted_at_the_pinned_release(name: str) -> None:
    assert check_keys(collector_docs()[name]) == []


def _tail(key: str, value: Any) -> Callable[[Doc], None]:
    return lambda d: d["processors"]["tail_sampling"].update({key: value})


def _lb(d: Doc) -> Doc:
    cfg: Doc = d["exporters"]["loadbalancing"]
    return cfg


MUTATIONS: list[tuple[str, str, Callable[[Doc], None], str]] = [
    # the four tail-sampling keys tests/test_collector_config.py used to accept
    *[(f"tail_sampling {key}", base, _tail(key, value), f"tail_sampling.{key}: unknown key")
      for base in ("otelcol.yaml", "fleet/tier2.yaml")
      for key, value in (("decision_wait_after_root_received", "5s"),
                         ("block_on_overflow", True),
                         ("maximum_trace_size_bytes", 1 << 20),
                         ("drop_pending_traces_on_shutdown", True))],
    ("top-level queue without sizer", "fleet/tier1.yaml",
     lambda d: _lb(d)["sending_queue"].pop("sizer"), "sending_queue.sizer: required"),
    ("retry without multiplier", "fleet/tier1.yaml",
     lambda d: _lb(d)["retry_on_failure"].pop("multiplier"),
     "retry_on_failure.multiplier: defaults to 0"),
    ("per-backend queue on", "fleet/tier1.yaml",
     lambda d: _lb(d)["protocol"]["otlp"].pop("sending_queue"),
     "protocol.otlp.sending_queue: the per-backend queue"),
    ("attributes for logs", "fleet/tier1.yaml + fleet/tier1-sessions.yaml",
     lambda d: d["service"]["pipelines"]["logs"].update(exporters=["loadbalancing"]),
     "'attributes' is not a routing key for logs"),
    ("unknown component", "otelcol.yaml",
     lambda d: (d["exporters"].update({"kafkaish": {}}),
                d["service"]["pipelines"]["logs"]["exporters"].append("kafkaish")),
     "no exporter 'kafkaish'"),
    ("unknown nested key", "fleet/tier1.yaml",
     lambda d: _lb(d)["resolver"]["static"].update(endpoints=["a:4317"]),
     "resolver.static.endpoints: unknown key"),
    ("unknown service key", "otelcol.yaml",
     lambda d: d["service"].update(pipeline={}), "service.pipeline: unknown key"),
]


@pytest.mark.parametrize(("what", "base", "mutate", "expected"), MUTATIONS,
                         ids=[f"{m[1]}: {m[0]}" for m in MUTATIONS])
def test_a_bad_config_is_refused_naming_the_key(what: str, base: str,
                                                mutate: Callable[[Doc], None],
                                                expected: str) -> None:
    doc = copy.deepcopy(collector_docs()[base])
    mutate(doc)
    problems = check_keys(doc)
    assert any(expected in p for p in problems), (what, problems)
