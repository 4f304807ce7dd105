"""The summary worker through its real handler (SummarizeFunction, an SQS consumer),
against moto tables built from template.yaml, with turns driven through the HTTP routes:
what a job folds (the omitted messages and a batch ahead), that it never sends a message,
how a job short of time is redelivered, races, and outages."""

from __future__ import annotations

import copy
import dataclasses
import json
import socket
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from convo_memory.adapters.summarizers import EmbeddedSummarizer
from convo_memory.domain.models import Summary
from tests.support.inprocess_api import AwsBackend, InProcessApi, new_workspace, serving
from tests.support.tenants import Tenant

SAMPLE_EVENT = Path(__file__).resolve().parents[2] / "events" / "summarize_sqs.json"
# The newest 4 messages are replayed; the budget never binds.
SMALL_REPLAY = {"maxMessages": 4, "maxChars": 10_000, "minMessages": 1}
LARGE_SUMMARY = {"maxChars": 50_000}
REDELIVER_SECONDS = 10  # functions/summarize/app.py: how soon an unfinished job is retried


# --- helpers -----------------------------------------------------------------------


def sqs_event(*records: tuple[str, str]) -> dict[str, Any]:
    """events/summarize_sqs.json with these (messageId, body) records."""
    sample = json.loads(SAMPLE_EVENT.read_text())
    template = sample["Records"][0]
    out = []
    for message_id, body in records:
        record = copy.deepcopy(template)
        record["messageId"] = message_id
        record["receiptHandle"] = f"rh-{message_id}"
        record["body"] = body
        out.append(record)
    return {"Records": out}


def job(tenant: Tenant, session_id: str) -> str:
    return json.dumps({"workspaceId": tenant.workspace_id, "sessionId": session_id})


def create_capability(
    api: InProcessApi, tenant: Tenant, summary: dict[str, Any] | None = None
) -> str:
    body = {
        "name": "short memory",
        "kind": "generative",
        "replay": SMALL_REPLAY,
        "summary": summary or LARGE_SUMMARY,
    }
    response = api.call("POST", "/v1/capabilities", token=tenant.token, json_body=body)
    assert response.status == 201, response.body
    return str(response.body["id"])


def open_session(api: InProcessApi, tenant: Tenant, capability_id: str) -> str:
    response = api.call(
        "POST",
        "/v1/sessions",
        token=tenant.token,
        json_body={"capabilityId": capability_id, "externalRef": "customer-4471"},
    )
    assert response.status == 201, response.body
    return str(response.body["id"])


def send_turns(
    api: InProcessApi, tenant: Tenant, session_id: str, n: int, tag: str = "turn"
) -> list[dict[str, Any]]:
    bodies = []
    for _ in range(n):
        count = get_session(api, tenant, session_id)["messageCount"]
        text = f"{tag} {count // 2 + 1}: remember the number {1000 + count}"
        response = api.call(
            "POST",
            f"/v1/sessions/{session_id}/messages",
            token=tenant.token,
            json_body={"input": text},
        )
        assert response.status == 200, response.body
        assert response.body["recorded"] is True
        bodies.append(response.body)
    return bodies


def get_session(api: InProcessApi, tenant: Tenant, session_id: str) -> dict[str, Any]:
    response = api.call("GET", f"/v1/sessions/{session_id}", token=tenant.token)
    assert response.status == 200, response.body
    return dict(response.body)


def context(api: InProcessApi, tenant: Tenant, session_id: str) -> dict[str, Any]:
    response = api.call("GET", f"/v1/sessions/{session_id}/context", token=tenant.token)
    assert response.status == 200, response.body
    return dict(response.body)


def transcript(api: InProcessApi, tenant: Tenant, session_id: str) -> list[dict[str, Any]]:
    response = api.call(
        "GET", f"/v1/sessions/{session_id}/messages", token=tenant.token, query={"limit": 100}
    )
    assert response.status == 200
    return list(response.body["messages"])


def line_of(role: str, content: str) -> str:
    return f"{role}: {' '.join(content.split())}"


def expected_lines(messages: list[dict[str, Any]]) -> list[str]:
    """The line summarizer's line for each message, oldest first."""
    return [line_of(m["role"], m["content"]) for m in messages]


@pytest.fixture
def line_summarizer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The embedded summarizer, made to append one line per message (its outage switch
    kept), so a summary shows exactly which messages were folded, how often and in what
    order: the fact summarizer would hide a message folded twice."""
    original = EmbeddedSummarizer.summarize

    def lines(
        self: EmbeddedSummarizer,
        previous: str | None,
        messages: list[tuple[str, str]],
        max_chars: int,
    ) -> str:
        original(self, None, [], max_chars)  # raises during an outage
        new = [line_of(role, content) for role, content in messages]
        return "\n".join([*(previous.splitlines() if previous else []), *new])

    monkeypatch.setattr(EmbeddedSummarizer, "summarize", lines)


def summarize(api: InProcessApi, *records: tuple[str, str]) -> list[str]:
    """Invoke SummarizeFunction; the messageIds it reported as failed."""
    result = api.invoke("SummarizeFunction", sqs_event(*records))
    return [failure["itemIdentifier"] for failure in result["batchItemFailures"]]


def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Counter:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.n = 0

    def add(self) -> None:
        with self.lock:
            self.n += 1


@pytest.fixture
def summarizer_calls(monkeypatch: pytest.MonkeyPatch) -> Counter:
    """Counts the embedded summarizer's calls (the real one still runs)."""
    calls = Counter()
    original = EmbeddedSummarizer.summarize

    def counted(self: EmbeddedSummarizer, *args: Any, **kwargs: Any) -> str:
        calls.add()
        return original(self, *args, **kwargs)

    monkeypatch.setattr(EmbeddedSummarizer, "summarize", counted)
    return calls


@pytest.fixture
def capability(api: InProcessApi, tenant: Tenant) -> str:
    return create_capability(api, tenant)


# --- one job -----------------------------------------------------------------------


def test_after_turns_one_job_folds_the_omitted_messages_and_a_batch_ahead(
    api: InProcessApi, tenant: Tenant, capability: str
) -> None:
    session_id = open_session(api, tenant, capability)
    send_turns(api, tenant, session_id, 6)  # 12 messages, the newest 4 replayed
    before = context(api, tenant, session_id)
    assert before["summary"] is None and before["omittedMessages"] == 8

    assert summarize(api, ("m-1", job(tenant, session_id))) == []

    after = context(api, tenant, session_id)
    # A batch of 5 turns past the newest omitted message is more than this window holds:
    # the summary runs ahead through the newest message.
    assert after["summary"]["throughSeq"] == 12 >= after["omittedMessages"]
    text = after["summary"]["text"]
    for number in (1000, 1002, 1010):  # what each user message asked to remember
        assert f"remember the number {number}" in text
    # The next turn replays the summary.
    (turn,) = send_turns(api, tenant, session_id, 1)
    assert turn["context"]["summaryIncluded"] is True
    assert turn["context"]["omittedMessages"] == 8


def test_a_job_never_sends_a_message(
    api: InProcessApi, tenant: Tenant, capability: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    session_id = open_session(api, tenant, capability)
    send_turns(api, tenant, session_id, 30)
    sent: list[str] = []
    api.container.infrastructure.clients["sqs"].meta.events.register(
        "before-call.sqs.SendMessage", lambda **kwargs: sent.append("SendMessage")
    )

    assert summarize(api, ("m-1", job(tenant, session_id))) == []

    assert context(api, tenant, session_id)["summary"]["throughSeq"] == 60
    assert sent == []  # no self-requeue: nothing for Lambda's loop detection to cut


def test_a_job_short_of_time_keeps_its_progress_and_asks_sqs_to_redeliver_it_soon(
    api: InProcessApi,
    tenant: Tenant,
    capability: str,
    monkeypatch: pytest.MonkeyPatch,
    summarizer_calls: Counter,
) -> None:
    session_id = open_session(api, tenant, capability)
    send_turns(api, tenant, session_id, 30)  # 60 messages: two calls of 40 at most
    worker = api.container.summaries
    calls_allowed = iter([True])

    def time_left() -> float:
        return 120.0 if next(calls_allowed, False) else 1.0

    fold = worker.fold
    monkeypatch.setattr(worker, "fold", lambda ws, sid, _time_left=None: fold(ws, sid, time_left))
    sqs = api.container.infrastructure.clients["sqs"]
    queue_url = api.resources.queue_urls["SummaryQueue"]
    sqs.send_message(QueueUrl=queue_url, MessageBody=job(tenant, session_id))
    (message,) = sqs.receive_message(QueueUrl=queue_url)["Messages"]
    changed: list[dict[str, Any]] = []
    sqs.meta.events.register(
        "provide-client-params.sqs.ChangeMessageVisibility",
        lambda params, **kwargs: changed.append(dict(params)),
    )
    event = sqs_event(("m-1", message["Body"]))
    event["Records"][0]["receiptHandle"] = message["ReceiptHandle"]

    result = api.invoke("SummarizeFunction", event)

    assert [f["itemIdentifier"] for f in result["batchItemFailures"]] == ["m-1"]
    assert summarizer_calls.n == 1
    assert context(api, tenant, session_id)["summary"]["throughSeq"] == 40  # progress kept
    # The same message comes back within seconds (not the queue's 18 minutes).
    assert changed == [
        {
            "QueueUrl": queue_url,
            "ReceiptHandle": message["ReceiptHandle"],
            "VisibilityTimeout": REDELIVER_SECONDS,
        }
    ]


@pytest.fixture
def unreachable_api(backend: AwsBackend) -> Iterator[InProcessApi]:
    """A deployment with a connection whose endpoint nothing listens on."""
    connections = {
        "unreachable": {
            "type": "openai",
            "baseUrl": f"http://127.0.0.1:{closed_port()}/v1",
            "models": ["summarizer"],
            "timeoutSeconds": 5,
        }
    }
    with serving(backend, {"PROVIDER_CONNECTIONS": json.dumps(connections)}) as stack:
        yield stack


def test_a_batch_reports_exactly_the_record_that_failed(unreachable_api: InProcessApi) -> None:
    api = unreachable_api
    tenant = Tenant(*new_workspace(api, "alpha"))
    capability = create_capability(api, tenant)
    # A capability whose summarizer model is unreachable: its jobs fail.
    unreachable = create_capability(
        api,
        tenant,
        {"provider": {"connection": "unreachable", "modelId": "summarizer"}, "maxChars": 2000},
    )
    good = open_session(api, tenant, capability)
    bad = open_session(api, tenant, unreachable)
    for session_id in (good, bad):
        send_turns(api, tenant, session_id, 4)

    failed = summarize(
        api,
        ("poison", "this is not json"),
        ("no-session", json.dumps({"workspaceId": tenant.workspace_id})),
        ("bad", job(tenant, bad)),
        ("good", job(tenant, good)),
    )

    # Malformed jobs can never succeed: they are dropped, not retried into the DLQ.
    assert failed == ["bad"]
    assert context(api, tenant, good)["summary"]["throughSeq"] == 8
    assert context(api, tenant, bad)["summary"] is None


def test_a_job_naming_another_workspaces_session_does_nothing(
    api: InProcessApi, tenant: Tenant, other_tenant: Tenant
) -> None:
    # A seeded capability: the other workspace has one of the same id.
    session_id = open_session(api, tenant, "cap-generative")
    send_turns(api, tenant, session_id, 12)  # 24 messages, the newest 20 replayed
    assert context(api, tenant, session_id)["omittedMessages"] == 4

    assert summarize(api, ("m-1", job(other_tenant, session_id))) == []
    assert context(api, tenant, session_id)["summary"] is None

    assert summarize(api, ("m-2", job(tenant, session_id))) == []
    # Through the newest omitted message (4) and a batch of 5 turns ahead.
    assert context(api, tenant, session_id)["summary"]["throughSeq"] == 14


def test_a_duplicate_delivery_leaves_the_summary_unchanged_without_summarizing(
    api: InProcessApi, tenant: Tenant, capability: str, summarizer_calls: Counter
) -> None:
    session_id = open_session(api, tenant, capability)
    send_turns(api, tenant, session_id, 5)
    record = ("m-1", job(tenant, session_id))
    assert summarize(api, record) == []
    first = context(api, tenant, session_id)["summary"]
    calls = summarizer_calls.n
    assert first["throughSeq"] == 10 and calls == 1

    assert summarize(api, record) == []
    assert summarize(api, record, ("m-2", job(tenant, session_id))) == []

    assert context(api, tenant, session_id)["summary"] == first
    assert summarizer_calls.n == calls


# --- racing jobs -------------------------------------------------------------------


@pytest.fixture
def racing_store(api: InProcessApi, monkeypatch: pytest.MonkeyPatch) -> Callable[[], int]:
    """The summary worker with small chunks so that racing jobs interleave (the stack's
    DynamoDB client is serialized, as DynamoDB is atomic per request); returns how many
    summary writes lost their condition."""
    worker = api.container.summaries
    monkeypatch.setattr(worker, "_policy", dataclasses.replace(worker._policy, chunk_messages=3))
    store = api.container.adapters.stores.summaries
    lost = Counter()
    advance = store.advance_summary

    def counted(
        session_id: str, previous_through: int, summary: Summary, *more: Any, **kw: Any
    ) -> bool:
        stored = advance(session_id, previous_through, summary, *more, **kw)
        if not stored:
            lost.add()
        return stored

    monkeypatch.setattr(store, "advance_summary", counted)
    return lambda: lost.n


def test_racing_jobs_fold_every_message_exactly_once(
    api: InProcessApi,
    tenant: Tenant,
    capability: str,
    line_summarizer: None,
    racing_store: Callable[[], int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    session_id = open_session(api, tenant, capability)
    # Both jobs summarize their first chunk from the same watermark before either stores
    # it, so every round has a real race; after that they run freely.
    barrier = threading.Barrier(2, timeout=20)
    first_call = threading.local()
    original = EmbeddedSummarizer.summarize

    def rendezvous(self: EmbeddedSummarizer, *args: Any, **kwargs: Any) -> str:
        if getattr(first_call, "pending", False):
            first_call.pending = False
            barrier.wait()
        return original(self, *args, **kwargs)

    monkeypatch.setattr(EmbeddedSummarizer, "summarize", rendezvous)

    def run_job(index: int, failures: list[Any]) -> None:
        first_call.pending = True
        try:
            failures.extend(summarize(api, (f"m-{index}", job(tenant, session_id))))
        except Exception as exc:  # surfaced by the assertion below
            failures.append(exc)

    lost_before = 0
    for round_turns in (7, 5, 6):
        send_turns(api, tenant, session_id, round_turns)
        failures: list[Any] = []
        threads = [threading.Thread(target=run_job, args=(i, failures)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)

        assert failures == []
        assert racing_store() > lost_before  # the race happened
        lost_before = racing_store()
        view = context(api, tenant, session_id)
        through = view["summary"]["throughSeq"]
        assert through >= view["omittedMessages"]
        folded = transcript(api, tenant, session_id)[:through]
        # Each message exactly once, in order: none folded twice, none skipped.
        assert view["summary"]["text"].splitlines() == expected_lines(folded)


# --- summarizer outage -------------------------------------------------------------


@pytest.fixture
def outage(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[bool], None]]:
    def set_outage(on: bool) -> None:
        if on:
            monkeypatch.setenv("CONVO_SUMMARIZER_FAIL", "1")
        else:
            monkeypatch.delenv("CONVO_SUMMARIZER_FAIL", raising=False)

    yield set_outage


def test_during_an_outage_turns_go_on_and_afterwards_one_job_catches_up(
    api: InProcessApi,
    tenant: Tenant,
    capability: str,
    line_summarizer: None,
    outage: Callable[[bool], None],
) -> None:
    session_id = open_session(api, tenant, capability)
    outage(True)

    turns = send_turns(api, tenant, session_id, 6)

    # Same replay as without a summarizer: the newest 4 messages, no summary.
    assert [t["context"]["replayedMessages"] for t in turns] == [0, 2, 4, 4, 4, 4]
    assert [t["context"]["omittedMessages"] for t in turns] == [0, 0, 0, 2, 4, 6]
    assert not any(t["context"]["summaryIncluded"] for t in turns)
    assert summarize(api, ("m-1", job(tenant, session_id))) == ["m-1"]
    assert context(api, tenant, session_id)["summary"] is None

    send_turns(api, tenant, session_id, 2)  # chat goes on
    outage(False)

    assert summarize(api, ("m-1", job(tenant, session_id))) == []

    view = context(api, tenant, session_id)
    assert view["omittedMessages"] == 12
    assert view["summary"]["throughSeq"] == 16 >= view["omittedMessages"]
    folded = transcript(api, tenant, session_id)[:16]
    assert view["summary"]["text"].splitlines() == expected_lines(folded)


def test_a_deleted_session_gets_no_summary_and_a_late_one_is_swept(backend: AwsBackend) -> None:
    with serving(backend) as api:
        _, token = new_workspace(api, "gone")
        created = api.call(
            "POST",
            "/v1/sessions",
            token=token,
            json_body={"capabilityId": "cap-generative", "externalRef": "x"},
        )
        session_id = created.body["id"]
        workspace_id = api.container.adapters.stores.sessions.get_session(session_id).workspace_id  # type: ignore[union-attr]
        assert api.call("DELETE", f"/v1/sessions/{session_id}", token=token).status == 204

        # A job for the deleted session does nothing.
        outcome = api.container.summaries.fold(workspace_id, session_id)
        assert outcome.status == "skipped"
        # A job already past that check when the deletion came lands its write (one
        # conditional put, no transaction): the deletion's final sweep removes it.
        late = api.container.adapters.stores.summaries.advance_summary(
            session_id, 0, Summary(text="late", through_seq=4)
        )
        assert late is True
        grace = api.container.settings.deletion_grace_seconds
        api.container.retention.run(datetime.now(UTC) + timedelta(seconds=grace + 1))
        assert api.container.adapters.stores.summaries.get_summary(session_id) is None
