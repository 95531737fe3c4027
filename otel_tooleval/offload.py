"""``grading.mode: process``: the live processor's graders in a child Python process.

Why: in one CPython process every thread shares one interpreter lock, so a grading thread's
CPU time is taken from the application however the work is scheduled. A child process
grades on another core. The application's process keeps what only it can do: reading the
run's spans into records, building the root copy with the verdicts, log events, metrics.

How (``otel_tooleval.worker`` has the wire format): the processor's grading thread turns each
run into plain tuples and hands them to :class:`GradingProcess`, which sends them in batches
(one pipe write while runs keep coming) and keeps each run until its verdict is back. A
receiver thread reads the verdicts in order and finishes each run through the processor.

Nothing is lost and nothing blocks the application:
- until the child has said it is ready (it starts on the first run, ~0.5 s), and for ever
  after it could not start or load the config, runs are graded on the thread as before;
- a child that exits has its unanswered runs graded on the thread, and is started again on
  the next run (at most ``MAX_STARTS`` times; then the thread grades for good);
- a run unanswered for ``grading.process_timeout_seconds`` ends the child (it hangs); its
  unanswered runs are forwarded ungraded and counted (``reason=grading_process``);
- at most ``limits.queue_size`` runs are in flight: the grading thread waits for room, and
  the application's queue in front of it fills and drops (counted) as in thread mode;
- after ``fork`` the child process of the parent is left to the parent.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any

from .worker import Verdict, read_frame, send

__all__ = ["MAX_STARTS", "GradingProcess", "InFlight", "process_unavailable"]

_log = logging.getLogger(__name__)

#: Times a grading process is started (the first time included) before the thread grades for good.
MAX_STARTS = 4
#: Runs sent in one pipe write at most.
_BATCH = 64
_WATCH_SECONDS = 1.0
_BOOT = ("import sys; sys.path[:0] = {path!r}; "
         "from otel_tooleval.worker import main; sys.exit(main())")


class InFlight:
    """A run sent to the child: what finishing it, or grading it here instead, needs."""

    __slots__ = ("dropped", "job", "models", "root", "sent", "tools")

    def __init__(self, job: Any, root: Any, tools: list[Any], models: list[Any],
                 dropped: int, sent: float) -> None:
        self.job = job            # the processor's RunJob (its root span, its claim)
        self.root = root          # the root's SpanRecord
        self.tools = tools
        self.models = models
        self.dropped = dropped
        self.sent = sent


def process_unavailable(config: Any) -> str | None:
    """Why this config cannot be graded in a child process here (None: it can)."""
    if not sys.executable or getattr(sys, "frozen", False):
        return "no Python interpreter to start (sys.executable is empty or the app is frozen)"
    if config.document is None:
        return "the config was not loaded from a document (a path, YAML text or a mapping)"
    for entry in config.graders:
        grader = entry.grader
        module = type(grader).__module__
        if not module.startswith("otel_tooleval.graders.") or getattr(grader, "custom", None):
            return (f"grader {entry.name!r} runs custom Python code, which lives in this "
                    "process")
    return None


class GradingProcess:
    """One child process that grades runs, with the processor's thread as its fallback.

    Args:
        config: the processor's ``ToolEvalConfig`` (``document`` is sent to the child).
        finish: ``finish(entry, verdict)`` forwards the root copy and emits (receiver thread).
        regrade: ``regrade(entry)`` grades a run on the calling thread (a child that exited).
        drop: ``drop(entry, reason)`` forwards a run's root ungraded and counts it.
        report: ``report(where)`` logs a failure once (called inside ``except``).
        full_details: send every result's ``details`` back (for whole ``RunReport`` s), not
            only what the metrics read.
    """

    def __init__(self, config: Any, *, finish: Callable[[InFlight, Verdict | None], None],
                 regrade: Callable[[InFlight], None], drop: Callable[[InFlight, str], None],
                 report: Callable[[str], None], full_details: bool = False) -> None:
        self._config = config
        self._full_details = full_details
        self._finish = finish
        self._regrade = regrade
        self._drop = drop
        self._report = report
        self._limit = config.limits.queue_size
        self._timeout = config.grading.process_timeout_seconds
        self.disabled: str | None = process_unavailable(config)
        if self.disabled:
            _log.warning("otel-tooleval: grading.mode is process, but runs are graded on a "
                         "thread: %s", self.disabled)
        self.starts = 0
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)
        self._proc: subprocess.Popen[bytes] | None = None
        # Written through the file object only: its lock orders a write against a close on
        # another thread (a raw descriptor could be closed and reused by the application).
        self._stdin: IO[bytes] | None = None
        self.ready = False
        self._hung = False
        self._in_flight: dict[int, InFlight] = {}
        self._outbox: list[tuple[Any, ...]] = []
        self._markers: list[tuple[int, threading.Event]] = []
        self._next_id = 0

    # -- the grading thread's side ---------------------------------------------------------------

    def available(self) -> bool:
        """Whether runs go to the child now; starts it when there is none (grading thread)."""
        if self.ready:
            return True
        if self._proc is None and not self.disabled:
            self._start()
        return False

    def _start(self) -> None:
        if self.starts >= MAX_STARTS:
            self.disabled = f"the grading process exited {self.starts} times"
            _log.warning("otel-tooleval: %s; grading on a thread from now on", self.disabled)
            return
        self.starts += 1
        package_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-c", _BOOT.format(path=[package_dir])],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True,
                start_new_session=True)   # a terminal's Ctrl-C is the application's to handle
        except OSError as exc:
            self.disabled = f"cannot start {sys.executable}: {exc}"
            _log.warning("otel-tooleval: %s; grading on a thread", self.disabled)
            return
        assert proc.stdin is not None and proc.stdout is not None
        self._proc, self._stdin, self._hung = proc, proc.stdin, False
        try:
            send(proc.stdin, ("init", dict(self._config.document), self._config.source,
                               self._full_details))
        except Exception:
            self._report("grading process start")
            self.disabled = "the config could not be sent to the grading process"
            proc.kill()
        try:
            threading.Thread(target=self._receive, args=(proc, proc.stdout),
                             name="otel-tooleval-verdicts", daemon=True).start()
        except RuntimeError:   # no new thread: nobody would read its answers
            self._report("grading process start")
            self.disabled = "no thread could be started to read the grading process's answers"
            self._proc, self._stdin = None, None
            _end(proc, 1.0)
            return
        try:
            threading.Thread(target=self._watch, args=(proc,), name="otel-tooleval-watchdog",
                             daemon=True).start()
        except RuntimeError:   # no new thread: the grading thread's own checks remain
            self._report("grading process watchdog")

    def submit(self, job: Any, root: Any, tools: list[Any], models: list[Any],
               dropped: int) -> bool:
        """Queue one run for the child (sent by ``flush`` or when the batch is full).

        False when the child is gone: the caller grades the run itself.
        """
        if self._outbox and len(self._in_flight) >= self._limit:
            self.flush()   # what it waits for room from must have been sent
        with self._room:
            while len(self._in_flight) >= self._limit and self.ready:
                self._room.wait(0.05)
                self._check_hung(time.monotonic())
            if not self.ready:
                return False
            job_id = self._next_id = self._next_id + 1
            self._in_flight[job_id] = InFlight(job, root, tools, models, dropped,
                                               time.monotonic())
        self._outbox.append((job_id, tuple(root), [tuple(t) for t in tools],
                             [tuple(m) for m in models], dropped))
        if len(self._outbox) >= _BATCH:
            self.flush()
        return True

    def flush(self) -> bool:
        """Send what is queued (the grading thread calls it before it waits for work); True
        when something was sent."""
        if not self._outbox:
            return False
        batch, self._outbox = self._outbox, []
        stdin = self._stdin
        try:
            if stdin is None:
                raise OSError("no grading process")
            send(stdin, ("runs", batch), plain_only=True)
            return True
        except (OSError, ValueError):   # gone (ValueError: its input was closed meanwhile)
            pass
        except Exception:   # a value that is no plain data (TypeError): graded here
            self._report("grading process batch")
        # Grade here what the receiver has not taken as lost already (each run stays in
        # flight until it is finished, for the flushes waiting on it); a child ended as hung
        # has its runs forwarded ungraded, as the receiver does.
        self._fall_back([job[0] for job in batch], self._hung)
        return False

    def after_in_flight(self, marker: threading.Event) -> None:
        """Set ``marker`` once every run sent so far is finished (a flush marker)."""
        self.flush()
        with self._lock:
            if self._in_flight:
                self._markers.append((self._next_id, marker))
                return
        marker.set()

    def check(self) -> None:
        """End a child that has left a run unanswered past the timeout (grading thread)."""
        if self._in_flight:
            with self._lock:
                self._check_hung(time.monotonic())

    def _watch(self, proc: subprocess.Popen[bytes]) -> None:
        """``check`` every second while ``proc`` is the child: the grading thread checks
        too, but not while a write to a child that stopped reading (a full pipe) holds it."""
        while self._proc is proc:
            time.sleep(_WATCH_SECONDS)
            if self._proc is proc:
                self.check()

    def _check_hung(self, now: float) -> None:
        oldest = next(iter(self._in_flight.values()), None)
        if oldest is None or now - oldest.sent < self._timeout or self._hung:
            return
        self._hung = True
        _log.warning("otel-tooleval: the grading process left a run unanswered for %.0f s; "
                      "ending it", self._timeout)
        if self._proc is not None:
            self._proc.kill()   # the receiver sees the end of its output and drops its runs

    def take_all(self) -> list[InFlight]:
        """Every unanswered run, which the caller now owns (shutdown out of time)."""
        with self._lock:
            taken = list(self._in_flight.values())
            self._in_flight.clear()
            self._release_markers()
        return taken

    def close(self, deadline: float) -> bool:
        """End the child: end of input, then wait until ``deadline`` (then kill it)."""
        proc = self._proc
        if proc is None:
            self.flush()
            return True
        # A write to a child that stopped reading (a full pipe) blocks, and closing the pipe
        # waits for that write: a timer kills the child at the deadline, which ends both.
        killed: list[bool] = []

        def kill() -> None:
            killed.append(True)
            _kill(proc)

        timer = threading.Timer(max(deadline - time.monotonic(), 0.0), kill)
        timer.daemon = True
        try:
            timer.start()
        except RuntimeError:   # no new threads at interpreter exit: as before, unbounded
            pass
        try:
            self.flush()
            return _end(proc, max(deadline - time.monotonic(), 0.0)) and not killed
        finally:
            timer.cancel()

    def after_fork_in_child(self) -> None:
        """A forked copy of the application: the grading process is the parent's, not ours.

        Our copies of its pipes are pointed at /dev/null (closing them outright would leave
        the file objects to close whatever descriptor reuses the number later): the grading
        process then sees the end of its input when the parent ends it, not when we exit.
        """
        proc = self._proc
        if proc is not None:
            try:
                null = os.open(os.devnull, os.O_RDWR)
                for stream in (proc.stdin, proc.stdout):
                    if stream is not None:
                        os.dup2(null, stream.fileno())
                os.close(null)
            except (OSError, ValueError):
                pass
        self.starts = 0
        self._reset()

    # -- the receiver thread -----------------------------------------------------------------------

    def _receive(self, proc: subprocess.Popen[bytes], stdout: IO[bytes]) -> None:
        try:
            kind, detail = read_frame(stdout)
            if kind != "ready":
                self.disabled = f"the grading process could not load the config: {detail}"
                _log.warning("otel-tooleval: %s; grading on a thread", self.disabled)
                raise EOFError
            self.ready = True
            while True:
                kind, answers = read_frame(stdout)
                for job_id, verdict, error in answers:
                    with self._lock:
                        entry = self._in_flight.pop(job_id, None)
                        self._room.notify()
                    if entry is None:
                        continue   # taken by a shutdown out of time: forwarded already
                    if error is not None:
                        self._failed(error)
                        self._drop(entry, "grading_process")
                    else:
                        self._finish(entry, verdict)
                with self._lock:
                    self._release_markers()
        except EOFError:
            pass
        except Exception:
            self._report("grading process verdicts")
        self._lost(proc)

    def _failed(self, error: str) -> None:
        try:
            raise RuntimeError(f"the grading process could not grade a run: {error}")
        except RuntimeError:
            self._report("grading process run")

    def _release_markers(self) -> None:
        """Set the flush markers whose runs are all finished (under the lock)."""
        if not self._markers:
            return
        first = next(iter(self._in_flight), None)
        keep = []
        for last_id, marker in self._markers:
            if first is None or first > last_id:
                marker.set()
            else:
                keep.append((last_id, marker))
        self._markers = keep

    def _lost(self, proc: subprocess.Popen[bytes] | None) -> None:
        """The child is gone: grade its unanswered runs here (or drop them, if it hung).

        Each run stays in flight until it is finished here, so that a flush waiting on it
        returns only once it is.
        """
        with self._lock:
            if proc is None or proc is not self._proc:
                return   # already handled
            hung = self._hung
            lost = list(self._in_flight)
            self._proc, self._stdin, self.ready = None, None, False
            self._room.notify_all()
        _end(proc, 1.0)
        if lost and not self.disabled:
            _log.warning("otel-tooleval: the grading process exited (status %s) with %d "
                         "runs unanswered", proc.returncode, len(lost))
        self._fall_back(lost, hung)
        with self._lock:
            self._release_markers()

    def _fall_back(self, job_ids: list[int], hung: bool) -> None:
        """Runs the child will not answer: graded here, or forwarded ungraded when it hung.

        A run already taken (by the receiver, or a shutdown out of time) is skipped; each
        stays in flight until it is finished here, for the flushes waiting on it.
        """
        for job_id in job_ids:
            entry = self._in_flight.get(job_id)
            if entry is None:
                continue
            try:
                if hung:
                    self._drop(entry, "grading_process")
                else:
                    self._regrade(entry)
            except Exception:
                self._report("grading process fallback")
            with self._lock:
                self._in_flight.pop(job_id, None)
                self._release_markers()


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        proc.kill()
    except OSError:
        pass


def _end(proc: subprocess.Popen[bytes], wait: float) -> bool:
    """Close the child's input (it exits once it has answered), wait, then kill it; True when
    it exited by itself."""
    try:
        if proc.stdin is not None:
            proc.stdin.close()
    except OSError:
        pass
    try:
        proc.wait(wait)
        return True
    except subprocess.TimeoutExpired:
        proc.kill()
        return False
