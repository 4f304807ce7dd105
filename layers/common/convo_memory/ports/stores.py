"""Storage: one port per store over the service's tables, and ``Stores``, every one of
them as the composition root wires them. Storage ports raise ``StoreUnavailable`` for
capacity and availability errors and ``StoreRejected`` when a request can never
succeed; nothing else escapes them."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from convo_memory.domain.erasures import Erasure, ErasureStatus, SessionOfEndUser
from convo_memory.domain.models import Capability, Message, Principal, Session, Summary
from convo_memory.domain.paused_turns import PendingTurn
from convo_memory.domain.prompt_record import StoredPrompt
from convo_memory.domain.recall import RecallSource
from convo_memory.domain.responses import ResponseRef, StoredResponse
from convo_memory.domain.summary_plan import FoldWindow, SummaryVersion
from convo_memory.domain.turn_records import AppendResult, TurnRecord, TurnState


class TokenStore(Protocol):
    """Workspaces and their API tokens (stored only as hashes)."""

    def put_workspace(self, workspace_id: str, name: str, created_at: str) -> None: ...
    def put_token(self, token_hash: str, workspace_id: str, name: str, created_at: str) -> bool: ...
    def workspace_for_token(self, token_hash: str) -> str | None: ...
    def put_token_id(
        self, token_id: str, token_hash: str, workspace_id: str, created_at: str
    ) -> None: ...
    def token_hash_for_id(self, token_id: str) -> str | None: ...
    def delete_token(self, token_hash: str, token_id: str) -> str | None:
        """Revoke a token: its workspace id, or None when no such token existed."""
        ...


class CapabilityStore(Protocol):
    def put_capability(self, workspace_id: str, capability: Capability) -> None: ...
    def get_capability(self, workspace_id: str, capability_id: str) -> Capability | None: ...
    def list_capabilities(self, workspace_id: str) -> list[Capability]: ...


class RunStore(Protocol):
    """Agent run traces: their own table, never touched by deletion or retention."""

    def put_run(self, run: dict[str, Any]) -> None: ...
    def get_run(self, workspace_id: str, run_id: str) -> dict[str, Any] | None: ...


class SessionStore(Protocol):
    """Session heads. ``get_session`` reports the exact message count and last turn time
    and treats a session being deleted as missing."""

    def create_session(self, session: Session, history: Sequence[TurnRecord] = ()) -> None:
        """Store a new session's head. One with a ``session_key`` claims that key of its
        workspace and capability in the same conditional write; when the key is already
        claimed nothing is stored and ``SessionKeyTaken`` names the claiming session
        (``None`` when a racing claim has not landed yet). With a recall, only while every
        session it was taken from still exists undeleted (checked in the same write):
        else nothing is stored and ``RecallSourceGone`` is raised. ``history``: (v4) its
        first turns (user seqs 1, 3, ...), written in the same write."""
        ...

    def bind_session(self, session: Session) -> bool:
        """(v4) Bind a conversation to ``session``'s capability, end user, principal and
        recall, if it is active, of ``session``'s workspace and bound to no capability
        yet (in one conditional write; its end user's listing includes it from then on).
        False otherwise. ``RecallSourceGone`` as ``create_session``."""
        ...

    def session_for_key(
        self, workspace_id: str, capability_id: str, session_key: str
    ) -> str | None:
        """The id of the session a key was claimed by (one strongly consistent read)."""
        ...

    def release_session_key(
        self, workspace_id: str, capability_id: str, session_key: str, session_id: str
    ) -> None:
        """Release a key that still names ``session_id`` (a session gone or going)."""
        ...

    def get_session(self, session_id: str) -> Session | None: ...
    def list_sessions(
        self, workspace_id: str, external_ref: str, limit: int, after: tuple[str, str] | None
    ) -> tuple[list[Session], bool]:
        """A page of the end user's sessions, newest first, after the position ``after``
        = (createdAt, id) of the previous page's last session; and whether there may be
        more (like DynamoDB, a full page says so even when nothing follows)."""
        ...

    def update_metadata(
        self, session_id: str, workspace_id: str, metadata: dict[str, Any]
    ) -> Session | None: ...
    def touch(self, session_id: str, last_active_at: str) -> None:
        """Move the head's coarse activity mark; only an active session moves. Raises
        ``SessionArchived`` or ``SessionNotFound`` otherwise."""
        ...

    def begin_deletion(self, session_id: str, workspace_id: str, deleted_at: str) -> bool:
        """Mark the session deleted (reads and turns answer 404 from now on); True also
        when it already was (a retried deletion resumes). False: no such session."""
        ...

    def delete_contents(self, session_id: str) -> int:
        """Delete every item of the session but its head, and release its key (when an
        app's key opened it); how many were deleted."""
        ...

    def keep_fence_nonce(self, session_id: str, nonce: str) -> str | None:
        """Store ``nonce`` as the session's fence nonce unless it has one; the nonce the
        session keeps, or None when the session is not active."""
        ...


class RecallStore(Protocol):
    """What a new session's recall reads: the end user's earlier sessions."""

    def candidates(
        self,
        workspace_id: str,
        external_ref: str,
        capability_id: str,
        principal: Principal | None,
        limit: int,
        scan: int,
    ) -> list[str]:
        """Ids of the end user's newest sessions (at most ``limit``, newest first) on
        ``capability_id`` whose principal equals ``principal`` (canonical JSON; two
        nulls are equal), looking at no more than the end user's ``scan`` newest
        sessions; sessions being deleted are left out."""
        ...

    def sources(self, session_ids: Sequence[str], max_turns: int) -> list[RecallSource | None]:
        """For each session (in order): its summary and its newest messages (at most
        ``max_turns`` turns), read consistently; None when it is missing or being
        deleted. One read per session."""
        ...


class TurnStore(Protocol):
    def load_turn_state(
        self, session_id: str, max_messages: int, with_digests: bool, pending: bool = False
    ) -> TurnState | None:
        """The head, the summary and the newest ``max_messages`` messages (with their
        digests: read for room when ``with_digests``, kept whenever read), and the
        session's paused turn if it has one (v4; ``pending``: the turn continues one, so
        room is made for it): one bounded read whatever the history's length."""
        ...

    def append_turn(self, session_id: str, after_seq: int, turn: TurnRecord) -> AppendResult:
        """Store the turn at the first free position after ``after_seq`` (a lost race
        moves on to the next one). Its digest is stored apart, with ``put_digest``. A
        turn that ends a pause (``turn.resolves``, v4) is written over it, at position
        ``after_seq + 1``, only while the pause is there (else ``PauseEnded``)."""
        ...

    def keep_pending(
        self, session_id: str, after_seq: int, pending: PendingTurn, replaces: str | None = None
    ) -> PendingTurn | None:
        """(v4) Keep a paused turn at the first free position after ``after_seq`` (it
        holds that position until it ends), or over the pause ``replaces`` at the
        position ``pending`` has: the state as kept (at its position), or None when that
        pause has ended meanwhile."""
        ...

    def put_digest(self, session_id: str, user_seq: int, turn: TurnRecord) -> None:
        """Store the tool digest of the turn at ``user_seq`` (idempotent)."""
        ...

    def find_turn(self, session_id: str, turn_id: str, from_seq: int) -> AppendResult | None:
        """Where turn ``turn_id`` was stored, looking at positions from ``from_seq`` on."""
        ...

    def list_messages(
        self, session_id: str, after_seq: int, limit: int
    ) -> tuple[list[Message], bool]:
        """Messages with seq > ``after_seq``, oldest first, and whether more exist."""
        ...

    def read_messages(self, session_id: str, first_seq: int, last_seq: int) -> list[Message]:
        """Messages ``first_seq..last_seq`` (strongly consistent)."""
        ...

    def remove_message(self, session_id: str, seq: int) -> bool:
        """(v5) Mark message ``seq`` removed, its turn kept (one conditional write); False
        when no recorded turn holds it. Removed messages are read marked ``removed``
        (the transcript's pages and the turn's read leave them out)."""
        ...

    def stored_prompt(self, session_id: str, user_seq: int) -> StoredPrompt | None:
        """What is stored of the prompt of the turn at ``user_seq``: its record and
        input, the messages, summary version and digests the record names (strongly
        consistent); None when there is no such turn."""
        ...


class SummaryStore(Protocol):
    """The rolling summary, and every version of it a fold wrote (kept apart from the
    summary, where no turn reads them: a fork starts from one, a turn's prompt record
    names one)."""

    def get_summary(self, session_id: str) -> Summary | None: ...
    def advance_summary(
        self,
        session_id: str,
        previous_through: int,
        summary: Summary,
        earlier: SummaryVersion | None = None,
        *,
        window: FoldWindow | None = None,
    ) -> bool:
        """Compare-and-set on ``throughSeq``: False when another run moved it first. The
        new summary is kept as a version too, in the same write. With ``window`` (a
        replay window that moves in steps), the new version is made in that window,
        ``earlier`` (the version that window shows, if any) is kept beside it, and the
        write happens only while no turn has landed after the window's
        ``message_count`` messages (else False too); without it, no earlier version is
        kept."""
        ...


CopyOutcome = Literal["done", "partial", "gone"]


class ForkStore(Protocol):
    """Forks (v4). A fork is created holding what a turn on it reads (the newest
    inherited turns, the summary version behind its fork point); the older inherited
    turns, and the summary versions behind them, are copied in afterwards and read from
    the parent until then. The parent keeps a marker of each copy still due, and
    finishes it before it deletes a message (a deletion, a purge, an erasure), so a
    fork never loses what it inherited and a deleted parent leaves nothing behind."""

    def create_fork(self, fork: Session, copy_turns: int, keep_earlier_summary: bool) -> bool:
        """Store the new session ``fork`` (``fork.fork_of`` names its parent and atSeq),
        holding the parent's ``copy_turns`` newest turns up to atSeq with their digests,
        and the newest summary version that ends at or before atSeq (with the version
        before it as the summary's earlier one when ``keep_earlier_summary``). True when
        older inherited turns or summary versions remain to copy (``copy_inherited``).
        The parent may itself be a fork whose copy is due (what it lacks is read
        through its own parent). Raises ``SessionNotFound`` when the parent was deleted
        meanwhile and ``RecallSourceGone`` as ``SessionStore.create_session`` does;
        nothing is left stored then."""
        ...

    def copy_inherited(
        self, parent_id: str, fork_id: str, time_left: Callable[[], float] | None = None
    ) -> CopyOutcome:
        """Copy what fork ``fork_id`` still lacks of parent ``parent_id``: ``done``
        (also when nothing was due), ``partial`` (stopped for lack of time, resumes from
        where it stopped), ``gone`` (the fork was deleted: nothing more to copy).
        A parent whose own copy is still due finishes it first."""
        ...

    def copies_due(self, session_id: str, most: int) -> int:
        """How many sessions, from ``session_id`` up its chain of parents, still have
        a copy due (``session_id`` included), counting at most ``most``."""
        ...


class RetentionStore(Protocol):
    """What the scheduled retention run reads and changes, through the byActivity index."""

    @property
    def activity_shards(self) -> int: ...
    def sessions_by_activity(
        self, status: str, shard: int, before: str, page_size: int = 100
    ) -> Iterator[tuple[str, str]]:
        """``(sessionId, since)`` of one shard's ``active`` / ``archived`` / ``deleting``
        sessions whose mark is earlier than ``before``, oldest first."""
        ...

    def last_turn_at(self, session_id: str) -> tuple[int, str] | None:
        """(message count, createdAt) of the session's newest turn, if it has one."""
        ...

    def paused_turns(self, shard: int, before: str) -> Iterator[tuple[str, int]]:
        """(v4) ``(sessionId, userSeq)`` of one shard's turns paused for the app's tools
        that stopped waiting before ``before``, oldest first."""
        ...

    def abandon_paused(self, session_id: str, user_seq: int, before: str) -> bool:
        """(v4) Record the turn paused at ``user_seq`` as abandoned if it stopped waiting
        before ``before`` (a pause ended or renewed meanwhile is left alone): whether
        this call recorded it."""
        ...

    def refresh_activity(self, session_id: str, seen: str, last_active_at: str) -> bool: ...
    def archive_session(self, session_id: str, last_active_at: str, archived_at: str) -> bool: ...
    def begin_purge(self, session_id: str, archived_at: str, deleted_at: str) -> bool: ...
    def delete_contents(self, session_id: str) -> int: ...
    def remove_head(self, session_id: str) -> bool:
        """Delete a head marked deleted (the last step of a deletion)."""
        ...


class ErasureStore(Protocol):
    """Erasing end users: the receipts (per workspace), and the steps that erase one
    session, each idempotent, so that a job cut short anywhere finishes on its next
    delivery with the same receipt. Every step that removes something is conditional on
    the session being claimed by this erasure: an erasure never touches another end
    user's session, nor one another erasure or a deletion is finishing."""

    def put_erasure(self, erasure: Erasure) -> None: ...
    def get_erasure(self, workspace_id: str, erasure_id: str) -> Erasure | None: ...
    def delete_erasure(self, workspace_id: str, erasure_id: str) -> None:
        """Remove a receipt whose job could not be queued (nothing was done yet)."""
        ...

    def start_erasure(self, workspace_id: str, erasure_id: str) -> Erasure | None:
        """Mark the erasure running (also a failed one, redriven), unless it is done:
        the receipt as it was before, or None when there is none."""
        ...

    def finish_erasure(
        self, workspace_id: str, erasure_id: str, status: ErasureStatus, finished_at: str
    ) -> bool:
        """Mark a running erasure ``done`` or ``failed`` (its receipt then expires);
        False when it was not running (a concurrent delivery finished it first)."""
        ...

    def sessions_of(
        self, workspace_id: str, external_ref: str, created_until: str
    ) -> list[SessionOfEndUser]:
        """Every session of the end user created at or before ``created_until`` that the
        byExternalRef index shows, live or claimed by an erasure (eventually consistent:
        a session created a moment ago may be missing, one removed a moment ago may still
        show), oldest first."""
        ...

    def claim_session(
        self, session_id: str, workspace_id: str, external_ref: str, erasure_id: str, at: str
    ) -> bool:
        """Mark a live session of this end user erased by ``erasure_id`` (404 everywhere
        from now on, its principal and metadata gone); True also when it already is.
        False: gone, another end user's, or being deleted or erased by someone else."""
        ...

    def newest_activity(self, session_ids: list[str]) -> str | None:
        """The newest activity mark (``lastActiveAt``) among these sessions' heads, claimed
        or not; None when none of them has a head any more."""
        ...

    def session_runs(self, session_id: str) -> list[str]:
        """The run ids of the session's agent turns: those its turns name, and those of
        turns that failed (and so are in no transcript)."""
        ...

    def keep_traces(self, session_id: str, erasure_id: str, count: int) -> int:
        """Note on the claimed head how many run traces it keeps, once: the count noted
        first (a redelivery may see fewer turns than the first attempt did)."""
        ...

    def erase_run(self, workspace_id: str, erasure_id: str, run_id: str) -> bool:
        """Delete a run trace and count it on the receipt, together; False when it was
        already gone (nothing counted)."""
        ...

    def erase_contents(self, session_id: str) -> int:
        """Delete every item of the session but its head, the items it owns elsewhere,
        and the idempotency records of its turns; how many items."""
        ...

    def remove_session(
        self, session_id: str, workspace_id: str, erasure_id: str, traces_kept: int
    ) -> bool:
        """Delete the claimed head and count the session (and the traces it keeps) on
        the receipt, together; False when it was already gone (nothing counted)."""
        ...

    def sweep_session(self, session_id: str, erase_traces: bool) -> tuple[int, list[str]]:
        """Delete what writes in flight left in the partition of a deleted or erased
        session (never a head, never a live session's items), with the idempotency
        records its turns name: (items deleted, run ids its turns named)."""
        ...


class ResponseStore(Protocol):
    """(v4) Stored responses: each is its turn (no item of its own)."""

    def find_response(
        self, ref: ResponseRef, workspace_id: str | None = None
    ) -> StoredResponse | None:
        """The response ``ref`` names, with its session's head, its turn and the turn
        before it, in one read (a turn a racing one pushed further on is looked for
        there); None when there is none (a missing or deleted session or turn) and, given
        ``workspace_id``, when the session is another workspace's, known from that one
        read: nothing more is read for it."""
        ...

    def mark_deleted(self, ref: ResponseRef, user_seq: int) -> bool:
        """Mark the response of the turn at ``user_seq`` deleted (the turn stays); False
        when that turn is not the response's."""
        ...

    def turn_at(self, session: Session, user_seq: int) -> StoredResponse | None:
        """(v5) The response of the turn at ``user_seq`` of ``session`` (whose head the
        caller read), in one read: a recorded turn's, or a pause's that still waits;
        None when no turn is there."""
        ...


@dataclass
class Stores:
    """Every storage port, as the composition root wires them into the services."""

    tokens: TokenStore
    capabilities: CapabilityStore
    sessions: SessionStore
    turns: TurnStore
    summaries: SummaryStore
    retention: RetentionStore
    runs: RunStore
    recall: RecallStore
    erasures: ErasureStore
    forks: ForkStore
    responses: ResponseStore
