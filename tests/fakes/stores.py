"""In-memory fakes of the storage ports (``convo_memory.ports``), split like the DynamoDB
stores: one class per port over one shared ``FakeDatabase``.

They keep the observable semantics of the DynamoDB stores (the store contract suite in
``tests/contract`` runs the same tests against both), e.g.:

- a turn is one record at its position; ``append_turn`` moves on past taken positions,
  and recognises its own earlier write by the turn id;
- ``get_session`` / ``load_turn_state`` report the exact message count and treat a session
  being deleted as missing; the head's ``lastActiveAt`` (the coarse activity mark) moves
  only on ``touch`` and ``refresh_activity``;
- values round-trip through JSON where DynamoDB stores JSON (capabilities, principal,
  metadata, run traces), so a value the real store could not hold fails here too.

Fault injection (``fail_next``, ``fail_always``, ``before_append``) and per-operation
call counters (``calls``) let tests drive failure paths and count store requests.
"""

from __future__ import annotations

import copy
import json
import zlib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from convo_memory.domain.app_call_ids import shown_calls
from convo_memory.domain.erasures import Erasure, ErasureStatus, SessionOfEndUser
from convo_memory.domain.errors import (
    PauseEnded,
    RecallSourceGone,
    SessionArchived,
    SessionKeyTaken,
    SessionNotFound,
    StoreRejected,
    ValidationFailed,
)
from convo_memory.domain.forks import REMOVED_FORK_POINT, summary_behind
from convo_memory.domain.models import (
    Capability,
    ForkPoint,
    Message,
    Principal,
    Recall,
    Session,
    Summary,
    ToolDigest,
)
from convo_memory.domain.paused_turns import PendingTurn
from convo_memory.domain.prompt_record import PromptRecord, StoredPrompt
from convo_memory.domain.recall import RecallSource, canonical_principal
from convo_memory.domain.responses import (
    ResponseRef,
    ResponseSettings,
    StoredResponse,
    previous_response,
)
from convo_memory.domain.summary_plan import FoldWindow, SummaryVersion
from convo_memory.domain.turn_records import (
    AppendResult,
    TurnRecord,
    TurnState,
    Twin,
    abandoned_turn,
    turn_messages,
    user_seq_of,
)
from convo_memory.ports import CopyOutcome, Stores

_T = TypeVar("_T")
ACTIVITY_SHARDS = 64
WRITES = (
    "put_",
    "create_",
    "append_",
    "update_",
    "advance_",
    "touch",
    "begin_",
    "delete_",
    "keep_",
)
# What a deletion strips from a head (``items.PERSONAL_HEAD_ATTRIBUTES``).
PERSONAL_HEAD_FIELDS = (
    "externalRef",
    "principal",
    "metadata",
    "recall",
    "fenceNonce",
    "forkOf",
)
# Reads follow a chain of forks still copying at most this deep (``fork_reads.MAX_CHAIN``).
MAX_CHAIN = 6


@dataclass
class StoredTurn:
    turn: TurnRecord
    response_deleted: bool = False
    # (v5) Whether its user message and its answer were removed as conversation items.
    removed: tuple[bool, bool] = (False, False)


@dataclass
class StoredDigest:
    digest: ToolDigest
    expires_at: float


@dataclass
class FakeDatabase:
    """What the tables hold, plus fault injection and request counters."""

    workspaces: dict[str, dict[str, str]] = field(default_factory=dict)
    tokens: dict[str, dict[str, str]] = field(default_factory=dict)
    token_ids: dict[str, str] = field(default_factory=dict)
    capabilities: dict[tuple[str, str], str] = field(default_factory=dict)  # JSON bodies
    heads: dict[str, dict[str, Any]] = field(default_factory=dict)
    turns: dict[str, dict[int, StoredTurn]] = field(default_factory=dict)  # by user seq
    # Turns paused for the app's tools (v4), by the user seq they hold.
    paused: dict[str, dict[int, PendingTurn]] = field(default_factory=dict)
    digests: dict[str, dict[int, StoredDigest]] = field(default_factory=dict)  # by user seq
    summaries: dict[str, Summary] = field(default_factory=dict)
    # (workspace, capability, app key) -> the session the key opened
    session_keys: dict[tuple[str, str, str], str] = field(default_factory=dict)
    # The window each summary was made in, and the version kept beside it, when the fold
    # said so (replay.alignment > 1).
    summary_made_at: dict[str, int] = field(default_factory=dict)
    earlier_summaries: dict[str, SummaryVersion] = field(default_factory=dict)
    # Every version of each session's summary a fold stored, by throughSeq (v4).
    kept_versions: dict[str, dict[int, SummaryVersion]] = field(default_factory=dict)
    # parent -> fork -> (atSeq, newest summary version to copy): the copies still due.
    fork_markers: dict[str, dict[str, tuple[int, int]]] = field(default_factory=dict)
    runs: dict[str, str] = field(default_factory=dict)  # runId -> JSON body
    erasures: dict[tuple[str, str], Erasure] = field(default_factory=dict)
    calls: Counter[str] = field(default_factory=Counter)
    fail_next: dict[str, Exception] = field(default_factory=dict)
    fail_always: dict[str, Exception] = field(default_factory=dict)
    # Called once (then cleared) at the start of append_turn: lets a test land a
    # competing write, as a racing Lambda would.
    before_append: Callable[[FakeDatabase], object] | None = None
    position_conflicts: int = 0
    stores: Stores = field(init=False)

    def __post_init__(self) -> None:
        self.stores = Stores(
            tokens=FakeTokenStore(self),
            capabilities=FakeCapabilityStore(self),
            sessions=FakeSessionStore(self),
            turns=FakeTurnStore(self),
            summaries=FakeSummaryStore(self),
            retention=FakeRetentionStore(self),
            runs=FakeRunStore(self),
            recall=FakeRecallStore(self),
            erasures=FakeErasureStore(self),
            forks=FakeForkStore(self),
            responses=FakeResponseStore(self),
        )

    def enter(self, operation: str) -> None:
        self.calls[operation] += 1
        if operation in self.fail_always:
            raise self.fail_always[operation]
        if operation in self.fail_next:
            raise self.fail_next.pop(operation)

    # -- shared reads -------------------------------------------------------------
    def newest_user_seq(self, session_id: str) -> int:
        turns = self.turns.get(session_id) or {}
        return max(turns) if turns else -1

    def session(self, session_id: str) -> Session | None:
        head = self.heads.get(session_id)
        if head is None or head["status"] == "deleting":
            return None
        count, last_active_at = 0, str(head["lastActiveAt"])
        newest = self.newest_user_seq(session_id)
        if newest > 0:
            count = newest + 1
            last_active_at = max(last_active_at, self.turns[session_id][newest].turn.created_at)
        return Session(
            id=session_id,
            workspace_id=head["workspaceId"],
            capability_id=head.get("capabilityId"),
            external_ref=head.get("externalRef"),
            principal=json.loads(head["principal"]),
            metadata=json.loads(head["metadata"]),
            status="archived" if head["status"] == "archived" else "active",
            created_at=head["createdAt"],
            last_active_at=last_active_at,
            message_count=count,
            recall=Recall.model_validate_json(head["recall"]) if "recall" in head else None,
            session_key=head.get("sessionKey"),
            fence_nonce=head.get("fenceNonce"),
            fork_of=ForkPoint.model_validate_json(head["forkOf"]) if "forkOf" in head else None,
            copying_from=head.get("copyFrom"),
        )

    def summary_versions(self, session_id: str) -> tuple[SummaryVersion, ...]:
        """The stored summary and the version kept beside it, as a turn reads them."""
        current = self.summaries.get(session_id)
        if current is None:
            return ()
        versions = [SummaryVersion(_copy(current), self.summary_made_at.get(session_id, 0))]
        earlier = self.earlier_summaries.get(session_id)
        if earlier is not None and earlier.summary.through_seq > 0:
            versions.append(earlier)
        return tuple(versions)

    def head_of(self, session: Session) -> dict[str, Any]:
        """A new session's head, as ``create_session`` stores it."""
        head: dict[str, Any] = {
            "workspaceId": session.workspace_id,
            "principal": _json_safe(session.principal),
            "metadata": _json_safe(session.metadata),
            "status": session.status,
            "createdAt": session.created_at,
            "lastActiveAt": session.last_active_at,
        }
        # (v4) A conversation not bound yet has neither; one bound without an end user
        # has no externalRef.
        if session.capability_id is not None:
            head["capabilityId"] = session.capability_id
        if session.external_ref is not None:
            head["externalRef"] = session.external_ref
        if session.recall is not None:
            head["recall"] = _json_safe(session.recall.to_json_dict())
        if session.session_key is not None:
            head["sessionKey"] = session.session_key
        if session.fence_nonce:
            head["fenceNonce"] = session.fence_nonce
        if session.fork_of is not None:
            head["forkOf"] = _json_safe(session.fork_of.to_json_dict())
        return head

    def copy_due(self, session_id: str) -> tuple[str, int] | None:
        """(parent, copy mark) of a fork whose copy is due, deleting or not (as
        ``fork_reads.copy_state``)."""
        head = self.heads.get(session_id) or {}
        if head.get("copyFrom") is None:
            return None
        return str(head["copyFrom"]), int(head.get("copyBelow", 1))

    def lineage_turns(self, session_id: str, depth: int = 0) -> dict[int, StoredTurn]:
        """A session's turns by user seq: its own and, for a fork still copying, the
        parent's below its copy mark, up the chain (what the DynamoDB store reads through)."""
        own = dict(self.turns.get(session_id) or {})
        due = self.copy_due(session_id) if depth < MAX_CHAIN else None
        if due is not None:
            parent, below = due
            inherited = self.lineage_turns(parent, depth + 1)
            own |= {seq: t for seq, t in inherited.items() if seq < below and seq not in own}
        return own

    def lineage_digests(self, session_id: str, depth: int = 0) -> dict[int, StoredDigest]:
        own = dict(self.digests.get(session_id) or {})
        due = self.copy_due(session_id) if depth < MAX_CHAIN else None
        if due is not None:
            parent, below = due
            inherited = self.lineage_digests(parent, depth + 1)
            own |= {seq: d for seq, d in inherited.items() if seq < below and seq not in own}
        return own

    def lineage_versions(self, session_id: str, depth: int = 0) -> dict[int, SummaryVersion]:
        """A session's kept summary versions: its own and, for a fork still copying, its
        parent's up to the newest its marker says it inherited, up the chain."""
        own = dict(self.kept_versions.get(session_id) or {})
        due = self.copy_due(session_id) if depth < MAX_CHAIN else None
        marker = (self.fork_markers.get(due[0]) or {}).get(session_id) if due else None
        if due is not None and marker is not None:
            inherited = self.lineage_versions(due[0], depth + 1)
            own |= {t: v for t, v in inherited.items() if t <= marker[1] and t not in own}
        return own

    def summary_version(self, session_id: str, through: int) -> Summary | None:
        found = self.lineage_versions(session_id).get(through)
        if found is not None:
            return _copy(found.summary)
        for version in self.summary_versions(session_id):
            if version.summary.through_seq == through:
                return _copy(version.summary)
        return None

    def messages(self, session_id: str) -> list[Message]:
        out: list[Message] = []
        for seq, stored in sorted(self.lineage_turns(session_id).items()):
            t = stored.turn
            out.extend(
                turn_messages(
                    seq,
                    t.user_content,
                    t.answer,
                    t.created_at,
                    t.withheld,
                    t.truncated,
                    t.abandoned,
                    removed=stored.removed,
                    attachments=t.attachments,
                )
            )
        return out

    def copy_inherited(self, parent_id: str, fork_id: str, depth: int = 0) -> CopyOutcome:
        """Copy what a fork still lacks of its parent (``DynamoForkStore.copy_inherited``):
        a live parent's own copy first; a deleting fork's own forks first."""
        head = self.heads.get(fork_id)
        if head is None or head["status"] == "deleting":
            if head is not None and head.get("copyFrom") == parent_id and depth < MAX_CHAIN:
                for grandchild in list(self.fork_markers.get(fork_id) or {}):
                    self.copy_inherited(fork_id, grandchild, depth + 1)
            (self.fork_markers.get(parent_id) or {}).pop(fork_id, None)
            return "gone"
        if head.get("copyFrom") != parent_id:
            (self.fork_markers.get(parent_id) or {}).pop(fork_id, None)
            return "done"
        parent = self.heads.get(parent_id) or {}
        if parent.get("copyFrom") is not None and parent.get("status") != "deleting":
            self.copy_inherited(parent["copyFrom"], parent_id, depth + 1)
        due = (self.fork_markers.get(parent_id) or {}).get(fork_id)
        below = int(head.get("copyBelow", 1))
        turns = self.turns.setdefault(fork_id, {})
        for seq, stored in self.lineage_turns(parent_id).items():
            if seq < below:
                turns[seq] = _copy(stored)
        digests = self.digests.setdefault(fork_id, {})
        for seq, digest in self.lineage_digests(parent_id).items():
            if seq < below:
                digests[seq] = _copy(digest)
        versions = self.kept_versions.setdefault(fork_id, {})
        for through, version in self.lineage_versions(parent_id).items():
            if due is not None and through <= due[1]:
                versions.setdefault(through, _copy(version))
        head.pop("copyFrom", None)
        head.pop("copyBelow", None)
        (self.fork_markers.get(parent_id) or {}).pop(fork_id, None)
        return "done"

    def delete_contents(self, session_id: str) -> int:
        for fork_id in list(self.fork_markers.get(session_id) or {}):
            self.copy_inherited(session_id, fork_id)  # a fork never loses what it inherited
        deleted = len(self.turns.pop(session_id, {})) + len(self.digests.pop(session_id, {}))
        deleted += len(self.paused.pop(session_id, {}))
        deleted += 1 if self.summaries.pop(session_id, None) is not None else 0
        deleted += len(self.kept_versions.pop(session_id, {}))
        deleted += len(self.fork_markers.pop(session_id, {}))
        self.earlier_summaries.pop(session_id, None)
        self.summary_made_at.pop(session_id, None)
        head = self.heads.get(session_id) or {}
        parent = head.pop("copyFrom", None)
        head.pop("copyBelow", None)
        if parent is not None:  # a fork still copying owns its marker in the parent
            (self.fork_markers.get(parent) or {}).pop(session_id, None)
        key = head.pop("sessionKey", None)
        if key is not None:
            claim = (head["workspaceId"], head["capabilityId"], key)
            if self.session_keys.get(claim) == session_id:
                del self.session_keys[claim]
            deleted += 1
        return deleted

    # -- test helpers (not part of any port) ---------------------------------------
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
        count = max(0, self.newest_user_seq(session_id) + 1)
        record = TurnRecord(
            turn_id=turn_id or f"seed-{count + 1}",
            user_content=user,
            answer=answer,
            withheld=False,
            created_at=created_at,
        )
        self.turns.setdefault(session_id, {})[count + 1] = StoredTurn(record)
        return AppendResult(count + 1, count + 2)

    def set_status(self, session_id: str, status: str) -> None:
        self.heads[session_id]["status"] = status

    def messages_of(self, session_id: str) -> list[Message]:
        """The whole stored transcript, oldest first."""
        return self.messages(session_id)

    def digests_of(self, session_id: str) -> dict[int, tuple[ToolDigest, float]]:
        """Stored digests by the seq of their answer."""
        return {
            d.digest.seq: (d.digest, d.expires_at)
            for d in (self.digests.get(session_id) or {}).values()
        }

    def run_id_of(self, session_id: str, seq: int) -> str | None:
        return self.turns[session_id][user_seq_of(seq)].turn.run_id

    def run(self, run_id: str) -> dict[str, Any]:
        body: dict[str, Any] = json.loads(self.runs[run_id])
        return body

    def writes(self) -> int:
        """How many calls changed (or tried to change) state."""
        return sum(n for op, n in self.calls.items() if op.startswith(WRITES))

    def holds_session(self, session_id: str) -> bool:
        """Whether anything of the session is still stored."""
        return (
            any(
                session_id in place
                for place in (
                    self.heads,
                    self.turns,
                    self.digests,
                    self.summaries,
                    self.kept_versions,
                    self.fork_markers,
                )
                if place.get(session_id)
            )
            or session_id in self.session_keys.values()
        )

    def dump(self) -> str:
        """Every stored value as one text, for "appears nowhere in the store" checks."""
        snapshot = {
            "workspaces": self.workspaces,
            "tokens": self.tokens,
            "capabilities": {f"{ws}/{cap}": body for (ws, cap), body in self.capabilities.items()},
            "heads": self.heads,
            "turns": {
                sid: {seq: t.turn.__dict__ for seq, t in turns.items()}
                for sid, turns in self.turns.items()
            },
            "digests": {
                sid: {seq: [d.digest.model_dump(), d.expires_at] for seq, d in digests.items()}
                for sid, digests in self.digests.items()
            },
            "summaries": {sid: s.model_dump() for sid, s in self.summaries.items()},
            "sessionKeys": {"#".join(claim): sid for claim, sid in self.session_keys.items()},
            "summaryMadeAt": self.summary_made_at,
            "earlierSummaries": {
                sid: [v.summary.model_dump(), v.made_at_window]
                for sid, v in self.earlier_summaries.items()
            },
            "summaryVersions": {
                sid: {t: [v.summary.model_dump(), v.made_at_window] for t, v in versions.items()}
                for sid, versions in self.kept_versions.items()
            },
            "forkMarkers": {sid: list(forks) for sid, forks in self.fork_markers.items()},
            "runs": self.runs,
        }
        return json.dumps(snapshot, ensure_ascii=False, default=str)


def _copy(value: _T) -> _T:
    return copy.deepcopy(value)


def _json_safe(value: Any) -> str:
    """JSON as DynamoDB would store it; a value it could not encode is refused."""
    text = json.dumps(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise StoreRejected("not encodable as UTF-8") from exc
    return text


class _Port:
    def __init__(self, db: FakeDatabase) -> None:
        self.db = db


class FakeTokenStore(_Port):
    def put_workspace(self, workspace_id: str, name: str, created_at: str) -> None:
        self.db.enter("put_workspace")
        self.db.workspaces[workspace_id] = {"name": name, "createdAt": created_at}

    def put_token(self, token_hash: str, workspace_id: str, name: str, created_at: str) -> bool:
        self.db.enter("put_token")
        if token_hash in self.db.tokens:
            return False
        self.db.tokens[token_hash] = {"workspaceId": workspace_id, "name": name}
        return True

    def workspace_for_token(self, token_hash: str) -> str | None:
        self.db.enter("workspace_for_token")
        token = self.db.tokens.get(token_hash)
        return token["workspaceId"] if token else None

    def put_token_id(
        self, token_id: str, token_hash: str, workspace_id: str, created_at: str
    ) -> None:
        self.db.enter("put_token_id")
        self.db.token_ids[token_id] = token_hash

    def token_hash_for_id(self, token_id: str) -> str | None:
        self.db.enter("token_hash_for_id")
        return self.db.token_ids.get(token_id)

    def delete_token(self, token_hash: str, token_id: str) -> str | None:
        self.db.enter("delete_token")
        self.db.token_ids.pop(token_id, None)
        token = self.db.tokens.pop(token_hash, None)
        return token["workspaceId"] if token else None


class FakeCapabilityStore(_Port):
    def put_capability(self, workspace_id: str, capability: Capability) -> None:
        self.db.enter("put_capability")
        self.db.capabilities[(workspace_id, capability.id)] = json.dumps(
            capability.to_stored_dict()
        )

    def get_capability(self, workspace_id: str, capability_id: str) -> Capability | None:
        self.db.enter("get_capability")
        body = self.db.capabilities.get((workspace_id, capability_id))
        return Capability.model_validate_json(body) if body else None

    def list_capabilities(self, workspace_id: str) -> list[Capability]:
        self.db.enter("list_capabilities")
        found = [
            Capability.model_validate_json(body)
            for (ws, _), body in self.db.capabilities.items()
            if ws == workspace_id
        ]
        return sorted(found, key=lambda c: (c.created_at, c.id))


class FakeRunStore(_Port):
    def put_run(self, run: dict[str, Any]) -> None:
        self.db.enter("put_run")
        self.db.runs[run["runId"]] = _json_safe(run)

    def get_run(self, workspace_id: str, run_id: str) -> dict[str, Any] | None:
        self.db.enter("get_run")
        body = self.db.runs.get(run_id)
        if body is None:
            return None
        run: dict[str, Any] = json.loads(body)
        return run if run["workspaceId"] == workspace_id else None


class FakeSessionStore(_Port):
    def create_session(self, session: Session, history: Sequence[TurnRecord] = ()) -> None:
        self.db.enter("create_session")
        if session.id in self.db.heads:
            raise StoreRejected(f"session id {session.id} already exists")
        claim = (session.workspace_id, session.capability_id or "", session.session_key or "")
        if session.session_key is not None and claim in self.db.session_keys:
            raise SessionKeyTaken(self.db.session_keys[claim])
        self._check_recall(session)
        if session.session_key is not None:
            self.db.session_keys[claim] = session.id
        self.db.heads[session.id] = self.db.head_of(session)
        if history:
            _json_safe([[t.user_content, t.answer] for t in history])
            self.db.turns[session.id] = {
                2 * index + 1: StoredTurn(_copy(turn)) for index, turn in enumerate(history)
            }

    def _check_recall(self, session: Session) -> None:
        if session.recall is not None and not all(
            self.db.heads.get(source, {}).get("status") in RECALLABLE
            for source in session.recall.from_sessions
        ):
            raise RecallSourceGone(f"a session recalled by {session.id} was deleted")

    def bind_session(self, session: Session) -> bool:
        self.db.enter("bind_session")
        head = self.db.heads.get(session.id)
        if (
            head is None
            or head["workspaceId"] != session.workspace_id
            or head["status"] != "active"
            or head.get("capabilityId") is not None
        ):
            return False
        self._check_recall(session)
        bound = self.db.head_of(session)
        for name in ("capabilityId", "externalRef", "principal", "recall"):
            if name in bound:
                head[name] = bound[name]
        return True

    def session_for_key(
        self, workspace_id: str, capability_id: str, session_key: str
    ) -> str | None:
        self.db.enter("session_for_key")
        return self.db.session_keys.get((workspace_id, capability_id, session_key))

    def release_session_key(
        self, workspace_id: str, capability_id: str, session_key: str, session_id: str
    ) -> None:
        self.db.enter("release_session_key")
        claim = (workspace_id, capability_id, session_key)
        if self.db.session_keys.get(claim) == session_id:
            del self.db.session_keys[claim]

    def get_session(self, session_id: str) -> Session | None:
        self.db.enter("get_session")
        return self.db.session(session_id)

    def list_sessions(
        self, workspace_id: str, external_ref: str, limit: int, after: tuple[str, str] | None
    ) -> tuple[list[Session], bool]:
        self.db.enter("list_sessions")
        keyed = sorted(
            (
                (f"{head['createdAt']}#{sid}", sid)
                for sid, head in self.db.heads.items()
                if head["workspaceId"] == workspace_id
                and head.get("externalRef") == external_ref
                and head["status"] != "deleting"
            ),
            reverse=True,
        )
        if after is not None:
            start = f"{after[0]}#{after[1]}"
            keyed = [(key, sid) for key, sid in keyed if key < start]
        page = keyed[:limit]
        sessions = [s for _, sid in page if (s := self.db.session(sid)) is not None]
        # Like DynamoDB: a full page says there may be more even when nothing follows.
        return sessions, bool(page) and len(page) == limit

    def update_metadata(
        self, session_id: str, workspace_id: str, metadata: dict[str, Any]
    ) -> Session | None:
        self.db.enter("update_metadata")
        head = self.db.heads.get(session_id)
        if head is None or head["workspaceId"] != workspace_id or head["status"] == "deleting":
            return None
        head["metadata"] = _json_safe(metadata)
        return self.db.session(session_id)

    def touch(self, session_id: str, last_active_at: str) -> None:
        self.db.enter("touch")
        head = self.db.heads.get(session_id)
        if head is not None and head["status"] == "active":
            head["lastActiveAt"] = last_active_at
            return
        if head is not None and head["status"] == "archived":
            raise SessionArchived("the session is archived and accepts no new turns")
        raise SessionNotFound(f"session {session_id!r} not found")

    def begin_deletion(self, session_id: str, workspace_id: str, deleted_at: str) -> bool:
        self.db.enter("begin_deletion")
        head = self.db.heads.get(session_id)
        if head is None or head["workspaceId"] != workspace_id or "erasureId" in head:
            return False
        head["status"] = "deleting"
        head.setdefault("deletedAt", deleted_at)
        for name in PERSONAL_HEAD_FIELDS:  # a tombstone: keys, status and times
            head.pop(name, None)
        return True

    def delete_contents(self, session_id: str) -> int:
        self.db.enter("delete_contents")
        return self.db.delete_contents(session_id)

    def keep_fence_nonce(self, session_id: str, nonce: str) -> str | None:
        self.db.enter("keep_fence_nonce")
        head = self.db.heads.get(session_id)
        if head is None or head["status"] != "active":
            return None
        return str(head.setdefault("fenceNonce", nonce))


RECALLABLE = ("active", "archived")


class FakeRecallStore(_Port):
    def candidates(
        self,
        workspace_id: str,
        external_ref: str,
        capability_id: str,
        principal: Principal | None,
        limit: int,
        scan: int,
    ) -> list[str]:
        self.db.enter("recall_candidates")
        # The end user's newest ``scan`` sessions, as the byExternalRef index lists them.
        listed = sorted(
            (
                (f"{head['createdAt']}#{sid}", sid)
                for sid, head in self.db.heads.items()
                if head["workspaceId"] == workspace_id
                and head.get("externalRef") == external_ref  # a tombstone has none
                and head["status"] != "deleting"
            ),
            reverse=True,
        )[:scan]
        wanted = canonical_principal(principal)
        return [
            sid
            for _, sid in listed
            if self.db.heads[sid]["status"] in RECALLABLE
            and self.db.heads[sid].get("capabilityId") == capability_id
            and canonical_principal(json.loads(self.db.heads[sid]["principal"])) == wanted
        ][:limit]

    def sources(self, session_ids: Sequence[str], max_turns: int) -> list[RecallSource | None]:
        found: list[RecallSource | None] = []
        for sid in session_ids:
            self.db.enter("recall_source")
            head = self.db.heads.get(sid)
            if head is None or head["status"] not in RECALLABLE:
                found.append(None)
                continue
            summary = self.db.summaries.get(sid)
            newest = sorted(self.db.turns.get(sid) or {})[-max_turns:] if max_turns > 0 else []
            messages = tuple(m for m in self.db.messages(sid) if user_seq_of(m.seq) in set(newest))
            found.append(
                RecallSource(sid, head["createdAt"], summary.text if summary else None, messages)
            )
        return found


class FakeErasureStore(_Port):
    """Receipts, and the steps of erasing a session, as ``DynamoErasureStore`` does them
    (conditional on the claim; counters move with what they count)."""

    def newest_activity(self, session_ids: list[str]) -> str | None:
        self.db.enter("newest_activity")
        heads = [self.db.heads.get(session_id) or {} for session_id in session_ids]
        return max((str(h["lastActiveAt"]) for h in heads if "lastActiveAt" in h), default=None)

    def _receipt(self, workspace_id: str, erasure_id: str) -> Erasure | None:
        return self.db.erasures.get((workspace_id, erasure_id))

    def _add(self, workspace_id: str, erasure_id: str, **counters: int) -> None:
        receipt = self._receipt(workspace_id, erasure_id)
        if receipt is not None:
            update = {name: getattr(receipt, name) + value for name, value in counters.items()}
            self.db.erasures[(workspace_id, erasure_id)] = receipt.model_copy(update=update)

    def put_erasure(self, erasure: Erasure) -> None:
        self.db.enter("put_erasure")
        key = (erasure.workspace_id, erasure.id)
        if key in self.db.erasures:
            raise StoreRejected(f"erasure id {erasure.id} already exists")
        self.db.erasures[key] = erasure

    def get_erasure(self, workspace_id: str, erasure_id: str) -> Erasure | None:
        self.db.enter("get_erasure")
        return self._receipt(workspace_id, erasure_id)

    def delete_erasure(self, workspace_id: str, erasure_id: str) -> None:
        self.db.enter("delete_erasure")
        self.db.erasures.pop((workspace_id, erasure_id), None)

    def start_erasure(self, workspace_id: str, erasure_id: str) -> Erasure | None:
        self.db.enter("start_erasure")
        before = self._receipt(workspace_id, erasure_id)
        if before is not None and before.status != "done":
            running = before.model_copy(update={"status": "running", "finished_at": None})
            self.db.erasures[(workspace_id, erasure_id)] = running
        return before

    def finish_erasure(
        self, workspace_id: str, erasure_id: str, status: ErasureStatus, finished_at: str
    ) -> bool:
        self.db.enter("finish_erasure")
        receipt = self._receipt(workspace_id, erasure_id)
        if receipt is None or receipt.status != "running":
            return False
        finished = receipt.model_copy(update={"status": status, "finished_at": finished_at})
        self.db.erasures[(workspace_id, erasure_id)] = finished
        return True

    def sessions_of(
        self, workspace_id: str, external_ref: str, created_until: str
    ) -> list[SessionOfEndUser]:
        self.db.enter("sessions_of")
        return sorted(
            (
                SessionOfEndUser(sid, head["createdAt"], head["status"] != "deleting")
                for sid, head in self.db.heads.items()
                if head["workspaceId"] == workspace_id
                and head.get("externalRef") == external_ref
                and head["createdAt"] <= created_until
                # A deleted session's head left the index; a claimed one stays in it.
                and (head["status"] != "deleting" or "erasureId" in head)
            ),
            key=lambda found: (found.created_at, found.session_id),
        )

    def claim_session(
        self, session_id: str, workspace_id: str, external_ref: str, erasure_id: str, at: str
    ) -> bool:
        self.db.enter("claim_session")
        head = self.db.heads.get(session_id)
        if head is None or head["workspaceId"] != workspace_id:
            return False
        if head.get("externalRef") != external_ref:
            return False
        if head.get("erasureId") == erasure_id:
            return True
        if "erasureId" in head or head["status"] not in ("active", "archived"):
            return False
        head.update(status="deleting", erasureId=erasure_id)
        head.setdefault("deletedAt", at)
        head.pop("principal", None)
        head.pop("metadata", None)
        return True

    def session_runs(self, session_id: str) -> list[str]:
        self.db.enter("session_runs")
        named = {s.turn.run_id for s in (self.db.turns.get(session_id) or {}).values()}
        failed = {
            run_id
            for run_id, body in self.db.runs.items()
            if json.loads(body).get("sessionId") == session_id
            and json.loads(body).get("status") == "failed"
        }
        return sorted(run_id for run_id in named | failed if run_id)

    def keep_traces(self, session_id: str, erasure_id: str, count: int) -> int:
        self.db.enter("keep_traces")
        head = self.db.heads.get(session_id)
        if head is None or head.get("erasureId") != erasure_id:
            return 0
        return int(head.setdefault("tracesKept", count))

    def erase_run(self, workspace_id: str, erasure_id: str, run_id: str) -> bool:
        self.db.enter("erase_run")
        body = self.db.runs.get(run_id)
        if body is None or json.loads(body)["workspaceId"] != workspace_id:
            return False
        del self.db.runs[run_id]
        self._add(workspace_id, erasure_id, traces_erased=1)
        return True

    def erase_contents(self, session_id: str) -> int:
        self.db.enter("erase_contents")
        return self.db.delete_contents(session_id)

    def remove_session(
        self, session_id: str, workspace_id: str, erasure_id: str, traces_kept: int
    ) -> bool:
        self.db.enter("remove_session")
        head = self.db.heads.get(session_id)
        if head is None or head.get("erasureId") != erasure_id:
            return False
        del self.db.heads[session_id]
        self._add(workspace_id, erasure_id, sessions_erased=1, traces_kept=traces_kept)
        return True

    def sweep_session(self, session_id: str, erase_traces: bool) -> tuple[int, list[str]]:
        self.db.enter("sweep_session")
        head = self.db.heads.get(session_id)
        if head is not None and head["status"] != "deleting":
            return 0, []
        runs = sorted(
            s.turn.run_id
            for s in (self.db.turns.get(session_id) or {}).values()
            if s.turn.run_id and erase_traces
        )
        return self.db.delete_contents(session_id), runs


class FakeTurnStore(_Port):
    def load_turn_state(
        self, session_id: str, max_messages: int, with_digests: bool, pending: bool = False
    ) -> TurnState | None:
        self.db.enter("load_turn_state")
        session = self.db.session(session_id)
        if session is None:
            return None
        turns = self.db.turns.get(session_id) or {}
        waiting = self.db.paused.get(session_id) or {}
        wanted = max(1, -(-max_messages // 2))
        read = sorted(turns)[-wanted:]
        messages = [
            m
            for seq in read
            for m in turn_messages(
                seq,
                turns[seq].turn.user_content,
                turns[seq].turn.answer,
                turns[seq].turn.created_at,
                turns[seq].turn.withheld,
                turns[seq].turn.truncated,
                turns[seq].turn.abandoned,
                removed=turns[seq].removed,
                attachments=turns[seq].turn.attachments,
            )
        ]
        messages = [m for m in messages if not m.removed]
        digests: dict[int, ToolDigest] = {}
        expiry: dict[int, float] = {}
        stored = self.db.digests.get(session_id) or {}
        for seq in read:
            # Whatever digests the read finds are kept, as DynamoDB's Query does.
            if seq in stored:
                digests[seq + 1] = _copy(stored[seq].digest)
                expiry[seq + 1] = stored[seq].expires_at
        return TurnState(
            session=session,
            summary=_copy(self.db.summaries.get(session_id)),
            recent=tuple(messages[-max_messages:]) if max_messages > 0 else (),
            digests=digests,
            digest_expiry=expiry,
            activity_mark=str(self.db.heads[session_id]["lastActiveAt"]),
            summary_versions=self.db.summary_versions(session_id),
            pending=_copy(max(waiting.items())[1]) if waiting else None,
            newest_turn_id=turns[read[-1]].turn.turn_id if read else "",
            newest_response_deleted=bool(read) and turns[read[-1]].response_deleted,
        )

    def append_turn(self, session_id: str, after_seq: int, turn: TurnRecord) -> AppendResult:
        self.db.enter("append_turn")
        if self.db.before_append is not None:
            hook, self.db.before_append = self.db.before_append, None
            hook(self.db)
        _json_safe([turn.user_content, turn.answer])
        turns = self.db.turns.setdefault(session_id, {})
        paused = self.db.paused.setdefault(session_id, {})
        if turn.resolves is not None:
            at = after_seq + 1
            waiting = paused.get(at)
            if waiting is not None and waiting.pause_id == turn.resolves:
                del paused[at]
                turns[at] = StoredTurn(_copy(turn))
                return AppendResult(at, at + 1)
            if at in turns and turns[at].turn.turn_id == turn.resolves:  # (v5) a placeholder
                turns[at] = StoredTurn(_copy(turn))
                return AppendResult(at, at + 1)
            if at in turns and turns[at].turn.turn_id == turn.turn_id:
                return AppendResult(at, at + 1, already_recorded=True)
            raise PauseEnded(f"the pause at {at} has ended")
        held = turns.get(after_seq + 1)
        if (
            turn.yields_to_twin
            and held is not None
            and held.turn.turn_id != turn.turn_id
            and held.turn.user_content == turn.user_content
        ):
            # (v5) A retry's twin holds the position: not written again.
            twin = Twin(held.turn.turn_id, held.turn.answer, held.turn.withheld)
            return AppendResult(after_seq + 1, after_seq + 2, already_recorded=True, twin=twin)
        position = self._free(session_id, after_seq, turn.turn_id)
        if position < 0:
            position = -position
            return AppendResult(position, position + 1, already_recorded=True)
        turns[position] = StoredTurn(_copy(turn))
        return AppendResult(position, position + 1)

    def _free(self, session_id: str, after_seq: int, item_id: str) -> int:
        """The first position after ``after_seq`` neither a turn nor a pause holds (the
        negated position of one that holds ``item_id``: an earlier attempt landed)."""
        turns = self.db.turns.setdefault(session_id, {})
        paused = self.db.paused.setdefault(session_id, {})
        position = user_seq_of(after_seq + 1)
        while position in turns or position in paused:
            held = turns[position].turn.turn_id if position in turns else None
            if held == item_id or (position in paused and paused[position].pause_id == item_id):
                return -position
            self.db.position_conflicts += 1
            position += 2
        return position

    def keep_pending(
        self, session_id: str, after_seq: int, pending: PendingTurn, replaces: str | None = None
    ) -> PendingTurn | None:
        self.db.enter("keep_pending")
        paused = self.db.paused.setdefault(session_id, {})
        if replaces is None:
            position = abs(self._free(session_id, after_seq, pending.pause_id))
            kept = pending.keep_at(position)
            paused[position] = PendingTurn.from_json(kept.to_json(), position, kept.user_input)
            return kept
        held = paused.get(pending.user_seq)
        if held is None or held.pause_id not in (replaces, pending.pause_id):
            return None
        paused[pending.user_seq] = PendingTurn.from_json(
            pending.to_json(), pending.user_seq, pending.user_input
        )
        return pending

    def put_digest(self, session_id: str, user_seq: int, turn: TurnRecord) -> None:
        self.db.enter("put_digest")
        assert turn.digest_text is not None and turn.digest_expires_at is not None
        digest = ToolDigest(
            seq=user_seq + 1, tools=sorted(set(turn.digest_tools)), text=turn.digest_text
        )
        self.db.digests.setdefault(session_id, {})[user_seq] = StoredDigest(
            digest, float(int(turn.digest_expires_at))
        )

    def find_turn(self, session_id: str, turn_id: str, from_seq: int) -> AppendResult | None:
        self.db.enter("find_turn")
        for seq, stored in sorted((self.db.turns.get(session_id) or {}).items()):
            if seq >= user_seq_of(max(1, from_seq)) and stored.turn.turn_id == turn_id:
                return AppendResult(seq, seq + 1, already_recorded=True)
        return None

    def list_messages(
        self, session_id: str, after_seq: int, limit: int
    ) -> tuple[list[Message], bool]:
        self.db.enter("list_messages")
        later = [m for m in self.db.messages(session_id) if m.seq > after_seq]
        return [m for m in later[:limit] if not m.removed], len(later) > limit

    def read_messages(self, session_id: str, first_seq: int, last_seq: int) -> list[Message]:
        self.db.enter("read_messages")
        return [m for m in self.db.messages(session_id) if first_seq <= m.seq <= last_seq]

    def remove_message(self, session_id: str, seq: int) -> bool:
        self.db.enter("remove_message")
        stored = (self.db.turns.get(session_id) or {}).get(user_seq_of(seq))
        if stored is None:
            return False
        user, answer = stored.removed
        stored.removed = (True, answer) if seq % 2 else (user, True)
        return True

    def stored_prompt(self, session_id: str, user_seq: int) -> StoredPrompt | None:
        self.db.enter("stored_prompt")
        stored = self.db.lineage_turns(session_id).get(user_seq)
        if stored is None:
            return None
        # As DynamoDB keeps it: encoded at the turn's position.
        kept = stored.turn.prompt_record
        record = PromptRecord.decode(kept.encode(user_seq), user_seq) if kept else None
        added = ResponseSettings.decode(stored.turn.response).instructions
        attached = stored.turn.attachments
        if record is None:
            return StoredPrompt(
                user_seq, stored.turn.user_content, None, (), None, {}, added, attached
            )
        messages = tuple(
            m
            for m in self.db.messages(session_id)
            if record.first_seq and record.first_seq <= m.seq <= record.last_seq
        )
        digests = {
            seq + 1: (_copy(d.digest), d.expires_at)
            for seq, d in self.db.lineage_digests(session_id).items()
            if seq + 1 in record.digest_seqs
        }
        summary = self.db.summary_version(session_id, record.summary_through)
        return StoredPrompt(
            user_seq, stored.turn.user_content, record, messages, summary, digests, added, attached
        )


class FakeResponseStore(_Port):
    """Responses as ``DynamoResponseStore`` finds them: by their turn."""

    def find_response(
        self, ref: ResponseRef, workspace_id: str | None = None
    ) -> StoredResponse | None:
        self.db.enter("find_response")
        session = self.db.session(ref.session_id)
        if session is None or workspace_id not in (None, session.workspace_id):
            return None
        waiting = (self.db.paused.get(ref.session_id) or {}).get(ref.user_seq)
        if waiting is not None and waiting.pause_id == ref.reply_id:
            return self._waiting(session, ref, waiting)
        turns = self.db.lineage_turns(ref.session_id)
        seq = next(
            (
                at
                for at, stored in sorted(turns.items())
                if at >= ref.user_seq
                and ref.reply_id in (stored.turn.turn_id, stored.turn.resolves)
            ),
            None,
        )
        if seq is None:
            return None
        stored, before = turns[seq], turns.get(seq - 2)
        turn = stored.turn
        user, answer = turn_messages(
            seq, turn.user_content, turn.answer, turn.created_at, turn.withheld, turn.truncated
        )
        record = turn.prompt_record
        before_id = before.turn.turn_id if before is not None else None
        previous = previous_response(session, seq, turn.resolves, before_id)
        return StoredResponse(
            session=session,
            ref=ref,
            user_seq=seq,
            user=user,
            answer=answer,
            settings=ResponseSettings.decode(turn.response, record is not None and record.chained),
            app_tools=record.app_tools if record else (),
            run_id=turn.run_id,
            deleted=stored.response_deleted,
            previous=previous,
            pause=turn.turn_id != ref.reply_id,
            ended_pause=turn.resolves,
        )

    @staticmethod
    def _waiting(session: Session, ref: ResponseRef, paused: PendingTurn) -> StoredResponse:
        """A pause that still waits, as its response (``DynamoResponseStore``'s)."""
        user, answer = turn_messages(
            paused.user_seq, paused.user_input, paused.text, paused.since, paused.withheld, False
        )
        return StoredResponse(
            session=session,
            ref=ref,
            user_seq=paused.user_seq,
            user=user,
            answer=answer,
            settings=ResponseSettings(chained=paused.prompt_record.chained),
            app_tools=paused.prompt_record.app_tools,
            run_id=paused.run_id if paused.traced else None,
            waiting=shown_calls(session.id, paused),
        )

    def turn_at(self, session: Session, user_seq: int) -> StoredResponse | None:
        self.db.enter("turn_at")
        paused = (self.db.paused.get(session.id) or {}).get(user_seq)
        if paused is not None:
            return self._waiting(
                session, ResponseRef(session.id, user_seq, paused.pause_id), paused
            )
        stored = (self.db.turns.get(session.id) or {}).get(user_seq)
        if stored is None:
            return None
        turn = stored.turn
        user, answer = turn_messages(
            user_seq, turn.user_content, turn.answer, turn.created_at, turn.withheld, turn.truncated
        )
        return StoredResponse(
            session=session,
            ref=ResponseRef(session.id, user_seq, turn.turn_id),
            user_seq=user_seq,
            user=user,
            answer=answer,
            settings=ResponseSettings.decode(turn.response),
            run_id=turn.run_id,
            deleted=stored.response_deleted,
            imported=turn.prompt_record is None,
        )

    def mark_deleted(self, ref: ResponseRef, user_seq: int) -> bool:
        self.db.enter("mark_response_deleted")
        stored = (self.db.turns.get(ref.session_id) or {}).get(user_seq)
        if stored is None or stored.turn.turn_id != ref.reply_id:
            return False
        stored.response_deleted = True
        return True


class FakeForkStore(_Port):
    """Forks as ``DynamoForkStore`` makes them: the newest inherited turns and the
    summary behind the fork point copied at once, the rest read through the parent until
    ``copy_inherited`` (or the parent's deletion) copies it."""

    def create_fork(self, fork: Session, copy_turns: int, keep_earlier_summary: bool) -> bool:
        self.db.enter("create_fork")
        assert fork.fork_of is not None
        parent_id, at_seq = fork.fork_of.session_id, fork.fork_of.at_seq
        parent = self.db.heads.get(parent_id)
        if (
            parent is None
            or parent["workspaceId"] != fork.workspace_id
            or parent["status"] not in RECALLABLE
        ):
            raise SessionNotFound(f"session {parent_id!r} not found")
        if fork.recall is not None and not all(
            self.db.heads.get(source, {}).get("status") in RECALLABLE
            for source in fork.recall.from_sessions
        ):
            raise RecallSourceGone(f"a session recalled by {parent_id} was deleted")
        lineage = self.db.lineage_turns(parent_id)
        turns = {seq: t for seq, t in lineage.items() if seq < at_seq}
        if at_seq and at_seq - 1 in turns and turns[at_seq - 1].removed[1]:
            raise ValidationFailed(REMOVED_FORK_POINT, param="atSeq")
        copied = sorted(turns)[-copy_turns:] if at_seq else []
        self.db.turns[fork.id] = {seq: _copy(turns[seq]) for seq in copied}
        digests = self.db.lineage_digests(parent_id)
        self.db.digests[fork.id] = {seq: _copy(digests[seq]) for seq in copied if seq in digests}
        versions = list(self.db.lineage_versions(parent_id).values())
        candidates = versions + list(self.db.summary_versions(parent_id))
        base = summary_behind(candidates, at_seq)
        older = None
        if base is not None:
            older = summary_behind(candidates, base.summary.through_seq - 1)
            self.db.summaries[fork.id] = _copy(base.summary)
            self.db.summary_made_at[fork.id] = base.made_at_window
            self.db.kept_versions[fork.id] = {base.summary.through_seq: base}
            if keep_earlier_summary and older is not None:
                self.db.earlier_summaries[fork.id] = older
        self.db.heads[fork.id] = self.db.head_of(fork)
        low = min(copied, default=1)
        if low > 1 or older:
            self.db.heads[fork.id] |= {"copyFrom": parent_id, "copyBelow": low}
            due = (at_seq, base.summary.through_seq if base is not None else 0)
            self.db.fork_markers.setdefault(parent_id, {})[fork.id] = due
            return True
        return False

    def copy_inherited(
        self, parent_id: str, fork_id: str, time_left: Callable[[], float] | None = None
    ) -> CopyOutcome:
        self.db.enter("copy_inherited")
        return self.db.copy_inherited(parent_id, fork_id)

    def copies_due(self, session_id: str, most: int) -> int:
        self.db.enter("copies_due")
        count, current = 0, session_id
        while count < most:
            due = self.db.copy_due(current)
            if due is None:
                break
            count, current = count + 1, due[0]
        return count


class FakeSummaryStore(_Port):
    def get_summary(self, session_id: str) -> Summary | None:
        self.db.enter("get_summary")
        return _copy(self.db.summaries.get(session_id))

    def advance_summary(
        self,
        session_id: str,
        previous_through: int,
        summary: Summary,
        earlier: SummaryVersion | None = None,
        *,
        window: FoldWindow | None = None,
    ) -> bool:
        self.db.enter("advance_summary")
        current = self.db.summaries.get(session_id)
        through = current.through_seq if current else 0
        if through != previous_through or (current and summary.through_seq <= through):
            return False
        if window is not None and self.db.newest_user_seq(session_id) > window.message_count:
            return False  # a turn landed after the window's history
        self.db.summaries[session_id] = _copy(summary)
        self.db.summary_made_at[session_id] = window.omitted if window else 0
        made = SummaryVersion(_copy(summary), self.db.summary_made_at[session_id])
        self.db.kept_versions.setdefault(session_id, {})[summary.through_seq] = made
        if earlier is None:
            self.db.earlier_summaries.pop(session_id, None)
        else:
            self.db.earlier_summaries[session_id] = earlier
        return True


class FakeRetentionStore(_Port):
    @property
    def activity_shards(self) -> int:
        return ACTIVITY_SHARDS

    def sessions_by_activity(
        self, status: str, shard: int, before: str, page_size: int = 100
    ) -> Iterator[tuple[str, str]]:
        self.db.enter("sessions_by_activity")
        since_field = {"active": "lastActiveAt", "archived": "archivedAt", "deleting": "deletedAt"}
        found = sorted(
            (str(head[since_field[status]]), sid)
            for sid, head in self.db.heads.items()
            if head["status"] == status
            and zlib.crc32(sid.encode()) % ACTIVITY_SHARDS == shard
            and str(head[since_field[status]]) < before
        )
        for since, sid in found:
            yield sid, since

    def last_turn_at(self, session_id: str) -> tuple[int, str] | None:
        self.db.enter("last_turn_at")
        newest = self.db.newest_user_seq(session_id)
        if newest < 0:
            return None
        return newest + 1, self.db.turns[session_id][newest].turn.created_at

    def refresh_activity(self, session_id: str, seen: str, last_active_at: str) -> bool:
        self.db.enter("refresh_activity")
        head = self.db.heads.get(session_id)
        if head is None or head["status"] != "active" or head["lastActiveAt"] != seen:
            return False
        head["lastActiveAt"] = last_active_at
        return True

    def archive_session(self, session_id: str, last_active_at: str, archived_at: str) -> bool:
        self.db.enter("archive_session")
        head = self.db.heads.get(session_id)
        if head is None or head["status"] != "active" or head["lastActiveAt"] != last_active_at:
            return False
        head["status"], head["archivedAt"] = "archived", archived_at
        return True

    def begin_purge(self, session_id: str, archived_at: str, deleted_at: str) -> bool:
        self.db.enter("begin_purge")
        head = self.db.heads.get(session_id)
        if head is None or head["status"] != "archived" or head.get("archivedAt") != archived_at:
            return False
        head["status"], head["deletedAt"] = "deleting", deleted_at
        head.pop("recall", None)
        return True

    def delete_contents(self, session_id: str) -> int:
        self.db.enter("delete_contents")
        return self.db.delete_contents(session_id)

    def paused_turns(self, shard: int, before: str) -> Iterator[tuple[str, int]]:
        self.db.enter("paused_turns")
        found = sorted(
            (pending.expires, sid, seq)
            for sid, held in self.db.paused.items()
            for seq, pending in held.items()
            if zlib.crc32(sid.encode()) % ACTIVITY_SHARDS == shard and pending.expires < before
        )
        for _, sid, seq in found:
            yield sid, seq

    def abandon_paused(self, session_id: str, user_seq: int, before: str) -> bool:
        self.db.enter("abandon_paused")
        pending = (self.db.paused.get(session_id) or {}).get(user_seq)
        if pending is None or pending.expires >= before:
            return False
        try:
            self.db.stores.turns.append_turn(session_id, user_seq - 1, abandoned_turn(pending))
        except PauseEnded:
            return False
        return True

    def remove_head(self, session_id: str) -> bool:
        self.db.enter("remove_head")
        head = self.db.heads.get(session_id)
        if head is None or head["status"] != "deleting":
            return False
        del self.db.heads[session_id]
        return True
