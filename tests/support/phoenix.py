"""Arize Phoenix, a real tracing backend, for the end-to-end tests; headless Chromium to look at it.

:class:`PhoenixServer` runs ``phoenix serve`` from Phoenix's own virtual environment (``.ci/run``
installs it in ``.phoenix-venv``; ``TOOLEVAL_PHOENIX`` names the executable) on 127.0.0.1 and free
ports, with its SQLite database in a temporary directory and everything that would reach the
internet switched off, and reads what it stored through its REST API::

    with PhoenixServer(executable, workdir, log_path=log) as phoenix:
        ...  # export to phoenix.otlp_endpoint("grpc") or phoenix.otlp_endpoint("http/protobuf")
        spans = phoenix.spans("my-project", trace_id=[trace_id])

:class:`DevToolsPage` drives one headless Chromium page over the DevTools protocol on a pipe
(``--remote-debugging-pipe``: no websocket library, no debugging port), so a test can wait until
Phoenix's single-page UI has rendered what it must show before taking the screenshot.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

from typing_extensions import Self

__all__ = ["PHOENIX_VERSION", "DevToolsPage", "PhoenixServer", "free_ports", "loopback_env",
           "wait_for"]

# The version .ci/run installs (keep the two in step); older or newer ones may work too.
PHOENIX_VERSION = "20.26.1"
HOST = "127.0.0.1"
_T = TypeVar("_T")
_MARK = "=== phoenix serve"  # starts each attempt's part of the log
# Straight to 127.0.0.1, whatever proxy the environment names.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def loopback_env(**extra: str) -> dict[str, str]:
    """This process's environment without proxies or OTEL_*/PHOENIX_* settings, plus ``extra``."""
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("OTEL_", "PHOENIX_"))
           and name.lower() not in ("http_proxy", "https_proxy", "all_proxy", "grpc_proxy")}
    env.update(no_proxy=f"{HOST},localhost", NO_PROXY=f"{HOST},localhost", **extra)
    return env


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports that were free on 127.0.0.1 a moment ago."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind((HOST, 0))
        return [sock.getsockname()[1] for sock in sockets]


def wait_for(probe: Callable[[], _T | None], *, timeout: float, interval: float = 0.25,
             what: str = "condition") -> _T:
    """Call ``probe`` until it returns something truthy, or raise ``TimeoutError`` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what}: not met within {timeout:.0f} s")
        time.sleep(interval)


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return f"(no log: {exc})"
    return "\n".join(text.splitlines()[-lines:])


class PhoenixServer:
    """``phoenix serve`` on 127.0.0.1 and free ports; a context manager that always stops it."""

    def __init__(self, executable: str, workdir: Path, *, log_path: Path,
                 startup_timeout: float = 180.0) -> None:
        self.executable = executable
        self.workdir = workdir
        self.log_path = log_path
        self.startup_timeout = startup_timeout
        self.http_port = self.grpc_port = 0
        self.version = ""
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.http_port}"

    def otlp_endpoint(self, protocol: str) -> str:
        """The value of ``OTEL_EXPORTER_OTLP_ENDPOINT`` for ``grpc`` or ``http/protobuf``."""
        return f"http://{HOST}:{self.grpc_port}" if protocol == "grpc" else self.url

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        """Start the server and wait until its HTTP and gRPC ports answer."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path.write_bytes(b"")
        for _attempt in range(3):
            self.http_port, self.grpc_port = free_ports(2)
            self._spawn()
            try:
                self._wait_ready()
                return
            except BaseException as exc:
                self.stop()
                this_attempt = log_tail(self.log_path, 200).rpartition(_MARK)[2]
                if isinstance(exc, Exception) and (
                        "already in use" in this_attempt or "Failed to bind" in this_attempt):
                    continue  # another process took a port between free_ports() and the bind
                raise
        raise RuntimeError(f"Phoenix could not bind free ports three times; log tail:\n"
                           f"{log_tail(self.log_path)}")

    def _spawn(self) -> None:
        env = loopback_env(
            PHOENIX_HOST=HOST, PHOENIX_PORT=str(self.http_port),
            PHOENIX_GRPC_PORT=str(self.grpc_port), PHOENIX_WORKING_DIR=str(self.workdir),
            # Offline and quiet: no telemetry pixels, web fonts or sandbox downloads, no
            # assistant or MCP server, no SQL echo of the migrations.
            PHOENIX_TELEMETRY_ENABLED="false", PHOENIX_ALLOW_EXTERNAL_RESOURCES="false",
            PHOENIX_DISABLE_AGENT_ASSISTANT="true", PHOENIX_AGENTS_DISABLE_BASH="true",
            PHOENIX_ENABLE_MCP_SERVER="false", PHOENIX_LOG_MIGRATIONS="false")
        with self.log_path.open("ab") as log:
            log.write(f"{_MARK} on :{self.http_port} (gRPC :{self.grpc_port})\n".encode())
            log.flush()
            self._process = subprocess.Popen(
                [self.executable, "serve"], env=env, cwd=self.workdir, stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def _wait_ready(self) -> None:
        def ready() -> bool:
            assert self._process is not None
            if self._process.poll() is not None:
                raise RuntimeError(f"phoenix serve exited with {self._process.returncode} while "
                                   f"starting; log tail:\n{log_tail(self.log_path)}")
            try:
                with _OPENER.open(f"{self.url}/healthz", timeout=2) as response:
                    if response.status != 200:
                        return False
                with socket.create_connection((HOST, self.grpc_port), timeout=2):
                    pass
                with _OPENER.open(f"{self.url}/arize_phoenix_version", timeout=2) as response:
                    self.version = response.read().decode().strip()
            except OSError:
                return False
            return True

        try:
            wait_for(ready, timeout=self.startup_timeout, interval=0.3, what="Phoenix start-up")
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; log tail:\n{log_tail(self.log_path)}") from None

    def stop(self, timeout: float = 20.0) -> None:
        """Terminate the server (its own process group), then kill it after ``timeout``."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)

    # ------------------------------------------------------------------ REST API (/v1)

    def get(self, path: str, **params: Any) -> Any:
        """GET ``path`` (e.g. ``/v1/projects``) with query ``params``; the decoded JSON body."""
        query = urlencode({k: v for k, v in params.items() if v is not None}, doseq=True)
        with _OPENER.open(f"{self.url}{path}?{query}", timeout=30) as response:
            return json.load(response)

    def graphql(self, query: str, **variables: Any) -> dict[str, Any]:
        """POST a GraphQL query to ``/graphql`` (what Phoenix's UI uses); its ``data``."""
        request = urllib.request.Request(
            f"{self.url}/graphql", data=json.dumps({"query": query, "variables": variables}).encode(),
            headers={"Content-Type": "application/json"})
        with _OPENER.open(request, timeout=30) as response:
            body = json.load(response)
        if body.get("errors"):
            raise RuntimeError(f"GraphQL errors: {body['errors']}")
        return dict(body["data"])

    def project_id(self, name: str) -> str:
        """The GlobalID of a project (``GET /v1/projects/{name}``), which the UI's URLs use."""
        return str(self.get(f"/v1/projects/{quote(name, safe='')}")["data"]["id"])

    def spans(self, project: str, **filters: Any) -> list[dict[str, Any]]:
        """Every span of ``project`` matching ``filters`` (``GET /v1/projects/{p}/spans``).

        A project that does not exist yet (no span arrived) has no spans.
        """
        spans: list[dict[str, Any]] = []
        cursor = None
        while True:
            try:
                page = self.get(f"/v1/projects/{quote(project, safe='')}/spans", limit=1000,
                                sort="start_time", order="asc", cursor=cursor, **filters)
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    return []
                raise
            spans.extend(page["data"])
            cursor = page.get("next_cursor")
            if not cursor:
                return spans


# Runs a program with the pipe ends given as fds 3 (commands in) and 4 (replies out), where
# Chromium's --remote-debugging-pipe expects them (dash's `3<&12` takes one-digit fds only).
_ON_FDS_3_AND_4 = """
import fcntl, os, sys
given = [int(fd) for fd in sys.argv[1:3]]
high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in given]
for fd in given:
    os.close(fd)
for target, fd in zip((3, 4), high):
    os.dup2(fd, target)
    os.close(fd)
os.execv(sys.argv[3], sys.argv[3:])
"""


class DevToolsPage:
    """One page of headless Chromium, driven over the DevTools protocol on fds 3 and 4."""

    def __init__(self, binary: str, flags: tuple[str, ...], profile: Path, *, width: int,
                 height: int, log_path: Path) -> None:
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        with log_path.open("wb") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-c", _ON_FDS_3_AND_4, str(to_browser_r), str(from_browser_w),
                 binary, *flags, "--remote-debugging-pipe", f"--user-data-dir={profile}",
                 f"--window-size={width},{height}", "about:blank"],
                pass_fds=(to_browser_r, from_browser_w), stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self._session: str | None = None
        try:
            targets = self.call("Target.getTargets")["targetInfos"]
            pages = [t["targetId"] for t in targets if t["type"] == "page"]
            target = pages[0] if pages else self.call(
                "Target.createTarget", {"url": "about:blank"})["targetId"]
            self._session = self.call("Target.attachToTarget",
                                      {"targetId": target, "flatten": True})["sessionId"]
            self.call("Emulation.setDeviceMetricsOverride",
                      {"width": width, "height": height, "deviceScaleFactor": 1,
                       "mobile": False})
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def call(self, method: str, params: dict[str, Any] | None = None, *,
             timeout: float = 60.0) -> dict[str, Any]:
        """Send one command and return its result (events in between are dropped)."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if self._session is not None and not method.startswith(("Target.", "Browser.")):
            message["sessionId"] = self._session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = json.loads(self._receive(deadline))
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"DevTools {method}: {reply['error']}")
                return dict(reply.get("result", {}))

    def _receive(self, deadline: float) -> bytes:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_browser], [], [], left)[0]:
                raise TimeoutError("no reply from Chromium over the DevTools pipe")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed the DevTools pipe (it exited)")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return message

    def navigate(self, url: str) -> None:
        result = self.call("Page.navigate", {"url": url})
        if result.get("errorText"):
            raise RuntimeError(f"navigation to {url} failed: {result['errorText']}")

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (awaited if it is a promise)."""
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression!r} raised: {result['exceptionDetails']}")
        return result["result"].get("value")

    def text(self) -> str:
        return str(self.evaluate("document.body ? document.body.innerText : ''") or "")

    def wait_for_text(self, *needles: str, timeout: float = 60.0) -> str:
        """Wait until the page's visible text holds every needle; that text."""
        seen = ""

        def probe() -> str | None:
            nonlocal seen
            seen = self.text()
            return seen if all(needle in seen for needle in needles) else None

        try:
            return wait_for(probe, timeout=timeout, interval=0.25, what=f"text {needles}")
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; the page showed:\n{seen[:3000]}") from None

    def click(self, selector: str, text: str) -> None:
        """Click (real mouse events) the first ``selector`` element whose text holds ``text``."""
        box = self.evaluate(
            f"(() => {{ const el = [...document.querySelectorAll({json.dumps(selector)})]"
            f".find(e => e.innerText.includes({json.dumps(text)}));"
            " if (!el) return null; el.scrollIntoView({block: 'center'});"
            " const r = el.getBoundingClientRect();"
            " return {x: r.x + r.width / 2, y: r.y + r.height / 2}; })()")
        if not box:
            raise LookupError(f"no {selector} element with text {text!r}")
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", {"type": kind, "x": box["x"], "y": box["y"],
                                                   "button": "left", "clickCount": 1})

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", {"format": "png"})["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        """Close the browser (``Browser.close``), then kill whatever is left of it."""
        if self._to_browser < 0:
            return
        with contextlib.suppress(Exception):
            self.call("Browser.close", timeout=10)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(10)
        # Its helper processes share the process group it was started in: end them too.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, signal.SIGKILL)
        self._process.wait(10)
        for fd in (self._to_browser, self._from_browser):
            if fd >= 0:
                os.close(fd)
        self._to_browser = self._from_browser = -1
