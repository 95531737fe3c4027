"""The ``otel-tooleval`` command line."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Mapping, Sequence

from . import __version__
from .config import ConfigError, load_config

__all__ = ["main"]


def _demo(args: argparse.Namespace) -> int:
    from .demo import run_demo
    from .demo.agent import default_config_text

    if args.print_config:
        sys.stdout.write(default_config_text())
        return 0
    config = load_config(args.config) if args.config else None
    run_demo(config, endpoint=args.endpoint)
    return 0


def _check(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    doc = {
        "graders": [{"name": g.name, "type": g.type,
                     "agents": sorted(g.agents) if g.agents else None,
                     "params": _params(g.grader)} for g in config.graders],
        "runs": config.runs.model_dump(),
        "limits": config.limits.model_dump(),
        "emit": config.emit.model_dump(),
    }
    json.dump(doc, sys.stdout, indent=2)
    sys.stdout.write("\n")
    print(f"{args.config}: {len(config.graders)} grader(s), valid.", file=sys.stderr)
    return 0


def _schema(args: argparse.Namespace) -> int:
    from .schema import config_schema

    json.dump(config_schema(), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


def _params(grader: object) -> object:
    """A grader's resolved options as plain data (pydantic models and dataclasses unfolded)."""
    params = getattr(grader, "params", None)
    if params is None:
        params = getattr(grader, "spec", None)
    return _plain(params)


def _plain(value: object) -> object:
    if hasattr(value, "model_dump"):
        return value.model_dump(exclude_none=True, mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="otel-tooleval",
        description="Grade what AI agents do with their tools, live, inside OpenTelemetry.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run a scripted agent and grade it live")
    demo.add_argument("--config", help="grader config (default: the embedded demo config)")
    demo.add_argument("--endpoint", help="OTLP endpoint (default: OTEL_EXPORTER_OTLP_ENDPOINT)")
    demo.add_argument("--print-config", action="store_true",
                      help="print the embedded demo config and exit")
    demo.set_defaults(func=_demo)
    check = sub.add_parser("check", help="validate a config and print the normalised graders")
    check.add_argument("config")
    check.set_defaults(func=_check)
    schema = sub.add_parser(
        "schema", help="print the JSON Schema of the config file (for editors)",
        description="Print the JSON Schema of the config file. Save it and point your editor at "
                    "it with a first line '# yaml-language-server: $schema=tooleval.schema.json'.")
    schema.set_defaults(func=_schema)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return int(args.func(args))
    except ConfigError as exc:
        print(f"otel-tooleval: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:   # e.g. `otel-tooleval schema | head`
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
