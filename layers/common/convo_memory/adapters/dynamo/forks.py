"""Forks on DynamoDB (v4): creating one, copying its older inherited messages in, and
reading what it inherited while that copy is due. See ``items`` for the layout.

**Creating** a fork (``DynamoForkStore.create_fork``) writes:

1. a placeholder head for the new id: a tombstone (status ``deleting``, in the
   ``DELETING#NN`` shard of byActivity), so that a creation cut short anywhere leaves
   nothing that the retention run does not finish deleting;
2. the parent's newest turns up to ``atSeq`` (as many as a turn's one Query reads), their
   digests, and the newest summary version that ends at or before ``atSeq`` (as the
   fork's summary and its first version), into the fork's partition, in batches;
3. one transaction: the real head over the placeholder, the parent's marker of the copy
   still due (``FORK#<forkId>``: atSeq and the newest summary version to copy), and a
   check that the parent is still active or archived (and that the sessions its recall
   came from still exist): a deletion of the parent that lands first wins.

**Copying the rest** (``copy_inherited``, the erasure worker's ``ForkCopyJob``) copies the
older inherited turns newest first, in chunks, moving the fork head's ``copyBelow`` mark
down after each (so a delivery cut short resumes), then the summary versions behind the
fork point; then it removes the head's copy attributes and the marker. Every write is a
copy of the same item, so two copiers (a redelivered job, the parent's deletion) agree.

**Until then** reads of inherited messages below ``copyBelow`` go to the parent
(``fork_reads.turn_items``). A fork may be made of a fork whose own copy is still due:
it is created from what a read through its parent finds, and its copy job first lets
the parent's own copy finish (``copy_inherited`` goes up the chain first), so its copy
comes after its parent's; reads go up the chain meanwhile (bounded: ``copies_due``).
The parent never deletes a message a copy still needs: every path that empties a
partition (a deletion, a purge, an erasure, a sweep) first finishes the copies its
markers name (``hand_over_to_forks``), for forks still alive, and for a fork being
deleted those of its own forks (which read through it into this partition). So a
message missing from both the fork and the parent has been copied into the fork
meanwhile: it is read again there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from convo_memory.adapters.dynamo import items, summary_items
from convo_memory.adapters.dynamo.fork_reads import (
    MAX_CHAIN,
    copy_from,
    copy_mark,
    copy_state,
    fork_head,
    summary_versions_through,
    turn_items,
)
from convo_memory.adapters.dynamo.table import DynamoTable, Item, number_value, string_value
from convo_memory.domain.errors import (
    RecallSourceGone,
    SessionNotFound,
    StoreRejected,
    StoreUnavailable,
    ValidationFailed,
)
from convo_memory.domain.forks import REMOVED_FORK_POINT, summary_behind
from convo_memory.domain.models import Session
from convo_memory.domain.summary_plan import SummaryVersion
from convo_memory.ports import CopyOutcome

logger = logging.getLogger(__name__)

# Inherited turns copied per step (four batch writes); a step is started only while the
# invocation has at least MIN_SECONDS_PER_STEP left.
CHUNK_TURNS = 100
MIN_SECONDS_PER_STEP = 10.0
_STATUS = {"#st": "status"}


class DynamoForkStore:
    def __init__(self, table: DynamoTable) -> None:
        self._table = table

    def create_fork(self, fork: Session, copy_turns: int, keep_earlier_summary: bool) -> bool:
        assert fork.fork_of is not None
        self._put_placeholder(fork)
        try:
            copy_below, versions_through = self._copy_newest(fork, copy_turns, keep_earlier_summary)
            self._commit(fork, copy_below, versions_through)
        except BaseException:
            self._discard(fork.id)
            raise
        return copy_below is not None

    def copy_inherited(
        self, parent_id: str, fork_id: str, time_left: Callable[[], float] | None = None
    ) -> CopyOutcome:
        return copy_inherited(self._table, parent_id, fork_id, time_left)

    def copies_due(self, session_id: str, most: int) -> int:
        """How many sessions from ``session_id`` up its chain of parents still have a
        copy due (itself included), counting at most ``most`` (one head read each)."""
        count, current = 0, session_id
        while count < most:
            state = copy_state(self._table, current)
            if state is None:
                break
            count, current = count + 1, state.parent
        return count

    # -- creating -------------------------------------------------------------------------

    def _put_placeholder(self, fork: Session) -> None:
        """A tombstone under the new id: what the retention run finishes deleting if the
        creation never completes."""
        placeholder: Item = {
            **items.head_key(fork.id),
            "workspaceId": string_value(fork.workspace_id),
            **(
                {"capabilityId": string_value(fork.capability_id)}
                if fork.capability_id is not None
                else {}
            ),
            "status": string_value("deleting"),
            "createdAt": string_value(fork.created_at),
            "lastActiveAt": string_value(fork.created_at),
            "deletedAt": string_value(fork.created_at),
            "gsi2pk": string_value(items.activity_pk("deleting", fork.id)),
            "gsi2sk": string_value(fork.created_at),
        }
        created, _ = self._table.conditional(
            "put_item", Item=placeholder, ConditionExpression="attribute_not_exists(pk)"
        )
        if not created:  # ids are random: a collision is a defect
            raise StoreRejected(f"session id {fork.id} already exists")

    def _copy_newest(
        self, fork: Session, copy_turns: int, keep_earlier: bool
    ) -> tuple[int | None, int]:
        """Copy the parent's newest ``copy_turns`` turns up to atSeq (with digests) and
        the summary behind atSeq into the fork: (the copy mark, when older turns or
        versions remain to copy, else None; the newest summary version to copy)."""
        assert fork.fork_of is not None
        parent_id, at_seq = fork.fork_of.session_id, fork.fork_of.at_seq
        if at_seq == 0:
            return None, 0
        # The newest copy_turns turns up to atSeq (and their digests): one bounded Query
        # (and, for a parent still copying, one up its chain for what it lacks).
        low = max(1, at_seq - 2 * copy_turns + 1)
        turns = turn_items(self._table, parent_id, low, at_seq - 1)
        seqs = [items.user_seq_of_item(t) for t in turns if not items.is_digest(t)]
        if seqs != list(range(low, at_seq, 2)):
            raise SessionNotFound(f"session {parent_id!r} not found")  # deleted meanwhile
        point = [t for t in turns if not items.is_digest(t)][-1]
        if point.get(items.REMOVED_ANSWER, {}).get("BOOL", False):
            raise ValidationFailed(REMOVED_FORK_POINT, param="atSeq")
        base, earlier, older = self._summary_behind(parent_id, at_seq, keep_earlier)
        writes = [_moved(item, fork.id) for item in turns]
        if base is not None:
            # As the parent kept it, with the window it was made in (the same windows of
            # the same messages show it).
            writes += [
                summary_items.summary_item(fork.id, base.summary, earlier, base.made_at_window),
                summary_items.summary_version_item(fork.id, base),
            ]
        self._table.put_items(writes)
        pending = low > 1 or older
        through = base.summary.through_seq if base is not None else 0
        return (low if pending else None), through

    def _summary_behind(
        self, parent_id: str, at_seq: int, keep_earlier: bool
    ) -> tuple[SummaryVersion | None, SummaryVersion | None, bool]:
        """The parent's newest summary version that ends at or before ``at_seq``, the one
        before it (kept beside it, as the parent's summary item keeps one, when
        ``keep_earlier``), and whether older versions exist (to be copied later)."""
        newest = summary_versions_through(self._table, parent_id, at_seq, newest=2)
        candidates = [summary_items.summary_version_from(item) for item in newest]
        # A summary folded before versions were kept has none: its item is a candidate.
        current = self._table.get(items.summary_key(parent_id))
        if current is not None:
            candidates += summary_items.summary_versions_from(current)
        base = summary_behind(candidates, at_seq)
        if base is None:
            return None, None, False
        before = summary_behind(candidates, base.summary.through_seq - 1)
        return base, before if keep_earlier else None, before is not None

    def _commit(self, fork: Session, copy_below: int | None, versions_through: int) -> None:
        """The real head over the placeholder, the parent's marker of the copy due, and
        the checks, in one transaction."""
        assert fork.fork_of is not None
        parent_id = fork.fork_of.session_id
        sources = fork.recall.from_sessions if fork.recall is not None else []
        entries = _commit_entries(fork, copy_below, versions_through, sources)
        reasons = self._table.transact(entries)
        if reasons is None:
            return
        failed = [code == "ConditionalCheckFailed" for code in reasons]
        if len(failed) > 1 and failed[1]:
            raise SessionNotFound(f"session {parent_id!r} not found")
        if any(failed[2 : 2 + len(sources)]):
            raise RecallSourceGone(f"a session recalled by {parent_id} was deleted")
        if failed and failed[0]:
            raise StoreRejected(f"the placeholder of fork {fork.id} is gone")
        raise StoreUnavailable(f"DynamoDB canceled the fork's creation ({', '.join(reasons)})")

    def _discard(self, fork_id: str) -> None:
        """Remove what a failed creation wrote (best effort: the placeholder is in the
        DELETING index, so the retention run finishes it otherwise)."""
        try:
            keys = [
                {"pk": item["pk"], "sk": item["sk"]}
                for item in self._table.query_all(
                    KeyConditionExpression="pk = :pk",
                    ExpressionAttributeValues={":pk": items.session_pk(fork_id)},
                    ProjectionExpression="pk, sk",
                    ConsistentRead=True,
                )
                # (v5) Its attachment references: the release that follows reads them.
                if item["sk"]["S"] != items.SESSION_SK and not items.is_attachment_reference(item)
            ]
            self._table.delete_keys(keys)
            self._table.conditional(
                "delete_item",
                Key=items.head_key(fork_id),
                ConditionExpression="#st = :del",
                ExpressionAttributeNames=_STATUS,
                ExpressionAttributeValues={":del": string_value("deleting")},
            )
        except Exception:
            logger.warning("fork %s not cleaned up; retention finishes it", fork_id, exc_info=True)


def _commit_entries(
    fork: Session, copy_below: int | None, versions_through: int, sources: list[str]
) -> list[Item]:
    """A new fork's transaction: its head put over the placeholder, its parent (and the
    sessions its recall came from) checked to be still there, and the parent's marker of
    the copy due (when one is)."""
    assert fork.fork_of is not None
    parent_id = fork.fork_of.session_id
    head = items.head_item(fork)
    if copy_below is not None:
        head[items.COPY_FROM] = string_value(parent_id)
        head[items.COPY_BELOW] = number_value(copy_below)
    live = {":a": string_value("active"), ":r": string_value("archived")}
    deleting = {":del": string_value("deleting")}
    entries: list[Item] = [
        {"Put": {"Item": head, "ConditionExpression": "#st = :del", **_names(deleting)}},
        {
            "ConditionCheck": {
                "Key": items.head_key(parent_id),
                "ConditionExpression": "workspaceId = :ws AND #st IN (:a, :r)",
                **_names({":ws": string_value(fork.workspace_id), **live}),
            }
        },
    ]
    entries += [
        {
            "ConditionCheck": {
                "Key": items.head_key(source),
                "ConditionExpression": "#st IN (:a, :r)",
                **_names(live),
            }
        }
        for source in sources
    ]
    if copy_below is not None:
        marker = {
            **items.fork_marker_key(parent_id, fork.id),
            "atSeq": number_value(fork.fork_of.at_seq),
            "versionsThrough": number_value(versions_through),
            "createdAt": string_value(fork.created_at),
        }
        entries.append({"Put": {"Item": marker}})
    return entries


def _names(values: Item) -> Item:
    """A condition's expression names (the status) and ``values``."""
    return {"ExpressionAttributeNames": _STATUS, "ExpressionAttributeValues": values}


# -- copying the rest ----------------------------------------------------------------------


def copy_inherited(
    table: DynamoTable,
    parent_id: str,
    fork_id: str,
    time_left: Callable[[], float] | None = None,
    depth: int = 0,
) -> CopyOutcome:
    """Copy what fork ``fork_id`` still lacks of ``parent_id`` (see the module's text):
    after the parent's own copy, when a live parent still has one due."""
    marker_key = items.fork_marker_key(parent_id, fork_id)
    head = fork_head(table, fork_id)
    if head is None or items.head_status(head) == "deleting":
        if head is not None and copy_from(head) == parent_id and depth < MAX_CHAIN:
            # Its own forks may read through it into this parent: their copies first.
            hand_over_to_forks(table, fork_id, fork_markers(table, fork_id), depth + 1)
        table.call("delete_item", Key=marker_key)
        return "gone"
    if copy_from(head) != parent_id:
        table.call("delete_item", Key=marker_key)
        return "done"
    if _parents_copy_first(table, parent_id, time_left, depth) == "partial":
        return "partial"
    marker = table.get(marker_key)
    below: int | CopyOutcome = copy_mark(head)
    while isinstance(below, int) and below > 1:
        if time_left is not None and time_left() < MIN_SECONDS_PER_STEP:
            return "partial"
        below = _copy_chunk(table, parent_id, fork_id, below)
    if not isinstance(below, int):
        return below
    through = int(marker["versionsThrough"]["N"]) if marker is not None else 0
    if through:
        versions = summary_versions_through(table, parent_id, through)
        table.put_items([_moved(item, fork_id) for item in versions])
    done = {":parent": string_value(parent_id)}
    finished, current = _change_fork_head(
        table, fork_id, "REMOVE copyFrom, copyBelow", "copyFrom = :parent", done
    )
    table.call("delete_item", Key=marker_key)
    if not finished and current is not None and items.head_status(current) == "deleting":
        return "gone"
    return "done"


def _parents_copy_first(
    table: DynamoTable, parent_id: str, time_left: Callable[[], float] | None, depth: int
) -> CopyOutcome | None:
    """A fork's copy comes after its parent's: a live parent still copying finishes its
    own first (so the fork's copy reads one partition); None when it has none due. A
    parent being deleted is read through instead (its deletion hands its copies over)."""
    parent = copy_state(table, parent_id) if depth < MAX_CHAIN else None
    if parent is None or parent.deleting:
        return None
    return copy_inherited(table, parent.parent, parent_id, time_left, depth + 1)


def _copy_chunk(table: DynamoTable, parent_id: str, fork_id: str, below: int) -> int | CopyOutcome:
    """Copy the chunk of inherited turns just below the fork's copy mark ``below`` and move
    the mark down: the new mark, or how the copy ended (another copier finished it, the
    fork is being deleted)."""
    low = max(1, below - 2 * CHUNK_TURNS)
    found = turn_items(table, parent_id, low, below - 2)
    if [items.user_seq_of_item(i) for i in found if not items.is_digest(i)] != list(
        range(low, below, 2)
    ):
        if copy_from(fork_head(table, fork_id)) is None:
            return "done"  # another copier (the parent's deletion) finished first
        raise StoreUnavailable(f"inherited turns of fork {fork_id} are not readable")
    table.put_items([_moved(item, fork_id) for item in found])
    marks = {":low": number_value(low), ":below": number_value(below)}
    moved, current = _change_fork_head(
        table, fork_id, "SET copyBelow = :low", "copyBelow = :below", marks
    )
    if moved:
        return low
    # Another copier moved it, or the fork is being deleted.
    if current is None or items.head_status(current) == "deleting":
        return "gone"
    return copy_mark(current) if items.COPY_FROM in current else "done"


def _change_fork_head(
    table: DynamoTable, fork_id: str, update: str, condition: str, values: Item
) -> tuple[bool, Item | None]:
    """A conditional update of a live fork's copy attributes: (applied, the head as it
    was when the condition failed)."""
    return table.conditional(
        "update_item",
        Key=items.head_key(fork_id),
        UpdateExpression=update,
        ConditionExpression=f"{condition} AND #st <> :del",
        ExpressionAttributeNames=_STATUS,
        ExpressionAttributeValues={**values, ":del": string_value("deleting")},
        ReturnValuesOnConditionCheckFailure="ALL_OLD",
    )


def hand_over_to_forks(
    table: DynamoTable, session_id: str, found: list[Item], depth: int = 0
) -> None:
    """Before a session's messages are deleted: finish every copy its markers (among
    ``found``, its items) say is still due to a live fork, or, through a fork being
    deleted, to that fork's own live forks."""
    for item in found:
        if items.is_fork_marker(item):
            fork_id = item["sk"]["S"].removeprefix(items.FORK_PREFIX)
            copy_inherited(table, session_id, fork_id, depth=depth)


def fork_markers(table: DynamoTable, session_id: str) -> list[Item]:
    """The keys of a session's markers of copies still due to its forks."""
    return list(
        table.query_all(
            KeyConditionExpression="pk = :pk AND begins_with(sk, :fork)",
            ExpressionAttributeValues={
                ":pk": items.session_pk(session_id),
                ":fork": string_value(items.FORK_PREFIX),
            },
            ProjectionExpression="pk, sk",
            ConsistentRead=True,
        )
    )


# -- helpers ----------------------------------------------------------------------------------


def _moved(item: Item, fork_id: str) -> Item:
    """An item of the parent's partition as the fork keeps it: in the fork's partition,
    without the idempotency record of the parent's request (the parent's to remove)."""
    moved = {name: value for name, value in item.items() if name != "k"}
    moved["pk"] = items.session_pk(fork_id)
    return moved
