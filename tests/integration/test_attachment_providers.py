"""(v5) What each provider is sent of a message's attachments: Bedrock Converse
``image`` and ``document`` blocks, checked against botocore's recorded Converse schema
(the Stubber validates every request against the service model), and OpenAI-compatible
parts (``image_url`` as data or a link, PDFs as ``file``, text documents as text) as a
fake server on 127.0.0.1 receives them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from botocore.stub import Stubber

from convo_memory.adapters.providers.bedrock import BedrockConverseProvider
from convo_memory.adapters.providers.openai_compat import OpenAICompatibleProvider
from convo_memory.domain.attachments import InlineFile, SentFile, check_file, ref_of
from convo_memory.domain.prompt import ChatMessage, Prompt
from tests.fakes.openai_server import FakeOpenAIServer
from tests.support.bedrock_events import bedrock_client
from tests.support.sample_files import data_url, jpeg, office, pdf, png

MODEL_ID = "anthropic.claude-3-haiku-20240307-v1:0"


def sent(data: bytes, name: str, mime: str | None = None) -> SentFile:
    checked = check_file(InlineFile(data, mime, name, "x"))
    return SentFile(ref_of(checked, f"file-{name}"), data=data)


def prompt_with(*files: SentFile, earlier: tuple[SentFile, ...] = ()) -> Prompt:
    messages = (
        ChatMessage("user", "Look at these.", attachments=earlier),
        ChatMessage("assistant", "I see them."),
        ChatMessage("user", "And these?", attachments=files),
    )
    return Prompt(system="Be brief.", messages=messages, user_input="And these?")


@pytest.fixture
def model() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(reply="Seen.") as server:
        yield server


def test_bedrock_gets_image_and_document_blocks_with_names_made_to_its_rules() -> None:
    client = bedrock_client()
    provider = BedrockConverseProvider(client, MODEL_ID)
    files = (
        sent(png(), "shot.png"),
        sent(pdf(), "Q3 report_v2.pdf"),
        sent(office("docx"), "Q3 report v2.docx"),
    )
    earlier = (sent(jpeg(), "old.jpg"),)
    expected_messages = [
        {"role": "user", "content": [
            {"text": "Look at these."},
            {"image": {"format": "jpeg", "source": {"bytes": jpeg()}}},
        ]},
        {"role": "assistant", "content": [{"text": "I see them."}]},
        {"role": "user", "content": [
            {"text": "And these?"},
            {"image": {"format": "png", "source": {"bytes": png()}}},
            {"document": {"format": "pdf", "name": "Q3 report v2", "source": {"bytes": pdf()}}},
            {"document": {"format": "docx", "name": "Q3 report v2 (2)", "source": {"bytes": office("docx")}}},
        ]},
    ]  # fmt: skip
    answer = {
        "output": {"message": {"role": "assistant", "content": [{"text": "Seen."}]}},
        "stopReason": "end_turn",
        "usage": {"inputTokens": 10, "outputTokens": 2, "totalTokens": 12},
        "metrics": {"latencyMs": 5},
    }
    with Stubber(client) as stubber:
        stubber.add_response(
            "converse",
            answer,
            {"modelId": MODEL_ID, "system": [{"text": "Be brief."}], "messages": expected_messages},
        )
        completion = provider.complete(prompt_with(*files, earlier=earlier))
        stubber.assert_no_pending_responses()
    assert completion.text == "Seen."


def test_an_openai_compatible_server_gets_parts_as_data_pdfs_as_files_and_text_as_text(
    model: FakeOpenAIServer,
) -> None:
    provider = OpenAICompatibleProvider(model.base_url, "fake-chat")
    files = (sent(png(), "shot.png"), sent(pdf(), "terms.pdf"), sent(b"a,b\n1,2\n", "t.csv"))

    provider.complete(prompt_with(*files))

    content: list[dict[str, Any]] = model.requests[-1].body["messages"][-1]["content"]
    assert content == [
        {"type": "text", "text": "And these?"},
        {"type": "image_url", "image_url": {"url": data_url("image/png", png())}},
        {"type": "file", "file": {"filename": "terms.pdf", "file_data": data_url("application/pdf", pdf())}},
        {"type": "text", "text": "[document: t.csv]\na,b\n1,2\n"},
    ]  # fmt: skip
    assert model.requests[-1].body["messages"][2] == {"role": "assistant", "content": "I see them."}


def test_a_connection_that_takes_images_by_url_gets_the_link(model: FakeOpenAIServer) -> None:
    provider = OpenAICompatibleProvider(model.base_url, "fake-chat", images_by_url=True)
    assert provider.attachment_form.by_url and not provider.attachment_form.takes("docx")
    image = sent(png(), "shot.png")
    linked = SentFile(image.ref, url="https://bucket.example/shot?signed")

    provider.complete(prompt_with(linked))

    content = model.requests[-1].body["messages"][-1]["content"]
    assert content[1] == {
        "type": "image_url",
        "image_url": {"url": "https://bucket.example/shot?signed"},
    }
