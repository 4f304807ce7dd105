"""Turns on DynamoDB: the serving path's one read and one write, transcript pages, and
the look-ups repair and the summarizer need. See ``items`` for the layout.

A turn is one item at its position (the user seq), written with a conditional put and
no transaction: the position is free or the put fails and the writer moves on to the
next one, so racing turns never share seqs and an answer always directly follows its own
user message. Which turn holds a position is in the item (``turnId``), so a writer can
tell its own earlier write from another turn's.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from convo_memory.adapters.dynamo import items, summary_items
from convo_memory.adapters.dynamo.fork_reads import stored_prompt, turn_items
from convo_memory.adapters.dynamo.sessions import newest_turn
from convo_memory.adapters.dynamo.table import DynamoTable, Item, string_value
from convo_memory.domain.errors import PauseEnded, StoreUnavailable
from convo_memory.domain.models import Message, Summary, ToolDigest
from convo_memory.domain.paused_turns import PendingTurn
from convo_memory.domain.prompt_record import StoredPrompt
from convo_memory.domain.summary_plan import SummaryVersion
from convo_memory.domain.turn_records import (
    AppendResult,
    TurnRecord,
    TurnState,
    Twin,
    user_seq_of,
)

MAX_POSITION_ATTEMPTS = 64
# After this many taken positions in a row, read where the transcript ends and jump.
JUMP_AFTER_CONFLICTS = 4


class DynamoTurnStore:
    def __init__(self, table: DynamoTable) -> None:
        self._table = table

    # -- the serving path's read ----------------------------------------------------
    def load_turn_state(
        self, session_id: str, max_messages: int, with_digests: bool, pending: bool = False
    ) -> TurnState | None:
        """One descending Query (a second page only past DynamoDB's 1 MB cap): the
        summary, the head, then the newest turns, with the digests among them and a
        paused turn (v4). Never reads older history. ``pending``: the turn continues a
        paused one, so the Query makes room for its item."""
        # At least one turn is read: the newest one gives the exact message count.
        turns_wanted = max(1, math.ceil(max_messages / 2))
        head: Item | None = None
        summaries: tuple[Summary | None, tuple[SummaryVersion, ...]] = (None, ())
        turns: list[Item] = []
        others: list[Item] = []  # digests and a paused turn
        start: dict[str, Any] | None = None
        extra = 3 if pending else 2  # the summary, the head (and the paused turn)
        # Items per turn wanted: a digest may come with each (agents; and, once a page
        # shows one, any session whose turns used the app's tools): at most two pages.
        per_turn = 2 if with_digests else 1
        while len(turns) < turns_wanted:
            limit = extra + (turns_wanted - len(turns)) * per_turn
            args: dict[str, Any] = {
                "KeyConditionExpression": "pk = :pk AND sk > :lo",
                "ExpressionAttributeValues": {
                    ":pk": items.session_pk(session_id),
                    ":lo": string_value(items.MSG_PREFIX),
                },
                "ScanIndexForward": False,
                "ConsistentRead": True,
                "Limit": limit,
            }
            if start:
                args["ExclusiveStartKey"] = start
            out = self._table.query(**args)
            for item in out.get("Items", []):
                sk = item["sk"]["S"]
                if sk == items.SESSION_SK:
                    head = item
                elif sk == items.SUMMARY_SK:
                    summaries = (
                        summary_items.summary_from(item),
                        summary_items.summary_versions_from(item),
                    )
                elif not items.is_turn(item):
                    others.append(item)
                    per_turn = 2 if items.is_digest(item) else per_turn
                elif len(turns) < turns_wanted:
                    turns.append(item)
            start = out.get("LastEvaluatedKey")
            if not start:
                break
        if head is None or items.head_status(head) == "deleting":
            return None
        turns.reverse()
        return _state_of(head, summaries, turns, others, max_messages)

    # -- the serving path's write ---------------------------------------------------
    def append_turn(self, session_id: str, after_seq: int, turn: TurnRecord) -> AppendResult:
        if turn.resolves is not None:
            return self._resolve(session_id, after_seq + 1, turn)
        if turn.yields_to_twin:
            twin = self._put_unless_twin(session_id, after_seq + 1, turn)
            if twin is not None:
                return twin
            after_seq += 2  # the position held another turn: on from there
        position, again = self._claim(
            session_id, after_seq, turn.turn_id, lambda at: items.turn_item(session_id, at, turn)
        )
        return AppendResult(position, position + 1, already_recorded=again)

    def _put_unless_twin(
        self, session_id: str, position: int, turn: TurnRecord
    ) -> AppendResult | None:
        """(v5) One conditional put at ``position``: where it lands, or where its twin (a
        recorded turn with the same input, or this turn's own earlier write) already
        is; None when another turn holds it."""
        stored, occupant = self._table.conditional(
            "put_item",
            Item=items.turn_item(session_id, position, turn),
            ConditionExpression="attribute_not_exists(sk)",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
        if stored:
            return AppendResult(position, position + 1)
        if occupant is None:
            occupant = self._table.get(items.turn_key(session_id, position))
        if occupant is None or items.is_pending(occupant):
            return None
        if items.turn_id_of(occupant) == turn.turn_id:
            return items.recorded_at(occupant)
        if occupant.get("u", {}).get("S") != turn.user_content:
            return None
        _, answer = items.messages_from(occupant)
        twin = Twin(items.turn_id_of(occupant), answer.content, answer.withheld)
        return AppendResult(position, position + 1, already_recorded=True, twin=twin)

    def keep_pending(
        self, session_id: str, after_seq: int, pending: PendingTurn, replaces: str | None = None
    ) -> PendingTurn | None:
        """Keep a paused turn: at the next free position (one conditional put, moving on
        past racing turns), or over the pause ``replaces`` at its own position (a turn
        that paused again). None when that pause has been ended meanwhile."""
        if replaces is None:
            position, _ = self._claim(
                session_id,
                after_seq,
                pending.pause_id,
                lambda at: items.pending_item(session_id, at, pending),
            )
            return pending.keep_at(position)
        # Its own id there too: an earlier attempt of this write that landed.
        stored, _ = self._table.conditional(
            "put_item",
            Item=items.pending_item(session_id, pending.user_seq, pending),
            ConditionExpression="#id IN (:pause, :self)",
            ExpressionAttributeNames={"#id": "id"},
            ExpressionAttributeValues={
                ":pause": string_value(replaces),
                ":self": string_value(pending.pause_id),
            },
        )
        return pending if stored else None

    def _resolve(self, session_id: str, position: int, turn: TurnRecord) -> AppendResult:
        """Write the turn that ends the pause ``turn.resolves`` over it, at its position:
        one put conditional on the pause still being there. Finding the turn itself
        there (an earlier attempt that landed) is success too; anything else raises
        ``PauseEnded``."""
        stored, occupant = self._table.conditional(
            "put_item",
            Item=items.turn_item(session_id, position, turn),
            ConditionExpression="#id = :pause",
            ExpressionAttributeNames={"#id": "id"},
            ExpressionAttributeValues={":pause": string_value(str(turn.resolves))},
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
        if stored:
            return AppendResult(position, position + 1)
        if occupant is not None and items.turn_id_of(occupant) == turn.turn_id:
            return items.recorded_at(occupant)
        raise PauseEnded(f"the pause at {position} of session {session_id} has ended")

    def _claim(
        self, session_id: str, after_seq: int, item_id: str, item_at: Callable[[int], Item]
    ) -> tuple[int, bool]:
        """Put ``item_at(position)`` at the first free position after ``after_seq`` (a
        racing turn that took one moves this one on; the item found there with the same
        id is an earlier attempt of this one): the position, and whether it was that
        earlier attempt's."""
        position = user_seq_of(after_seq + 1)
        for conflicts in range(1, MAX_POSITION_ATTEMPTS + 1):
            stored, occupant = self._table.conditional(
                "put_item",
                Item=item_at(position),
                ConditionExpression="attribute_not_exists(sk)",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
            if stored:
                return position, False
            if occupant is None:
                occupant = self._table.get(items.turn_key(session_id, position))
            if occupant is not None and items.turn_id_of(occupant) == item_id:
                return items.user_seq_of_item(occupant), True  # our own earlier write landed
            position += 2
            if conflicts % JUMP_AFTER_CONFLICTS == 0:
                newest = self._newest_user_seq(session_id)
                position = max(position, newest + 2)
            time.sleep(0.001 * min(conflicts, 20))
        raise StoreUnavailable("too many concurrent turns on this session")

    def put_digest(self, session_id: str, user_seq: int, turn: TurnRecord) -> None:
        """Store the tool digest of the turn at ``user_seq`` (idempotent)."""
        self._table.call("put_item", Item=items.digest_item(session_id, user_seq, turn))

    def _newest_user_seq(self, session_id: str) -> int:
        newest = newest_turn(self._table, session_id, consistent=True)
        return items.user_seq_of_item(newest) if newest is not None else -1

    def find_turn(self, session_id: str, turn_id: str, from_seq: int) -> AppendResult | None:
        for item in self._table.query_all(
            KeyConditionExpression="pk = :pk AND sk BETWEEN :lo AND :hi",
            ExpressionAttributeValues={
                ":pk": items.session_pk(session_id),
                ":lo": string_value(items.turn_sk(user_seq_of(max(1, from_seq)))),
                ":hi": string_value(items.MSG_UPPER),
            },
            ProjectionExpression="sk, id",
            ConsistentRead=True,
        ):
            if not items.is_digest(item) and items.turn_id_of(item) == turn_id:
                return items.recorded_at(item)
        return None

    # -- transcript reads -------------------------------------------------------------
    def list_messages(
        self, session_id: str, after_seq: int, limit: int
    ) -> tuple[list[Message], bool]:
        messages: list[Message] = []
        start: dict[str, Any] | None = None
        while len(messages) <= limit:
            args: dict[str, Any] = {
                "KeyConditionExpression": "pk = :pk AND sk BETWEEN :lo AND :hi",
                "ExpressionAttributeValues": {
                    ":pk": items.session_pk(session_id),
                    ":lo": string_value(items.turn_sk(user_seq_of(after_seq + 1))),
                    ":hi": string_value(items.MSG_UPPER),
                },
                # Enough turns for limit + 1 messages (to know whether more exist).
                "Limit": (limit - len(messages)) // 2 + 2,
            }
            if start:
                args["ExclusiveStartKey"] = start
            out = self._table.query(**args)
            for item in out.get("Items", []):
                if items.is_turn(item):
                    messages.extend(m for m in items.messages_from(item) if m.seq > after_seq)
            start = out.get("LastEvaluatedKey")
            if not start:
                break
        if messages and messages[0].seq > after_seq + 1:
            # A fork whose older inherited messages are still being copied in.
            inherited = turn_items(
                self._table,
                session_id,
                user_seq_of(after_seq + 1),
                min(user_seq_of(messages[0].seq) - 2, user_seq_of(after_seq + limit + 1)),
                consistent=False,
            )
            older = [
                m
                for item in inherited
                if items.is_turn(item)
                for m in items.messages_from(item)
                if after_seq < m.seq < messages[0].seq
            ]
            messages = older + messages
        more = len(messages) > limit
        return [m for m in messages[:limit] if not m.removed], more

    def read_messages(self, session_id: str, first_seq: int, last_seq: int) -> list[Message]:
        # Consistent: the fold's target came from a consistent read, so must its messages.
        found = turn_items(
            self._table, session_id, user_seq_of(max(1, first_seq)), user_seq_of(max(1, last_seq))
        )
        messages = [m for item in found if items.is_turn(item) for m in items.messages_from(item)]
        return [m for m in messages if first_seq <= m.seq <= last_seq]

    def stored_prompt(self, session_id: str, user_seq: int) -> StoredPrompt | None:
        return stored_prompt(self._table, session_id, user_seq)

    def remove_message(self, session_id: str, seq: int) -> bool:
        """(v5) Mark message ``seq`` removed (one conditional write on its turn): False
        when no recorded turn holds it (a pause still waiting holds none)."""
        name = items.REMOVED_USER if seq % 2 else items.REMOVED_ANSWER
        removed, _ = self._table.conditional(
            "update_item",
            Key=items.turn_key(session_id, user_seq_of(seq)),
            UpdateExpression="SET #r = :yes",
            ConditionExpression="attribute_exists(sk) AND attribute_not_exists(#p)",
            ExpressionAttributeNames={"#r": name, "#p": items.PENDING_STATE},
            ExpressionAttributeValues={":yes": {"BOOL": True}},
        )
        return removed


def _state_of(
    head: Item,
    summaries: tuple[Summary | None, tuple[SummaryVersion, ...]],
    turns: list[Item],
    others: list[Item],
    max_messages: int,
) -> TurnState:
    """The session's state from its head, its summary (and the versions a turn may
    show), its newest turns (oldest first), and the digests (only those of these turns
    count) and paused turn read with them."""
    # (v5) A removed message is not replayed (the prompt joins what then follows itself).
    messages = [m for item in turns for m in items.messages_from(item) if not m.removed]
    digests: dict[int, ToolDigest] = {}
    expiry: dict[int, float] = {}
    read_seqs = {items.user_seq_of_item(t) for t in turns}
    pending = None
    for item in others:
        if items.is_pending(item):
            # Read newest first: of two pauses of racing turns, the newest is the one shown.
            pending = pending or items.pending_from(item)
        elif items.user_seq_of_item(item) in read_seqs:
            digest, expires = items.digest_from(item)
            digests[digest.seq], expiry[digest.seq] = digest, expires
    summary, versions = summaries
    newest = turns[-1] if turns else None
    return TurnState(
        session=items.session_from(head, newest),
        summary=summary,
        recent=tuple(messages[-max_messages:]) if max_messages > 0 else (),
        digests=digests,
        digest_expiry=expiry,
        activity_mark=head["lastActiveAt"]["S"],
        summary_versions=versions,
        pending=pending,
        newest_turn_id=items.turn_id_of(newest) if newest is not None else "",
        newest_response_deleted=newest is not None and items.response_deleted(newest),
    )
