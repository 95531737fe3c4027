"""collector-config/ is parsed and checked for what it wires (no collector or Docker engine here).

Every YAML file under collector-config/ is found by glob and must be a collector config, a compose
file, a Prometheus config or a graders config. Each kind has checks written as functions that
return a list of problems, so the negative tests can break a loaded document in memory and see
the problem reported. The fleet's grading hop (the `serve` command line and the ungraded agent)
is also run for real, against an in-process OTLP receiver standing in for tier 2.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import re
import runpy
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from urllib.request import urlopen

import pytest
import yaml

from otel_tooleval import ConfigError, load_config
from otel_tooleval.sessions import DEFAULT_KEYS
from tests.support.otlp_receiver import OtlpReceiver

ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR = ROOT / "collector-config"
YAML_FILES = sorted({*CONFIG_DIR.rglob("*.yaml"), *CONFIG_DIR.rglob("*.yml")})
COMPOSE_SERVICES = {  # services each compose file must start
    "docker-compose.yaml": {"collector", "jaeger", "prometheus", "agent"},
    "fleet/docker-compose.yaml": {"tier1", "tooleval-1", "tooleval-2", "tier2", "jaeger",
                                  "prometheus"},
}
COLLECTOR_ROLES = {"otelcol.yaml": "storage", "fleet/tier1.yaml": "router",
                   "fleet/tier2.yaml": "storage"}
DEFAULT_COLLECTOR_CONFIG = "/etc/otelcol-contrib/config.yaml"
PROMETHEUS_CONFIG = "/etc/prometheus/prometheus.yml"
JAEGER_PORTS = {"grpc": 4317, "http": 4318, "ui": 16686}
PROMETHEUS_PORTS = {"ui": 9090}
# An agent run (model calls, tool calls) commonly lasts tens of seconds; the tail sampler must
# wait at least this long after a trace's first span for the root span and its verdict.
MIN_DECISION_WAIT_S = 30.0

Doc = dict[str, Any]
Loader = Callable[[Path], Any]


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def rel(path: Path) -> str:
    return path.relative_to(CONFIG_DIR).as_posix()


def kind_of(doc: Any) -> str:
    if not isinstance(doc, dict):
        return "unknown"
    if isinstance(doc.get("service"), dict) and "pipelines" in doc["service"]:
        return "collector"
    if isinstance(doc.get("services"), dict):
        return "compose"
    if "scrape_configs" in doc:
        return "prometheus"
    if "graders" in doc:
        return "graders"
    if "rule_files" in doc and "tests" in doc:
        return "rules_test"   # promtool test rules (tests/test_prometheus.py runs it)
    if set(doc) == {"groups"}:
        return "rules"   # Prometheus recording and alert rules (promtool: test_prometheus.py)
    if set(doc) == {"exporters"}:
        return "overlay"   # merged onto a collector config with a second --config
    return "unknown"


def ctype(component_id: str) -> str:
    """`otlp/jaeger` -> `otlp`."""
    return component_id.split("/", 1)[0]


def host_port(endpoint: str) -> tuple[str, int]:
    """`http://tier2:4318`, `tier2:4318` or `0.0.0.0:4318` -> (host, port)."""
    if "://" in endpoint:
        parts = urlsplit(endpoint)
        if parts.hostname is None or parts.port is None:
            raise ValueError(f"{endpoint!r} has no host:port")
        return parts.hostname, parts.port
    host, _, port = endpoint.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{endpoint!r} is not host:port")
    return host, int(port)


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration_seconds(text: object) -> float:
    """A Go duration string (`60s`, `1m30s`, `500ms`) in seconds."""
    if not isinstance(text, str):
        raise TypeError(f"{text!r} is not a duration string")
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"{text!r} is not a duration")
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)


# ================================================================ collector configs

SECTIONS = ("receivers", "processors", "exporters", "connectors", "extensions")
SIGNALS = ("traces", "metrics", "logs")


def pipelines(doc: Doc) -> dict[str, Doc]:
    return (doc.get("service") or {}).get("pipelines") or {}


def signal_pipelines(doc: Doc, signal: str) -> dict[str, Doc]:
    return {name: p for name, p in pipelines(doc).items() if ctype(name) == signal}


def check_components(doc: Doc) -> list[str]:
    """Every component a pipeline names is defined; every defined one is used."""
    problems: list[str] = []
    defined = {section: set(doc.get(section) or {}) for section in SECTIONS}
    used: dict[str, set[str]] = {section: set() for section in SECTIONS}
    if not pipelines(doc):
        problems.append("service.pipelines is empty")
    roles = {"receivers": ("receivers", "connectors"), "processors": ("processors",),
             "exporters": ("exporters", "connectors")}
    for name, pipeline in pipelines(doc).items():
        if ctype(name) not in SIGNALS:
            problems.append(f"pipeline {name}: unknown signal")
        for role, sections in roles.items():
            ids = (pipeline or {}).get(role) or []
            if role != "processors" and not ids:
                problems.append(f"pipeline {name} has no {role}")
            if len(ids) != len(set(ids)):
                problems.append(f"pipeline {name} lists a {role[:-1]} twice")
            for cid in ids:
                section = next((s for s in sections if cid in defined[s]), None)
                if section is None:
                    problems.append(f"pipeline {name}: {role[:-1]} {cid} is not defined")
                else:
                    used[section].add(cid)
    for cid in (doc.get("service") or {}).get("extensions") or []:
        if cid not in defined["extensions"]:
            problems.append(f"service.extensions: {cid} is not defined")
        used["extensions"].add(cid)
    for section in SECTIONS:
        for cid in sorted(defined[section] - used[section]):
            problems.append(f"{section[:-1]} {cid} is defined but no pipeline uses it")
    return problems


def check_processor_order(doc: Doc) -> list[str]:
    """memory_limiter first and batch last in every pipeline; tail_sampling only on traces."""
    problems: list[str] = []
    for name, pipeline in pipelines(doc).items():
        types = [ctype(p) for p in (pipeline or {}).get("processors") or []]
        if not types or types[0] != "memory_limiter":
            problems.append(f"pipeline {name}: memory_limiter must come first, got {types}")
        if "batch" not in types:
            problems.append(f"pipeline {name}: no batch processor")
        elif types[-1] != "batch":
            problems.append(f"pipeline {name}: batch must come last, got {types}")
        if "tail_sampling" in types and ctype(name) != "traces":
            problems.append(f"pipeline {name}: tail_sampling works on traces only")
    return problems


def check_otlp_receiver(doc: Doc) -> list[str]:
    """An OTLP receiver listening on gRPC and HTTP on all interfaces (inside a container)."""
    receivers = {k: v for k, v in (doc.get("receivers") or {}).items() if ctype(k) == "otlp"}
    if not receivers:
        return ["no otlp receiver"]
    problems: list[str] = []
    for name, cfg in receivers.items():
        protocols = (cfg or {}).get("protocols") or {}
        for protocol in ("grpc", "http"):
            endpoint = (protocols.get(protocol) or {}).get("endpoint")
            if endpoint is None:
                problems.append(f"receiver {name}: no {protocol} endpoint")
            elif host_port(endpoint)[0] != "0.0.0.0":
                problems.append(f"receiver {name}: {protocol} listens on {endpoint}, "
                                "unreachable from other containers")
    return problems


# contrib 0.129 processor/tailsamplingprocessor/config.go (tests/data/collector_keys: the
# release's keys for every component; tests/test_collector_keys.py checks them all)
TAIL_SAMPLING_KEYS = {
    "decision_wait", "num_traces", "expected_new_traces_per_sec", "decision_cache", "policies",
    "sample_on_first_match",
}
POLICY_FIELDS: dict[str, set[str]] = {  # processor/tailsamplingprocessor config, per policy type
    "always_sample": set(),
    "boolean_attribute": {"key", "value", "invert_match"},
    "probabilistic": {"hash_salt", "sampling_percentage"},
    "status_code": {"status_codes"},
    "string_attribute": {"key", "values", "enabled_regex_matching", "cache_max_size",
                         "invert_match"},
    "numeric_attribute": {"key", "min_value", "max_value", "invert_match"},
    "latency": {"threshold_ms", "upper_threshold_ms"},
    "span_count": {"min_spans", "max_spans"},
    "rate_limiting": {"spans_per_second"},
    "trace_state": {"key", "values"},
}


def sampling_processors(doc: Doc, pipeline: Doc) -> dict[str, Doc]:
    return {cid: (doc.get("processors") or {}).get(cid) or {}
            for cid in pipeline.get("processors") or []
            if ctype(cid) in ("tail_sampling", "probabilistic_sampler")}


def check_policy(policy: Doc) -> list[str]:
    name, kind = policy.get("name"), policy.get("type")
    if not name:
        return [f"policy {policy}: no name"]
    if kind not in POLICY_FIELDS:
        return [f"policy {name}: unknown or unsupported type {kind!r}"]
    problems = [f"policy {name}: {key} is not a field of a {kind} policy"
                for key in sorted(set(policy) - {"name", "type", kind})]
    block = policy.get(kind)
    if POLICY_FIELDS[kind] and not isinstance(block, dict):
        problems.append(f"policy {name}: no {kind} block")
    elif isinstance(block, dict):
        problems += [f"policy {name}: {kind}.{key} is not a field"
                     for key in sorted(set(block) - POLICY_FIELDS[kind])]
    return problems


def check_tail_sampling(doc: Doc) -> list[str]:
    """Traces: keep every failed run and every error trace, sample the rest."""
    traces = signal_pipelines(doc, "traces")
    found = [(cid, cfg) for p in traces.values() for cid, cfg in sampling_processors(doc, p).items()
             if ctype(cid) == "tail_sampling"]
    if not found:
        return ["no tail_sampling processor in a traces pipeline"]
    problems: list[str] = []
    for cid, cfg in found:
        problems += [f"{cid}: unknown key {key}" for key in sorted(set(cfg) - TAIL_SAMPLING_KEYS)]
        try:
            wait = duration_seconds(cfg.get("decision_wait"))
        except (TypeError, ValueError) as exc:
            problems.append(f"{cid}: decision_wait: {exc}")
            wait = 0.0
        if wait < MIN_DECISION_WAIT_S:
            problems.append(f"{cid}: decision_wait {wait}s is shorter than an agent run "
                            f"(at least {MIN_DECISION_WAIT_S}s)")
        rate, capacity = cfg.get("expected_new_traces_per_sec"), cfg.get("num_traces")
        if not isinstance(rate, int) or not isinstance(capacity, int) or rate <= 0:
            problems.append(f"{cid}: num_traces and expected_new_traces_per_sec must be set")
        elif capacity < rate * wait:
            problems.append(f"{cid}: num_traces {capacity} < {rate}/s x {wait}s: traces would be "
                            "evicted before their decision")
        cache = cfg.get("decision_cache") or {}
        problems += [f"{cid}: decision_cache.{key} is not a field" for key in
                     sorted(set(cache) - {"sampled_cache_size", "non_sampled_cache_size"})]
        policies = cfg.get("policies") or []
        for policy in policies:
            problems += [f"{cid}: {p}" for p in check_policy(policy)]
        names = [p.get("name") for p in policies]
        if len(names) != len(set(names)):
            problems.append(f"{cid}: policy names repeat")
        by_type: dict[str, list[Doc]] = {}
        for policy in policies:
            by_type.setdefault(policy.get("type"), []).append(policy.get(policy.get("type")) or {})
        if not any(b.get("key") == "tooleval.passed" and b.get("value") is False
                   and not b.get("invert_match") for b in by_type.get("boolean_attribute", [])):
            problems.append(f"{cid}: no boolean_attribute policy keeping tooleval.passed = false "
                            "(a YAML boolean, not a string)")
        if not any(isinstance(b.get("sampling_percentage"), (int, float))
                   and 0 < b["sampling_percentage"] < 100 for b in by_type.get("probabilistic", [])):
            problems.append(f"{cid}: no probabilistic policy sampling part of the rest")
        if not any("ERROR" in (b.get("status_codes") or []) for b in by_type.get("status_code", [])):
            problems.append(f"{cid}: no status_code policy keeping ERROR traces")
        if "always_sample" in by_type:
            problems.append(f"{cid}: an always_sample policy keeps everything")
    return problems


def exporters_of(doc: Doc, signal: str) -> dict[str, Doc]:
    return {cid: (doc.get("exporters") or {}).get(cid) or {}
            for p in signal_pipelines(doc, signal).values() for cid in p.get("exporters") or []}


def check_storage_exporters(doc: Doc) -> list[str]:
    """Traces to Jaeger over OTLP; metrics to a prometheus exporter Prometheus can scrape."""
    problems: list[str] = []
    jaeger = exporters_of(doc, "traces").get("otlp/jaeger")
    if jaeger is None:
        problems.append("traces are not exported to otlp/jaeger")
    else:
        if host_port(jaeger.get("endpoint", "")) != ("jaeger", JAEGER_PORTS["grpc"]):
            problems.append(f"otlp/jaeger: endpoint {jaeger.get('endpoint')} is not jaeger:4317")
        if (jaeger.get("tls") or {}).get("insecure") is not True:
            problems.append("otlp/jaeger: tls.insecure must be true (plain gRPC in the network)")
    proms = {k: v for k, v in exporters_of(doc, "metrics").items() if ctype(k) == "prometheus"}
    if not proms:
        problems.append("metrics are not exported to a prometheus exporter")
    for cid, cfg in proms.items():
        if host_port(cfg.get("endpoint", ":"))[0] != "0.0.0.0":
            problems.append(f"{cid}: endpoint {cfg.get('endpoint')} cannot be scraped from "
                            "another container")
    if not exporters_of(doc, "logs"):
        problems.append("logs go nowhere")
    return problems


def check_router(doc: Doc, routing: str = "traceID") -> list[str]:
    """Tier 1: traces routed whole by trace id to the graders, unsampled; the rest to tier 2.

    ``routing="attributes"``: by the session keys instead (tier1-sessions.yaml merged on)."""
    problems: list[str] = []
    for name, pipeline in pipelines(doc).items():
        for cid in sampling_processors(doc, pipeline):
            problems.append(f"pipeline {name}: {cid} samples before grading; runs would be lost "
                            "before anyone sees their verdict")
    traces = exporters_of(doc, "traces")
    balancers = {k: v for k, v in traces.items() if ctype(k) == "loadbalancing"}
    if not balancers or set(traces) != set(balancers):
        problems.append(f"traces must go only to a loadbalancing exporter, got {sorted(traces)}")
    for cid, cfg in balancers.items():
        if cfg.get("routing_key") != routing:
            problems.append(f"{cid}: routing_key must be {routing}, got {cfg.get('routing_key')}")
        if routing == "attributes" and cfg.get("routing_attributes") != list(DEFAULT_KEYS):
            problems.append(f"{cid}: routing_attributes must be the session keys "
                            f"{list(DEFAULT_KEYS)}, got {cfg.get('routing_attributes')}")
        if routing == "traceID" and "routing_attributes" in cfg:
            problems.append(f"{cid}: routing_attributes without routing_key: attributes")
        otlp = (cfg.get("protocol") or {}).get("otlp")
        if not isinstance(otlp, dict):
            problems.append(f"{cid}: protocol.otlp missing")
            otlp = {}
        if "endpoint" in otlp:
            problems.append(f"{cid}: protocol.otlp.endpoint is set per backend, not here")
        # The graders listen on 0.0.0.0 with TLS and bearer tokens (serve refuses it without).
        if (otlp.get("tls") or {}).get("insecure") or not (otlp.get("tls") or {}).get("ca_file"):
            problems.append(f"{cid}: protocol.otlp.tls needs ca_file (the graders speak TLS)")
        authenticator = (otlp.get("auth") or {}).get("authenticator")
        if not authenticator or ctype(authenticator) != "bearertokenauth":
            problems.append(f"{cid}: protocol.otlp.auth.authenticator must be a bearertokenauth "
                            "extension (the graders want a bearer token)")
        elif authenticator not in ((doc.get("service") or {}).get("extensions") or []):
            problems.append(f"{cid}: extension {authenticator} is not in service.extensions")
        hostnames = ((cfg.get("resolver") or {}).get("static") or {}).get("hostnames") or []
        if len(set(hostnames)) < 2:
            problems.append(f"{cid}: static resolver needs at least two graders, got {hostnames}")
        for hostname in hostnames:
            try:
                host_port(hostname)
            except ValueError as exc:
                problems.append(f"{cid}: {exc}")
        # serve answers RESOURCE_EXHAUSTED + RetryInfo under backpressure: retry and queue.
        if (cfg.get("retry_on_failure") or {}).get("enabled") is not True:
            problems.append(f"{cid}: retry_on_failure must be enabled")
        if (cfg.get("sending_queue") or {}).get("enabled") is not True:
            problems.append(f"{cid}: sending_queue must be enabled")
    for signal in ("logs", "metrics"):
        for cid, cfg in exporters_of(doc, signal).items():
            if ctype(cid) not in ("otlp", "otlphttp"):
                problems.append(f"{signal} exporter {cid}: {signal} go straight to tier 2 over OTLP")
            elif host_port(cfg.get("endpoint", ":"))[0] != "tier2":
                problems.append(f"{signal} exporter {cid}: endpoint {cfg.get('endpoint')} "
                                "is not tier 2")
        if not exporters_of(doc, signal):
            problems.append(f"{signal} go nowhere")
    return problems


def role_of(doc: Doc) -> str:
    balancing = any(ctype(k) == "loadbalancing" for k in doc.get("exporters") or {})
    return "router" if balancing else "storage"


def check_collector(doc: Doc, routing: str = "traceID") -> list[str]:
    problems = check_components(doc) + check_processor_order(doc) + check_otlp_receiver(doc)
    if role_of(doc) == "router":
        return problems + check_router(doc, routing)
    return problems + check_tail_sampling(doc) + check_storage_exporters(doc)


def collector_listen_ports(doc: Doc) -> dict[str, int]:
    ports: dict[str, int] = {}
    for name, cfg in (doc.get("receivers") or {}).items():
        if ctype(name) == "otlp":
            for protocol, pcfg in ((cfg or {}).get("protocols") or {}).items():
                ports[protocol] = host_port((pcfg or {}).get("endpoint", ":"))[1]
    for name, cfg in (doc.get("exporters") or {}).items():
        if ctype(name) == "prometheus":
            ports["prometheus"] = host_port(cfg["endpoint"])[1]
    readers = (((doc.get("service") or {}).get("telemetry") or {}).get("metrics") or {}).get(
        "readers") or []
    for reader in readers:
        exporter = ((reader.get("pull") or {}).get("exporter") or {}).get("prometheus")
        if exporter:
            ports["telemetry"] = int(exporter["port"])
    return ports


# ================================================================ serve command line

def serve_parser() -> argparse.ArgumentParser:
    """`otel-tooleval serve` as ARCHITECTURE.md specifies it."""
    parser = argparse.ArgumentParser(prog="otel-tooleval serve", add_help=False)
    parser.add_argument("--config", required=True)
    parser.add_argument("--grpc", default="127.0.0.1:4317")
    parser.add_argument("--http", default="127.0.0.1:4318")
    parser.add_argument("--forward")
    parser.add_argument("--forward-protocol", choices=["grpc", "http/protobuf"])
    parser.add_argument("--decision-wait", type=float)
    parser.add_argument("--max-buffered-spans", type=int)
    parser.add_argument("--max-body-bytes", type=int)
    parser.add_argument("--shutdown-timeout", type=float, default=30.0)
    parser.add_argument("--tls-cert")
    parser.add_argument("--tls-key")
    parser.add_argument("--tls-client-ca")
    parser.add_argument("--bearer-token-file")
    parser.add_argument("--insecure-bind", action="store_true")
    return parser


def cli_serve_parser() -> argparse.ArgumentParser | None:
    """The real `serve` subcommand's parser, once the CLI has one."""
    from otel_tooleval import cli

    make = getattr(cli, "_parser", None)
    if make is None:
        return None
    for action in make()._actions:
        if isinstance(action, argparse._SubParsersAction) and "serve" in action.choices:
            return action.choices["serve"]  # type: ignore[no-any-return]
    return None


def parse_serve(args: list[str]) -> tuple[argparse.Namespace | None, list[str]]:
    problems: list[str] = []
    parsed = None
    parsers = [serve_parser(), cli_serve_parser()]
    for parser in [p for p in parsers if p is not None]:
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                namespace = parser.parse_args(args)
        except (SystemExit, argparse.ArgumentError) as exc:
            problems.append(f"serve {' '.join(args)}: {err.getvalue().strip() or exc}")
        else:
            parsed = parsed or namespace
    return (None if problems else parsed), problems


# ================================================================ compose files

def command_words(service: Doc) -> list[list[str]]:
    """The service's command as shell commands (split on && ; ||), each a list of words."""
    command = service.get("command")
    if command is None:
        return []
    words = shlex.split(command) if isinstance(command, str) else [str(w) for w in command]
    if words[:2] in (["sh", "-c"], ["bash", "-c"]):
        words = shlex.split(words[2])
    segments: list[list[str]] = [[]]
    for word in words:
        if word in ("&&", ";", "||"):
            segments.append([])
        else:
            segments[-1].append(word)
    return [s for s in segments if s]


def serve_args(service: Doc) -> list[str] | None:
    for words in command_words(service):
        for i, word in enumerate(words[:-1]):
            if word == "otel-tooleval" and words[i + 1] == "serve":
                return words[i + 2:]
    return None


def environment(service: Doc) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


def bind_mounts(service: Doc) -> list[tuple[str, str]]:
    """(host path, container path) of every bind mount."""
    mounts = []
    for volume in service.get("volumes") or []:
        if isinstance(volume, dict):
            if volume.get("type") == "bind":
                mounts.append((volume["source"], volume["target"]))
            continue
        source, target = volume.split(":")[:2]
        if source.startswith((".", "/", "~")):
            mounts.append((source, target))
    return mounts


def host_path(service: Doc, container_path: str, compose_dir: Path) -> Path | None:
    """The host file behind a container path, through the longest matching bind mount."""
    best = None
    for source, target in bind_mounts(service):
        inside = container_path == target or container_path.startswith(target.rstrip("/") + "/")
        if inside and (best is None or len(target) > len(best[1])):
            best = (source, target)
    if best is None:
        return None
    return (compose_dir / best[0] / container_path[len(best[1]):].lstrip("/")).resolve()


def is_collector(service: Doc) -> bool:
    return str(service.get("image", "")).startswith("otel/opentelemetry-collector")


def collector_config_path(service: Doc) -> str:
    words = [w for segment in command_words(service) for w in segment]
    for i, word in enumerate(words):
        if word.startswith("--config="):
            return word.split("=", 1)[1]
        if word == "--config" and i + 1 < len(words):
            return words[i + 1]
    return DEFAULT_COLLECTOR_CONFIG


def check_compose_files(doc: Doc, compose_dir: Path) -> list[str]:
    """Mounted host paths exist inside the repository; images are pinned."""
    problems: list[str] = []
    for name, service in (doc.get("services") or {}).items():
        image = str(service.get("image", ""))
        tag = image.rpartition(":")[2] if ":" in image else ""
        if not tag or tag == "latest":
            problems.append(f"{name}: image {image!r} is not pinned to a version")
        for source, target in bind_mounts(service):
            path = (compose_dir / source).resolve()
            if not path.exists():
                problems.append(f"{name}: mounted {source} ({path}) does not exist")
            elif path != ROOT and ROOT not in path.parents:
                problems.append(f"{name}: mounted {source} is outside the repository")
        for words in command_words(service):
            for word in words:
                mapped = host_path(service, word, compose_dir) if word.startswith("/") else None
                if mapped is not None and not mapped.exists():
                    problems.append(f"{name}: command uses {word}, but {mapped} does not exist")
    return problems


class Wiring:
    """What each compose service listens on, read from its own config."""

    def __init__(self, doc: Doc, compose_dir: Path, load: Loader) -> None:
        self.services: dict[str, Doc] = doc.get("services") or {}
        self.dir = compose_dir
        self.problems: list[str] = []
        self.collectors: dict[str, Doc] = {}
        self.serves: dict[str, argparse.Namespace] = {}
        self.ports: dict[str, dict[str, int]] = {}
        for name, service in self.services.items():
            args = serve_args(service)
            image = str(service.get("image", ""))
            if is_collector(service):
                path = host_path(service, collector_config_path(service), compose_dir)
                if path is None or not path.exists():
                    self.problems.append(f"{name}: collector config is not mounted")
                    continue
                self.collectors[name] = load(path)
                self.ports[name] = collector_listen_ports(self.collectors[name])
            elif args is not None:
                parsed, problems = parse_serve(args)
                self.problems += [f"{name}: {p}" for p in problems]
                if parsed is not None:
                    self.serves[name] = parsed
                    self.ports[name] = {protocol: host_port(address)[1] for protocol, address
                                        in (("grpc", parsed.grpc), ("http", parsed.http))
                                        if address != "off"}
            elif image.startswith("jaegertracing/jaeger:"):
                if environment(service).get("JAEGER_LISTEN_HOST") != "0.0.0.0":
                    self.problems.append(f"{name}: JAEGER_LISTEN_HOST=0.0.0.0 is needed for OTLP "
                                         "from other containers")
                self.ports[name] = dict(JAEGER_PORTS)
            elif image.startswith("prom/prometheus:"):
                self.ports[name] = dict(PROMETHEUS_PORTS)

    def check_target(self, where: str, endpoint: str, protocol: str) -> None:
        """`endpoint` must reach a service port speaking `protocol` (grpc or http)."""
        try:
            host, port = host_port(endpoint)
        except ValueError as exc:
            self.problems.append(f"{where}: {exc}")
            return
        if host not in self.services:
            self.problems.append(f"{where}: {host} is not a service of this compose file")
        elif self.ports.get(host, {}).get(protocol) != port:
            self.problems.append(f"{where}: {host}:{port} is not where {host} listens for OTLP "
                                 f"{protocol} ({self.ports.get(host)})")


def check_compose_wiring(doc: Doc, compose_dir: Path, load: Loader = load_yaml) -> list[str]:
    """Endpoints, forwards, balancer backends and scrape targets meet a listening port."""
    w = Wiring(doc, compose_dir, load)
    for name, service in w.services.items():
        env = environment(service)
        if "OTEL_EXPORTER_OTLP_ENDPOINT" in env:
            protocol = env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
            w.check_target(f"{name}: OTEL_EXPORTER_OTLP_ENDPOINT", env["OTEL_EXPORTER_OTLP_ENDPOINT"],
                           "grpc" if protocol == "grpc" else "http")
        for port in service.get("ports") or []:
            container_port = int(str(port).split(":")[-1].split("/")[0])
            if container_port not in w.ports.get(name, {}).values():
                w.problems.append(f"{name}: publishes {container_port}, where nothing listens")
    for name, args in w.serves.items():
        service = w.services[name]
        for flag, value in (("--grpc", args.grpc), ("--http", args.http)):
            if value != "off" and host_port(value)[0] != "0.0.0.0":
                w.problems.append(f"{name}: {flag} {value} is unreachable from other containers")
        if not (args.tls_cert and args.tls_key and args.bearer_token_file):
            w.problems.append(f"{name}: serve on 0.0.0.0 needs --tls-cert, --tls-key and "
                              "--bearer-token-file")
        graders = host_path(service, args.config, compose_dir)
        if graders is None or not graders.exists():
            w.problems.append(f"{name}: --config {args.config} is not mounted")
        else:
            try:
                load_config(graders)
            except ConfigError as exc:
                w.problems.append(f"{name}: --config {args.config}: {exc}")
        grace = duration_seconds(str(service.get("stop_grace_period", "10s")))
        if grace <= args.shutdown_timeout:
            w.problems.append(f"{name}: stop_grace_period {grace}s does not leave serve its "
                              f"--shutdown-timeout {args.shutdown_timeout}s to drain")
        env = environment(service)
        forward = args.forward or env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "none")
        if forward == "none":
            w.problems.append(f"{name}: graded traces are forwarded nowhere")
        else:
            wire = args.forward_protocol or env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
            w.check_target(f"{name}: --forward", forward, "grpc" if wire == "grpc" else "http")
            target = w.collectors.get(host_port(forward)[0])
            for cid, cfg in ((target or {}).get("processors") or {}).items():
                if ctype(cid) == "tail_sampling" and args.decision_wait is not None:
                    wait = duration_seconds(cfg.get("decision_wait"))
                    if wait <= args.decision_wait:
                        w.problems.append(f"{name}: {cid} decision_wait {wait}s must exceed the "
                                          f"grader's --decision-wait {args.decision_wait}s")
    # Each grader's metrics need their own series: same service.name, distinct instance ids.
    instances = [dict(pair.split("=", 1) for pair in environment(w.services[name]).get(
        "OTEL_RESOURCE_ATTRIBUTES", "").split(",") if "=" in pair).get("service.instance.id")
        for name in w.serves]
    if len(instances) > 1 and (None in instances or len(set(instances)) < len(instances)):
        w.problems.append(f"graders need distinct service.instance.id values in "
                          f"OTEL_RESOURCE_ATTRIBUTES, got {instances}: their counters would mix")
    for name, config in w.collectors.items():
        for cid, cfg in (config.get("exporters") or {}).items():
            if ctype(cid) == "otlp":
                w.check_target(f"{name}: exporter {cid}", cfg.get("endpoint", ""), "grpc")
            elif ctype(cid) == "otlphttp":
                w.check_target(f"{name}: exporter {cid}", cfg.get("endpoint", ""), "http")
            elif ctype(cid) == "loadbalancing":
                hostnames = ((cfg.get("resolver") or {}).get("static") or {}).get("hostnames")
                for hostname in hostnames or []:
                    w.check_target(f"{name}: {cid} backend", hostname, "grpc")
                    if host_port(hostname)[0] not in w.serves:
                        w.problems.append(f"{name}: {cid} backend {hostname} does not run "
                                          "otel-tooleval serve")
    w.problems += check_scrape_wiring(w, load)
    return w.problems


def check_scrape_wiring(w: Wiring, load: Loader) -> list[str]:
    """Prometheus scrapes ports the collectors expose, among them the prometheus exporter."""
    problems: list[str] = []
    proms = [n for n, s in w.services.items() if str(s.get("image", "")).startswith("prom/")]
    exporter_targets = {(n, p["prometheus"]) for n, p in w.ports.items() if "prometheus" in p}
    for name in proms:
        path = host_path(w.services[name], PROMETHEUS_CONFIG, w.dir)
        if path is None or not path.exists():
            problems.append(f"{name}: {PROMETHEUS_CONFIG} is not mounted")
            continue
        scraped = set()
        for job in load(path).get("scrape_configs") or []:
            for static in job.get("static_configs") or []:
                for target in static.get("targets") or []:
                    host, port = host_port(target)
                    scraped.add((host, port))
                    exposed = w.ports.get(host, {})
                    if port not in (exposed.get("prometheus"), exposed.get("telemetry")):
                        problems.append(f"{name}: job {job.get('job_name')} scrapes {target}, "
                                        f"which serves no metrics ({exposed})")
        if not exporter_targets & scraped:
            problems.append(f"{name}: no job scrapes a collector's prometheus exporter "
                            f"({sorted(exporter_targets)})")
    return problems


def check_prometheus_config(doc: Doc) -> list[str]:
    problems: list[str] = []
    for job in doc.get("scrape_configs") or []:
        targets = [t for s in job.get("static_configs") or [] for t in s.get("targets") or []]
        if not job.get("job_name") or not targets:
            problems.append(f"scrape job {job.get('job_name')}: needs a name and targets")
        for target in targets:
            try:
                host_port(target)
            except ValueError as exc:
                problems.append(f"job {job.get('job_name')}: {exc}")
    if not doc.get("scrape_configs"):
        problems.append("no scrape_configs")
    return problems


def check_rules(doc: Doc) -> list[str]:
    """The shape promtool checks too: named groups of recording or alert rules with an expr."""
    problems = []
    for group in doc.get("groups") or []:
        for rule in group.get("rules") or []:
            if ("record" in rule) == ("alert" in rule) or not rule.get("expr"):
                problems.append(f"group {group.get('name')}: {rule}: needs record or alert, "
                                "and expr")
    return problems


def test_prometheus_configs_load_the_rules(docs: dict[str, Any]) -> None:
    """Both Prometheus configs load rules.yaml from where their compose file mounts it."""
    for name in ("prometheus.yml", "fleet/prometheus.yml"):
        assert docs[name]["rule_files"] == ["/etc/prometheus/rules/rules.yaml"], name
        compose = docs[name.replace("prometheus.yml", "docker-compose.yaml")]
        mounts = compose["services"]["prometheus"]["volumes"]
        source = next(m.split(":")[0] for m in mounts if ":/etc/prometheus/rules:" in m)
        assert (CONFIG_DIR / Path(name).parent / source / "rules.yaml").is_file(), name


# ================================================================ overlays (a second --config)

OVERLAYS = {"fleet/tier1-sessions.yaml": "tier1.yaml"}   # overlay -> the file it goes on


def merge(base: Any, overlay: Any) -> Any:
    """The collector's merge of two --config files: maps merged key by key, the rest replaced."""
    if isinstance(base, dict) and isinstance(overlay, dict):
        out = dict(base)
        for key, value in overlay.items():
            out[key] = merge(base.get(key), value) if key in base else value
        return out
    return overlay


def check_overlay(doc: Doc) -> list[str]:
    """The sessions overlay changes the routing of the loadbalancing exporter and nothing else."""
    exporters = doc.get("exporters") or {}
    if set(exporters) != {"loadbalancing"}:
        return [f"the overlay may only touch exporters.loadbalancing, got {sorted(exporters)}"]
    extra = set(exporters["loadbalancing"] or {}) - {"routing_key", "routing_attributes"}
    return [f"the overlay changes more than the routing: {sorted(extra)}"] if extra else []


# ================================================================ tests: every file

@pytest.fixture(scope="module")
def docs() -> dict[str, Any]:
    return {rel(path): load_yaml(path) for path in YAML_FILES}


def test_the_glob_finds_the_files_this_test_knows() -> None:
    names = {rel(p) for p in YAML_FILES}
    assert set(COLLECTOR_ROLES) | set(COMPOSE_SERVICES) | {"prometheus.yml",
                                                           "fleet/prometheus.yml"} <= names


@pytest.mark.parametrize("path", YAML_FILES, ids=rel)
def test_yaml_file(path: Path) -> None:
    """Every YAML file under collector-config/ is of a kind with checks, and passes them."""
    doc = load_yaml(path)
    kind = kind_of(doc)
    if kind == "collector":
        assert check_collector(doc) == []
    elif kind == "compose":
        assert check_compose_files(doc, path.parent) == []
        assert check_compose_wiring(doc, path.parent) == []
        expected = COMPOSE_SERVICES.get(rel(path), {"jaeger", "prometheus"})
        assert expected <= set(doc["services"])
    elif kind == "prometheus":
        assert check_prometheus_config(doc) == []
    elif kind == "graders":
        load_config(path)
    elif kind == "rules":
        assert check_rules(doc) == []
    elif kind == "rules_test":
        assert all((path.parent / name).is_file() for name in doc["rule_files"])
    elif kind == "overlay":
        assert check_overlay(doc) == []
        base = load_yaml(path.parent / OVERLAYS[rel(path)])
        assert check_collector(merge(base, doc), routing="attributes") == []
    else:
        pytest.fail(f"{rel(path)}: no check knows this kind of file")


def test_every_config_is_mounted_by_a_compose_file(docs: dict[str, Any]) -> None:
    mounted: set[Path] = set()
    for name, doc in docs.items():
        if kind_of(doc) == "compose":
            compose_dir = (CONFIG_DIR / name).parent
            for service in doc["services"].values():
                mounted |= {(compose_dir / src).resolve() for src, _ in bind_mounts(service)}
    for name, doc in docs.items():
        if kind_of(doc) in ("collector", "prometheus", "graders", "overlay"):
            assert (CONFIG_DIR / name).resolve() in mounted, f"{name} is used by no compose file"


def test_collector_roles(docs: dict[str, Any]) -> None:
    for name, role in COLLECTOR_ROLES.items():
        assert role_of(docs[name]) == role, name


def test_pipelines_wire_otlp_in_and_jaeger_out(docs: dict[str, Any]) -> None:
    doc = docs["otelcol.yaml"]
    assert set(doc["receivers"]["otlp"]["protocols"]) == {"grpc", "http"}
    wired = pipelines(doc)
    assert set(wired) == {"traces", "logs", "metrics"}
    for pipeline in wired.values():
        assert pipeline["receivers"] == ["otlp"]
    assert wired["traces"]["processors"] == ["memory_limiter", "tail_sampling", "batch"]
    assert wired["traces"]["exporters"] == ["otlp/jaeger"]
    assert wired["metrics"]["exporters"] == ["prometheus"]
    assert doc["exporters"]["prometheus"]["endpoint"] == "0.0.0.0:8889"


def test_fleet_wiring(docs: dict[str, Any]) -> None:
    tier1, tier2 = docs["fleet/tier1.yaml"], docs["fleet/tier2.yaml"]
    assert set(tier1["exporters"]["loadbalancing"]["resolver"]["static"]["hostnames"]) == {
        "tooleval-1:4317", "tooleval-2:4317"}
    assert pipelines(tier1)["traces"]["processors"] == ["memory_limiter", "batch"]
    assert pipelines(tier2)["traces"]["processors"] == ["memory_limiter", "tail_sampling", "batch"]
    for name in ("tooleval-1", "tooleval-2"):
        args = serve_args(docs["fleet/docker-compose.yaml"]["services"][name])
        assert args is not None
        parsed, problems = parse_serve(args)
        assert problems == [] and parsed is not None
        assert (parsed.forward, parsed.forward_protocol) == ("http://tier2:4318", "http/protobuf")
        assert (parsed.grpc, parsed.http, parsed.decision_wait) == ("0.0.0.0:4317",
                                                                    "0.0.0.0:4318", 5.0)
        assert (parsed.tls_cert, parsed.tls_key, parsed.bearer_token_file) == (
            "/certs/server.pem", "/certs/server-key.pem", "/certs/token")
        assert not parsed.insecure_bind


def demo_span_count() -> int:
    """Spans of the demo scripts: per run a root, a chat span per turn, the calls, a last chat."""
    from otel_tooleval.demo.agent import SCRIPTS

    return sum(2 + sum(1 + len(calls) for calls in turns) for _, turns in SCRIPTS)


def test_ungraded_fleet_agent_exports_plain_spans(
        receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.http_endpoint)
    module = runpy.run_path(str(CONFIG_DIR / "fleet" / "ungraded_agent.py"), run_name="agent")
    module["main"]()
    spans = receiver.spans()
    roots = [s for s in spans if s["parent_span_id"] is None]
    assert len(roots) == 4 and {s["resource"]["service.name"] for s in spans} == {"travel-agent"}
    assert len(spans) == demo_span_count()
    assert not [s for s in spans if any(k.startswith("tooleval.") for k in s["attributes"])]


def test_fleet_grader_command_grades_the_ungraded_agent(
        docs: dict[str, Any], receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch) -> None:
    """The serve command line of the fleet compose file, run here on loopback ports."""
    from otel_tooleval.serve import ToolEvalServer, options_from_args

    service = docs["fleet/docker-compose.yaml"]["services"]["tooleval-1"]
    args, problems = parse_serve(serve_args(service) or [])
    assert args is not None, problems
    graders = host_path(service, args.config, CONFIG_DIR / "fleet")
    options = options_from_args(  # tier2 replaced by the test receiver, ports chosen by the OS
        str(graders), grpc="127.0.0.1:0", http="127.0.0.1:0", forward=receiver.http_endpoint,
        forward_protocol=args.forward_protocol, decision_wait=0.2)
    with ToolEvalServer(options) as server:
        health = urlopen(f"http://127.0.0.1:{server.http_port}/healthz", timeout=5)
        assert health.status == 200
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{server.http_port}")
        runpy.run_path(str(CONFIG_DIR / "fleet" / "ungraded_agent.py"), run_name="agent")["main"]()

        def verdicts() -> list[bool]:
            return [s["attributes"]["tooleval.passed"] for s in receiver.spans()
                    if "tooleval.passed" in s["attributes"]]

        assert receiver.wait_for(lambda: len(verdicts()) == 4, timeout=20), receiver.spans()
    assert sorted(verdicts()) == [False, False, True, True]
    agent_spans = {s["span_id"] for s in receiver.spans()
                   if s["resource"].get("service.name") == "travel-agent"}
    assert len(agent_spans) == demo_span_count()  # every span forwarded, not only the roots
    assert receiver.wait_for(lambda: any(r["event_name"] == "gen_ai.evaluation.result"
                                         for r in receiver.logs()), timeout=10)


def test_fleet_certificates_let_tier1_reach_a_grader(
        docs: dict[str, Any], receiver: OtlpReceiver, tmp_path: Path) -> None:
    """make_certs.py (the `certs` service) and the graders' TLS and token flags, on loopback:
    a client with the fleet's CA and token, as tier 1 is, gets in; one without the token does
    not."""
    import grpc
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    from otel_tooleval.serve import ToolEvalServer, options_from_args
    from tests.test_serve import demo_spans

    service = docs["fleet/docker-compose.yaml"]["services"]["certs"]
    words = command_words(service)[-1]
    make_certs = runpy.run_path(str(CONFIG_DIR / "fleet" / "make_certs.py"), run_name="certs")
    assert make_certs["main"]([str(tmp_path), *words[3:]]) == 0   # python /opt/make_certs.py /certs …
    assert make_certs["main"]([str(tmp_path), *words[3:]]) == 0   # kept on a second start
    args, problems = parse_serve(serve_args(docs["fleet/docker-compose.yaml"]["services"][
        "tooleval-1"]) or [])
    assert args is not None, problems
    local = {flag: str(tmp_path / Path(getattr(args, flag)).name)
             for flag in ("tls_cert", "tls_key", "bearer_token_file")}
    options = options_from_args(str(CONFIG_DIR.parent / "examples/plain_otel/graders.yaml"),
                                grpc="127.0.0.1:0", http=None, forward=receiver.http_endpoint,
                                forward_protocol="http/protobuf", decision_wait=0.1, **local)
    token = (tmp_path / "token").read_text().strip()
    credentials = grpc.ssl_channel_credentials((tmp_path / "ca.pem").read_bytes())
    with ToolEvalServer(options) as server:
        def exporter(headers: dict[str, str] | None) -> OTLPSpanExporter:
            return OTLPSpanExporter(endpoint=f"localhost:{server.grpc_port}", insecure=False,
                                    credentials=credentials, headers=headers, timeout=5)

        spans = demo_spans()
        assert exporter(None).export(spans) == SpanExportResult.FAILURE
        assert exporter({"authorization": f"Bearer {token}"}).export(spans) == \
            SpanExportResult.SUCCESS
        assert receiver.wait_for(lambda: len(receiver.spans()) == len(spans))


# ================================================================ tests: the checks catch faults

def mutated(docs: dict[str, Any], name: str, change: Callable[[Doc], object]) -> Doc:
    doc: Doc = copy.deepcopy(docs[name])
    change(doc)
    return doc


def _ts(doc: Doc) -> Doc:
    ts: Doc = doc["processors"]["tail_sampling"]
    return ts


def _policy(doc: Doc, kind: str) -> Doc:
    return next(p for p in _ts(doc)["policies"] if p["type"] == kind)


def _lb(doc: Doc) -> Doc:
    lb: Doc = doc["exporters"]["loadbalancing"]
    return lb


COLLECTOR_FAULTS: list[tuple[str, str, Callable[[Doc], object], str]] = [
    ("otelcol.yaml", "no memory_limiter",
     lambda d: pipelines(d)["traces"]["processors"].remove("memory_limiter"),
     "memory_limiter must come first"),
    ("otelcol.yaml", "batch before tail_sampling",
     lambda d: pipelines(d)["traces"].update(processors=["memory_limiter", "batch",
                                                         "tail_sampling"]),
     "batch must come last"),
    ("otelcol.yaml", "passed as a string",
     lambda d: _policy(d, "boolean_attribute")["boolean_attribute"].update(value="false"),
     "tooleval.passed = false"),
    ("otelcol.yaml", "keeps passing runs", lambda d: _policy(d, "boolean_attribute")[
        "boolean_attribute"].update(value=True), "tooleval.passed = false"),
    ("otelcol.yaml", "misspelt field", lambda d: _policy(d, "boolean_attribute")[
        "boolean_attribute"].update(values=False), "values is not a field"),
    ("otelcol.yaml", "no probabilistic policy", lambda d: _ts(d)["policies"].remove(
        _policy(d, "probabilistic")), "no probabilistic policy"),
    ("otelcol.yaml", "no error policy", lambda d: _ts(d)["policies"].remove(
        _policy(d, "status_code")), "no status_code policy"),
    ("otelcol.yaml", "short decision_wait", lambda d: _ts(d).update(decision_wait="5s"),
     "shorter than an agent run"),
    ("otelcol.yaml", "too few traces held", lambda d: _ts(d).update(num_traces=100),
     "evicted before their decision"),
    ("otelcol.yaml", "no tail sampling", lambda d: pipelines(d)["traces"].update(
        processors=["memory_limiter", "batch"]), "no tail_sampling processor"),
    ("otelcol.yaml", "undefined exporter", lambda d: pipelines(d)["metrics"].update(
        exporters=["prometheusremotewrite"]), "prometheusremotewrite is not defined"),
    ("otelcol.yaml", "unused processor", lambda d: d["processors"].update(
        attributes={"actions": []}), "attributes is defined but no pipeline uses it"),
    ("otelcol.yaml", "jaeger on localhost", lambda d: d["exporters"]["otlp/jaeger"].update(
        endpoint="localhost:4317"), "is not jaeger:4317"),
    ("otelcol.yaml", "receiver on loopback", lambda d: d["receivers"]["otlp"]["protocols"][
        "http"].update(endpoint="127.0.0.1:4318"), "unreachable from other containers"),
    ("fleet/tier1.yaml", "samples before grading",
     lambda d: (d["processors"].update(tail_sampling=copy.deepcopy(
         load_yaml(CONFIG_DIR / "fleet/tier2.yaml")["processors"]["tail_sampling"])),
                pipelines(d)["traces"].update(processors=["memory_limiter", "tail_sampling",
                                                          "batch"])),
     "samples before grading"),
    ("fleet/tier1.yaml", "routes by service", lambda d: _lb(d).update(routing_key="service"),
     "routing_key must be traceID"),
    ("fleet/tier1.yaml", "one grader", lambda d: _lb(d)["resolver"]["static"].update(
        hostnames=["tooleval-1:4317"]), "at least two graders"),
    ("fleet/tier1.yaml", "no queue", lambda d: _lb(d).pop("sending_queue"),
     "sending_queue must be enabled"),
    ("fleet/tier1.yaml", "logs through the graders", lambda d: pipelines(d)["logs"].update(
        exporters=["loadbalancing"]), "logs go straight to tier 2"),
    ("fleet/tier1.yaml", "metrics to jaeger", lambda d: d["exporters"]["otlp/tier2"].update(
        endpoint="jaeger:4317"), "is not tier 2"),
    ("fleet/tier1.yaml", "plaintext to the graders", lambda d: _lb(d)["protocol"]["otlp"].update(
        tls={"insecure": True}), "tls needs ca_file"),
    ("fleet/tier1.yaml", "no token for the graders",
     lambda d: _lb(d)["protocol"]["otlp"].pop("auth"), "must be a bearertokenauth"),
    ("fleet/tier1.yaml", "token extension not started",
     lambda d: d["service"].pop("extensions"), "not in service.extensions"),
]


@pytest.mark.parametrize(("name", "fault", "change", "expected"), COLLECTOR_FAULTS,
                         ids=[f"{n}: {f}" for n, f, _, _ in COLLECTOR_FAULTS])
def test_collector_checks_catch(docs: dict[str, Any], name: str, fault: str,
                               change: Callable[[Doc], object], expected: str) -> None:
    assert check_collector(docs[name]) == []
    problems = check_collector(mutated(docs, name, change))
    assert any(expected in p for p in problems), problems


def _service(doc: Doc, name: str) -> Doc:
    service: Doc = doc["services"][name]
    return service


def _serve_command(doc: Doc, old: str, new: str) -> None:
    for name in ("tooleval-1", "tooleval-2"):
        command = _service(doc, name)["command"]
        command[-1] = command[-1].replace(old, new)


COMPOSE_FAULTS: list[tuple[str, str, Callable[[Doc], object], str]] = [
    ("docker-compose.yaml", "agent to a closed port", lambda d: _service(d, "agent")[
        "environment"].update(OTEL_EXPORTER_OTLP_ENDPOINT="http://collector:4319"),
     "is not where collector listens"),
    ("docker-compose.yaml", "agent speaks gRPC to the HTTP port", lambda d: _service(d, "agent")[
        "environment"].update(OTEL_EXPORTER_OTLP_PROTOCOL="grpc"), "OTLP grpc"),
    ("docker-compose.yaml", "agent to an unknown host", lambda d: _service(d, "agent")[
        "environment"].update(OTEL_EXPORTER_OTLP_ENDPOINT="http://otelcol:4318"),
     "otelcol is not a service"),
    ("docker-compose.yaml", "published port nothing listens on",
     lambda d: _service(d, "collector")["ports"].append("55679:55679"), "publishes 55679"),
    ("docker-compose.yaml", "jaeger on loopback", lambda d: _service(d, "jaeger").pop(
        "environment"), "JAEGER_LISTEN_HOST"),
    ("docker-compose.yaml", "config not mounted", lambda d: _service(d, "collector").update(
        volumes=[]), "collector config is not mounted"),
    ("fleet/docker-compose.yaml", "unknown serve flag",
     lambda d: _serve_command(d, "--grpc 0.0.0.0:4317", "--grpc-port 4317"), "unrecognized"),
    ("fleet/docker-compose.yaml", "forward protocol and port disagree",
     lambda d: _serve_command(d, "http/protobuf", "grpc"), "OTLP grpc"),
    ("fleet/docker-compose.yaml", "serve on loopback",
     lambda d: _serve_command(d, "--grpc 0.0.0.0:4317", "--grpc 127.0.0.1:4317"),
     "unreachable from other containers"),
    ("fleet/docker-compose.yaml", "public grader without a token",
     lambda d: _serve_command(d, "--bearer-token-file /certs/token ", ""),
     "needs --tls-cert, --tls-key and --bearer-token-file"),
    ("fleet/docker-compose.yaml", "grader waits longer than the sampler",
     lambda d: _serve_command(d, "--decision-wait 5", "--decision-wait 90"),
     "must exceed the grader's --decision-wait"),
    ("fleet/docker-compose.yaml", "killed while draining",
     lambda d: _service(d, "tooleval-2").pop("stop_grace_period"), "does not leave serve"),
    ("fleet/docker-compose.yaml", "graders' metrics mixed",
     lambda d: _service(d, "tooleval-2")["environment"].update(
         OTEL_RESOURCE_ATTRIBUTES="service.instance.id=tooleval-1"), "distinct service.instance.id"),
    ("fleet/docker-compose.yaml", "graders config not mounted",
     lambda d: _service(d, "tooleval-1").update(volumes=["../..:/src:ro"]),
     "--config /etc/tooleval/graders.yaml is not mounted"),
    ("fleet/docker-compose.yaml", "balancer backend not running serve",
     lambda d: d["services"].pop("tooleval-2"), "tooleval-2 is not a service"),
]


@pytest.mark.parametrize(("name", "fault", "change", "expected"), COMPOSE_FAULTS,
                         ids=[f"{n}: {f}" for n, f, _, _ in COMPOSE_FAULTS])
def test_compose_wiring_checks_catch(docs: dict[str, Any], name: str, fault: str,
                                     change: Callable[[Doc], object], expected: str) -> None:
    compose_dir = (CONFIG_DIR / name).parent
    problems = check_compose_wiring(mutated(docs, name, change), compose_dir)
    assert any(expected in p for p in problems), problems


def test_scrape_checks_catch_a_wrong_port(docs: dict[str, Any]) -> None:
    def load(path: Path) -> Any:
        doc = load_yaml(path)
        if path.name == "prometheus.yml":
            doc["scrape_configs"][0]["static_configs"][0]["targets"] = ["collector:9999"]
        return doc

    problems = check_compose_wiring(docs["docker-compose.yaml"], CONFIG_DIR, load)
    assert any("scrapes collector:9999" in p for p in problems), problems
    assert any("no job scrapes a collector's prometheus exporter" in p for p in problems)


def test_exporter_port_change_is_caught_by_the_scrape_check(docs: dict[str, Any]) -> None:
    def load(path: Path) -> Any:
        doc = load_yaml(path)
        if path.name == "tier2.yaml":
            doc["exporters"]["prometheus"]["endpoint"] = "0.0.0.0:9464"
        return doc

    problems = check_compose_wiring(docs["fleet/docker-compose.yaml"], CONFIG_DIR / "fleet", load)
    assert any("scrapes tier2:8889" in p for p in problems), problems


def test_serve_graders_config_is_loaded(docs: dict[str, Any], tmp_path: Path) -> None:
    bad = tmp_path / "graders.yaml"
    bad.write_text("graders:\n  - name: x\n    type: tool-calls\n    config: {requird: []}\n")
    doc = mutated(docs, "fleet/docker-compose.yaml", lambda d: _service(d, "tooleval-1").update(
        volumes=["../..:/src:ro", f"{bad}:/etc/tooleval/graders.yaml:ro"]))
    problems = check_compose_wiring(doc, CONFIG_DIR / "fleet")
    assert any("tooleval-1: --config /etc/tooleval/graders.yaml:" in p for p in problems), problems


def test_mount_checks_catch_a_missing_file(docs: dict[str, Any]) -> None:
    doc = mutated(docs, "docker-compose.yaml", lambda d: _service(d, "collector").update(
        volumes=["./otelcol-missing.yaml:/etc/otelcol-contrib/config.yaml:ro"]))
    assert any("does not exist" in p for p in check_compose_files(doc, CONFIG_DIR))
    doc = mutated(docs, "docker-compose.yaml", lambda d: _service(d, "agent").update(
        command=["sh", "-c", "python /src/examples/plain_otel/agnet.py"]))
    assert any("agnet.py" in p for p in check_compose_files(doc, CONFIG_DIR))
    doc = mutated(docs, "docker-compose.yaml", lambda d: _service(d, "jaeger").update(
        image="jaegertracing/jaeger:latest"))
    assert any("not pinned" in p for p in check_compose_files(doc, CONFIG_DIR))


def test_duration_parsing() -> None:
    assert duration_seconds("60s") == 60 and duration_seconds("1m30s") == 90
    assert duration_seconds("500ms") == 0.5
    for bad in ("60", "sixty seconds", "1m 30s"):
        with pytest.raises(ValueError):
            duration_seconds(bad)
    with pytest.raises(TypeError):
        duration_seconds(60)


# ================================================================ sessions: routing by the key

def test_sessions_overlay_routes_by_the_session_keys(docs: dict[str, Any]) -> None:
    """tier1.yaml alone routes by trace id; with tier1-sessions.yaml merged on, by the session
    keys (the loadbalancing exporter's `routing_key: attributes`), everything else unchanged."""
    tier1, overlay = docs["fleet/tier1.yaml"], docs["fleet/tier1-sessions.yaml"]
    merged = merge(tier1, overlay)
    lb = _lb(merged)
    assert (lb["routing_key"], lb["routing_attributes"]) == ("attributes", list(DEFAULT_KEYS))
    assert _lb(tier1)["routing_key"] == "traceID"   # the default fleet keeps runs whole
    without = {k: v for k, v in lb.items() if k not in ("routing_key", "routing_attributes")}
    assert without == {k: v for k, v in _lb(tier1).items() if k != "routing_key"}
    assert {k: v for k, v in merged.items() if k != "exporters"} == {
        k: v for k, v in tier1.items() if k != "exporters"}
    assert check_collector(merged) != []                      # not a trace-id router any more
    assert check_collector(merged, routing="attributes") == []
    tier1_service = docs["fleet/docker-compose.yaml"]["services"]["tier1"]
    assert ("./tier1-sessions.yaml", "/etc/otelcol-contrib/sessions.yaml") in [
        (src, dst.split(":")[0]) for src, dst in
        ((v.split(":", 1)[0], v.split(":", 1)[1]) for v in tier1_service["volumes"]
         if isinstance(v, str) and v.startswith("./"))]


@pytest.mark.parametrize(("fault", "expected"), [
    (lambda o: o["exporters"]["loadbalancing"].update(routing_attributes=["session.id"]),
     "routing_attributes must be the session keys"),
    (lambda o: o["exporters"]["loadbalancing"].update(routing_key="service"),
     "routing_key must be attributes"),
    (lambda o: o["exporters"]["loadbalancing"].update(timeout="1s"),
     "the overlay changes more than the routing"),
    (lambda o: o["exporters"].update({"otlp/x": {"endpoint": "x:4317"}}),
     "the overlay may only touch exporters.loadbalancing"),
], ids=["one key", "by service", "timeout", "another exporter"])
def test_sessions_overlay_checks_catch(docs: dict[str, Any], fault: Callable[[Doc], object],
                                       expected: str) -> None:
    overlay = copy.deepcopy(docs["fleet/tier1-sessions.yaml"])
    fault(overlay)
    problems = check_overlay(overlay) + check_collector(
        merge(docs["fleet/tier1.yaml"], overlay), routing="attributes")
    assert any(expected in p for p in problems), problems


def test_trace_id_router_refuses_stray_routing_attributes(docs: dict[str, Any]) -> None:
    tier1 = copy.deepcopy(docs["fleet/tier1.yaml"])
    _lb(tier1)["routing_attributes"] = ["session.id"]
    assert any("routing_attributes without" in p for p in check_collector(tier1))
