"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1, for recording frameworks.

Every framework fixture under ``tests/data/frameworks/`` is recorded from the framework's real
agent and tool machinery talking to this server through the framework's own OpenAI client
settings (base URL ``http://127.0.0.1:PORT/v1``, any API key). No network, no model.

The script is the same four-call weather run everywhere:

1. ``lookup_city(query="paris")``
2. ``get_weather(city="Paris")``
3. ``get_weather(city="Lyon")`` and ``convert_temp(celsius=21)`` in one response
4. the final answer ``Paris 21C (69.8F), Lyon 18C``

The turn to play is the number of assistant messages with tool calls already in the request
(frameworks resend the conversation), so a framework that asks again after the last turn gets
the final answer again. A request without ``tools`` (a framework's own summary or title call)
gets the final answer. ``stream: true`` is answered with server-sent events in OpenAI's chunk
format (tool calls as argument deltas, a usage chunk when ``stream_options.include_usage``).

Standard library only, so that every recorder venv can import it as it is. Run it alone with
``python scripted_openai.py [PORT]``; recorders use :func:`serve` as a context manager.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FINAL_ANSWER", "PROMPT", "SCRIPT", "TOOLS", "serve"]

PROMPT = "What's the weather in Paris and Lyon? Give Paris in Fahrenheit too."
FINAL_ANSWER = "Paris 21C (69.8F), Lyon 18C"
SCRIPT: tuple[tuple[tuple[str, dict[str, Any]], ...], ...] = (
    (("lookup_city", {"query": "paris"}),),
    (("get_weather", {"city": "Paris"}),),
    (("get_weather", {"city": "Lyon"}), ("convert_temp", {"celsius": 21})),
)

#: The tools every recorder gives its agent, with the results they must return.
TOOLS = {
    "lookup_city": "Resolve a free-text place query to a canonical city name.",
    "get_weather": "Return the current weather for a city (temperature in Celsius).",
    "convert_temp": "Convert a temperature from Celsius to Fahrenheit.",
}


def lookup_city(query: str) -> str:
    """Resolve a free-text place query to a canonical city name."""
    return query.strip().title()


def get_weather(city: str) -> dict[str, Any]:
    """Return the current weather for a city (temperature in Celsius)."""
    temps = {"Paris": 21.0, "Lyon": 18.0}
    return {"city": city, "temp_c": temps.get(city)}


def convert_temp(celsius: float) -> float:
    """Convert a temperature from Celsius to Fahrenheit."""
    return round(celsius * 9 / 5 + 32, 1)


def _turn(body: dict[str, Any]) -> int:
    messages = body.get("messages") or []
    return sum(1 for m in messages
               if isinstance(m, dict) and m.get("role") == "assistant" and m.get("tool_calls"))


def _tool_calls(turn: int) -> list[dict[str, Any]]:
    return [{"id": f"call_{turn}_{i}", "type": "function",
             "function": {"name": name, "arguments": json.dumps(args)}}
            for i, (name, args) in enumerate(SCRIPT[turn])]


def _answer(body: dict[str, Any]) -> tuple[str | None, list[dict[str, Any]]]:
    """(text, tool calls) of the response to this request."""
    turn = _turn(body)
    if body.get("tools") and turn < len(SCRIPT):
        return None, _tool_calls(turn)
    return FINAL_ANSWER, []


_USAGE = {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "scripted-openai/1"

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:  # type: ignore[attr-defined]
            sys.stderr.write("scripted-openai: " + format % args + "\n")

    def _send(self, status: int, doc: Any) -> None:
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            self._send(200, {"object": "list", "data": [
                {"id": "scripted", "object": "model", "created": 0, "owned_by": "tests"}]})
        else:
            self._send(404, {"error": {"message": f"no {self.path}"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._send(400, {"error": {"message": "not JSON"}})
            return
        self.server.requests.append(body)  # type: ignore[attr-defined]
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, {"error": {"message": f"only /v1/chat/completions, not {self.path}"}})
            return
        text, calls = _answer(body)
        model = body.get("model") or "scripted"
        created = int(time.time())
        rid = f"chatcmpl-{len(self.server.requests)}"  # type: ignore[attr-defined]
        if body.get("stream"):
            self._stream(rid, model, created, text, calls,
                         bool((body.get("stream_options") or {}).get("include_usage")))
            return
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if calls:
            message["tool_calls"] = calls
        self._send(200, {"id": rid, "object": "chat.completion", "created": created,
                         "model": model, "usage": _USAGE, "choices": [{
                             "index": 0, "message": message,
                             "finish_reason": "tool_calls" if calls else "stop"}]})

    def _stream(self, rid: str, model: str, created: int, text: str | None,
                calls: list[dict[str, Any]], usage: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

        def chunk(delta: dict[str, Any], finish: str | None = None,
                  with_usage: bool = False) -> None:
            doc: dict[str, Any] = {"id": rid, "object": "chat.completion.chunk",
                                   "created": created, "model": model,
                                   "choices": [{"index": 0, "delta": delta,
                                                "finish_reason": finish}]}
            if with_usage:
                doc["choices"], doc["usage"] = [], _USAGE
            self.wfile.write(f"data: {json.dumps(doc)}\n\n".encode())
            self.wfile.flush()

        chunk({"role": "assistant", "content": "" if text is not None else None})
        if text is not None:
            for i in range(0, len(text), 8):
                chunk({"content": text[i:i + 8]})
        for i, call in enumerate(calls):
            args = call["function"]["arguments"]
            chunk({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                   "function": {"name": call["function"]["name"],
                                                "arguments": ""}}]})
            for j in range(0, len(args), 10):
                chunk({"tool_calls": [{"index": i, "function": {"arguments": args[j:j + 10]}}]})
        chunk({}, "tool_calls" if calls else "stop")
        if usage:
            chunk({}, with_usage=True)
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


@contextmanager
def serve(port: int = 0, *, verbose: bool = False) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Run the server on 127.0.0.1; yield (base URL ending in /v1, the requests received)."""
    server = ThreadingHTTPServer(("127.0.0.1", port), _Handler)
    server.daemon_threads = True
    server.requests = []  # type: ignore[attr-defined]
    server.verbose = verbose  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, name="scripted-openai", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", server.requests  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()


if __name__ == "__main__":
    with serve(int(sys.argv[1]) if len(sys.argv) > 1 else 0, verbose=True) as (url, _):
        print(f"scripted OpenAI-compatible model at {url} (Ctrl-C stops)", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
