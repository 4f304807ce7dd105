"""Reading what a fork inherited: a fork's turns below its copy mark are still in its
parent's partition until its ``ForkCopyJob`` has copied them in (``forks``), so every
read of a session's older turns, of a turn's stored prompt or of a summary version
looks there too; a read that races the copy's end reads the fork again."""

from __future__ import annotations

from convo_memory.adapters.dynamo import items, summary_items
from convo_memory.adapters.dynamo.table import DynamoTable, Item, string_value
from convo_memory.domain.models import Summary
from convo_memory.domain.prompt_record import PromptRecord, StoredPrompt
from convo_memory.domain.responses import ResponseSettings
from convo_memory.domain.turn_records import user_seq_of

_STATUS = {"#st": "status"}


def copy_state(table: DynamoTable, session_id: str) -> tuple[str, int] | None:
    """(parent, copy mark) of a live fork whose older inherited messages are still being
    copied in (those below the mark); None for any other session."""
    head = fork_head(table, session_id)
    if head is None or items.head_status(head) == "deleting" or items.COPY_FROM not in head:
        return None
    return head[items.COPY_FROM]["S"], copy_mark(head)


def turn_items(
    table: DynamoTable, session_id: str, low: int, high: int, *, consistent: bool = True
) -> list[Item]:
    """Turn and digest items of user seqs ``low..high`` in sk order: from the session's
    partition and, for a fork still copying, those below its copy mark from its parent.
    A session's own turns are contiguous, so only a leading gap can be inherited."""
    own = turn_range(table, session_id, low, high, consistent=consistent)
    first = first_turn_seq(own)
    if first == low:
        return own
    state = copy_state(table, session_id)
    if state is None:
        # No copy due (any more): what is missing is not stored, or the copy finished
        # between the two reads and it landed just now (read again, consistently).
        return turn_range(table, session_id, low, high)
    parent_id, below = state
    upper = min(high, below - 2, high if first is None else first - 2)
    inherited = turn_range(table, parent_id, low, upper) if upper >= low else []
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


def summary_version(table: DynamoTable, session_id: str, through_seq: int) -> Summary | None:
    """The summary version that ends at ``through_seq`` (0: none), wherever it is kept:
    its version item, the summary item (a version from before versions were kept), or,
    for a fork still copying, its parent's."""
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
    state = copy_state(table, session_id)
    if state is not None:
        item = table.get(summary_items.summary_version_key(state[0], through_seq))
    if item is None:  # copied meanwhile: in the fork now
        item = table.get(summary_items.summary_version_key(session_id, through_seq))
    return summary_items.summary_from(item) if item is not None else None


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
