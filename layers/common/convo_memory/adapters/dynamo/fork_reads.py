"""Reading what a fork inherited: a fork's turns below its copy mark are still in its
parent's partition until its ``ForkCopyJob`` has copied them in (``forks``), so every
read of a session's older turns, of a turn's stored prompt or of a summary version
looks there too; a read that races the copy's end reads the fork again.

A fork may be made of a fork whose own copy is still due (its copy is queued after its
parent's), so a parent may itself read its older turns through its own parent: reads
follow that chain, one level per fork still copying, at most ``MAX_CHAIN`` levels (the
creation of a fork refuses a deeper one, ``forks.MAX_COPIES_DUE``). A fork being deleted
keeps its parent and copy mark until its own marker is gone, so that its forks can still
read through it while their copies are finished.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from convo_memory.adapters.dynamo import items, summary_items
from convo_memory.adapters.dynamo.table import DynamoTable, Item, string_value
from convo_memory.domain.models import Summary
from convo_memory.domain.prompt_record import PromptRecord, StoredPrompt
from convo_memory.domain.responses import ResponseSettings
from convo_memory.domain.turn_records import user_seq_of

_STATUS = {"#st": "status"}
# The most forks still copying a read goes through (one head read and one Query each).
MAX_CHAIN = 6


@dataclass(frozen=True)
class CopyDue:
    """A fork whose older inherited turns (those below ``below``) are still in ``parent``."""

    parent: str
    below: int
    deleting: bool


def copy_state(table: DynamoTable, session_id: str) -> CopyDue | None:
    """Where a fork whose copy is due still reads its older inherited turns (a live
    fork's or a deleting one's: see the module's text); None when no copy is due."""
    head = fork_head(table, session_id)
    if head is None or items.COPY_FROM not in head:
        return None
    deleting = items.head_status(head) == "deleting"
    return CopyDue(head[items.COPY_FROM]["S"], copy_mark(head), deleting)


def turn_items(
    table: DynamoTable,
    session_id: str,
    low: int,
    high: int,
    *,
    consistent: bool = True,
    depth: int = 0,
) -> list[Item]:
    """Turn and digest items of user seqs ``low..high`` in sk order: from the session's
    partition and, for a fork still copying, those below its copy mark from its parent
    (and so on up a chain of forks still copying). A session's own turns are
    contiguous, so only a leading gap can be inherited."""
    own = turn_range(table, session_id, low, high, consistent=consistent)
    first = first_turn_seq(own)
    if first == low:
        return own
    state = copy_state(table, session_id) if depth < MAX_CHAIN else None
    if state is None:
        # No copy due (any more): what is missing is not stored, or the copy finished
        # between the two reads and it landed just now (read again, consistently).
        return turn_range(table, session_id, low, high)
    upper = min(high, state.below - 2, high if first is None else first - 2)
    inherited: list[Item] = []
    if upper >= low:
        inherited = turn_items(
            table, state.parent, low, upper, consistent=consistent, depth=depth + 1
        )
    seqs = [items.user_seq_of_item(i) for i in inherited if not items.is_digest(i)]
    if seqs != list(range(low, upper + 1, 2)):
        return turn_range(table, session_id, low, high)  # the copy finished meanwhile
    return inherited + [i for i in own if items.user_seq_of_item(i) > upper]


def stored_prompt(table: DynamoTable, session_id: str, user_seq: int) -> StoredPrompt | None:
    """What is stored of the prompt of the turn at ``user_seq`` (``TurnStore.stored_prompt``)."""
    turn = next(
        (i for i in turn_items(table, session_id, user_seq, user_seq) if items.is_turn(i)),
        None,
    )
    if turn is None:
        return None
    text = turn.get(items.PROMPT_RECORD, {}).get("S")
    record = PromptRecord.decode(text, user_seq) if text is not None else None
    user_input = turn["u"]["S"]
    added = ResponseSettings.decode(turn.get(items.RESPONSE_SETTINGS, {}).get("S")).instructions
    attached = tuple(items.messages_from(turn)[0].attachments)  # (v5) the input's
    if record is None or not (record.first_seq or record.summary_through):
        return StoredPrompt(
            user_seq, user_input, record, (), None, added_instructions=added, attachments=attached
        )
    window: list[Item] = []
    if record.first_seq:
        window = turn_items(
            table, session_id, user_seq_of(record.first_seq), user_seq_of(record.last_seq)
        )
    messages = tuple(
        m
        for item in window
        if items.is_turn(item)
        for m in items.messages_from(item)
        if record.first_seq <= m.seq <= record.last_seq
    )
    digests = {}
    for item in window:
        if items.is_digest(item):
            digest, expires = items.digest_from(item)
            if digest.seq in record.digest_seqs:
                digests[digest.seq] = (digest, expires)
    summary = summary_version(table, session_id, record.summary_through)
    return StoredPrompt(user_seq, user_input, record, messages, summary, digests, added, attached)


def summary_version(
    table: DynamoTable, session_id: str, through_seq: int, depth: int = 0
) -> Summary | None:
    """The summary version that ends at ``through_seq`` (0: none), wherever it is kept:
    its version item, the summary item (a version from before versions were kept), or,
    for a fork still copying, up its chain of parents."""
    if through_seq <= 0:
        return None
    item = table.get(summary_items.summary_version_key(session_id, through_seq))
    if item is not None:
        return summary_items.summary_from(item)
    current = table.get(items.summary_key(session_id))
    if current is not None:
        for version in summary_items.summary_versions_from(current):
            if version.summary.through_seq == through_seq:
                return version.summary
    state = copy_state(table, session_id) if depth < MAX_CHAIN else None
    if state is None:
        return None
    found = summary_version(table, state.parent, through_seq, depth + 1)
    if found is not None:
        return found
    item = table.get(summary_items.summary_version_key(session_id, through_seq))
    return summary_items.summary_from(item) if item is not None else None  # copied meanwhile


def summary_versions_through(
    table: DynamoTable,
    session_id: str,
    through_seq: int,
    *,
    newest: int | None = None,
    depth: int = 0,
) -> list[Item]:
    """The session's summary version items that end at or before ``through_seq``: all,
    oldest first, or the ``newest`` few, newest first. A fork still copying adds those
    it still reads through its parent: the parent's up to the newest one its marker says
    the fork inherited (``versionsThrough``), and so on up the chain."""
    own = _versions_in(table, session_id, through_seq, newest)
    state = copy_state(table, session_id) if depth < MAX_CHAIN else None
    if state is None:
        return own
    marker = table.get(items.fork_marker_key(state.parent, session_id))
    if marker is None:  # the copy ended meanwhile: they are in the fork's partition now
        return _versions_in(table, session_id, through_seq, newest)
    bound = min(through_seq, int(marker.get("versionsThrough", {}).get("N", "0")))
    held = {item["sk"]["S"] for item in own}
    inherited = [
        item
        for item in summary_versions_through(
            table, state.parent, bound, newest=newest, depth=depth + 1
        )
        if item["sk"]["S"] not in held
    ]
    merged = sorted(own + inherited, key=lambda item: item["sk"]["S"], reverse=newest is not None)
    return merged if newest is None else merged[:newest]


def _versions_in(
    table: DynamoTable, session_id: str, through_seq: int, newest: int | None
) -> list[Item]:
    """The version items of one partition (one request when ``newest`` is given)."""
    if through_seq <= 0:
        return []
    args: dict[str, Any] = {
        "KeyConditionExpression": "pk = :pk AND sk BETWEEN :lo AND :hi",
        "ExpressionAttributeValues": {
            ":pk": items.session_pk(session_id),
            ":lo": string_value(summary_items.summary_version_sk(1)),
            ":hi": string_value(summary_items.summary_version_sk(through_seq)),
        },
        "ConsistentRead": True,
    }
    if newest is None:
        return list(table.query_all(**args))
    found: list[Item] = table.query(**args, ScanIndexForward=False, Limit=newest).get("Items", [])
    return found


def fork_head(table: DynamoTable, session_id: str) -> Item | None:
    return table.get(
        items.head_key(session_id),
        ProjectionExpression="#pk, #st, #from, #below",
        ExpressionAttributeNames={
            "#pk": "pk",
            **_STATUS,
            "#from": items.COPY_FROM,
            "#below": items.COPY_BELOW,
        },
    )


def copy_mark(head: Item) -> int:
    """The user seq below which a fork's inherited turns may still be in its parent."""
    return int(head[items.COPY_BELOW]["N"]) if items.COPY_BELOW in head else 1


def copy_from(head: Item | None) -> str | None:
    if head is None or items.COPY_FROM not in head:
        return None
    return str(head[items.COPY_FROM]["S"])


def turn_range(
    table: DynamoTable, session_id: str, low: int, high: int, *, consistent: bool = True
) -> list[Item]:
    """Turn and digest items of user seqs ``low..high`` of one partition, in sk order."""
    if high < low:
        return []
    return list(
        table.query_all(
            KeyConditionExpression="pk = :pk AND sk BETWEEN :lo AND :hi",
            ExpressionAttributeValues={
                ":pk": items.session_pk(session_id),
                ":lo": string_value(items.turn_sk(max(1, low))),
                ":hi": string_value(items.turn_sk(high) + items.DIGEST_SUFFIX),
            },
            ConsistentRead=consistent,
        )
    )


def first_turn_seq(found: list[Item]) -> int | None:
    return next((items.user_seq_of_item(i) for i in found if not items.is_digest(i)), None)
