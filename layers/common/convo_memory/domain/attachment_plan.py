"""(v5) Which attachments a prompt carries: those of the messages in its replay window
and of its input, newest first, at most ``MAX_PROMPT_IMAGES`` images,
``MAX_PROMPT_DOCUMENTS`` documents and ``MAX_PROMPT_ATTACHMENT_BYTES`` in all (Bedrock's
per-request limits, and what a turn loads). The rest become placeholders in their
message's text, fenced as data (a file name is the user's text, never an instruction),
never their bytes. Pure: the serving path loads the bytes of what is kept
(``SentFile.data``) or links them (``SentFile.url``) afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from convo_memory.domain.attachments import (
    MAX_PROMPT_ATTACHMENT_BYTES,
    MAX_PROMPT_DOCUMENTS,
    MAX_PROMPT_IMAGES,
    FileRef,
    SentFile,
    placeholder,
)
from convo_memory.domain.prompt import fence

if TYPE_CHECKING:
    from convo_memory.domain.prompt import ChatMessage, Prompt

__all__ = ["AttachmentForm", "SentFile", "form_of", "planned", "with_placeholders"]


@dataclass(frozen=True)
class AttachmentForm:
    """How a model provider takes attachments: the document types it takes as
    documents (``documents``; None: every type) and those it takes as their text
    (``as_text``), and whether images go as a short-lived URL (``by_url``) rather than
    their bytes."""

    documents: frozenset[str] | None = None
    as_text: frozenset[str] = frozenset()
    by_url: bool = False

    def takes(self, code: str) -> bool:
        """Whether a document of type ``code`` can be sent at all."""
        return self.documents is None or code in self.documents or code in self.as_text


# Bedrock and the embedded models take every type the service does, as bytes.
EVERY_FORM = AttachmentForm()


def form_of(provider: object) -> AttachmentForm:
    """A provider's ``attachment_form`` (every type, as bytes, when it declares none)."""
    form = getattr(provider, "attachment_form", None)
    return form if isinstance(form, AttachmentForm) else EVERY_FORM


def planned(prompt: Prompt) -> Prompt:
    """``prompt`` with the attachments it may carry, newest first within the limits;
    each other one is a fenced placeholder at the end of its message's text."""
    if not any(message.attachments for message in prompt.messages):
        return prompt
    budget = _Budget()
    messages = list(prompt.messages)
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if not message.attachments:
            continue
        sent = message.attachments
        taken = {i for i in range(len(sent) - 1, -1, -1) if budget.takes(sent[i].ref)}
        kept = tuple(file for i, file in enumerate(sent) if i in taken)
        dropped = [file.ref for i, file in enumerate(sent) if i not in taken]
        messages[index] = with_placeholders(
            replace(message, attachments=kept), dropped, prompt.fence_nonce
        )
    return replace(prompt, messages=tuple(messages))


def with_placeholders(
    message: ChatMessage, refs: list[FileRef], nonce: str, why: str = ""
) -> ChatMessage:
    """``message`` with a fenced placeholder for each of ``refs`` after its text."""
    if not refs:
        return message
    notes = "\n".join(placeholder(ref, why) for ref in refs)
    block = fence("attachments", notes, nonce)
    content = f"{message.content}\n\n{block}" if message.content else block
    return replace(message, content=content)


class _Budget:
    """What a prompt has room for, taken newest first."""

    def __init__(self) -> None:
        self.images = MAX_PROMPT_IMAGES
        self.documents = MAX_PROMPT_DOCUMENTS
        self.bytes = MAX_PROMPT_ATTACHMENT_BYTES

    def takes(self, ref: FileRef) -> bool:
        left = self.images if ref.type == "image" else self.documents
        if left <= 0 or ref.bytes > self.bytes:
            return False
        if ref.type == "image":
            self.images -= 1
        else:
            self.documents -= 1
        self.bytes -= ref.bytes
        return True
