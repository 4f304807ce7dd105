"""(v5) A message's attachments as each provider takes them.

- OpenAI-compatible chat completions: ``image_url`` parts (a ``data:`` URL, or the
  short-lived presigned URL the serving path made for a connection with ``attachments:
  "url"``), PDFs as ``file`` parts with ``file_data``, and the text documents (TXT, MD,
  CSV, HTML) as their text; other documents never reach it (refused with 422 first).
- Bedrock Converse: ``image`` and ``document`` blocks with the bytes, the document's name
  made to Bedrock's rules and unique within the request.
"""

from __future__ import annotations

import base64
from typing import Any

from convo_memory.domain.attachment_plan import AttachmentForm
from convo_memory.domain.attachments import SentFile, bedrock_document_name, placeholder
from convo_memory.domain.file_types import TEXT_CODES

# What an OpenAI-compatible server takes: PDFs as files, text documents as their text.
OPENAI_DOCUMENTS = frozenset({"pdf"})


def openai_form(images_by_url: bool) -> AttachmentForm:
    return AttachmentForm(documents=OPENAI_DOCUMENTS, as_text=TEXT_CODES, by_url=images_by_url)


def data_url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def openai_parts(text: str, attachments: tuple[SentFile, ...]) -> list[dict[str, Any]]:
    """A user message's content: its text, then a part per attachment."""
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    for sent in attachments:
        ref, data = sent.ref, sent.data
        if ref.type == "image":
            url = sent.url or data_url(ref.mime_type, data or b"")
            parts.append({"type": "image_url", "image_url": {"url": url}})
        elif ref.code in TEXT_CODES and data is not None:
            body = data.decode("utf-8", errors="replace")
            parts.append({"type": "text", "text": f"[document: {ref.filename}]\n{body}"})
        elif ref.code in OPENAI_DOCUMENTS and data is not None:
            file = {"filename": ref.filename, "file_data": data_url(ref.mime_type, data)}
            parts.append({"type": "file", "file": file})
        else:
            parts.append({"type": "text", "text": placeholder(ref, "not sent")})
    return parts


def converse_blocks(attachments: tuple[SentFile, ...], names: set[str]) -> list[dict[str, Any]]:
    """Converse ``image`` / ``document`` blocks for a message's attachments (``names``:
    the document names the request already uses)."""
    blocks: list[dict[str, Any]] = []
    for sent in attachments:
        ref = sent.ref
        if sent.data is None:
            continue
        source = {"bytes": sent.data}
        if ref.type == "image":
            blocks.append({"image": {"format": ref.code, "source": source}})
        else:
            name = bedrock_document_name(ref.filename, names)
            blocks.append({"document": {"format": ref.code, "name": name, "source": source}})
    return blocks
