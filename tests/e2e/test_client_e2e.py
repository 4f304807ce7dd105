"""The Python client against `python -m local_runtime`: a conversation, pages, context,
streaming, an agent run, typed errors, and a turn whose first answer is lost on the way."""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import urlsplit

import pytest

from convo_memory_client import (
    CapabilityNotConversational,
    Conversations,
    Delta,
    Done,
    PrincipalImmutable,
    RouteNotFound,
    SessionNotFound,
    Unauthorized,
    ValidationError,
)
from tests.fakes.quiet_server import QuietServer
from tests.support.runtime_process import RuntimeProcess
from tests.support.tenants import unique_ref

pytestmark = pytest.mark.e2e
PRINCIPAL = {"tenant_id": "store-a", "user_id": "u_913"}


def test_a_conversation_its_pages_and_its_context(client: Conversations) -> None:
    ref = unique_ref()
    session = client.sessions.create(
        "cap-generative", ref, principal=PRINCIPAL, metadata={"channel": "web"}
    )
    assert (session.external_ref, session.principal, session.metadata) == (
        ref,
        PRINCIPAL,
        {"channel": "web"},
    )

    first = client.predict("cap-generative", "Where is order 12345?", session_id=session.id)
    second = client.sessions.send(session.id, "Can I still cancel it?")

    assert "Where is order 12345?" in first.output and first.recorded
    assert first.turn is not None and (first.turn.user_seq, first.turn.assistant_seq) == (1, 2)
    assert second.turn is not None and second.turn.user_seq == 3
    assert second.context is not None and second.context.replayed_messages == 2

    # Small pages: several calls, each handing back its nextToken.
    page = client.sessions.messages_page(session.id, limit=3)
    assert [m.seq for m in page.items] == [1, 2, 3] and page.next_token
    rest = client.sessions.messages_page(session.id, limit=3, next_token=page.next_token)
    assert [m.seq for m in rest.items] == [4] and rest.next_token is None
    messages = list(client.sessions.messages(session.id, limit=1))
    assert [(m.seq, m.role) for m in messages] == [
        (1, "user"),
        (2, "assistant"),
        (3, "user"),
        (4, "assistant"),
    ]
    assert messages[0].content == "Where is order 12345?" and messages[1].content == first.output
    assert not any(m.withheld or m.truncated for m in messages)

    context = client.sessions.context(session.id)
    assert [m.seq for m in context.messages] == [1, 2, 3, 4]
    assert context.omitted_messages == 0
    assert context.replayed_chars == sum(len(m.content) for m in messages)

    assert client.sessions.get(session.id).message_count == 4
    updated = client.sessions.update(session.id, {"channel": "app"})
    assert updated.metadata == {"channel": "app"} and updated.principal == PRINCIPAL


def test_a_conversation_of_the_responses_door_is_a_session_to_the_client(
    client: Conversations,
) -> None:
    history = [
        {"type": "message", "role": "user", "content": "My locker code is 7001."},
        {"type": "message", "role": "assistant", "content": "Noted."},
    ]
    opened = client.request("POST", "/v1/conversations", json={"items": history})
    unbound = client.sessions.get(opened["id"])
    assert (unbound.capability_id, unbound.external_ref, unbound.message_count) == (None, None, 2)
    assert [m.content for m in client.sessions.messages(opened["id"])] == [
        "My locker code is 7001.",
        "Noted.",
    ]

    ref = unique_ref()
    asked = {"model": "cap-generative", "input": "My code?", "conversation": opened["id"]}
    client.request("POST", "/v1/responses", json={**asked, "user": ref})

    bound = client.sessions.get(opened["id"])  # its first response bound it
    assert (bound.capability_id, bound.external_ref, bound.message_count) == (
        "cap-generative",
        ref,
        4,
    )
    assert [s.id for s in client.sessions.list(ref)] == [opened["id"]]


def test_sessions_are_listed_per_end_user_across_pages(client: Conversations) -> None:
    ref = unique_ref()
    created = [client.sessions.create("cap-generative", ref).id for _ in range(3)]

    first = client.sessions.list_page(ref, limit=2)
    listed = [s.id for s in client.sessions.list(ref, limit=2)]

    assert len(first.items) == 2 and first.next_token
    assert listed == list(reversed(created))  # newest first, every page


def test_deleting_a_session(client: Conversations) -> None:
    session = client.sessions.create("cap-generative", unique_ref())
    client.sessions.delete(session.id)

    with pytest.raises(SessionNotFound):
        client.sessions.get(session.id)


def test_an_answer_regenerated_and_a_message_edited_through_forks(client: Conversations) -> None:
    session = client.sessions.create("cap-generative", unique_ref(), principal=PRINCIPAL)
    client.sessions.send(session.id, "Where is order 12345?")
    client.sessions.send(session.id, "Can I still cancel it?")

    regenerated = client.sessions.fork(session.id, at_seq=2)
    again = client.sessions.send(regenerated.id, "Can I still cancel it?")
    edited = client.sessions.fork(session.id, at_seq=2, metadata={"edited": True})
    client.sessions.send(edited.id, "Can I change the address instead?")

    assert regenerated.fork_of is not None and regenerated.fork_of.session_id == session.id
    assert (regenerated.principal, regenerated.fork_of.at_seq, edited.metadata) == (
        PRINCIPAL,
        2,
        {"edited": True},
    )
    assert again.turn is not None and again.turn.assistant_seq == 4
    assert [m.content for m in client.sessions.messages(edited.id)][2] == (
        "Can I change the address instead?"
    )
    assert client.sessions.get(session.id).message_count == 4  # the original is unchanged
    sent = client.sessions.prompt_of(session.id, 4)
    assert [m.seq for m in sent.messages] == [1, 2]
    assert sent.messages[0].content == "Where is order 12345?"
    assert (sent.seq, sent.input, sent.summary, sent.expired_digests) == (
        4,
        "Can I still cancel it?",
        None,
        [],
    )


def test_streaming_sends_deltas_then_done(client: Conversations) -> None:
    session = client.sessions.create("cap-generative", unique_ref())

    with client.stream("cap-generative", "And the other one?", session_id=session.id) as stream:
        events = list(stream)

    kinds = [type(e) for e in events]
    assert kinds[-1] is Done and kinds.count(Done) == 1 and Delta in kinds
    assert kinds.index(Delta) < kinds.index(Done)
    done = events[-1]
    assert isinstance(done, Done) and stream.prediction == done.prediction
    text = "".join(e.text for e in events if isinstance(e, Delta))
    assert text == done.prediction.output and "And the other one?" in text
    assert done.prediction.turn is not None and done.prediction.recorded
    assert [m.content for m in client.sessions.messages(session.id)] == [
        "And the other one?",
        text,
    ]


def test_an_agent_run_trace_carries_the_principal(client: Conversations) -> None:
    session = client.sessions.create("cap-agent", unique_ref(), principal=PRINCIPAL)

    prediction = client.sessions.send(session.id, "Where is order 12345?")

    assert prediction.run_id
    run = client.runs.get(prediction.run_id)
    assert run.session_id == session.id and run.capability_id == "cap-agent"
    assert [step.tool for step in run.steps] == ["lookup_order"]
    assert run.steps[0].principal == PRINCIPAL
    context = client.sessions.context(session.id)
    assert context.tool_digests and context.tool_digests[0].tools == ["lookup_order"]


def test_capabilities(client: Conversations) -> None:
    created = client.capabilities.create(
        "client e2e", "generative", {"type": "embedded"}, replay={"maxMessages": 4}
    )

    fetched = client.capabilities.get(created.id)
    listed = {c.id: c for c in client.capabilities.list()}

    assert (fetched.name, fetched.kind) == ("client e2e", "generative")
    assert fetched.replay is not None and fetched.replay.max_messages == 4
    assert {"cap-generative", "cap-agent", "cap-classic", created.id} <= set(listed)
    assert listed["cap-classic"].kind == "classic"


def test_typed_errors_from_the_service(
    client: Conversations, local_runtime: RuntimeProcess
) -> None:
    ref = unique_ref()
    session = client.sessions.create("cap-generative", ref, principal=PRINCIPAL)

    with pytest.raises(SessionNotFound) as not_found:
        client.sessions.get("ses_does_not_exist")
    assert (not_found.value.status, not_found.value.code) == (404, "session_not_found")

    with pytest.raises(PrincipalImmutable) as immutable:
        client.request(
            "PATCH", f"/v1/sessions/{session.id}", json={"principal": {"user_id": "someone"}}
        )
    assert immutable.value.status == 409
    assert client.sessions.get(session.id).principal == PRINCIPAL

    with pytest.raises(ValidationError) as invalid:
        client.sessions.create("cap-generative", "")
    assert invalid.value.status == 422 and invalid.value.details
    with pytest.raises(ValidationError):
        client.sessions.messages_page(session.id, limit=0)
    with pytest.raises(ValidationError):
        client.sessions.list_page(ref, next_token="not+a/token==")

    with pytest.raises(CapabilityNotConversational):
        client.sessions.create("cap-classic", unique_ref())
    with pytest.raises(RouteNotFound):
        client.request("GET", "/v1/no-such-route")

    stranger = Conversations(local_runtime.base_url, "not-a-token-of-anyone-0000")
    with pytest.raises(Unauthorized) as unauthorized:
        stranger.sessions.get(session.id)
    assert unauthorized.value.status == 401


# A turn whose first answer is lost ----------------------------------------------------------


class LosingProxy:
    """Forwards to the runtime, but for the first turn (a POST carrying an Idempotency-Key)
    it waits for the runtime's whole answer and then hangs up: with nothing at all
    (``mode="silent"``) or after a 200 status line and headers (``mode="headers"``, a
    stream that never gets to its first event)."""

    def __init__(self, upstream: str, mode: str) -> None:
        self.seen: list[tuple[str, str, str | None]] = []  # (method, path, key)
        self.lost: list[bytes] = []  # the answers that never reached the client
        target = urlsplit(upstream)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else None
                key = self.headers.get("idempotency-key")
                # Only the first one: a retry under a new key would get through and show up
                # in the transcript as a second turn.
                first = key is not None and self.command == "POST" and not proxy.lost
                proxy.seen.append((self.command, self.path, key))
                upstream_connection = http.client.HTTPConnection(
                    str(target.hostname), target.port, timeout=30
                )
                headers = {
                    k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")
                }
                upstream_connection.request(self.command, self.path, body=body, headers=headers)
                response = upstream_connection.getresponse()
                payload = response.read()  # the turn has run and been recorded
                upstream_connection.close()
                if first:
                    proxy.lost.append(payload)
                    if mode == "headers":
                        self.send_response(200)
                        self.send_header("Content-Type", "text/event-stream")
                        self.send_header("Connection", "close")
                        self.end_headers()
                    self.close_connection = True
                    return
                self.send_response(response.status)
                for name, value in response.getheaders():
                    if name.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PATCH = do_DELETE = _forward

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self._server = QuietServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def losing_proxy(local_runtime: RuntimeProcess) -> Iterator[Any]:
    proxies: list[LosingProxy] = []

    def start(mode: str = "silent") -> LosingProxy:
        proxy = LosingProxy(local_runtime.base_url, mode)
        proxies.append(proxy)
        return proxy

    yield start
    for proxy in proxies:
        proxy.close()


@pytest.mark.parametrize("door", ["predict", "send"])
def test_a_turn_whose_answer_is_lost_is_retried_and_recorded_once(
    client: Conversations, local_runtime: RuntimeProcess, losing_proxy: Any, door: str
) -> None:
    session = client.sessions.create("cap-generative", unique_ref())
    proxy = losing_proxy("silent")
    through_proxy = Conversations(proxy.base_url, local_runtime.tokens["dev"], timeout=30)

    if door == "predict":
        prediction = through_proxy.predict("cap-generative", "Please cancel it.", session.id)
    else:
        prediction = through_proxy.sessions.send(session.id, "Please cancel it.")

    turns = [seen for seen in proxy.seen if seen[0] == "POST"]
    assert len(turns) == 2 and turns[0][2] and turns[0][2] == turns[1][2]
    assert len(proxy.lost) == 1 and b'"recorded":true' in proxy.lost[0]
    assert prediction.turn is not None and prediction.turn.user_seq == 1
    messages = list(client.sessions.messages(session.id))
    assert [m.content for m in messages] == ["Please cancel it.", prediction.output]


def test_a_stream_lost_before_its_first_event_is_retried_and_recorded_once(
    client: Conversations, local_runtime: RuntimeProcess, losing_proxy: Any
) -> None:
    session = client.sessions.create("cap-generative", unique_ref())
    proxy = losing_proxy("headers")
    through_proxy = Conversations(proxy.base_url, local_runtime.tokens["dev"], timeout=30)

    events = list(through_proxy.stream("cap-generative", "Stream it once.", session.id))

    assert len(proxy.seen) == 2 and proxy.seen[0][2] == proxy.seen[1][2]
    assert b"event: done" in proxy.lost[0]
    done = events[-1]
    assert isinstance(done, Done)
    assert "".join(e.text for e in events if isinstance(e, Delta)) == done.prediction.output
    messages = list(client.sessions.messages(session.id))
    assert [m.content for m in messages] == ["Stream it once.", done.prediction.output]
