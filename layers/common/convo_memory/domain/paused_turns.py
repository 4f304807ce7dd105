"""A turn that paused for the app's own tools (v4), as it is kept until it ends.

When a step of the model calls one of the app's tools, the service runs its own tools
called in that step, then the turn pauses: the app gets the calls, runs its tools and
continues the turn with their results. Until then the turn is a ``PendingTurn``, kept
durably at the transcript position it will be recorded at (the continuation may reach
another container): what the model was sent (the prompt record, the summary text it
showed), every round of tool calls so far, the paused step (the service's replies in
it), the calls the service made and the app answered, the text written so far, and the
run's counters. The continuation resumes from exactly that; the turn is recorded once,
when it ends (its user message and final answer at that position), or, left waiting,
as ``abandoned`` (its user message and the text that came with the calls,
``turn_records.abandoned_turn``).

Kept within ``PENDING_MAX_BYTES`` (``fitted``): tool results the model was shown are cut
to equal shares first, then the summary text (the continuation then shows the summary
its window has), then what the trace and digest keep of each result.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from convo_memory.domain.attachments import FileRef, decode_refs, encode_refs
from convo_memory.domain.errors import ProviderError, ToolCallsMismatch
from convo_memory.domain.generation import TokenUsage
from convo_memory.domain.models import Summary
from convo_memory.domain.prompt_record import PromptRecord
from convo_memory.domain.tools import AppToolCall, ToolCall, ToolReply, ToolRequest, ToolRound
from convo_memory.domain.turns import ToolOutput


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


# The kept state's JSON (the user input is kept beside it, at most MAX_INPUT_BYTES): the
# item stays well under DynamoDB's 400 KB.
PENDING_MAX_BYTES = 160 * 1024
# What a cut tool result keeps at least, and what the trace and digest keep of each.
MIN_REPLY_CHARS = 500
KEPT_OUTPUT_CHARS = 4_000
CUT_MARK = " …[cut while the turn waited]"
# Between the texts of a turn's steps (as the tool loop joins them).
SEPARATOR = "\n\n"


@dataclass(frozen=True)
class PendingTurn:
    """A turn waiting for the app's tool results. ``user_seq`` is its position (0 until
    kept); ``created_at`` when the turn began, ``since`` when it last paused,
    ``expires`` when it stops waiting (``PENDING_TURN_SECONDS`` later);
    ``rounds`` the finished rounds of tool calls, ``step`` the paused one (its replies
    answer the service's requests only), ``app_call_ids`` the requests of ``step`` the
    app answers; ``calls`` every tool call so far, the service's and the app's
    answered ones (for the digest and the trace); ``texts`` what the model wrote, step by
    step, as served; ``traced``: a run trace was stored at a pause (the service's tools
    had run)."""

    pause_id: str
    user_seq: int
    created_at: str
    since: str
    expires: str
    user_input: str
    prompt_record: PromptRecord
    summary: Summary | None
    rounds: tuple[ToolRound, ...]
    step: ToolRound
    app_call_ids: tuple[str, ...]
    calls: tuple[ToolCall, ...] = ()
    texts: tuple[str, ...] = ()
    withheld: bool = False
    run_id: str | None = None
    traced: bool = False
    model_calls: int = 0
    usage: TokenUsage | None = None
    # (v5) Its user message's attachments (references): sent again when it continues.
    attachments: tuple[FileRef, ...] = ()

    @staticmethod
    def new_pause_id() -> str:
        return "pause_" + secrets.token_urlsafe(12)

    @property
    def tool_calls(self) -> tuple[AppToolCall, ...]:
        """The calls the app is asked for, in the order the model made them."""
        return app_tool_calls(self.step, self.app_call_ids)

    @property
    def text(self) -> str:
        """What the model wrote before and with the calls (the abandoned answer)."""
        return SEPARATOR.join(t for t in self.texts if t)

    def answered(self, outputs: Sequence[ToolOutput]) -> ToolRound:
        """The paused step with the app's results as its replies (one per request, in
        order); ``ToolCallsMismatch`` unless ``outputs`` answer exactly the calls waited
        for, each once."""
        waiting = [call.call_id for call in self.tool_calls]
        given = [output.call_id for output in outputs]
        if len(set(given)) != len(given) or set(given) != set(waiting):
            raise ToolCallsMismatch(_mismatch(waiting, given))
        results = {output.call_id: output.output for output in outputs}
        service = {reply.call_id: reply for reply in self.step.replies}
        replies = tuple(
            service.get(r.call_id) or ToolReply(r.call_id, r.name, results.get(r.call_id, ""))
            for r in self.step.requests
        )
        return ToolRound(self.step.text, self.step.requests, replies)

    # -- kept as JSON --------------------------------------------------------------------

    def to_json(self) -> str:
        """The state as it is kept beside its user input (compact JSON; the position is
        the item's key, the user input an attribute of its own)."""
        usage = self.usage
        data: dict[str, Any] = {
            "id": self.pause_id,
            "at": self.created_at,
            "since": self.since,
            "until": self.expires,
            # Seqs as distances back from the position (1 while it has none, for sizing).
            "record": self.prompt_record.encode(self.user_seq or 1),
            "rounds": [_round_json(r) for r in self.rounds],
            "step": _round_json(self.step),
            "app": list(self.app_call_ids),
            "calls": [_call_json(c) for c in self.calls],
            "texts": list(self.texts),
            "withheld": self.withheld,
            "run": self.run_id,
            "traced": self.traced,
            "modelCalls": self.model_calls,
        }
        if self.summary is not None:
            data["summary"] = {"text": self.summary.text, "throughSeq": self.summary.through_seq}
        if self.attachments:
            data["f"] = encode_refs(self.attachments)
        if usage is not None:
            data["usage"] = [
                usage.input_tokens,
                usage.output_tokens,
                usage.cached_input_tokens,
                usage.cache_write_input_tokens,
            ]
        return json.dumps(data, separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str, user_seq: int, user_input: str) -> PendingTurn:
        """The state ``to_json`` kept for the turn at ``user_seq``."""
        data = json.loads(text)
        summary = data.get("summary")
        usage = data.get("usage")
        return cls(
            pause_id=str(data["id"]),
            user_seq=user_seq,
            created_at=str(data["at"]),
            since=str(data["since"]),
            expires=str(data["until"]),
            user_input=user_input,
            prompt_record=PromptRecord.decode(str(data["record"]), user_seq),
            summary=None if summary is None else Summary(**_summary_fields(summary)),
            rounds=tuple(_round_of(r) for r in data.get("rounds", ())),
            step=_round_of(data["step"]),
            app_call_ids=tuple(str(i) for i in data.get("app", ())),
            calls=tuple(_call_of(c) for c in data.get("calls", ())),
            texts=tuple(str(t) for t in data.get("texts", ())),
            withheld=bool(data.get("withheld")),
            run_id=data.get("run"),
            traced=bool(data.get("traced")),
            model_calls=int(data.get("modelCalls", 0)),
            usage=None if usage is None else TokenUsage(*(int(n) for n in usage)),
            attachments=tuple(decode_refs(data["f"])) if "f" in data else (),
        )

    def keep_at(self, user_seq: int) -> PendingTurn:
        """This state at the position it was kept at."""
        return replace(self, user_seq=user_seq)

    def fitted(self, max_bytes: int = PENDING_MAX_BYTES) -> PendingTurn:
        """This state within ``max_bytes`` of JSON: the tool results the model was shown
        cut to equal shares, then without the summary text, then with what the trace and
        digest keep of each call cut too. A ``ProviderError`` when even that does not fit
        (the model's own calls are that large)."""
        for candidate in (self, *self._smaller(max_bytes)):
            if utf8_len(candidate.to_json()) <= max_bytes:
                return candidate
        raise ProviderError(
            "Model provider error: the model's tool calls are too large to keep while the "
            "app runs its tools."
        )

    def _smaller(self, max_bytes: int) -> Iterator[PendingTurn]:
        replies = [reply for r in (*self.rounds, self.step) for reply in r.replies]
        outputs = sum(len(reply.output) for reply in replies)
        excess = utf8_len(self.to_json()) - max_bytes
        share = max(MIN_REPLY_CHARS, (outputs - excess) // max(1, len(replies)) - 64)
        cut = replace(
            self,
            rounds=tuple(_cut_round(r, share) for r in self.rounds),
            step=_cut_round(self.step, share),
        )
        yield cut
        yield replace(cut, summary=None)
        yield replace(cut, summary=None, calls=tuple(_cut_call(c) for c in cut.calls))


def app_tool_calls(step: ToolRound, app_call_ids: Sequence[str]) -> tuple[AppToolCall, ...]:
    """The requests of ``step`` the app answers, as the calls it is handed (their
    arguments as JSON text), in the order the model made them."""
    waiting = set(app_call_ids)
    return tuple(
        AppToolCall(r.call_id, r.name, json.dumps(dict(r.input), ensure_ascii=False))
        for r in step.requests
        if r.call_id in waiting
    )


def _mismatch(waiting: list[str], given: list[str]) -> str:
    def named(ids: list[str]) -> str:
        shown = ", ".join(ids[:8]) + (", ..." if len(ids) > 8 else "")
        return shown or "none"

    if not waiting:
        return "this session has no turn waiting for tool results"
    return (
        "the tool messages must answer exactly the calls the paused turn waits for "
        f"({named(waiting)}), each once; got {named(given)}"
    )


def _cut(text: str, chars: int) -> str:
    if len(text) <= chars:
        return text
    return text[: max(0, chars - len(CUT_MARK))] + CUT_MARK


def _cut_round(round_: ToolRound, chars: int) -> ToolRound:
    replies = tuple(replace(r, output=_cut(r.output, chars)) for r in round_.replies)
    return replace(round_, replies=replies)


def _cut_call(call: ToolCall) -> ToolCall:
    return replace(call, output=_cut(call.output, MIN_REPLY_CHARS))


def _summary_fields(value: Mapping[str, Any]) -> dict[str, Any]:
    return {"text": str(value["text"]), "through_seq": int(value["throughSeq"])}


def _round_json(round_: ToolRound) -> dict[str, Any]:
    return {
        "text": round_.text,
        "requests": [
            {"id": r.call_id, "name": r.name, "input": dict(r.input), "error": r.input_error}
            for r in round_.requests
        ],
        "replies": [
            {"id": r.call_id, "name": r.name, "output": r.output, "error": r.is_error}
            for r in round_.replies
        ],
    }


def _round_of(data: Mapping[str, Any]) -> ToolRound:
    return ToolRound(
        text=str(data.get("text", "")),
        requests=tuple(
            ToolRequest(str(r["id"]), str(r["name"]), dict(r.get("input") or {}), r.get("error"))
            for r in data.get("requests", ())
        ),
        replies=tuple(
            ToolReply(str(r["id"]), str(r["name"]), str(r["output"]), bool(r.get("error")))
            for r in data.get("replies", ())
        ),
    )


def _call_json(call: ToolCall) -> dict[str, Any]:
    return {
        "kind": call.kind,
        "name": call.name,
        "input": dict(call.input),
        "output": _cut(call.output, KEPT_OUTPUT_CHARS),
        "at": call.started_at,
        "ms": call.duration_ms,
        "status": call.status,
        "principal": call.principal,
    }


def _call_of(data: Mapping[str, Any]) -> ToolCall:
    status = data.get("status")
    return ToolCall(
        name=str(data["name"]),
        input=dict(data.get("input") or {}),
        output=str(data.get("output", "")),
        started_at=str(data.get("at", "")),
        duration_ms=float(data.get("ms", 0.0)),
        status=status if status in ("ok", "error", "timeout") else "ok",
        principal=data.get("principal"),
        kind="app" if data.get("kind") == "app" else "service",
    )
