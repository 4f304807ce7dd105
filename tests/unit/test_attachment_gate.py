"""(v5) The input gate for requests that carry attachments: the 1 MiB body limit is
raised to what Lambda takes (6 MiB) for them alone, and ``POST /v1/files`` reads a
multipart form instead of JSON; the doors read image and file parts into attachments,
naming the part they refuse."""

from __future__ import annotations

import json

import pytest

from convo_memory.domain.attachments import FileAtUrl, FileById, InlineFile
from convo_memory.domain.errors import InvalidJson, PayloadTooLarge, ValidationFailed
from convo_memory.doors.attachment_parts import user_content
from convo_memory.edge import input_gate
from convo_memory.edge.multipart import read_form
from convo_memory_client.files import multipart
from tests.support.sample_files import data_url, png

MIB = 1024 * 1024


def body_of(size: int, *, image: bool) -> bytes:
    """A chat body of about ``size`` bytes, its padding in a text part."""
    parts: list[dict[str, object]] = [{"type": "text", "text": "x" * size}]
    if image:
        parts.append({"type": "image_url", "image_url": {"url": data_url("image/png", png())}})
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": parts}]}).encode()


def test_only_a_body_that_carries_attachments_may_pass_1_mib() -> None:
    with pytest.raises(PayloadTooLarge):
        input_gate.read_json_object(body_of(2 * MIB, image=False))
    assert input_gate.read_json_object(body_of(2 * MIB, image=True))["model"] == "m"
    with pytest.raises(PayloadTooLarge) as refused:
        input_gate.read_json_object(body_of(6 * MIB, image=True))
    assert refused.value.message == "the request body is larger than 6291456 bytes"
    native = json.dumps({"input": "x" * (2 * MIB), "attachments": [{"fileId": "file-1"}]})
    assert input_gate.read_json_object(native)["attachments"]


def test_an_upload_is_a_form_bounded_by_lambdas_limit() -> None:
    body, content_type = multipart({"purpose": "vision"}, "a.png", png(), "image/png")
    request = input_gate.gate(
        method="POST", route="POST /v1/files", headers={}, query=None, body=body, multipart=True
    )
    assert request.body is None  # the route reads the form itself
    form = read_form(content_type, body)
    assert form.fields == {"purpose": "vision"}
    assert form.file is not None and (form.file.filename, form.file.data) == ("a.png", png())
    with pytest.raises(PayloadTooLarge):
        input_gate.gate(
            method="POST",
            route="POST /v1/files",
            headers={},
            query=None,
            body=b"x" * (6 * MIB + 1),
            multipart=True,
        )
    with pytest.raises(InvalidJson):
        read_form("application/json", b"{}")


def test_the_doors_read_parts_into_attachments_naming_what_they_refuse() -> None:
    text, attached = user_content(
        [
            {"type": "text", "text": "Look"},
            {"type": "image_url", "image_url": {"url": data_url("image/png", png())}},
            {"type": "file", "file": {"file_id": "file-abc"}},
            {"type": "input_file", "file_url": "https://example.com/t.pdf", "filename": "t.pdf"},
        ],
        "messages.0",
    )
    assert text == "Look"
    inline, by_id, by_url = attached
    assert (
        isinstance(inline, InlineFile) and inline.data == png() and inline.declared == "image/png"
    )
    assert by_id == FileById("file-abc", "messages.0.content.2.file.file_id", "file")
    assert by_url == FileAtUrl(
        "https://example.com/t.pdf", "messages.0.content.3.file_url", "file", "t.pdf"
    )
    with pytest.raises(ValidationFailed) as refused:
        user_content([{"type": "input_image", "image_url": "data:image/png;base64,@@"}], "input.1")
    assert refused.value.param == "input.1.content.0.image_url"
    with pytest.raises(ValidationFailed) as refused:
        user_content([{"type": "input_image", "image_url": "ftp://x"}], "input.1")
    assert refused.value.param == "input.1.content.0.image_url"
