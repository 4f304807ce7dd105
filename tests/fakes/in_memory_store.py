"""In-memory fakes of the services' ports, for the fast, deterministic unit tier.

``InMemoryStore`` implements every method the services (and the summarize / repair
consumers) call on ``DynamoStore``, with the same observable semantics:

- ``load_turn_state`` returns the head, the summary, the newest ``max_messages``
  messages oldest first and the digests stored with them (expired digests included:
  DynamoDB TTL deletes lazily, so expiry is the reader's job), reading the same items
  as DynamoStore's single bounded Query;
- ``append_turn`` is conditional on the head's ``messageCount``; a lost race appends at
  the new end, so the answer always gets ``userSeq + 1``; a turn id that was already
  recorded returns ``already_recorded=True`` and stores nothing; an archived session
  raises ``SessionArchived``, a missing one ``SessionNotFound``;
- values round-trip through JSON where DynamoDB stores JSON (capabilities, sessions'
  principal / metadata, run traces), so a value the real store could not hold fails here.

Knobs for fault injection (``fail_next_append``, ``fail_next``, ``fail_always``,
``before_append``) and per-method call counters (``calls``) let tests drive the failure
paths and assert how many store requests a use case made.
"""

from __future__ import annotations

import copy
import json
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from convo_memory.domain.errors import SessionArchived, SessionNotFound
from convo_memory.domain.models import Capability, Message, Session, Summary, ToolDigest
from convo_memory.domain.prompt import Prompt
from convo_memory.domain.turn_records import AppendResult, TurnRecord, TurnState
from convo_memory.ports import Completion, FilterVerdict, ToolCall

__all__ = [
    "FakeClock",
    "FakeContentFilter",
    "FakeMetrics",
    "FakeProvider",
    "FakeQueue",
    "InMemoryStore",
]

_T = TypeVar("_T")


@dataclass
class _StoredMessage:
    message: Message
    turn_id: str
    run_id: str | None = None


@dataclass
class _StoredDigest:
    digest: ToolDigest
    expires_at: float


@dataclass
class _Partition:
    """Everything DynamoDB keeps under ``pk = SESSION#<sid>`` except the summary."""

    head: dict[str, Any]
    messages: dict[int, _StoredMessage] = field(default_factory=dict)
    digests: dict[int, _StoredDigest] = field(default_factory=dict)
    markers: dict[str, tuple[int, int]] = field(default_factory=dict)


class InMemoryStore:
    """A dict-backed stand-in for ``DynamoStore`` (conversations and runs tables)."""

    def __init__(self) -> None:
        self.workspaces: dict[str, dict[str, str]] = {}
        self.tokens: dict[str, dict[str, str]] = {}
        self.token_ids: dict[str, str] = {}
        self.capabilities: dict[tuple[str, str], str] = {}  # JSON bodies, as stored
        self.partitions: dict[str, _Partition] = {}
        self.summaries: dict[str, Summary] = {}
        self.runs: dict[str, str] = {}  # runId -> JSON body, as stored
        # Observability and fault injection.
        self.calls: Counter[str] = Counter()
        self.race_retries = 0
        self.fail_next_append: Exception | None = None
        self.fail_next: dict[str, Exception] = {}
        self.fail_always: dict[str, Exception] = {}
        # Called (once, then cleared) inside append_turn before the condition is checked:
        # lets a test land a competing write, as a racing Lambda would.
        self.before_append: Callable[[InMemoryStore], object] | None = None

    # -- fault injection --------------------------------------------------------
    def _enter(self, operation: str) -> None:
        self.calls[operation] += 1
        if operation in self.fail_always:
            raise self.fail_always[operation]
        if operation in self.fail_next:
            raise self.fail_next.pop(operation)

    # -- workspaces and tokens --------------------------------------------------
    def put_workspace(self, workspace_id: str, name: str, created_at: str) -> None:
        self._enter("put_workspace")
        self.workspaces[workspace_id] = {"name": name, "createdAt": created_at}

    def put_token(self, token_hash: str, workspace_id: str, name: str, created_at: str) -> bool:
        self._enter("put_token")
        if token_hash in self.tokens:
            return False
        self.tokens[token_hash] = {
            "workspaceId": workspace_id,
            "name": name,
            "createdAt": created_at,
        }
        return True

    def workspace_for_token(self, token_hash: str) -> str | None:
        self._enter("workspace_for_token")
        item = self.tokens.get(token_hash)
        return item["workspaceId"] if item else None

    def put_token_id(
        self, token_id: str, token_hash: str, workspace_id: str, created_at: str
    ) -> None:
        self._enter("put_token_id")
        self.token_ids[token_id] = token_hash

    def token_hash_for_id(self, token_id: str) -> str | None:
        self._enter("token_hash_for_id")
        return self.token_ids.get(token_id)

    def delete_token(self, token_hash: str, token_id: str) -> str | None:
        self._enter("delete_token")
        self.token_ids.pop(token_id, None)
        item = self.tokens.pop(token_hash, None)
        return item["workspaceId"] if item else None

    # -- capabilities -----------------------------------------------------------
    def put_capability(self, workspace_id: str, capability: Capability) -> None:
        self._enter("put_capability")
        self.capabilities[(workspace_id, capability.id)] = json.dumps(capability.to_json_dict())

    def get_capability(self, workspace_id: str, capability_id: str) -> Capability | None:
        self._enter("get_capability")
        body = self.capabilities.get((workspace_id, capability_id))
        return Capability.model_validate_json(body) if body is not None else None

    def list_capabilities(self, workspace_id: str) -> list[Capability]:
        self._enter("list_capabilities")
        caps = [
            Capability.model_validate_json(body)
            for (ws, _), body in self.capabilities.items()
            if ws == workspace_id
        ]
        caps.sort(key=lambda c: (c.created_at, c.id))
        return caps

    # -- sessions ---------------------------------------------------------------
    @staticmethod
    def _head_from(session: Session) -> dict[str, Any]:
        return {
            "workspaceId": session.workspace_id,
            "capabilityId": session.capability_id,
            "externalRef": session.external_ref,
            "principal": json.dumps(session.principal),
            "metadata": json.dumps(session.metadata),
            "status": session.status,
            "createdAt": session.created_at,
            "lastActiveAt": session.last_active_at,
            "messageCount": session.message_count,
            "summaryRequestedAt": 0,  # epoch milliseconds
        }

    @staticmethod
    def _session_from(session_id: str, head: dict[str, Any]) -> Session:
        return Session(
            id=session_id,
            workspace_id=head["workspaceId"],
            capability_id=head["capabilityId"],
            external_ref=head["externalRef"],
            principal=json.loads(head["principal"]),
            metadata=json.loads(head["metadata"]),
            status=head["status"],
            created_at=head["createdAt"],
            last_active_at=head["lastActiveAt"],
            message_count=head["messageCount"],
        )

    def create_session(self, session: Session) -> None:
        self._enter("create_session")
        if session.id in self.partitions:
            # DynamoDB: ConditionalCheckFailedException (attribute_not_exists(pk)).
            raise RuntimeError(f"session {session.id!r} already exists")
        self.partitions[session.id] = _Partition(head=self._head_from(session))

    def get_session(self, session_id: str) -> Session | None:
        self._enter("get_session")
        partition = self.partitions.get(session_id)
        return self._session_from(session_id, partition.head) if partition else None

    def list_sessions(
        self, workspace_id: str, external_ref: str, limit: int, after: tuple[str, str] | None
    ) -> tuple[list[Session], bool]:
        """Newest first by ``createdAt#id`` (the byExternalRef GSI's sort key). Like a
        DynamoDB Query with ``Limit``, a full page says there may be more."""
        self._enter("list_sessions")
        rows = sorted(
            (
                (f"{p.head['createdAt']}#{sid}", sid)
                for sid, p in self.partitions.items()
                if p.head["workspaceId"] == workspace_id and p.head["externalRef"] == external_ref
            ),
            reverse=True,
        )
        if after is not None:
            start = f"{after[0]}#{after[1]}"
            rows = [row for row in rows if row[0] < start]
        page = rows[:limit]
        sessions = [self._session_from(sid, self.partitions[sid].head) for _, sid in page]
        return sessions, bool(page) and len(page) == limit

    def update_metadata(
        self, session_id: str, workspace_id: str, metadata: dict[str, Any]
    ) -> Session | None:
        """Replace metadata; None when the session is missing or another workspace's."""
        self._enter("update_metadata")
        partition = self.partitions.get(session_id)
        if partition is None or partition.head["workspaceId"] != workspace_id:
            return None
        partition.head["metadata"] = json.dumps(metadata)
        return self._session_from(session_id, partition.head)

    def delete_session(self, session_id: str) -> int:
        """Delete the whole session partition and its summary; never the run traces.
        Returns the number of items deleted, counted the way ``DynamoStore`` does
        (the head's delete always counts, even when it was missing)."""
        self._enter("delete_session")
        partition = self.partitions.pop(session_id, None)
        deleted = 1
        if self.summaries.pop(session_id, None) is not None:
            deleted += 1
        if partition is not None:
            deleted += len(partition.messages) + len(partition.digests) + len(partition.markers)
        return deleted

    # -- retention (byActivity) -------------------------------------------------
    activity_shards = 16

    def _activity_key(self, session_id: str, head: dict[str, Any]) -> tuple[str, str]:
        """The head's byActivity keys, as DynamoStore maintains them: ``ACTIVE#NN`` /
        lastActiveAt from creation (a turn moves gsi2sk with lastActiveAt), until
        ``archive_session`` moves it to ``ARCHIVED#NN`` / archivedAt."""
        if "gsi2pk" in head:
            return head["gsi2pk"], head["gsi2sk"]
        shard = zlib.crc32(session_id.encode()) % self.activity_shards  # as DynamoStore
        return f"ACTIVE#{shard:02d}", head["lastActiveAt"]

    def sessions_by_activity(
        self, status: str, shard: int, before: str, page_size: int = 100
    ) -> Iterator[tuple[str, str]]:
        """``(sessionId, since)`` in one byActivity shard with since < ``before``,
        oldest first (the index's sort order; ties by pk)."""
        self._enter("sessions_by_activity")
        prefix = {"active": "ACTIVE", "archived": "ARCHIVED"}[status]
        wanted = f"{prefix}#{shard:02d}"
        rows = []
        for sid, partition in self.partitions.items():
            gsi2pk, gsi2sk = self._activity_key(sid, partition.head)
            if gsi2pk == wanted and gsi2sk < before:
                rows.append((gsi2sk, f"SESSION#{sid}", sid))
        for since, _, sid in sorted(rows):
            yield sid, since

    def archive_session(self, session_id: str, last_active_at: str, archived_at: str) -> bool:
        """Conditional on status = active AND lastActiveAt = ``last_active_at``."""
        self._enter("archive_session")
        partition = self.partitions.get(session_id)
        if (
            partition is None
            or partition.head["status"] != "active"
            or partition.head["lastActiveAt"] != last_active_at
        ):
            return False
        gsi2pk, _ = self._activity_key(session_id, partition.head)
        partition.head.update(
            status="archived",
            archivedAt=archived_at,
            gsi2pk=gsi2pk.replace("ACTIVE#", "ARCHIVED#"),
            gsi2sk=archived_at,
        )
        return True

    def purge_session(self, session_id: str, archived_at: str) -> int | None:
        """Delete the partition and its summary if still archived at ``archived_at``
        (None, nothing deleted, otherwise); never the run traces. Counts items as
        ``DynamoStore.purge_session`` does (the head, the summary, messages, digests,
        turn markers)."""
        self._enter("purge_session")
        partition = self.partitions.get(session_id)
        if (
            partition is None
            or partition.head["status"] != "archived"
            or partition.head.get("archivedAt") != archived_at
        ):
            return None
        del self.partitions[session_id]
        deleted = 1 + len(partition.messages) + len(partition.digests) + len(partition.markers)
        if self.summaries.pop(session_id, None) is not None:
            deleted += 1
        return deleted

    # -- messages ---------------------------------------------------------------
    def list_messages(
        self, session_id: str, after_seq: int, limit: int
    ) -> tuple[list[Message], bool]:
        """Messages with seq > after_seq, oldest first; and whether more exist."""
        self._enter("list_messages")
        partition = self.partitions.get(session_id)
        if partition is None:
            return [], False
        seqs = sorted(seq for seq in partition.messages if seq > after_seq)
        page = [self._copy(partition.messages[seq].message) for seq in seqs[:limit]]
        return page, len(seqs) > limit

    def read_messages_range(self, session_id: str, first_seq: int, last_seq: int) -> list[Message]:
        """Messages first_seq..last_seq inclusive, oldest first."""
        self._enter("read_messages_range")
        partition = self.partitions.get(session_id)
        if partition is None:
            return []
        return [
            self._copy(partition.messages[seq].message)
            for seq in sorted(partition.messages)
            if first_seq <= seq <= last_seq
        ]

    def load_turn_state(
        self, session_id: str, max_messages: int, with_digests: bool
    ) -> TurnState | None:
        """The head, the summary, the newest ``max_messages`` messages (oldest first)
        and the digests stored with them; None when the session does not exist.

        Walks the partition the way DynamoStore's one descending Query does (summary,
        head, then each message's digest and the message, newest first) with the same
        item budget, so the same items come back."""
        self._enter("load_turn_state")
        partition = self.partitions.get(session_id)
        if partition is None:
            return None
        wanted = max_messages + (max_messages if with_digests else 0) + 2
        items: list[tuple[str, int]] = []
        if session_id in self.summaries:
            items.append(("summary", 0))
        items.append(("head", 0))
        for seq in sorted(partition.messages, reverse=True):
            if seq in partition.digests:
                items.append(("digest", seq))
            items.append(("message", seq))
        summary: Summary | None = None
        messages: list[Message] = []
        digests: dict[int, ToolDigest] = {}
        expiry: dict[int, float] = {}
        for kind, seq in items[:wanted]:
            if kind == "summary":
                summary = self._copy(self.summaries[session_id])
            elif kind == "digest":
                digests[seq] = self._copy(partition.digests[seq].digest)
                expiry[seq] = partition.digests[seq].expires_at
            elif kind == "message" and len(messages) < max_messages:
                messages.append(self._copy(partition.messages[seq].message))
        messages.reverse()
        return TurnState(
            session=self._session_from(session_id, partition.head),
            summary=summary,
            recent=tuple(messages),
            digests=digests,
            digest_expiry=expiry,
            summary_requested_at=int(partition.head["summaryRequestedAt"]) / 1000,
        )

    def append_turn(self, session_id: str, expected_count: int, turn: TurnRecord) -> AppendResult:
        """Append a user message and its answer atomically (see the module docstring)."""
        self._enter("append_turn")
        if self.fail_next_append is not None:
            failure, self.fail_next_append = self.fail_next_append, None
            raise failure
        if self.before_append is not None:
            hook, self.before_append = self.before_append, None
            hook(self)
        partition = self.partitions.get(session_id)
        if partition is not None and turn.turn_id in partition.markers:
            user_seq, assistant_seq = partition.markers[turn.turn_id]
            return AppendResult(user_seq, assistant_seq, -1, already_recorded=True)
        if partition is None:
            raise SessionNotFound("session not found")
        if partition.head["status"] != "active":
            raise SessionArchived("the session is archived and accepts no new turns")
        count = int(partition.head["messageCount"])
        if count != expected_count:
            self.race_retries += 1  # DynamoStore retries at the count the cancellation returned
        user_seq, assistant_seq = count + 1, count + 2
        for seq, role, content, withheld, run_id in (
            (user_seq, "user", turn.user_content, False, None),
            (assistant_seq, "assistant", turn.answer, turn.withheld, turn.run_id),
        ):
            message = Message(
                seq=seq, role=role, content=content, created_at=turn.created_at, withheld=withheld
            )
            partition.messages[seq] = _StoredMessage(message, turn.turn_id, run_id)
        if turn.digest_text is not None and turn.digest_tools and turn.digest_expires_at:
            partition.digests[assistant_seq] = _StoredDigest(
                ToolDigest(
                    seq=assistant_seq, tools=sorted(set(turn.digest_tools)), text=turn.digest_text
                ),
                float(int(turn.digest_expires_at)),
            )
        partition.markers[turn.turn_id] = (user_seq, assistant_seq)
        partition.head["messageCount"] = assistant_seq
        partition.head["lastActiveAt"] = turn.created_at
        if turn.mark_summary_requested_at is not None:
            # As DynamoStore: whole milliseconds.
            partition.head["summaryRequestedAt"] = int(turn.mark_summary_requested_at * 1000)
        return AppendResult(user_seq, assistant_seq, assistant_seq)

    # -- summary ----------------------------------------------------------------
    def get_summary(self, session_id: str) -> Summary | None:
        self._enter("get_summary")
        summary = self.summaries.get(session_id)
        return self._copy(summary) if summary else None

    def advance_summary(self, session_id: str, previous_through: int, summary: Summary) -> bool:
        """Compare-and-set: store only if the stored summary is still at
        ``previous_through`` (or absent, when that is 0) and the new one is ahead."""
        self._enter("advance_summary")
        # The real store checks the head in the same transaction.
        if session_id not in self.partitions:
            return False
        stored = self.summaries.get(session_id)
        if stored is None:
            if previous_through != 0:
                return False
        elif stored.through_seq != previous_through or stored.through_seq >= summary.through_seq:
            return False
        self.summaries[session_id] = self._copy(summary)
        return True

    # -- runs -------------------------------------------------------------------
    def put_run(self, run: dict[str, Any]) -> None:
        self._enter("put_run")
        self.runs[run["runId"]] = json.dumps(run)

    def get_run(self, workspace_id: str, run_id: str) -> dict[str, Any] | None:
        self._enter("get_run")
        body = self.runs.get(run_id)
        if body is None:
            return None
        run: dict[str, Any] = json.loads(body)
        return run if run["workspaceId"] == workspace_id else None

    # -- test helpers (not part of the store's interface) -------------------------
    def add_turn(
        self,
        session_id: str,
        user: str,
        answer: str,
        *,
        turn_id: str | None = None,
        created_at: str = "2025-01-01T00:00:00.000Z",
    ) -> AppendResult:
        """Record one turn directly (seeding a history); not counted in ``calls``."""
        partition = self.partitions[session_id]
        count = int(partition.head["messageCount"])
        record = TurnRecord(
            turn_id=turn_id or f"seed-{count + 1}",
            user_content=user,
            answer=answer,
            withheld=False,
            created_at=created_at,
        )
        result = self.append_turn(session_id, count, record)
        self.calls["append_turn"] -= 1
        return result

    def set_status(self, session_id: str, status: str) -> None:
        self.partitions[session_id].head["status"] = status

    def messages_of(self, session_id: str) -> list[Message]:
        """The whole stored transcript, oldest first."""
        partition = self.partitions.get(session_id)
        if partition is None:
            return []
        return [self._copy(partition.messages[seq].message) for seq in sorted(partition.messages)]

    def digests_of(self, session_id: str) -> dict[int, tuple[ToolDigest, float]]:
        partition = self.partitions.get(session_id)
        if partition is None:
            return {}
        return {seq: (d.digest, d.expires_at) for seq, d in partition.digests.items()}

    def run_id_of(self, session_id: str, seq: int) -> str | None:
        return self.partitions[session_id].messages[seq].run_id

    def run(self, run_id: str) -> dict[str, Any]:
        body: dict[str, Any] = json.loads(self.runs[run_id])
        return body

    def writes(self) -> int:
        """How many calls changed (or tried to change) state."""
        return sum(
            n
            for op, n in self.calls.items()
            if op.startswith(("put_", "create_", "append_", "update_", "delete_", "advance_"))
        )

    def dump(self) -> str:
        """Every stored value as one text, for "appears nowhere in the store" checks."""
        snapshot = {
            "workspaces": self.workspaces,
            "tokens": self.tokens,
            "capabilities": {f"{ws}/{cap}": body for (ws, cap), body in self.capabilities.items()},
            "partitions": {
                sid: {
                    "head": p.head,
                    "messages": {
                        seq: [m.message.model_dump(), m.turn_id, m.run_id]
                        for seq, m in p.messages.items()
                    },
                    "digests": {
                        seq: [d.digest.model_dump(), d.expires_at] for seq, d in p.digests.items()
                    },
                    "markers": p.markers,
                }
                for sid, p in self.partitions.items()
            },
            "summaries": {sid: s.model_dump() for sid, s in self.summaries.items()},
            "runs": self.runs,
        }
        return json.dumps(snapshot, ensure_ascii=False, default=str)

    @staticmethod
    def _copy(value: _T) -> _T:
        return copy.deepcopy(value)


class FakeQueue:
    """The services' queue port: records each body as SQS would carry it (JSON)."""

    def __init__(self) -> None:
        self.sent: list[tuple[dict[str, Any], int]] = []
        self.attempts = 0
        self.fail_with: Exception | None = None

    def send(self, body: dict[str, Any], delay_seconds: int = 0) -> None:
        self.attempts += 1
        if self.fail_with is not None:
            raise self.fail_with
        self.sent.append((json.loads(json.dumps(body, separators=(",", ":"))), delay_seconds))

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [body for body, _ in self.sent]


class FakeProvider:
    """A model provider that records every prompt and answers as configured.

    ``text`` may be a string or a function of the prompt; ``stream`` yields ``chunks``
    when given, else the text split into words (each chunk keeps its trailing space)."""

    def __init__(
        self,
        text: str | Callable[[Prompt], str] = "an answer",
        tool_calls: Sequence[ToolCall] = (),
        chunks: Sequence[str] | None = None,
    ) -> None:
        self.text = text
        self.tool_calls = tuple(tool_calls)
        self.chunks = tuple(chunks) if chunks is not None else None
        self.prompts: list[Prompt] = []
        self.complete_calls = 0
        self.stream_calls = 0

    def _answer(self, prompt: Prompt) -> str:
        return self.text(prompt) if callable(self.text) else self.text

    def complete(self, prompt: Prompt) -> Completion:
        self.complete_calls += 1
        self.prompts.append(prompt)
        return Completion(text=self._answer(prompt), tool_calls=self.tool_calls)

    def stream(self, prompt: Prompt) -> Iterator[str]:
        self.stream_calls += 1
        self.prompts.append(prompt)
        if self.chunks is not None:
            yield from self.chunks
            return
        words = self._answer(prompt).split(" ")
        for i, word in enumerate(words):
            yield word if i == len(words) - 1 else word + " "

    @property
    def last_prompt(self) -> Prompt:
        return self.prompts[-1]


class FakeContentFilter:
    """Blocks any text containing one of ``blocked`` (case-insensitive); records checks."""

    def __init__(self, blocked: Iterable[str] = ()) -> None:
        self.blocked = tuple(term.casefold() for term in blocked)
        self.checked: list[str] = []

    def check(self, text: str) -> FilterVerdict:
        self.checked.append(text)
        folded = text.casefold()
        for term in self.blocked:
            if term in folded:
                return FilterVerdict(False, f"blocked term {term!r}")
        return FilterVerdict(True)


class FakeMetrics:
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def count(self, name: str, value: int = 1) -> None:
        self.counts[name] += value


class FakeClock:
    """An injectable ``time.time``: starts at ``now`` and moves only when told."""

    def __init__(self, now: float = 1_750_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
