"""What a turn was sent (v4), kept without a second copy of the prompt.

A turn's first model call is sent: the capability's instructions, the session's recall,
the summary version its window showed, the tool digests of its replayed turns, the
replayed messages and its input. All of these are stored anyway (the capability and the
recall never change, every summary version is kept, digests live with their turns, the
messages and the input are the transcript), so a turn keeps only which of them it was
sent: a ``PromptRecord`` of a few dozen bytes on its stored record (at most
``MAX_RECORD_BYTES``, its attribute name included), from which ``SentPrompt`` is
rebuilt on request.

The record's text is ``;``-separated tagged fields, each omitted when empty:
``w<first>-<last>`` the replayed seqs, ``s<throughSeq>`` the summary version,
``d<hex>`` which replayed answers had their digest sent (bit ``i``: the window's
``i``-th answer), ``r`` the recall was sent, ``c`` its request named the response before
it (``previous_response_id``: its window followed that response), ``t<name>,<name>``
the app's tools offered (as many whole names as fit). Seqs are written as distances
back from the turn's own user seq (its item's key says it), so a record is as long at
message 10,000 as at 10: the turn's read does not grow with the conversation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the job workers carry records (TurnRecord) without the API models
    from convo_memory.domain.attachments import FileRef
    from convo_memory.domain.models import Message, Recall, Summary, ToolDigest

# The stored record's budget (the contract's 200 bytes), its one-letter attribute name
# included: DynamoDB bills names as data.
MAX_RECORD_BYTES = 200
ATTRIBUTE_NAME_BYTES = 1
TOOL_SEPARATOR = ","


@dataclass(frozen=True)
class PromptRecord:
    """Which stored parts one turn's first model call was sent."""

    first_seq: int = 0  # the replayed messages are first_seq..last_seq (0: none)
    last_seq: int = 0
    summary_through: int = 0  # the summary version shown (0: none)
    digest_seqs: tuple[int, ...] = ()  # answer seqs whose tool digest was sent
    recall: bool = False
    app_tools: tuple[str, ...] = ()
    chained: bool = False  # its request named the response before it (v4)

    @classmethod
    def of(
        cls,
        replayed: Sequence[Message],
        summary: Summary | None,
        digests: Sequence[ToolDigest],
        *,
        recall: bool,
        app_tools: Sequence[str] = (),
    ) -> PromptRecord:
        """The record of a prompt built from these parts."""
        return cls(
            first_seq=replayed[0].seq if replayed else 0,
            last_seq=replayed[-1].seq if replayed else 0,
            summary_through=summary.through_seq if summary is not None else 0,
            digest_seqs=tuple(sorted(d.seq for d in digests)),
            recall=recall,
            app_tools=tuple(app_tools),
        )

    @property
    def replayed_answers(self) -> list[int]:
        """The seqs of the replayed answers (seqs are contiguous; answers are even)."""
        if not self.first_seq:
            return []
        start = self.first_seq + self.first_seq % 2
        return list(range(start, self.last_seq + 1, 2))

    def encode(self, user_seq: int) -> str:
        """The stored text of the record of the turn at ``user_seq``, within
        ``MAX_RECORD_BYTES`` (app tool names that would not fit are left out, whole)."""
        fields: list[str] = []
        if self.first_seq:
            fields.append(f"w{user_seq - self.first_seq}-{user_seq - self.last_seq}")
        if self.summary_through:
            fields.append(f"s{user_seq - self.summary_through}")
        sent = set(self.digest_seqs)
        mask = sum(1 << i for i, seq in enumerate(self.replayed_answers) if seq in sent)
        if mask:
            fields.append(f"d{mask:x}")
        if self.recall:
            fields.append("r")
        if self.chained:
            fields.append("c")
        text = ";".join(fields)
        names: list[str] = []
        for name in self.app_tools:
            candidate = ";".join([*fields, "t" + TOOL_SEPARATOR.join([*names, name])])
            if len(candidate.encode()) + ATTRIBUTE_NAME_BYTES > MAX_RECORD_BYTES:
                break
            names.append(name)
            text = candidate
        return text

    @classmethod
    def decode(cls, text: str, user_seq: int) -> PromptRecord:
        """The record the stored text of the turn at ``user_seq`` holds (unknown fields,
        from a later version, are ignored)."""
        first = last = through = mask = 0
        recall = chained = False
        tools: tuple[str, ...] = ()
        for part in filter(None, text.split(";")):
            tag, value = part[0], part[1:]
            if tag == "w":
                first_back, _, last_back = value.partition("-")
                first, last = user_seq - int(first_back), user_seq - int(last_back)
            elif tag == "s":
                through = user_seq - int(value)
            elif tag == "d":
                mask = int(value, 16)
            elif tag == "r":
                recall = True
            elif tag == "c":
                chained = True
            elif tag == "t":
                tools = tuple(value.split(TOOL_SEPARATOR))
        record = cls(first, last, through, (), recall, tools)
        answers = record.replayed_answers
        digests = tuple(seq for i, seq in enumerate(answers) if mask >> i & 1)
        return cls(first, last, through, digests, recall, tools, chained)


@dataclass(frozen=True)
class ExpiredDigest:
    """A digest that was sent with a turn and has since passed its retention window."""

    seq: int


@dataclass(frozen=True)
class LostSummary:
    """A summary version a turn was sent that is no longer kept (one folded before
    versions were kept, replaced since)."""

    through_seq: int


@dataclass(frozen=True)
class SentPrompt:
    """What a turn's first model call was sent, rebuilt from what is stored: the shapes
    of ``/context`` (``recall`` and ``summary`` the ones sent, or None)."""

    seq: int  # the turn's answer
    instructions: str
    recall: Recall | None
    summary: Summary | LostSummary | None
    tool_digests: tuple[ToolDigest | ExpiredDigest, ...]
    messages: tuple[Message, ...]
    input: str
    app_tools: tuple[str, ...] = field(default=())
    # (v5) The input's attachments, as references.
    attachments: tuple[FileRef, ...] = field(default=())


@dataclass(frozen=True)
class StoredPrompt:
    """What the stores hold of one turn's prompt: its record and input, and the stored
    parts the record names (the summary version when it is still readable, the digests
    still kept, with their expiry)."""

    user_seq: int
    input: str
    record: PromptRecord | None  # None: the turn was recorded before records were kept
    messages: tuple[Message, ...]
    summary: Summary | None
    digests: dict[int, tuple[ToolDigest, float]] = field(default_factory=dict)
    # (v4) Instructions its Responses request added after the capability's (kept with it).
    added_instructions: str | None = None
    attachments: tuple[FileRef, ...] = ()


def sent_prompt(
    stored: StoredPrompt,
    record: PromptRecord,
    instructions: str,
    recall: Recall | None,
    now: float,
) -> SentPrompt:
    """What a turn was sent, from what is stored of it and what it was sent from (the
    capability's instructions, then any its request added; the session's recall), as of
    ``now`` (a digest past its retention window shows as expired)."""
    digests: list[ToolDigest | ExpiredDigest] = []
    for seq in record.digest_seqs:
        kept = stored.digests.get(seq)
        digests.append(kept[0] if kept is not None and kept[1] > now else ExpiredDigest(seq))
    summary: Summary | LostSummary | None = None
    if record.summary_through:
        summary = stored.summary or LostSummary(record.summary_through)
    return SentPrompt(
        seq=stored.user_seq + 1,
        instructions=with_added(instructions, stored.added_instructions),
        recall=recall if record.recall else None,
        summary=summary,
        tool_digests=tuple(digests),
        messages=stored.messages,
        input=stored.input,
        app_tools=record.app_tools,
        attachments=stored.attachments,
    )


def with_added(instructions: str, added: str | None) -> str:
    """The capability's instructions, then those a request added for its turn alone."""
    return f"{instructions}\n\n{added}" if added else instructions
