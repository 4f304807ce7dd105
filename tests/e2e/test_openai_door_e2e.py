"""The OpenAI-compatible door end to end: OpenAI's own Python SDK, LangChain's
``ChatOpenAI``, and the recipes of docs/openai.md for clients that cannot send ``user``
(LiteLLM's ``completion()``, Simon Willison's ``llm``) against ``python -m local_runtime``,
with an OpenAI-compatible fake model and a webhook tool server on 127.0.0.1."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest
from langchain_openai import ChatOpenAI
from openai import OpenAI

from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.webhook_server import Reply, WebhookServer
from tests.support.docs_recipes import docs_block, recipe_output
from tests.support.runtime_process import DEV_TOKEN, RuntimeProcess, StartRuntime, launch_runtime

pytestmark = pytest.mark.e2e
DOCS = Path(__file__).resolve().parents[2] / "docs" / "openai.md"
README = Path(__file__).resolve().parents[2] / "README.md"
PRINCIPAL = {"tenant_id": "store-a", "user_id": "u_913"}


@dataclass
class Stack:
    runtime: RuntimeProcess
    model: FakeOpenAIServer
    hook: WebhookServer

    def client(self, **options: Any) -> OpenAI:
        return OpenAI(base_url=self.runtime.base_url + "/v1", api_key=DEV_TOKEN, **options)

    def call(self, method: str, path: str, body: Any = None) -> Any:
        status, _, payload = self.runtime.call(method, path, token=DEV_TOKEN, json=body)
        assert 200 <= status < 300, (status, payload)
        return payload


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with FakeOpenAIServer() as model, WebhookServer(default_output="ok") as hook:
        connections = {"fake": {"type": "openai", "baseUrl": model.base_url, "models": ["fake-*"]}}
        runtime = launch_runtime(
            {
                "CONVO_PROVIDER_CONNECTIONS": json.dumps(connections),
                "CONVO_TOOL_ALLOWED_HOSTS": hook.host,
                "no_proxy": "127.0.0.1,localhost",
            }
        )
        try:
            yield Stack(runtime, model, hook)
        finally:
            runtime.assert_stopped_cleanly()


def test_models_lists_the_conversational_capabilities(stack: Stack) -> None:
    ids = [model.id for model in stack.client().models.list()]

    assert "cap-generative" in ids and "cap-agent" in ids
    assert "cap-classic" not in ids


def test_three_turns_by_key_hold_a_conversation_at_the_model(stack: Stack) -> None:
    capability = stack.call(
        "POST",
        "/v1/capabilities",
        {
            "name": "fake chat",
            "kind": "generative",
            "provider": {"connection": "fake", "modelId": "fake-chat"},
            "instructions": "You are the e2e assistant.",
        },
    )["id"]
    stack.model.requests.clear()
    stack.model.respond = lambda body: f"noted ({len(body['messages'])} messages)"
    client = stack.client()
    history: list[Any] = []
    answers = []
    for text in ("My name is Ada Lovelace.", "I like engines.", "What is my name?"):
        history.append({"role": "user", "content": text})
        answer = client.chat.completions.create(
            model=capability,
            messages=history,  # the whole history, resent each time
            user="e2e-ada",
            extra_headers={"X-Convo-Session-Key": "e2e-conv-1"},
            max_tokens=64,
            temperature=0.3,
            top_p=0.5,
            stop=["END"],
        )
        answers.append(answer)
        history.append({"role": "assistant", "content": answer.choices[0].message.content})

    third = stack.model.requests[-1].body
    # Turn 1's text reached turn 3's prompt (replayed by the service, not resent by us).
    system = third["messages"][0]
    # The capability's instructions first (then, in a session, the data policy: issue 21).
    assert system["role"] == "system"
    assert system["content"].startswith("You are the e2e assistant.\n\n")
    # Every turn of the session sends the same system text: a prefix a provider can cache.
    assert {r.body["messages"][0]["content"] for r in stack.model.requests[-3:]} == {
        system["content"]
    }
    assert {"role": "user", "content": "My name is Ada Lovelace."} in third["messages"]
    assert third["messages"][-1] == {"role": "user", "content": "What is my name?"}
    assert (third["max_tokens"], third["temperature"], third["top_p"], third["stop"]) == (
        64,
        0.3,
        0.5,
        ["END"],
    )
    session_id = answers[0].convo["sessionId"]  # type: ignore[attr-defined]
    assert {a.convo["sessionId"] for a in answers} == {session_id}  # type: ignore[attr-defined]
    # The resent history recorded each message once.
    messages = stack.call("GET", f"/v1/sessions/{session_id}/messages")["messages"]
    assert [m["content"] for m in messages] == [m["content"] for m in history]


def test_stream_chunks_concatenate_to_the_recorded_answer(stack: Stack) -> None:
    raw = stack.client().chat.completions.with_raw_response.create(
        model="cap-generative",
        messages=[{"role": "user", "content": "Tell me something in pieces."}],
        user="e2e-streamer",
        extra_headers={"X-Convo-Session-Key": "e2e-stream"},
        stream=True,
        stream_options={"include_usage": True},
    )
    session_id = raw.headers["x-convo-session-id"]
    chunks = list(raw.parse())

    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 1
    assert chunks[-1].choices[0].finish_reason == "stop"
    messages = stack.call("GET", f"/v1/sessions/{session_id}/messages")["messages"]
    assert messages[-1]["content"] == text and "Tell me something in pieces." in text


def test_eight_concurrent_first_calls_on_one_key_open_one_session(stack: Stack) -> None:
    client = stack.client(max_retries=0)
    answers: list[Any] = []
    start = threading.Barrier(8)

    def first_call() -> None:
        start.wait()
        answers.append(
            client.chat.completions.create(
                model="cap-generative",
                messages=[{"role": "user", "content": "hello at once"}],
                user="e2e-racer",
                extra_headers={"X-Convo-Session-Key": "e2e-race"},
            )
        )

    threads = [threading.Thread(target=first_call) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert len(answers) == 8
    sessions = {a.convo["sessionId"] for a in answers}
    listed = stack.call("GET", "/v1/sessions?externalRef=e2e-racer")["sessions"]
    assert len(sessions) == 1 and [s["id"] for s in listed] == list(sessions)


def test_every_refusal_raises_the_sdks_own_exception(stack: Stack) -> None:
    client = stack.client(max_retries=0)
    turn: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}], "user": "e2e-refused"}
    key = {"X-Convo-Session-Key": "e2e-refusals"}
    client.chat.completions.create(model="cap-generative", extra_headers=key, **turn)

    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="cap-none", **turn)
    with pytest.raises(openai.ConflictError) as other_user:
        client.chat.completions.create(
            model="cap-generative", extra_headers=key, **{**turn, "user": "someone-else"}
        )
    with pytest.raises(openai.AuthenticationError):
        OpenAI(base_url=stack.runtime.base_url + "/v1", api_key="not-a-token").models.list()
    with pytest.raises(openai.UnprocessableEntityError) as legacy:
        client.chat.completions.create(
            model="cap-generative",
            functions=[{"name": "f", "parameters": {}}],
            **turn,
        )

    with pytest.raises(openai.ConflictError) as classic:
        client.chat.completions.create(model="cap-classic", messages=turn["messages"])
    with pytest.raises(openai.UnprocessableEntityError) as mistyped:
        client.chat.completions.create(
            model="cap-generative", extra_body={"temperature": "hot"}, **turn
        )

    assert missing.value.code == "capability_not_found"
    assert other_user.value.code == "external_ref_immutable"
    assert other_user.value.type == "conflict_error"
    assert legacy.value.body["message"].startswith("functions is not supported")  # type: ignore[index]
    assert (legacy.value.param, mistyped.value.param) == ("functions", "temperature")
    assert classic.value.code == "capability_not_conversational"


def test_over_the_rate_limit_the_sdk_raises_rate_limit_error(start_runtime: StartRuntime) -> None:
    runtime = start_runtime(
        {"CONVO_WORKSPACE_TURNS_PER_SECOND": "1", "CONVO_WORKSPACE_TURN_BURST": "40"}
    )
    client = OpenAI(base_url=runtime.base_url + "/v1", api_key=DEV_TOKEN, max_retries=0)
    with pytest.raises(openai.RateLimitError) as refused:
        for _ in range(60):  # a burst of 40
            client.chat.completions.create(
                model="cap-generative", messages=[{"role": "user", "content": "again"}]
            )

    assert refused.value.code == "rate_limited"
    assert int(refused.value.response.headers["retry-after"]) >= 1


def test_a_stateless_call_records_nothing(stack: Stack) -> None:
    answer = stack.client().chat.completions.create(
        model="cap-generative",
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello!"},
            {"role": "user", "content": "Stateless, please."},
        ],
        user="e2e-stateless",
    )

    assert answer.convo == {  # type: ignore[attr-defined]
        "sessionId": None,
        "turn": None,
        "recorded": False,
        "withheld": False,
        "runId": None,
    }
    assert "I remember 2 earlier messages" in (answer.choices[0].message.content or "")
    assert stack.call("GET", "/v1/sessions?externalRef=e2e-stateless")["sessions"] == []


def test_an_agent_calls_its_webhook_with_the_principal_and_keeps_its_digest(
    stack: Stack,
) -> None:
    created = stack.call(
        "POST",
        "/v1/capabilities",
        {
            "name": "parcel desk",
            "kind": "agent",
            "tools": [
                {
                    "name": "track_parcel",
                    "description": "Tracking",
                    "inputSchema": {"type": "object", "properties": {"query": {"type": "string"}}},
                    "url": stack.hook.url("/track"),
                }
            ],
        },
    )
    stack.hook.secret = created["toolSigningSecret"]
    stack.hook.answers["/track"] = Reply(200, {"output": "ETA 2025-06-14 via ParcelCo"})
    stack.hook.calls.clear()
    client = stack.client(max_retries=0)
    turn = {"model": created["id"], "user": "e2e-agent-user"}
    headers = {"X-Convo-Session-Key": "e2e-agent", "X-Convo-Principal": json.dumps(PRINCIPAL)}

    first = client.chat.completions.create(
        messages=[{"role": "user", "content": "Please track_parcel 12345"}],
        extra_headers=headers,
        **turn,
    )
    follow_up = client.chat.completions.create(
        messages=[{"role": "user", "content": "When does it arrive?"}],
        extra_headers={"X-Convo-Session-Key": "e2e-agent"},  # the stored principal applies
        **turn,
    )
    with pytest.raises(openai.ConflictError) as refused:
        client.chat.completions.create(
            messages=[{"role": "user", "content": "again"}],
            extra_headers={**headers, "X-Convo-Principal": json.dumps({"tenant_id": "other"})},
            **turn,
        )

    (call,) = stack.hook.calls
    assert call.signature_valid and call.principal == PRINCIPAL
    assert call.body["sessionId"] == first.convo["sessionId"]
    message = first.choices[0].message
    assert 'I used track_parcel: "ETA 2025-06-14 via ParcelCo"' in (message.content or "")
    assert not message.tool_calls  # the service's tools are not the client's
    # The follow-up is answered from the digest kept with turn 1; no tool is called again.
    assert "2025-06-14" in (follow_up.choices[0].message.content or "")
    assert len(stack.hook.calls) == 1
    assert refused.value.code == "principal_immutable"


def test_langchain_chatopenai_holds_a_conversation(stack: Stack) -> None:
    llm = ChatOpenAI(
        base_url=stack.runtime.base_url + "/v1",
        api_key=DEV_TOKEN,
        model="cap-generative",
        default_headers={"X-Convo-Session-Key": "e2e-langchain"},
        model_kwargs={"user": "e2e-langchain-user"},
    )

    llm.invoke("Hi, my name is Grace.")
    second = llm.invoke("What is my name?")
    streamed = "".join(str(chunk.content) for chunk in llm.stream("Once more, streamed."))

    assert "I remember 2 earlier messages" in str(second.content)
    assert "I remember 4 earlier messages" in streamed
    sessions = stack.call("GET", "/v1/sessions?externalRef=e2e-langchain-user")["sessions"]
    assert [s["sessionKey"] for s in sessions] == ["e2e-langchain"]
    assert sessions[0]["messageCount"] == 6


def marked_examples() -> list[tuple[Path, str]]:
    """Every ``openai-example`` block of docs/openai.md, and of the README once it has
    one (the same example, with the same markers)."""
    pattern = r"<!-- openai-example:start -->\n```python\n(.*?)```\n<!-- openai-example:end -->"
    return [
        (path, found)
        for path in (DOCS, README)
        for found in re.findall(pattern, path.read_text(), re.S)
    ]


def test_the_docs_example_runs_as_written(stack: Stack, tmp_path: Path) -> None:
    examples = marked_examples()
    assert [path for path, _ in examples].count(DOCS) == 1, "docs/openai.md has no example"
    for index, (path, code) in enumerate(examples):
        env = {**os.environ, "CONVO_BASE_URL": stack.runtime.base_url, "CONVO_TOKEN": DEV_TOKEN}
        # The first runs exactly as written; a copy of it (the README's) in a conversation
        # of its own, so that it starts from scratch too.
        if index:
            code = code.replace("support-chat-0001", f"support-chat-copy-{index}")
        (tmp_path / "example.py").write_text(code)
        result = subprocess.run(
            [sys.executable, "example.py"],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=60,
        )

        assert result.returncode == 0, (path, result.stderr)
        lines = result.stdout.splitlines()
        assert 'You said: "Hi, my name is Ada."' in lines[0], path
        assert 'You said: "What is my name?". I remember 2 earlier messages.' in lines[2], path
        assert lines[1].split()[1] == lines[3].split()[1], path  # one session
        assert 'You said: "Say it again, slowly."' in lines[4], path


def keyed_session(stack: Stack, end_user: str, key: str) -> dict[str, Any]:
    sessions = stack.call("GET", f"/v1/sessions?externalRef={end_user}")["sessions"]
    (session,) = [s for s in sessions if s["sessionKey"] == key]
    return dict(session)


# What the embedded model answers a recipe's two turns: the second remembers the first.
TWO_TURNS = [
    'You said: "Hi, my name is Ada.". I remember 0 earlier messages.',
    'You said: "What is my name?". I remember 2 earlier messages.',
]


def test_litellm_holds_a_conversation_by_the_docs_recipe(stack: Stack, tmp_path: Path) -> None:
    (code,) = docs_block("litellm-example", ("python",))
    (tmp_path / "example.py").write_text(code)
    env = {
        "CONVO_BASE_URL": stack.runtime.base_url,
        "CONVO_TOKEN": DEV_TOKEN,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # offline, as the docs say
    }

    assert recipe_output([sys.executable, "example.py"], env, tmp_path) == TWO_TURNS
    assert keyed_session(stack, "customer-4471", "litellm-chat-0001")["messageCount"] == 4


def test_llm_holds_a_conversation_by_the_docs_recipe(stack: Stack, tmp_path: Path) -> None:
    models, commands = docs_block("llm-example", ("yaml", "sh"))
    # The docs name make run's address; this runtime listens on a port of its own.
    (tmp_path / "extra-openai-models.yaml").write_text(
        models.replace("http://127.0.0.1:3000", stack.runtime.base_url)
    )
    tools = str(Path(sys.executable).parent)  # llm, installed with the dev dependencies
    env = {
        "LLM_USER_PATH": str(tmp_path),
        "CONVO_TOKEN": DEV_TOKEN,
        "PATH": f"{tools}{os.pathsep}{os.environ.get('PATH', '')}",
    }

    # ``--no-stream`` reads the answer's usage: it failed on an answer without one.
    lines = recipe_output(["bash", "-euo", "pipefail", "-c", commands], env, tmp_path)
    assert lines == TWO_TURNS
    assert keyed_session(stack, "customer-4471", "llm-chat-0001")["messageCount"] == 4
