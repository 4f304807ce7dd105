"""A small fake OpenAI-compatible chat-completions server on 127.0.0.1 (free port).

It records every request (path, headers, JSON body) and answers according to its
attributes, which tests set before calling:

- ``reply``: the ``choices[0].message.content`` of a non-streaming answer (or
  ``respond(body)``, when set: an answer that depends on the request);
- ``stream_chunks``: the delta texts of a streaming answer (chunked SSE, one event per
  HTTP chunk, then ``data: [DONE]``); ``gate``, if set, is awaited after the first
  chunk so a test can prove it received that chunk before the rest was sent;
- ``error_status`` / ``error_body`` / ``error_headers``: answer every request with that
  status instead;
- ``delay``: sleep before answering (timeouts);
- ``stream_raw``: raw SSE text sent as the streaming body instead of ``stream_chunks``;
- ``usage``: the ``usage`` member of non-streaming answers (or ``usage_for(body)``, when
  set: usage that depends on the request), and of a stream's last chunk (``choices: []``)
  when the request asks with ``stream_options.include_usage``, as OpenAI does; none when
  both are unset;
- ``tls``: a server-side ``ssl.SSLContext``: the server speaks HTTPS (its ``port`` is
  the one to reach, by whatever name its certificate names);
- ``script``: replies for the next requests, one each, streamed or not as asked:
  ``Turn(content, tool_calls)`` with ``tool_calls`` as ``(id, name, arguments JSON)``; a
  streamed reply sends each call's arguments in pieces of ``piece_chars`` characters
  (the id and name with the first piece only), as OpenAI does;
- ``refuse_fields``: request fields the server does not know, answered with a 400 as
  strict servers do (``prompt_cache_key`` on an older vLLM, say);
- ``tool_rule``: answer like a model that uses the tools it is offered (the embedded
  models' rule): after a user message, a call of each offered tool whose name occurs
  in it, with ``{"query": <the message>}`` (``tool_choice`` and ``parallel_tool_calls``
  followed); after tool results, ``Tool results: <each result, | between>``; otherwise
  as set above. Call ids are unique across the server's life.

``cache_keys`` lists the ``prompt_cache_key`` of each request received (None: none sent).
"""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.fakes.quiet_server import QuietServer


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class Turn:
    content: str | None = None
    tool_calls: list[tuple[str, str, str]] = field(default_factory=list)


def streamed_usage(body: Any) -> bool:
    """Whether a streaming request asks for usage in its last chunk."""
    options = body.get("stream_options") if isinstance(body, dict) else None
    return isinstance(options, dict) and options.get("include_usage") is True


@dataclass
class FakeOpenAIServer:
    reply: str = "Hello from the fake model."
    respond: Callable[[Any], str] | None = None
    usage: dict[str, Any] | None = None
    usage_for: Callable[[Any], dict[str, Any]] | None = None
    stream_chunks: list[str] = field(default_factory=lambda: ["Hel", "lo", " there", "!"])
    stream_raw: str | None = None
    gate: threading.Event | None = None
    gate_timeout: float = 5.0
    error_status: int | None = None
    error_body: Any = None
    error_headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    requests: list[RecordedRequest] = field(default_factory=list)
    script: list[Turn] = field(default_factory=list)
    piece_chars: int = 5
    first_chunk_sent: threading.Event = field(default_factory=threading.Event)
    gate_timed_out: bool = False
    refuse_fields: tuple[str, ...] = ()
    tool_rule: bool = False
    calls_made: int = 0
    tls: ssl.SSLContext | None = None
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    @property
    def cache_keys(self) -> list[str | None]:
        """The ``prompt_cache_key`` of each request received, in order (None: none)."""
        return [
            r.body.get("prompt_cache_key") if isinstance(r.body, dict) else None
            for r in self.requests
        ]

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def answering(self, body: Any) -> FakeOpenAIServer:
        """The server whose settings answer a request (``body``): this one."""
        return self

    def start(self) -> FakeOpenAIServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            fake: FakeOpenAIServer = server

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                self.fake = fake = server.answering(body)
                fake.requests.append(
                    RecordedRequest("POST", self.path, dict(self.headers.items()), body)
                )
                if fake.delay:
                    time.sleep(fake.delay)
                unknown = [f for f in fake.refuse_fields if isinstance(body, dict) and f in body]
                if fake.error_status is not None:
                    self._send_json(fake.error_status, fake.error_body, fake.error_headers)
                elif unknown:
                    message = f"unexpected field: {unknown[0]}"
                    self._send_json(400, {"error": {"message": message}})
                elif self.path != "/v1/chat/completions":
                    self._send_json(404, {"error": {"message": "no such route"}})
                elif fake.tool_rule and (ruled := fake.tool_turn(body)) is not None:
                    self._send_turn(
                        ruled,
                        bool(isinstance(body, dict) and body.get("stream")),
                        fake._usage(body),
                        streamed_usage(body),
                    )
                elif fake.script:
                    self._send_turn(
                        fake.script.pop(0),
                        bool(isinstance(body, dict) and body.get("stream")),
                        fake._usage(body),
                        streamed_usage(body),
                    )
                elif isinstance(body, dict) and body.get("stream"):
                    self._send_stream(fake._usage(body) if streamed_usage(body) else None)
                else:
                    answer: dict[str, Any] = {
                        "id": "chatcmpl-1",
                        "object": "chat.completion",
                        "choices": [
                            {
                                "index": 0,
                                "message": {
                                    "role": "assistant",
                                    "content": fake.respond(body)
                                    if fake.respond is not None
                                    else fake.reply,
                                },
                                "finish_reason": "stop",
                            }
                        ],
                    }
                    usage = fake._usage(body)
                    if usage is not None:
                        answer["usage"] = usage
                    self._send_json(200, answer)

            def _send_json(
                self, status: int, payload: Any, headers: dict[str, str] | None = None
            ) -> None:
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _send_turn(
                self, turn: Turn, stream: bool, usage: Any = None, stream_usage: bool = False
            ) -> None:
                fake = self.fake
                calls = [
                    {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                    for i, n, a in turn.tool_calls
                ]
                finish = "tool_calls" if calls else "stop"
                if not stream:
                    message: dict[str, Any] = {"role": "assistant", "content": turn.content}
                    if calls:
                        message["tool_calls"] = calls
                    choice = {"index": 0, "message": message, "finish_reason": finish}
                    reply: dict[str, Any] = {"id": "chatcmpl-s", "choices": [choice]}
                    if usage is not None:
                        reply["usage"] = usage
                    self._send_json(200, reply)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                deltas: list[dict[str, Any]] = [{"role": "assistant"}]
                if turn.content:
                    deltas += [
                        {"content": turn.content[i : i + 4]} for i in range(0, len(turn.content), 4)
                    ]
                for index, (call_id, name, arguments) in enumerate(turn.tool_calls):
                    size = max(1, fake.piece_chars)
                    pieces = [arguments[i : i + size] for i in range(0, len(arguments), size)] or [
                        ""
                    ]
                    for n, piece in enumerate(pieces):
                        call: dict[str, Any] = {"index": index, "function": {"arguments": piece}}
                        if n == 0:
                            call.update({"id": call_id, "type": "function"})
                            call["function"]["name"] = name
                        deltas.append({"tool_calls": [call]})
                for delta in deltas:
                    event = {"choices": [{"index": 0, "delta": delta}]}
                    self._chunk(f"data: {json.dumps(event)}\n\n")
                done = {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
                self._chunk(f"data: {json.dumps(done)}\n\n")
                self._usage_chunk(usage if stream_usage else None)
                self._chunk("data: [DONE]\n\n")
                self.wfile.write(b"0\r\n\r\n")

            def _chunk(self, text: str) -> None:
                data = text.encode("utf-8")
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def _usage_chunk(self, usage: Any) -> None:
                if usage is not None:
                    self._chunk(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n")

            def _send_stream(self, usage: Any = None) -> None:
                fake = self.fake
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                if fake.stream_raw is not None:
                    self._chunk(fake.stream_raw)
                    self.wfile.write(b"0\r\n\r\n")
                    return
                self._chunk('data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n')
                for index, text in enumerate(fake.stream_chunks):
                    event = {"choices": [{"index": 0, "delta": {"content": text}}]}
                    self._chunk(f"data: {json.dumps(event)}\n\n")
                    if index == 0:
                        fake.first_chunk_sent.set()
                        if fake.gate is not None and not fake.gate.wait(fake.gate_timeout):
                            fake.gate_timed_out = True
                done = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
                self._chunk(f"data: {json.dumps(done)}\n\n")
                self._usage_chunk(usage)
                self._chunk("data: [DONE]\n\n")
                self.wfile.write(b"0\r\n\r\n")

        self._server = QuietServer(("127.0.0.1", 0), Handler)
        if self.tls is not None:
            self._server.socket = self.tls.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def tool_turn(self, body: Any) -> Turn | None:
        """The ``tool_rule`` answer to a request (None: answer as without the rule)."""
        messages = body.get("messages") if isinstance(body, dict) else None
        if not messages:
            return None
        last = messages[-1]
        if last.get("role") == "tool":
            results: list[str] = []
            for message in reversed(messages):
                if message.get("role") != "tool":
                    break
                results.insert(0, str(message.get("content")))
            return Turn("Tool results: " + " | ".join(results))
        tools = [t["function"]["name"] for t in body.get("tools") or []]
        choice = body.get("tool_choice", "auto")
        if last.get("role") != "user" or not tools or choice == "none":
            return None
        text = str(last.get("content"))
        called = [name for name in tools if name.casefold() in text.casefold()]
        if isinstance(choice, dict):
            called = [choice["function"]["name"]]
        elif choice == "required" and not called:
            called = tools[:1]
        if body.get("parallel_tool_calls") is False:
            called = called[:1]
        if not called:
            return None
        calls = []
        for name in called:
            self.calls_made += 1
            calls.append((f"call_{self.calls_made}", name, json.dumps({"query": text})))
        return Turn(None, calls)

    def _usage(self, body: Any) -> dict[str, Any] | None:
        if self.usage_for is not None:
            return self.usage_for(body)
        return self.usage

    def stop(self) -> None:
        if self._server is not None:
            if self.gate is not None:
                self.gate.set()  # never leave a handler thread waiting
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class ModelSwitchboard(FakeOpenAIServer):
    """A fake model server that answers a request for a plugged model id as the model
    plugged in under it (a ``FakeOpenAIServer`` that is never started: its settings
    answer, its ``requests`` record), and any other request as itself.

    One runtime can then serve module after module, each with a fake model of its own
    under a model id of its own (tests/support/runtime_process.py's shared runtime): a
    request a module's turns set off late, a summary say, never reaches the next one's."""

    plugged: dict[str, FakeOpenAIServer] = field(default_factory=dict)

    def answering(self, body: Any) -> FakeOpenAIServer:
        model_id = body.get("model") if isinstance(body, dict) else None
        return self.plugged.get(model_id, self) if isinstance(model_id, str) else self

    def model_id_of(self, model: FakeOpenAIServer) -> str:
        """The model id ``model`` is plugged in under."""
        return next(model_id for model_id, plugged in self.plugged.items() if plugged is model)

    @contextmanager
    def plug(self, models: dict[str, FakeOpenAIServer]) -> Iterator[None]:
        """Each model answers every request for its model id until the block ends."""
        assert not self.plugged, "models are plugged in already"
        self.plugged = dict(models)
        try:
            yield
        finally:
            self.plugged = {}
            for model in models.values():
                if model.gate is not None:
                    model.gate.set()  # never leave a handler thread waiting
