"""(v5) The attached parts both OpenAI-compatible doors read, and what they show.

Read: a user message's content as its text and its attachments (``AttachmentInput``):

- chat: ``{type: "image_url", image_url: {url, detail?}}`` (a ``data:`` URL or an
  ``https`` URL) and ``{type: "file", file: {file_id} | {file_data, filename}}``;
- Responses: ``input_image`` (``image_url`` or ``file_id``, ``detail?``) and
  ``input_file`` (``file_id``, ``file_data`` + ``filename``, or ``file_url``).

Bytes are only decoded here (base64, a ``data:`` URL's type); what they are, their size
and what a capability takes are the serving path's to check (``services.attachments``),
so every door refuses the same input in the same words. A refusal names the part
(``messages.0.content.1``). Shown: a stored attachment as an input part a client can
resend (``input_image`` / ``input_file`` with ``file_id``).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Sequence
from typing import Any

from convo_memory.domain.attachments import (
    AttachmentInput,
    FileAtUrl,
    FileById,
    FileRef,
    InlineFile,
    PartKind,
    SentFile,
    check_file,
)
from convo_memory.doors.openai_common import invalid

TEXT_PARTS = frozenset({"text", "input_text", "output_text"})
IMAGE_PARTS = frozenset({"image_url", "input_image"})
FILE_PARTS = frozenset({"file", "input_file"})
ATTACHED_PARTS = IMAGE_PARTS | FILE_PARTS
MAX_URL_CHARS = 2048
_DATA_URL = re.compile(r"data:([\w.+-]+/[\w.+-]+)?((?:;[\w.+-]+=[^;,]*)*)(;base64)?,", re.ASCII)


def user_content(content: Any, where: str) -> tuple[str, tuple[AttachmentInput, ...]]:
    """A user message's text and attachments (a string: text alone); 422 naming the
    part for anything else."""
    if isinstance(content, str):
        return content, ()
    if not isinstance(content, list) or not content:
        raise invalid(f"{where}.content", "must be a string or a list of content parts")
    texts: list[str] = []
    attached: list[AttachmentInput] = []
    for index, part in enumerate(content):
        at = f"{where}.content.{index}"
        kind = part_type(part)
        if kind in TEXT_PARTS and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind in ATTACHED_PARTS:
            attached.append(attachment_of(part, at))
        else:
            raise invalid(at, "must be a text, image or file part")
    return "\n".join(texts), tuple(attached)


def text_only(content: Any) -> str:
    """A message's text, its attached parts left out: an app's copy of its history, which
    a stored conversation ignores (nothing there is refused or decoded)."""
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else []
    texts = [p.get("text") for p in parts if part_type(p) in TEXT_PARTS]
    return "\n".join(t for t in texts if isinstance(t, str))


def attachment_of(part: dict[str, Any], where: str) -> AttachmentInput:
    """One attached part, read (its bytes decoded, not yet checked)."""
    kind = part["type"]
    if kind == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
        return _by_url(url, f"{where}.image_url.url", None, "image")
    if kind == "input_image":
        if isinstance(part.get("file_id"), str):
            return FileById(part["file_id"], f"{where}.file_id", "image")
        return _by_url(part.get("image_url"), f"{where}.image_url", None, "image")
    given = part.get("file") if kind == "file" else part
    if not isinstance(given, dict):
        raise invalid(f"{where}.file", "must be {file_id} or {file_data, filename}")
    filename = given.get("filename") if isinstance(given.get("filename"), str) else None
    if isinstance(given.get("file_id"), str):
        return FileById(given["file_id"], _at(where, kind, "file_id"), "file")
    if isinstance(given.get("file_data"), str):
        return _data(given["file_data"], _at(where, kind, "file_data"), filename, "file")
    if kind == "input_file" and isinstance(given.get("file_url"), str):
        return _by_url(given["file_url"], f"{where}.file_url", filename, "file")
    raise invalid(_at(where, kind, "file_id"), "is required: a file_id, or file_data and filename")


def _at(where: str, kind: str, name: str) -> str:
    return f"{where}.file.{name}" if kind == "file" else f"{where}.{name}"


def _by_url(url: Any, where: str, filename: str | None, part: PartKind) -> AttachmentInput:
    if not isinstance(url, str) or not url:
        raise invalid(where, "is required: a data: URL or an https URL")
    if url.startswith("data:"):
        return _data(url, where, filename, part)
    if len(url) > MAX_URL_CHARS or not url.lower().startswith(("https://", "http://")):
        raise invalid(where, f"must be a data: URL or an https URL of at most {MAX_URL_CHARS}")
    return FileAtUrl(url, where, part, filename)


def _data(text: str, where: str, filename: str | None, part: PartKind) -> InlineFile:
    """Bytes sent inline: a ``data:`` URL (its type declared), or plain base64."""
    declared = None
    found = _DATA_URL.match(text)
    if found is not None:
        declared, payload = found.group(1), text[found.end() :]
        if not found.group(3):
            raise invalid(where, "must be a base64 data: URL (data:<type>;base64,...)")
    elif text.startswith("data:"):
        raise invalid(where, "is not a data: URL (data:<type>;base64,...)")
    else:
        payload = text
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise invalid(where, "is not valid base64") from None
    return InlineFile(data, declared, filename, where, part)


def has_attached(content: Any) -> bool:
    """Whether a message's content holds an image or file part."""
    parts = content if isinstance(content, list) else []
    return any(part_type(p) in ATTACHED_PARTS for p in parts)


def history_attachments(content: Any, where: str) -> tuple[SentFile, ...]:
    """A stateless history message's attachments, sent as given (``stateless_history``)."""
    if not has_attached(content):
        return ()
    return stateless_history(user_content(content, where)[1])


def stateless_history(
    attached: Sequence[AttachmentInput],
) -> tuple[SentFile, ...]:
    """A stateless client's earlier attachments, sent as given: bytes it sent inline,
    checked (a URL or a file id in an earlier message is refused: send the bytes)."""
    from convo_memory.domain.attachments import ref_of

    sent = []
    for index, given in enumerate(attached):
        if not isinstance(given, InlineFile):
            raise invalid(given.where, "in an earlier message of a stateless call must be data")
        checked = check_file(given)
        sent.append(SentFile(ref_of(checked, f"history-{index}"), data=checked.data))
    return tuple(sent)


def input_part(ref: FileRef) -> dict[str, Any]:
    """A stored attachment as an input part a client can resend (Responses' items)."""
    if ref.type == "image":
        return {"type": "input_image", "file_id": ref.file_id, "detail": "auto"}
    return {"type": "input_file", "file_id": ref.file_id, "filename": ref.filename}


def with_input_parts(item: dict[str, Any], refs: Sequence[FileRef]) -> dict[str, Any]:
    """A message item with its attachments after its text, as parts to resend."""
    if not refs:
        return item
    return {**item, "content": [*item["content"], *(input_part(ref) for ref in refs)]}


def part_type(part: Any) -> str | None:
    """A content part's ``type`` when the part is an object and its type a string (any
    JSON may arrive here: nothing else is a part)."""
    kind = part.get("type") if isinstance(part, dict) else None
    return kind if isinstance(kind, str) else None
