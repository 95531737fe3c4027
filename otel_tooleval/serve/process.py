"""The ``otel-tooleval serve`` process: start, wait for a signal, drain, and the lines printed."""

from __future__ import annotations

import logging
import signal
import sys
import time

from .grpc_receiver import quiet_grpc_core
from .memory import return_large_blocks
from .server import ToolEvalServer
from .settings import ServeOptions

#: How often the main thread looks at what the signals asked for.
_POLL_SECONDS = 0.1
#: Seconds of --shutdown-timeout kept for the process's exit (at most a tenth of it).
_EXIT_RESERVE = 0.5
#: Descriptors serve keeps for itself beside ``--max-connections`` (gRPC connections, the
#: forwarder's, files, the interpreter's own).
_OWN_DESCRIPTORS = 256


def raise_file_limit(max_connections: int) -> str | None:
    """Raise this process's soft limit on open files to its hard limit, as Go servers and
    systemd's services commonly run (the soft default, 1,024 under systemd, is below
    ``--max-connections`` plus what serve needs itself). Returns a warning line when the limit
    stays below that, else None. Where the limit cannot be read or raised, nothing changes."""
    try:
        import resource
    except ImportError:   # not a POSIX system
        return None
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and soft < hard:
            # an unlimited hard limit is refused by some kernels: ask for what is needed then
            target = (hard if hard != resource.RLIM_INFINITY
                      else max(soft, max_connections + _OWN_DESCRIPTORS))
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    except (OSError, ValueError):
        return None
    needed = max_connections + _OWN_DESCRIPTORS
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return None
    return (f"otel-tooleval serve: the open-file limit is {soft} (hard limit {hard}), below "
            f"--max-connections {max_connections} plus about {_OWN_DESCRIPTORS} for serve "
            "itself: at the limit HTTP accepting pauses until connections close (raise it with "
            "`ulimit -n` or systemd's LimitNOFILE=, or lower --max-connections)")


def forwarding(options: ServeOptions) -> str:
    """Where the start line says the traces go: the next hop and its protocol, or nowhere."""
    if options.forward == "none":
        return ("forwarding nowhere: verdicts are only logged here (--forward URL or "
                "OTEL_EXPORTER_OTLP_ENDPOINT sends the traces and their verdicts on)")
    return f"forwarding to {options.forward} ({options.forward_protocol})"


def run(options: ServeOptions) -> int:
    """Serve until SIGTERM or SIGINT, then drain; SIGHUP reloads the bearer tokens and the TLS
    files. Exit status: 0 when everything accepted was forwarded, 1 when the shutdown timeout
    cut the drain short (the last line says what was not delivered), 2 when a port cannot be
    bound."""
    return_large_blocks()   # RSS follows what is held (memory.py)
    warning = raise_file_limit(options.max_connections)
    if warning is not None:
        print(warning, file=sys.stderr, flush=True)
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
             f"{server.http_port} (/v1/traces, /healthz)" if options.http else "",
             f"Prometheus scrapes on {options.metrics.rsplit(':', 1)[0]}:"
             f"{server.metrics_endpoint.port} (/metrics)"
             if options.metrics and server.metrics_endpoint is not None else ""]
    print(f"otel-tooleval serve: listening for {', '.join(w for w in where if w)}; "
          f"{forwarding(options)}; "
          f"decision wait {options.decision_wait:g} s", file=sys.stderr, flush=True)
    while not asked["stop"]:
        time.sleep(_POLL_SECONDS)
        if asked["reload"] and not asked["stop"]:
            asked["reload"] = False     # SIGHUPs during the reload: one more reload after it
            server.reload()
    print("otel-tooleval serve: draining", file=sys.stderr, flush=True)
    # The process ends within --shutdown-timeout of the signal: the stop gets the timeout less
    # what the signal's poll, the last lines and the interpreter's exit take on a busy machine.
    timeout = options.shutdown_timeout
    ok = server.stop(timeout=max(timeout - min(_EXIT_RESERVE, timeout / 10) - _POLL_SECONDS, 0.0))
    stats = server.stats()
    # One write, line break included: a telemetry exporter given up on at the deadline may
    # still log from its daemon thread, and must not land inside this line.
    print(f"otel-tooleval serve: stopped; {stats.get('accepted_spans', 0)} spans accepted,"
          + (" none forwarded (no next hop)," if options.forward == "none"
             else f" {stats.get('forwarded_spans', 0)} forwarded,")
          + f" {stats.get('runs_graded', 0)} runs graded"
          + (f", {stats['sessions_graded']} sessions graded" if "sessions_graded" in stats else "")
          + ("" if ok else "; NOT everything was delivered before the shutdown timeout: "
             + ("; ".join(server.undelivered()) or "see /healthz's counters")) + "\n",
          end="", file=sys.stderr, flush=True)
    return 0 if ok else 1
