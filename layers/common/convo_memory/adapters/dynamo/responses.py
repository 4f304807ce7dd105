"""Stored responses on DynamoDB (v4): a response is its turn, found by the position and
reply id its id names (``domain.responses.ResponseRef``). No item is written for a
response: reading one is one ``BatchGetItem`` of the session's head, the turn at that
position and the turn before it (its previous response); deleting one marks its turn
(``qx``), which stays in its conversation. A paused turn's item is no response yet; once
the pause ends, its id names the turn that ended it (``ep``) as that turn's pause.

A turn a racing turn pushed past its position is found by its id further on (a Query
from that position); a fork's first turn's previous response is its parent's, at the
fork point.
"""

from __future__ import annotations

from convo_memory.adapters.dynamo import items
from convo_memory.adapters.dynamo.fork_reads import turn_items
from convo_memory.adapters.dynamo.table import DynamoTable, Item, string_value
from convo_memory.domain.app_call_ids import shown_calls
from convo_memory.domain.models import Session
from convo_memory.domain.prompt_record import PromptRecord
from convo_memory.domain.responses import (
    ResponseRef,
    ResponseSettings,
    StoredResponse,
    previous_response,
)
from convo_memory.domain.turn_records import turn_messages


class DynamoResponseStore:
    def __init__(self, table: DynamoTable) -> None:
        self._table = table

    def find_response(
        self, ref: ResponseRef, workspace_id: str | None = None
    ) -> StoredResponse | None:
        """The response ``ref`` names (None: no such session or turn, the session is
        being deleted, or it is not ``workspace_id``'s, which the first read says: no
        other read follows; a deleted response is returned marked ``deleted``)."""
        sid, seq = ref.session_id, ref.user_seq
        keys = [items.head_key(sid), items.turn_key(sid, seq)]
        if seq > 2:
            keys.append(items.turn_key(sid, seq - 2))
        found = {item["sk"]["S"]: item for item in self._table.batch_get(keys)}
        head = found.get(items.SESSION_SK)
        if head is None or items.head_status(head) == "deleting":
            return None
        if workspace_id is not None and head.get("workspaceId", {}).get("S") != workspace_id:
            return None  # another workspace's: indistinguishable from a missing one
        turn = found.get(items.turn_sk(seq))
        if turn is None or ref.reply_id not in _ids(turn):
            turn = self._pushed_on(sid, seq, ref.reply_id)  # a racing turn took its place
            if turn is None:
                return None
            seq = items.user_seq_of_item(turn)
        if items.is_pending(turn):
            # (v5) A pause still waiting is retrievable: its calls, nothing recorded yet.
            waiting = items.turn_id_of(turn) == ref.reply_id
            return _waiting(items.session_from(head), ref, turn) if waiting else None
        before = found.get(items.turn_sk(seq - 2)) if seq > 2 else None
        if seq > 2 and before is None:
            before = self._turn(sid, seq - 2)  # moved on, or inherited (a fork's first turn)
        return _stored(items.session_from(head), ref, turn, before)

    def turn_at(self, session: Session, user_seq: int) -> StoredResponse | None:
        """The response of the turn at ``user_seq`` (a pause that waits: its calls)."""
        turn = self._table.get(items.turn_key(session.id, user_seq))
        if turn is None:
            return None
        ref = ResponseRef(session.id, user_seq, items.turn_id_of(turn))
        if items.is_pending(turn):
            return _waiting(session, ref, turn)
        return _stored(session, ref, turn, None)

    def mark_deleted(self, ref: ResponseRef, user_seq: int) -> bool:
        """Mark the response of the turn at ``user_seq`` deleted (False: that turn is not
        the response's any more)."""
        marked, _ = self._table.conditional(
            "update_item",
            Key=items.turn_key(ref.session_id, user_seq),
            UpdateExpression="SET #d = :yes",
            ConditionExpression="#id = :id",
            ExpressionAttributeNames={"#d": items.RESPONSE_DELETED, "#id": "id"},
            ExpressionAttributeValues={":yes": {"BOOL": True}, ":id": string_value(ref.reply_id)},
        )
        return marked

    def _pushed_on(self, session_id: str, user_seq: int, reply_id: str) -> Item | None:
        for item in self._table.query_all(
            KeyConditionExpression="pk = :pk AND sk BETWEEN :lo AND :hi",
            FilterExpression="#id = :id OR #ep = :id",
            ExpressionAttributeNames={"#id": "id", "#ep": items.ENDED_PAUSE},
            ExpressionAttributeValues={
                ":pk": items.session_pk(session_id),
                ":lo": string_value(items.turn_sk(user_seq)),
                ":hi": string_value(items.MSG_UPPER),
                ":id": string_value(reply_id),
            },
        ):
            if not items.is_digest(item):
                return item
        return None

    def _turn(self, session_id: str, user_seq: int) -> Item | None:
        found = turn_items(self._table, session_id, user_seq, user_seq, consistent=False)
        return next((item for item in found if not items.is_digest(item)), None)


def _stored(session: Session, ref: ResponseRef, turn: Item, before: Item | None) -> StoredResponse:
    seq = items.user_seq_of_item(turn)
    user, answer = items.messages_from(turn)
    record_text = turn.get(items.PROMPT_RECORD, {}).get("S")
    record = PromptRecord.decode(record_text, seq) if record_text is not None else None
    ended_pause = turn.get(items.ENDED_PAUSE, {}).get("S")
    before_id = items.turn_id_of(before) if before is not None else None
    previous = previous_response(session, seq, ended_pause, before_id)
    settings = turn.get(items.RESPONSE_SETTINGS, {}).get("S")
    return StoredResponse(
        session=session,
        ref=ref,
        user_seq=seq,
        user=user,
        answer=answer,
        settings=ResponseSettings.decode(settings, record is not None and record.chained),
        app_tools=record.app_tools if record is not None else (),
        run_id=turn.get("r", {}).get("S"),
        deleted=items.response_deleted(turn),
        previous=previous,
        pause=items.turn_id_of(turn) != ref.reply_id,
        ended_pause=ended_pause,
        imported=record is None,
    )


def _waiting(session: Session, ref: ResponseRef, turn: Item) -> StoredResponse:
    """A pause that still waits for the app's tools, as its response: the calls it waits
    for (with the ids the app was shown) after the text that came with them."""
    pending = items.pending_from(turn)
    user_seq = pending.user_seq
    user, answer = turn_messages(
        user_seq, pending.user_input, pending.text, pending.since, pending.withheld, False, False
    )
    return StoredResponse(
        session=session,
        ref=ref,
        user_seq=user_seq,
        user=user,
        answer=answer,
        settings=ResponseSettings(chained=pending.prompt_record.chained),
        app_tools=pending.prompt_record.app_tools,
        run_id=pending.run_id if pending.traced else None,
        waiting=shown_calls(session.id, pending),
    )


def _ids(turn: Item) -> tuple[str, ...]:
    """The ids a response id may name a turn by: its own, and the pause it ended."""
    return (items.turn_id_of(turn), turn.get(items.ENDED_PAUSE, {}).get("S", ""))
