"""(v5) Images and files end to end, with the clients apps use: the real ``openai``
package (a chat ``image_url``, ``files.create`` then ``input_file`` by ``file_id``, a
Responses ``input_image`` as data), the OpenAI Agents SDK and Vercel's AI SDK, against
``python -m local_runtime`` whose capabilities' model is a fake OpenAI-compatible server
on 127.0.0.1. The model gets the image on its turn and again while it is in the window,
a placeholder once it is outside (what the summarizer is sent); refusals are clear 4xx
that store nothing; the tables hold references only, S3 one object per distinct
attachment of an owner, and nothing of an end user once their erasure is done."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import openai
import pytest

from convo_memory_client import Conversations
from convo_memory_client.export import export_lines
from tests.fakes.openai_server import FakeOpenAIServer, RecordedRequest
from tests.support.docs_recipes import recipe_output
from tests.support.node_scripts import NODE_DIR, node_command
from tests.support.runtime_process import DEV_TOKEN, FakeModelStack, runtime_on_fake_model
from tests.support.sample_files import data_url, padded_png, pdf, png

pytestmark = pytest.mark.e2e
CHAT_USER, RESP_USER, AGENT_USER, NODE_USER = (
    "e2e-img-chat",
    "e2e-img-resp",
    "e2e-img-agent",
    "e2e-img-node",
)
IMAGE, OTHER_IMAGE, NODE_IMAGE, AGENT_IMAGE = png(seed=1), png(seed=2), png(seed=3), png(seed=4)


@dataclass
class Stack(FakeModelStack):
    model: FakeOpenAIServer
    narrow: str = ""  # replays two messages: an attachment soon leaves its window
    blind: str = ""  # takes no images

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.base_url, api_key=DEV_TOKEN, max_retries=0)

    def capability_with(self, name: str, **settings: Any) -> str:
        provider = {"connection": "fake", "modelId": "fake-chat"}
        body = {"name": name, "kind": "generative", "provider": provider, **settings}
        return str(self.call("POST", "/v1/capabilities", body)["id"])

    def aws(self, service: str) -> Any:
        """A client of the runtime's moto server (its stand-in credentials)."""
        return boto3.client(  # type: ignore[call-overload]
            service,
            endpoint_url=self.runtime.aws_endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def bucket_keys(self) -> list[str]:
        s3 = self.aws("s3")
        bucket = next(b["Name"] for b in s3.list_buckets()["Buckets"] if "attachments" in b["Name"])
        return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]

    def items(self) -> list[dict[str, Any]]:
        dynamodb = self.aws("dynamodb")
        found: list[dict[str, Any]] = []
        for table in dynamodb.list_tables()["TableNames"]:
            found += dynamodb.scan(TableName=table)["Items"]
        return found

    def owner_of(self, user: str) -> str:
        """The keyed name an end user's attachments carry (from an id a listing shows)."""
        for session in self.call("GET", f"/v1/sessions?externalRef={user}")["sessions"]:
            for message in self.call("GET", f"/v1/sessions/{session['id']}/messages")["messages"]:
                for ref in message["attachments"]:
                    return str(ref["fileId"]).split("-")[1]
        raise AssertionError(f"no attachment of {user}")


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    model = FakeOpenAIServer(reply="Seen.")
    with model, runtime_on_fake_model(model.base_url, "eyes") as (runtime, [capability]):
        stack = Stack(runtime, model, capability, DEV_TOKEN)
        stack.narrow = stack.capability_with(
            "narrow eyes", replay={"maxMessages": 2, "minMessages": 2}
        )
        stack.blind = stack.capability_with("blind", attachments={"images": False})
        yield stack


def parts(request: RecordedRequest, kind: str) -> list[dict[str, Any]]:
    """Every content part of ``kind`` the model was sent in one request."""
    return [
        part
        for message in request.body["messages"]
        if isinstance(message.get("content"), list)
        for part in message["content"]
        if part.get("type") == kind
    ]


def image_urls(request: RecordedRequest) -> list[str]:
    return [part["image_url"]["url"] for part in parts(request, "image_url")]


# -- the model sees it, then a placeholder --------------------------------------------------


def test_a_chat_image_reaches_the_model_while_in_the_window_then_a_placeholder(
    stack: Stack,
) -> None:
    client, key = stack.client(), {"X-Convo-Session-Key": "e2e-img-chat"}
    image = {"type": "image_url", "image_url": {"url": data_url("image/png", IMAGE)}}
    ask = [{"role": "user", "content": [{"type": "text", "text": "What is this?"}, image]}]

    def say(messages: Any) -> Any:
        return client.chat.completions.create(
            model=stack.narrow, messages=messages, user=CHAT_USER, extra_headers=key
        )

    first = say(ask)
    assert image_urls(stack.model.requests[-1]) == [data_url("image/png", IMAGE)]
    say([{"role": "user", "content": "What colour is it?"}])
    assert image_urls(stack.model.requests[-1]) == [data_url("image/png", IMAGE)]  # replayed
    say([{"role": "user", "content": "Thanks."}])
    assert image_urls(stack.model.requests[-1]) == []  # out of the window

    # What leaves the window is folded into the summary: the summarizer gets a placeholder.
    placeholder = f"[image: image.png, {len(IMAGE)} bytes]"
    deadline = time.monotonic() + 30
    while not any(placeholder in json.dumps(r.body) for r in stack.model.requests):
        assert time.monotonic() < deadline, "the summarizer was never sent the placeholder"
        time.sleep(0.2)
    (summarizing,) = [r for r in stack.model.requests if placeholder in json.dumps(r.body)][:1]
    assert image_urls(summarizing) == []
    assert base64.b64encode(IMAGE).decode()[:40] not in json.dumps(summarizing.body)
    session = first.model_extra["convo"]["sessionId"]
    (user_message, *_) = stack.call("GET", f"/v1/sessions/{session}/messages")["messages"]
    assert [(r["type"], r["mimeType"], r["bytes"]) for r in user_message["attachments"]] == [
        ("image", "image/png", len(IMAGE))
    ]


def test_files_create_then_input_file_by_id_reaches_the_model(stack: Stack) -> None:
    client = stack.client()
    uploaded = client.files.create(
        file=("terms.pdf", pdf(), "application/pdf"), purpose="user_data"
    )
    assert client.files.retrieve(uploaded.id).bytes == len(pdf())
    assert client.files.content(uploaded.id).read() == pdf()
    assert uploaded.id in [f.id for f in client.files.list()]

    first = client.responses.create(
        model=stack.capability,
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Summarise it."},
                    {"type": "input_file", "file_id": uploaded.id},
                ],
            }
        ],
        safety_identifier=RESP_USER,
    )
    sent = parts(stack.model.requests[-1], "file")
    assert sent == [
        {
            "type": "file",
            "file": {"filename": "terms.pdf", "file_data": data_url("application/pdf", pdf())},
        }
    ]
    client.responses.create(
        model=stack.capability,
        input="Anything else?",
        previous_response_id=first.id,
        safety_identifier=RESP_USER,
    )
    assert len(parts(stack.model.requests[-1], "file")) == 1  # again, in the window


def test_a_responses_input_image_as_data_is_stored_once_per_owner(stack: Stack) -> None:
    client = stack.client()
    image = {
        "type": "input_image",
        "image_url": data_url("image/png", OTHER_IMAGE),
        "detail": "auto",
    }
    ask = [{"role": "user", "content": [{"type": "input_text", "text": "And this one?"}, image]}]

    first = client.responses.create(model=stack.capability, input=ask, safety_identifier=RESP_USER)  # type: ignore[arg-type]
    assert image_urls(stack.model.requests[-1]) == [data_url("image/png", OTHER_IMAGE)]
    client.responses.create(
        model=stack.capability,
        input="Bigger?",
        previous_response_id=first.id,
        safety_identifier=RESP_USER,
    )
    assert image_urls(stack.model.requests[-1]) == [data_url("image/png", OTHER_IMAGE)]
    client.responses.create(model=stack.capability, input=ask, safety_identifier=RESP_USER)  # type: ignore[arg-type]

    items = stack.call("GET", f"/v1/responses/{first.id}/input_items")["data"]
    assert {
        "type": "input_image",
        "file_id": items[-1]["content"][1]["file_id"],
        "detail": "auto",
    } in items[-1]["content"]
    owner = stack.owner_of(RESP_USER)
    assert (
        len([key for key in stack.bucket_keys() if f"/{owner}/" in key]) == 1
    )  # two sessions, one object


def test_the_agents_sdk_sends_an_image_that_the_next_run_still_sees(stack: Stack) -> None:
    from agents import Agent, ModelSettings, Runner, set_default_openai_client, set_tracing_disabled

    set_tracing_disabled(True)
    with asyncio.Runner() as loop:
        set_default_openai_client(openai.AsyncOpenAI(base_url=stack.base_url, api_key=DEV_TOKEN))
        agent = Agent(name="eyes", instructions="Describe.", model=stack.capability,
                      model_settings=ModelSettings(extra_body={"safety_identifier": AGENT_USER}))  # fmt: skip
        image = {
            "type": "input_image",
            "image_url": data_url("image/png", AGENT_IMAGE),
            "detail": "auto",
        }
        ask = [
            {"role": "user", "content": [{"type": "input_text", "text": "What is this?"}, image]}
        ]
        first = loop.run(Runner.run(agent, ask))  # type: ignore[arg-type]
        assert image_urls(stack.model.requests[-1]) == [data_url("image/png", AGENT_IMAGE)]
        loop.run(Runner.run(agent, "Which colour?", previous_response_id=first.last_response_id))
    assert image_urls(stack.model.requests[-1]) == [data_url("image/png", AGENT_IMAGE)]


def test_the_ai_sdk_sends_an_image_that_the_next_call_still_sees(stack: Stack) -> None:
    env = {"CONVO_BASE_URL": stack.runtime.base_url, "CONVO_TOKEN": DEV_TOKEN}
    command = [
        *node_command("responses_image.mjs"),
        stack.capability,
        NODE_USER,
        base64.b64encode(NODE_IMAGE).decode(),
    ]
    before = len(stack.model.requests)

    [line] = recipe_output(command, env, NODE_DIR)

    out, sent = json.loads(line), stack.model.requests[before:]
    assert out["first"]["text"] == out["second"]["text"] == "Seen."
    assert [image_urls(r) for r in sent] == [[data_url("image/png", NODE_IMAGE)]] * 2


# -- refusals: a clear 4xx, nothing stored ---------------------------------------------------


def refused(
    stack: Stack, user: str, content: list[Any], capability: str | None = None, **door: Any
) -> tuple[int, Any]:
    body = {
        "model": capability or stack.capability,
        "user": user,
        "messages": [{"role": "user", "content": content}],
    }
    headers = {"X-Convo-Session-Key": f"refused-{user}"}
    if door.get("responses"):
        body = {
            "model": stack.capability,
            "safety_identifier": user,
            "input": [{"role": "user", "content": content}],
        }
        status, _, answer = stack.runtime.call("POST", "/v1/responses", token=DEV_TOKEN, json=body)
    else:
        status, _, answer = stack.runtime.call(
            "POST", "/v1/chat/completions", token=DEV_TOKEN, json=body, headers=headers
        )
    return status, answer


def test_what_the_service_refuses_is_a_clear_4xx_and_nothing_is_stored(stack: Stack) -> None:
    keys, calls = stack.bucket_keys(), len(stack.model.requests)
    image = {"type": "image_url", "image_url": {"url": data_url("image/png", IMAGE)}}
    huge = {"type": "image_url", "image_url": {"url": data_url("image/png", padded_png(5_000_000))}}
    lying = {
        "type": "file",
        "file": {"filename": "x.pdf", "file_data": data_url("application/pdf", png())},
    }
    private = {"type": "input_image", "image_url": "https://169.254.169.254/latest/meta.png"}

    cases = [
        (refused(stack, "e2e-refused-1", [huge]), 413, None),
        (refused(stack, "e2e-refused-2", [lying]), 422, "messages[0].content[0].file.file_data"),
        (
            refused(stack, "e2e-refused-3", [image] * 21),
            422,
            "messages[0].content[20].image_url.url",
        ),
        (
            refused(stack, "e2e-refused-4", [image], stack.blind),
            422,
            "messages[0].content[0].image_url.url",
        ),
        (
            refused(stack, "e2e-refused-5", [private], responses=True),
            422,
            "input[0].content[0].image_url",
        ),
    ]

    for (status, answer), expected, param in cases:
        assert status == expected, answer
        if param is not None:
            assert answer["error"]["param"].replace("[", ".").replace("]", "") == param.replace(
                "[", "."
            ).replace("]", "")
    assert stack.bucket_keys() == keys and len(stack.model.requests) == calls
    for user in (
        "e2e-refused-1",
        "e2e-refused-2",
        "e2e-refused-3",
        "e2e-refused-4",
        "e2e-refused-5",
    ):
        assert stack.call("GET", f"/v1/sessions?externalRef={user}")["sessions"] == []


# -- what is kept, and what an erasure leaves ---------------------------------------------------


def test_tables_hold_references_only_and_an_erasure_leaves_nothing_of_the_end_user(
    stack: Stack,
) -> None:
    sent = [IMAGE, OTHER_IMAGE, AGENT_IMAGE, NODE_IMAGE, pdf()]
    items = stack.items()
    text = json.dumps(items)
    assert not any(base64.b64encode(data).decode()[8:48] in text for data in sent)
    turns = [i for i in items if i.get("sk", {}).get("S", "").startswith("MSG#") and "f" in i]
    assert turns
    for turn in turns:
        assert len("f") + len(turn["f"]["S"].encode()) <= 300 * len(json.loads(turn["f"]["S"]))

    # An export carries each attachment after its message, with its bytes.
    exported = list(export_lines(Conversations(stack.runtime.base_url, DEV_TOKEN), RESP_USER))
    attached = [line for line in exported if line["type"] == "attachment"]
    assert {base64.b64decode(line["data"]) for line in attached} == {pdf(), OTHER_IMAGE}
    assert {line["kind"] for line in attached} == {"image", "document"}

    users = (CHAT_USER, RESP_USER, AGENT_USER, NODE_USER)
    owners = [stack.owner_of(user) for user in users]
    erasures = [stack.call("POST", "/v1/erasures", {"externalRef": user})["id"] for user in users]
    deadline = time.monotonic() + 60
    for erasure in erasures:  # they run together
        while (done := stack.call("GET", f"/v1/erasures/{erasure}"))["status"] != "done":
            assert time.monotonic() < deadline and done["status"] != "failed", done
            time.sleep(0.3)
    left = stack.bucket_keys()
    assert not any(f"/{owner}/" in key for owner in owners for key in left)
    assert all("/files/" in key for key in left)  # the upload is the workspace's: it stays
