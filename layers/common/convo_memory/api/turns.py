"""The native turn doors' bodies (predict, a session's messages) and what a turn
answers and shows: its Prediction, the context preview, what a turn was sent."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from convo_memory.api.common import said_schema
from convo_memory.api.files import MAX_NATIVE_ATTACHMENTS, AttachmentIn
from convo_memory.domain.app_call_ids import shown_calls
from convo_memory.domain.attachments import FileRef
from convo_memory.domain.models import (
    ApiModel,
    Message,
    Recall,
    Summary,
    ToolDigest,
    TurnSeqs,
)
from convo_memory.domain.prompt_record import ExpiredDigest, LostSummary, SentPrompt
from convo_memory.domain.sessions import ContextPreview

# -- turns ---------------------------------------------------------------------------


ATTACHMENTS = (
    "(v5) Uploaded files (POST /v1/files), or earlier attachments, by id: at most 20 "
    "images and 5 documents; the input may be empty when there are some."
)


class TurnInput(ApiModel):
    input: str = Field(json_schema_extra=said_schema)
    session_id: str | None = Field(default=None, max_length=128)
    attachments: list[AttachmentIn] = Field(
        default_factory=list, max_length=MAX_NATIVE_ATTACHMENTS, description=ATTACHMENTS
    )


class MessageInput(ApiModel):
    input: str = Field(json_schema_extra=said_schema)
    attachments: list[AttachmentIn] = Field(
        default_factory=list, max_length=MAX_NATIVE_ATTACHMENTS, description=ATTACHMENTS
    )


class TurnContext(ApiModel):
    replayed_messages: int
    replayed_chars: int
    omitted_messages: int
    summary_included: bool


class Prediction(ApiModel):
    output: str
    withheld: bool
    session_id: str | None
    turn: TurnSeqs | None
    recorded: bool
    run_id: str | None
    context: TurnContext | None


class PendingCallView(ApiModel):
    """A call of one of the app's own tools a paused turn waits for."""

    id: str
    name: str
    arguments: str = Field(description="The arguments, as JSON text.")


class PendingTurnView(ApiModel):
    """(v4) A turn waiting for the app's tool results: the seq its user message will
    have, the calls it waits for, and since when (it is recorded, once, when it ends)."""

    user_seq: int
    tool_calls: list[PendingCallView]
    since: str


class ContextView(ApiModel):
    summary: Summary | None
    messages: list[Message]
    tool_digests: list[ToolDigest]
    omitted_messages: int
    replayed_chars: int
    recall: Recall | None
    pending_turn: PendingTurnView | None = None

    @classmethod
    def of(cls, preview: ContextPreview, session_id: str = "") -> ContextView:
        """``GET /v1/sessions/{id}/context``: what the next turn would see (a waiting
        turn's calls with the ids the app was shown, given the session's id)."""
        pending = preview.pending
        calls = () if pending is None else pending.tool_calls
        if pending is not None and session_id:
            calls = shown_calls(session_id, pending)
        return cls(
            summary=preview.summary,
            messages=list(preview.messages),
            tool_digests=list(preview.tool_digests),
            omitted_messages=preview.omitted_messages,
            replayed_chars=preview.replayed_chars,
            recall=preview.recall,
            pending_turn=None
            if pending is None
            else PendingTurnView(
                user_seq=pending.user_seq,
                tool_calls=[
                    PendingCallView(id=c.call_id, name=c.name, arguments=c.arguments) for c in calls
                ],
                since=pending.since,
            ),
        )


class ExpiredDigestView(ApiModel):
    """A tool digest the turn was sent that has since passed its retention window."""

    seq: int
    expired: Literal[True] = True


class LostSummaryView(ApiModel):
    """A summary version the turn was sent that is no longer kept (folded before
    versions were kept, and replaced since)."""

    through_seq: int
    expired: Literal[True] = True


class PromptView(ApiModel):
    """``GET /v1/sessions/{id}/messages/{seq}/prompt``: what the model was sent for that
    turn's first model call, in the shapes of ``/context``."""

    seq: int = Field(description="The turn's answer.")
    instructions: str
    recall: Recall | None
    summary: Summary | LostSummaryView | None
    tool_digests: list[ToolDigest | ExpiredDigestView]
    messages: list[Message]
    input: str
    app_tools: list[str] = Field(description="The names of the app's own tools offered.")
    attachments: list[FileRef] = Field(
        default_factory=list, description="(v5) The input's images and documents."
    )

    @classmethod
    def of(cls, sent: SentPrompt) -> PromptView:
        summary: Summary | LostSummaryView | None = None
        if isinstance(sent.summary, LostSummary):
            summary = LostSummaryView(through_seq=sent.summary.through_seq)
        else:
            summary = sent.summary
        return cls(
            seq=sent.seq,
            instructions=sent.instructions,
            recall=sent.recall,
            summary=summary,
            tool_digests=[
                ExpiredDigestView(seq=d.seq) if isinstance(d, ExpiredDigest) else d
                for d in sent.tool_digests
            ],
            messages=list(sent.messages),
            input=sent.input,
            app_tools=list(sent.app_tools),
            attachments=list(sent.attachments),
        )
