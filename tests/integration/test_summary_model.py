"""Who summarizes, and how often: a fake OpenAI-compatible model on 127.0.0.1 behind an
operator connection, turns through the HTTP routes of the in-process stack, and the
SummaryQueue drained by SummarizeFunction after every turn (a conversation at a human
pace: each turn arrives after the previous one's summary job has run)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.fakes.openai_server import FakeOpenAIServer, RecordedRequest
from tests.support.inprocess_api import AwsBackend, InProcessApi, new_workspace, serving
from tests.support.summary_jobs import SummaryJobs

PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
CHAT_MODEL = "chat-model-1"
SUMMARY_MODEL = "summary-model-1"


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


def is_summary_request(request: RecordedRequest) -> bool:
    system = request.body["messages"][0]["content"]
    return "rolling summary of a conversation" in system


@dataclass
class FakeModel:
    """Answers turns with a line that quotes the input, summaries with a numbered text."""

    server: FakeOpenAIServer
    summaries: list[str] = field(default_factory=list)

    def respond(self, body: Any) -> str:
        system = body["messages"][0]["content"]
        if "rolling summary of a conversation" in system:
            self.summaries.append(f"Summary {len(self.summaries) + 1}: order 48213, Ada.")
            return self.summaries[-1]
        return f"Noted: {body['messages'][-1]['content']}"

    @property
    def summary_requests(self) -> list[RecordedRequest]:
        return [r for r in self.server.requests if is_summary_request(r)]

    @property
    def turn_requests(self) -> list[RecordedRequest]:
        return [r for r in self.server.requests if not is_summary_request(r)]


@dataclass
class Stack:
    api: InProcessApi
    token: str
    model: FakeModel
    jobs: SummaryJobs


def stack(backend: AwsBackend, env: dict[str, str] | None = None) -> Iterator[Stack]:
    with FakeOpenAIServer() as server:
        model = FakeModel(server)
        server.respond = model.respond
        connections = {
            "fake": {"type": "openai", "baseUrl": server.base_url, "models": ["*-model-*"]}
        }
        settings = {
            "PROVIDER_CONNECTIONS": json.dumps(connections),
            # A human pace: every due trigger is sent, and its job runs before the next turn.
            "SUMMARY_COALESCE_SECONDS": "0",
            "SUMMARY_DELAY_SECONDS": "0",
            **(env or {}),
        }
        with serving(backend, settings) as api:
            _, token = new_workspace(api, "alpha")
            yield Stack(api, token, model, SummaryJobs(api))


@pytest.fixture
def default_stack(backend: AwsBackend) -> Iterator[Stack]:
    yield from stack(backend)


def create_capability(s: Stack, **fields: Any) -> str:
    body = {
        "name": "support",
        "kind": "generative",
        "provider": {"connection": "fake", "modelId": CHAT_MODEL},
        **fields,
    }
    response = s.api.call("POST", "/v1/capabilities", token=s.token, json_body=body)
    assert response.status == 201, response.body
    return str(response.body["id"])


def converse(s: Stack, capability: str, turns: int) -> tuple[str, list[dict[str, Any]]]:
    response = s.api.call(
        "POST",
        "/v1/sessions",
        token=s.token,
        json_body={"capabilityId": capability, "externalRef": "customer-4471"},
    )
    assert response.status == 201, response.body
    session_id = str(response.body["id"])
    bodies = []
    for i in range(1, turns + 1):
        text = f"Question {i}: where is order 48213?" if i > 1 else "I'm Ada, order 48213."
        answer = s.api.call(
            "POST",
            f"/v1/sessions/{session_id}/messages",
            token=s.token,
            json_body={"input": text},
        )
        assert answer.status == 200 and answer.body["recorded"] is True, answer.body
        bodies.append(answer.body)
        s.jobs.run_pending()
    return session_id, bodies


def context(s: Stack, session_id: str) -> dict[str, Any]:
    response = s.api.call("GET", f"/v1/sessions/{session_id}/context", token=s.token)
    assert response.status == 200
    return dict(response.body)


def fenced(text: str, kind: str) -> list[str]:
    return re.findall(rf'<data-[0-9a-f]+ kind="{kind}">\n(.*?)\n</data-[0-9a-f]+>', text, re.S)


def test_the_capabilitys_own_model_summarizes_once_per_five_turns_with_the_data_fenced(
    default_stack: Stack,
) -> None:
    s = default_stack
    capability = create_capability(s)  # default replay window: 20 messages

    session_id, turns = converse(s, capability, 50)

    summary_requests = s.model.summary_requests
    # The capability's own connection and model, by default.
    assert {r.body["model"] for r in summary_requests} == {CHAT_MODEL}
    assert {r.body["model"] for r in s.model.turn_requests} == {CHAT_MODEL}
    assert len(s.model.turn_requests) == 50
    assert 1 <= len(summary_requests) <= 50 // 5 + 2
    # Every prompt fences the previous summary (the model's own last answer) and the new
    # messages as data; each call folds a batch of at least five turns.
    previous = ["(none yet)", *s.model.summaries]
    for index, request in enumerate(summary_requests):
        prompt = request.body["messages"][-1]["content"]
        assert fenced(prompt, "previous-summary") == [previous[index]]
        (new_messages,) = fenced(prompt, "new-messages")
        assert new_messages.count("user: ") >= 5 and new_messages.count("assistant: ") >= 5
        assert "Question" not in prompt.split("<data-")[0]  # no recorded text outside
    # No turn ever saw a gap between the summary in its prompt and its window.
    for request, turn in zip(s.model.turn_requests, turns, strict=True):
        system = request.body["messages"][0]["content"]
        through = re.findall(r'kind="summary" through-seq="(\d+)"', system)
        covered = int(through[0]) if through else 0
        assert covered >= turn["context"]["omittedMessages"]
    view = context(s, session_id)
    assert view["summary"]["text"] == s.model.summaries[-1]
    assert view["summary"]["throughSeq"] >= view["omittedMessages"] == 80


def test_a_deployment_default_summary_model_summarizes_capabilities_without_their_own(
    backend: AwsBackend,
) -> None:
    for s in stack(backend, {"SUMMARY_CONNECTION": "fake", "SUMMARY_MODEL_ID": SUMMARY_MODEL}):
        plain = create_capability(s, replay={"maxMessages": 4, "maxChars": 10_000})
        pinned = create_capability(
            s,
            replay={"maxMessages": 4, "maxChars": 10_000},
            summary={"provider": {"connection": "fake", "modelId": "pinned-model-1"}},
        )

        converse(s, plain, 4)
        converse(s, pinned, 4)

        models = [r.body["model"] for r in s.model.summary_requests]
        assert SUMMARY_MODEL in models and "pinned-model-1" in models
        assert CHAT_MODEL not in models
