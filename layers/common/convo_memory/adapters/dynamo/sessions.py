"""Session heads on DynamoDB: create, read (with the exact message count), list per end
user (byExternalRef), metadata, the coarse activity mark, and the first steps of a
deletion. See ``items`` for the layout."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from convo_memory.adapters.dynamo import items
from convo_memory.adapters.dynamo.forks import hand_over_to_forks
from convo_memory.adapters.dynamo.table import DynamoTable, Item, string_value
from convo_memory.domain.errors import (
    RecallSourceGone,
    SessionArchived,
    SessionKeyTaken,
    SessionNotFound,
    StoreRejected,
    StoreUnavailable,
)
from convo_memory.domain.models import Session
from convo_memory.domain.turn_records import TurnRecord

# Newest-turn reads for a listing page run this many at a time.
LIST_READ_CONCURRENCY = 8


class DynamoSessionStore:
    def __init__(self, table: DynamoTable) -> None:
        self._table = table

    def create_session(self, session: Session, history: Sequence[TurnRecord] = ()) -> None:
        if session.session_key is not None or session.recall is not None or history:
            self._create_transacted(session, history)
            return
        created, _ = self._table.conditional(
            "put_item",
            Item=items.head_item(session),
            ConditionExpression="attribute_not_exists(pk)",
        )
        if not created:  # ids are random: a collision is a defect, not a conflict to report
            raise StoreRejected(f"session id {session.id} already exists")

    def _create_transacted(self, session: Session, history: Sequence[TurnRecord]) -> None:
        """The head in one transaction with what must hold with it: the app's key item
        (new, so of concurrent first calls on one key exactly one opens its session), a
        check that each session a recall was taken from is still active or archived (a
        deletion that lands first wins: no text of a deleted session is stored after its
        deletion), and the imported history's turns (so only the call that opens the
        session imports them)."""
        head = {"Item": items.head_item(session), "ConditionExpression": "attribute_not_exists(pk)"}
        entries: list[Item] = [{"Put": head}]
        key_item = items.session_key_item(session) if session.session_key is not None else None
        if key_item is not None:
            entries.append(
                {"Put": {"Item": key_item, "ConditionExpression": "attribute_not_exists(pk)"}}
            )
        entries += _recall_checks(session)
        entries += [
            {"Put": {"Item": items.turn_item(session.id, 2 * index + 1, turn)}}
            for index, turn in enumerate(history)
        ]
        reasons = self._table.transact(entries)
        if reasons is None:
            return
        reasons += ["None"] * (len(entries) - len(reasons))
        failed = [code == "ConditionalCheckFailed" for code in reasons]
        if failed[0]:  # ids are random: a collision is a defect, not a conflict to report
            raise StoreRejected(f"session id {session.id} already exists")
        if key_item is not None:
            if failed[1]:
                winner = self._table.get({"pk": key_item["pk"], "sk": key_item["sk"]})
                raise SessionKeyTaken(winner["sessionId"]["S"] if winner else None)
            if not any(failed):
                # Another transaction on the same key was in flight: its session wins, if any.
                raise SessionKeyTaken(None)
        if any(failed[2 if key_item is not None else 1 :]):
            raise RecallSourceGone(f"a session recalled by {session.id} was deleted")
        raise StoreUnavailable(f"DynamoDB canceled the session's creation ({', '.join(reasons)})")

    def bind_session(self, session: Session) -> bool:
        """Bind a conversation's head to ``session``'s capability, end user (with its
        byExternalRef keys), principal and recall: only an active head of its workspace
        that has no capability yet (False otherwise: bound first by a racing response, or
        gone). With a recall, in one transaction with its sources' checks."""
        bound = items.bound_attributes(session) | items.recall_attribute(session.recall)
        names = {f"#b{i}": name for i, name in enumerate(bound)}
        update = {
            "Key": items.head_key(session.id),
            "UpdateExpression": "SET " + ", ".join(f"{n} = :{n[1:]}" for n in names),
            "ConditionExpression": (
                "attribute_exists(pk) AND workspaceId = :ws AND #st = :active "
                "AND attribute_not_exists(capabilityId)"
            ),
            "ExpressionAttributeNames": {"#st": "status", **names},
            "ExpressionAttributeValues": {
                ":ws": string_value(session.workspace_id),
                ":active": string_value("active"),
                **{f":{n[1:]}": bound[name] for n, name in names.items()},
            },
        }
        checks = _recall_checks(session)
        if not checks:
            done, _ = self._table.conditional("update_item", **update)
            return done
        reasons = self._table.transact([{"Update": update}, *checks])
        if reasons is None:
            return True
        if reasons[0] == "ConditionalCheckFailed":
            return False
        if "ConditionalCheckFailed" in reasons:
            raise RecallSourceGone(f"a session recalled by {session.id} was deleted")
        raise StoreUnavailable(f"DynamoDB canceled the conversation's binding ({reasons})")

    def session_for_key(
        self, workspace_id: str, capability_id: str, session_key: str
    ) -> str | None:
        item = self._table.get(items.session_key_key(workspace_id, capability_id, session_key))
        return item["sessionId"]["S"] if item else None

    def release_session_key(
        self, workspace_id: str, capability_id: str, session_key: str, session_id: str
    ) -> None:
        release_session_key(
            self._table, items.session_key_key(workspace_id, capability_id, session_key), session_id
        )

    def get_session(self, session_id: str) -> Session | None:
        """One Query (summary, head, newest turn): the head plus the exact count."""
        head, newest = self._head_and_newest(session_id)
        if head is None or items.head_status(head) == "deleting":
            return None
        return items.session_from(head, newest)

    def _head_and_newest(self, session_id: str) -> tuple[Item | None, Item | None]:
        out = self._table.query(
            KeyConditionExpression="pk = :pk AND sk > :lo",
            ExpressionAttributeValues={
                ":pk": items.session_pk(session_id),
                ":lo": string_value(items.MSG_PREFIX),
            },
            ScanIndexForward=False,
            ConsistentRead=True,
            Limit=3,
        )
        head = newest = None
        for item in out.get("Items", []):
            sk = item["sk"]["S"]
            if sk == items.SESSION_SK:
                head = item
            elif sk.startswith(items.MSG_PREFIX):
                newest = item
                break
        return head, newest

    def _newest_turn(self, session_id: str) -> Item | None:
        return newest_turn(self._table, session_id, consistent=False)

    def list_sessions(
        self, workspace_id: str, external_ref: str, limit: int, after: tuple[str, str] | None
    ) -> tuple[list[Session], bool]:
        partition = items.external_ref_pk(workspace_id, external_ref)
        args: dict[str, Any] = {
            "IndexName": "byExternalRef",
            "KeyConditionExpression": "gsi1pk = :p",
            "ExpressionAttributeValues": {":p": string_value(partition)},
            "ScanIndexForward": False,
            "Limit": limit,
        }
        if after is not None:
            # The start key is rebuilt here from a position: cursors carry no key layout.
            created_at, session_id = after
            args["ExclusiveStartKey"] = {
                "gsi1pk": string_value(partition),
                "gsi1sk": string_value(f"{created_at}#{session_id}"),
                **items.head_key(session_id),
            }
        out = self._table.query(**args)
        heads = [h for h in out.get("Items", []) if items.head_status(h) != "deleting"]
        # The heads' counts move once per granularity: read each newest turn for exact ones.
        with ThreadPoolExecutor(max_workers=LIST_READ_CONCURRENCY) as pool:
            newest = list(
                pool.map(lambda h: self._newest_turn(h["pk"]["S"].removeprefix("SESSION#")), heads)
            )
        sessions = [items.session_from(h, t) for h, t in zip(heads, newest, strict=True)]
        return sessions, bool(out.get("LastEvaluatedKey"))

    def update_metadata(
        self, session_id: str, workspace_id: str, metadata: dict[str, Any]
    ) -> Session | None:
        """Replace metadata; None when the session is missing, deleted or another's."""
        updated, attributes = self._table.conditional(
            "update_item",
            Key=items.head_key(session_id),
            UpdateExpression="SET metadata = :m",
            ConditionExpression="attribute_exists(pk) AND workspaceId = :ws AND #st <> :del",
            ExpressionAttributeNames={"#st": "status"},
            ExpressionAttributeValues={
                ":m": string_value(items.compact(metadata)),
                ":ws": string_value(workspace_id),
                ":del": string_value("deleting"),
            },
            ReturnValues="ALL_NEW",
        )
        if not updated or attributes is None:
            return None
        return items.session_from(attributes, self._newest_turn(session_id))

    def touch(self, session_id: str, last_active_at: str) -> None:
        moved, current = self._table.conditional(
            "update_item",
            Key=items.head_key(session_id),
            UpdateExpression="SET lastActiveAt = :at, gsi2sk = :at",
            ConditionExpression="#st = :active",
            ExpressionAttributeNames={"#st": "status"},
            ExpressionAttributeValues={
                ":at": string_value(last_active_at),
                ":active": string_value("active"),
            },
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
        if moved:
            return
        if current is None:
            current = self._table.get(items.head_key(session_id))
        if current is not None and items.head_status(current) == "archived":
            raise SessionArchived("the session is archived and accepts no new turns")
        raise SessionNotFound(f"session {session_id!r} not found")

    def keep_fence_nonce(self, session_id: str, nonce: str) -> str | None:
        """One conditional update on an active head: the nonce it already had, else
        ``nonce``; None when the head is not active (never re-creates a deleted head)."""
        kept, attributes = self._table.conditional(
            "update_item",
            Key=items.head_key(session_id),
            UpdateExpression="SET #nonce = if_not_exists(#nonce, :nonce)",
            ConditionExpression="#st = :active",
            ExpressionAttributeNames={"#st": "status", "#nonce": items.FENCE_NONCE},
            ExpressionAttributeValues={
                ":nonce": string_value(nonce),
                ":active": string_value("active"),
            },
            ReturnValues="ALL_NEW",
        )
        if not kept or attributes is None:
            return None
        return str(attributes[items.FENCE_NONCE]["S"])

    def begin_deletion(self, session_id: str, workspace_id: str, deleted_at: str) -> bool:
        """Mark the session deleted and strip its head to a tombstone in one write: from
        here on it answers 404 and its head holds no personal data (an owner attribute,
        naming an item the session owns, goes once that item has). A session an erasure
        has claimed is the erasure's to finish: False, as for a missing one."""
        remove = ", ".join(("gsi1pk", "gsi1sk", *items.PERSONAL_HEAD_ATTRIBUTES))
        marked, _ = self._table.conditional(
            "update_item",
            Key=items.head_key(session_id),
            # Out of the listing at once; into DELETING#NN so retention finishes the job.
            UpdateExpression=(
                "SET #st = :del, deletedAt = if_not_exists(deletedAt, :at), "
                f"gsi2pk = :gsi2pk, gsi2sk = if_not_exists(deletedAt, :at) REMOVE {remove}"
            ),
            ConditionExpression=(
                "attribute_exists(pk) AND workspaceId = :ws AND attribute_not_exists(erasureId)"
            ),
            ExpressionAttributeNames={"#st": "status"},
            ExpressionAttributeValues={
                ":del": string_value("deleting"),
                ":at": string_value(deleted_at),
                ":ws": string_value(workspace_id),
                ":gsi2pk": string_value(items.activity_pk("deleting", session_id)),
            },
        )
        return marked

    def delete_contents(self, session_id: str) -> int:
        return delete_contents(self._table, session_id)


def _recall_checks(session: Session) -> list[Item]:
    """A transaction's checks that each session a recall was taken from is still active
    or archived (a deletion that lands first wins)."""
    sources = session.recall.from_sessions if session.recall is not None else []
    recallable = {":active": string_value("active"), ":archived": string_value("archived")}
    return [
        {
            "ConditionCheck": {
                "Key": items.head_key(source),
                "ConditionExpression": "#st IN (:active, :archived)",
                "ExpressionAttributeNames": {"#st": "status"},
                "ExpressionAttributeValues": recallable,
            }
        }
        for source in sources
    ]


def session_items(table: DynamoTable, session_id: str) -> list[Item]:
    """Every item of a session's partition, head included (strongly consistent), as much
    of each as a sweep needs (``items.session_item_projection``)."""
    projection, names = items.session_item_projection()
    return list(
        table.query_all(
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": items.session_pk(session_id)},
            ProjectionExpression=projection,
            ExpressionAttributeNames=names,
            ConsistentRead=True,
        )
    )


def delete_contents(table: DynamoTable, session_id: str, found: list[Item] | None = None) -> int:
    """Delete every item of a session's partition except its head, and the items outside
    it that its head says it owns (strongly consistent read of the keys, unless the
    caller read them: ``found``, then batched deletes); then the head's owner attributes,
    once what they named is gone. A copy still due to a fork of the session is finished
    first: a fork never loses what it inherited."""
    if found is None:
        found = session_items(table, session_id)
    hand_over_to_forks(table, session_id, found)
    head = next((item for item in found if item["sk"]["S"] == items.SESSION_SK), None)
    # (v5) An attachment's reference is left to the release that follows (it must see it).
    keys = [
        {"pk": item["pk"], "sk": item["sk"]}
        for item in found
        if item is not head and not items.is_attachment_reference(item)
    ]
    if head is not None:
        keys += items.owned_item_keys(head)
    deleted = table.delete_keys(keys)
    if head is not None and items.SESSION_KEY in head:
        # The app's key (OpenAI-compatible door) is released: a later call with it opens
        # a new session. Conditional: a key already re-opened on a newer session stays.
        key = items.session_key_key(
            head["workspaceId"]["S"], head["capabilityId"]["S"], head[items.SESSION_KEY]["S"]
        )
        release_session_key(table, key, session_id)
        deleted += 1
    owners = [name for name in items.OWNER_ATTRIBUTES if head is not None and name in head]
    owners += [items.OWNER_COMPANIONS[name] for name in owners if name in items.OWNER_COMPANIONS]
    if owners:
        table.conditional(
            "update_item",
            Key=items.head_key(session_id),
            UpdateExpression="REMOVE " + ", ".join(f"#o{i}" for i in range(len(owners))),
            ConditionExpression="#st = :del",
            ExpressionAttributeNames={
                "#st": "status",
                **{f"#o{i}": name for i, name in enumerate(owners)},
            },
            ExpressionAttributeValues={":del": string_value("deleting")},
        )
    return deleted


def release_session_key(table: DynamoTable, key: Item, session_id: str) -> None:
    """Delete a key item if it still names ``session_id`` (a key already re-opened on a
    newer session keeps it)."""
    table.conditional(
        "delete_item",
        Key=key,
        ConditionExpression="sessionId = :sid",
        ExpressionAttributeValues={":sid": string_value(session_id)},
    )


def newest_turn(table: DynamoTable, session_id: str, *, consistent: bool) -> Item | None:
    """The key and createdAt of a session's newest turn (or of its digest, which carries
    the same position, or of a paused turn, v4, flagged): one read of at most one item."""
    out = table.query(
        KeyConditionExpression="pk = :pk AND sk BETWEEN :lo AND :hi",
        ExpressionAttributeValues={
            ":pk": items.session_pk(session_id),
            ":lo": string_value(items.MSG_PREFIX),
            ":hi": string_value(items.MSG_UPPER),
        },
        ProjectionExpression="sk, #at, #pd",
        ExpressionAttributeNames={"#at": "at", "#pd": items.PENDING_MARK},
        ScanIndexForward=False,
        ConsistentRead=consistent,
        Limit=1,
    )
    found: list[Item] = out.get("Items", [])
    return found[0] if found else None
