"""The ``otel-tooleval serve`` process: start, wait for a signal, drain, and the lines printed."""

from __future__ import annotations

import logging
import signal
import sys
import time

from .grpc_receiver import quiet_grpc_core
from .options import ServeOptions
from .server import ToolEvalServer

#: How often the main thread looks at what the signals asked for.
_POLL_SECONDS = 0.1


def run(options: ServeOptions) -> int:
    """Serve until SIGTERM or SIGINT, then drain; SIGHUP reloads the bearer tokens and the TLS
    files. Exit status: 0 when everything accepted was forwarded, 1 when the shutdown timeout
    cut the drain short, 2 when a port cannot be bound."""
    quiet_grpc_core(logging.getLogger("otel_tooleval").getEffectiveLevel())
    server = ToolEvalServer(options)
    try:
        server.start()
    except OSError as exc:
        print(f"otel-tooleval serve: {exc}", file=sys.stderr)
        server.stop(timeout=1)
        return 2
    # The signal handlers only note what was asked: a handler runs on the main thread between
    # two bytecodes, so one that took a lock (an Event's, a reload's, logging's) could wait
    # forever for a lock the interrupted code holds. The loop below acts on the notes.
    asked = {"stop": False, "reload": False}

    def on_signal(signum: int, frame: object) -> None:
        asked["stop"] = True

    def on_hangup(signum: int, frame: object) -> None:
        asked["reload"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    # SIGHUP re-reads --bearer-token-file and the TLS files (a bad file keeps the old); with
    # neither, it does nothing: by default it would end the process without a drain.
    signal.signal(signal.SIGHUP, on_hangup)
    where = [f"OTLP/gRPC on {options.grpc.rsplit(':', 1)[0]}:{server.grpc_port}"
             if options.grpc else "", f"OTLP/HTTP on {options.http.rsplit(':', 1)[0]}:"
             f"{server.http_port} (/v1/traces, /healthz)" if options.http else ""]
    print(f"otel-tooleval serve: listening for {', '.join(w for w in where if w)}; "
          f"forwarding to {options.forward} ({options.forward_protocol}); "
          f"decision wait {options.decision_wait:g} s", file=sys.stderr, flush=True)
    while not asked["stop"]:
        time.sleep(_POLL_SECONDS)
        if asked["reload"] and not asked["stop"]:
            asked["reload"] = False     # SIGHUPs during the reload: one more reload after it
            server.reload()
    print("otel-tooleval serve: draining", file=sys.stderr, flush=True)
    ok = server.stop()
    stats = server.stats()
    print(f"otel-tooleval serve: stopped; {stats.get('accepted_spans', 0)} spans accepted, "
          f"{stats.get('forwarded_spans', 0)} forwarded, {stats.get('runs_graded', 0)} runs graded"
          + (f", {stats['sessions_graded']} sessions graded" if "sessions_graded" in stats else "")
          + ("" if ok else "; NOT everything was forwarded before the shutdown timeout"),
          file=sys.stderr, flush=True)
    return 0 if ok else 1
