"""DynamoDB store: the conversations table and the runs table.

Key design (see docs/architecture.md): one partition per session holding the head, the
summary, the messages and their tool digests, sorted so that one descending Query reads
everything a turn needs. botocore errors are translated here into domain errors; nothing
above this module sees a ``ClientError``.
"""

from __future__ import annotations

import base64
import json
import time
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from convo_memory.domain.errors import (
    SessionArchived,
    SessionNotFound,
    StoreUnavailable,
    ValidationFailed,
)
from convo_memory.domain.models import Capability, Message, Session, Summary, ToolDigest
from convo_memory.domain.turn_records import AppendResult, TurnRecord, TurnState

Item = dict[str, Any]

SESSION_SK = "SESSION"
SUMMARY_SK = "SUMMARY"
MSG_PREFIX = "MSG#"
DIGEST_SUFFIX = "#DIGEST"
TURN_PREFIX = "#TURN#"
ACTIVITY_SHARDS = 16
TURN_MARKER_TTL_SECONDS = 14 * 24 * 3600
MAX_RACE_RETRIES = 25

# Capacity and availability errors: the request may succeed later.
_UNAVAILABLE_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "InternalServerError",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "LimitExceededException",
        "TransactionInProgressException",
    }
)


def session_pk(session_id: str) -> str:
    return f"SESSION#{session_id}"


def message_sk(seq: int) -> str:
    return f"{MSG_PREFIX}{seq:010d}"


def activity_shard(session_id: str) -> int:
    return zlib.crc32(session_id.encode()) % ACTIVITY_SHARDS


def _s(value: str) -> dict[str, str]:
    return {"S": value}


def _n(value: int | float) -> dict[str, str]:
    return {"N": str(value)}


def _unavailable(exc: Exception) -> StoreUnavailable:
    return StoreUnavailable(f"DynamoDB unavailable: {exc}")


def _translate(exc: ClientError) -> Exception:
    code = exc.response.get("Error", {}).get("Code", "")
    if code in _UNAVAILABLE_CODES:
        return _unavailable(exc)
    return exc


@dataclass
class RequestCounter:
    """Counts DynamoDB requests by operation (used by the benchmark and tests)."""

    by_operation: dict[str, int] = field(default_factory=dict)

    def add(self, operation: str) -> None:
        self.by_operation[operation] = self.by_operation.get(operation, 0) + 1


class DynamoStore:
    """Conversations and runs persistence over a low-level DynamoDB client."""

    def __init__(self, client: Any, table_name: str, runs_table_name: str) -> None:
        self._client = client
        self.table = table_name
        self.runs_table = runs_table_name

    # -- low-level call wrapper -------------------------------------------------
    def _call(self, operation: str, **kwargs: Any) -> Any:
        try:
            return getattr(self._client, operation)(**kwargs)
        except ClientError as exc:
            raise _translate(exc) from exc
        except BotoCoreError as exc:  # connection errors, read timeouts
            raise _unavailable(exc) from exc

    def _conditional(self, operation: str, **kwargs: Any) -> Any | None:
        """A conditional write: its response, or None when the condition failed.
        Other errors are translated like every other call."""
        try:
            return getattr(self._client, operation)(**kwargs)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                return None
            raise _translate(exc) from exc
        except BotoCoreError as exc:
            raise _unavailable(exc) from exc

    # -- workspaces and tokens --------------------------------------------------
    def put_workspace(self, workspace_id: str, name: str, created_at: str) -> None:
        self._call(
            "put_item",
            TableName=self.table,
            Item={
                "pk": _s(f"WS#{workspace_id}"),
                "sk": _s("WORKSPACE"),
                "name": _s(name),
                "createdAt": _s(created_at),
            },
        )

    def put_token(self, token_hash: str, workspace_id: str, name: str, created_at: str) -> bool:
        """Store a token hash; False when that hash already exists."""
        stored = self._conditional(
            "put_item",
            TableName=self.table,
            Item={
                "pk": _s(f"TOKEN#{token_hash}"),
                "sk": _s("TOKEN"),
                "workspaceId": _s(workspace_id),
                "name": _s(name),
                "createdAt": _s(created_at),
            },
            ConditionExpression="attribute_not_exists(pk)",
        )
        return stored is not None

    def workspace_for_token(self, token_hash: str) -> str | None:
        # Strongly consistent: a token revoked a moment ago must not resolve.
        out = self._call(
            "get_item",
            TableName=self.table,
            Key={"pk": _s(f"TOKEN#{token_hash}"), "sk": _s("TOKEN")},
            ConsistentRead=True,
        )
        item = out.get("Item")
        return item["workspaceId"]["S"] if item else None

    def put_token_id(
        self, token_id: str, token_hash: str, workspace_id: str, created_at: str
    ) -> None:
        """The public id a token can be revoked by (the token itself is never stored)."""
        self._call(
            "put_item",
            TableName=self.table,
            Item={
                "pk": _s(f"TOKENID#{token_id}"),
                "sk": _s("TOKENID"),
                "tokenHash": _s(token_hash),
                "workspaceId": _s(workspace_id),
                "createdAt": _s(created_at),
            },
        )

    def token_hash_for_id(self, token_id: str) -> str | None:
        out = self._call(
            "get_item",
            TableName=self.table,
            Key={"pk": _s(f"TOKENID#{token_id}"), "sk": _s("TOKENID")},
            ConsistentRead=True,
        )
        item = out.get("Item")
        return item["tokenHash"]["S"] if item else None

    def delete_token(self, token_hash: str, token_id: str) -> str | None:
        """Revoke a token: its workspace id, or None when no such token existed."""
        out = self._call(
            "delete_item",
            TableName=self.table,
            Key={"pk": _s(f"TOKEN#{token_hash}"), "sk": _s("TOKEN")},
            ReturnValues="ALL_OLD",
        )
        self._call(
            "delete_item",
            TableName=self.table,
            Key={"pk": _s(f"TOKENID#{token_id}"), "sk": _s("TOKENID")},
        )
        old = out.get("Attributes")
        return old["workspaceId"]["S"] if old else None

    # -- capabilities -----------------------------------------------------------
    def put_capability(self, workspace_id: str, capability: Capability) -> None:
        self._call(
            "put_item",
            TableName=self.table,
            Item={
                "pk": _s(f"WS#{workspace_id}"),
                "sk": _s(f"CAP#{capability.id}"),
                "body": _s(json.dumps(capability.to_json_dict())),
            },
        )

    def get_capability(self, workspace_id: str, capability_id: str) -> Capability | None:
        out = self._call(
            "get_item",
            TableName=self.table,
            Key={"pk": _s(f"WS#{workspace_id}"), "sk": _s(f"CAP#{capability_id}")},
        )
        item = out.get("Item")
        return Capability.model_validate_json(item["body"]["S"]) if item else None

    def list_capabilities(self, workspace_id: str) -> list[Capability]:
        caps: list[Capability] = []
        for item in self._query_all(
            KeyConditionExpression="pk = :pk AND begins_with(sk, :cap)",
            ExpressionAttributeValues={":pk": _s(f"WS#{workspace_id}"), ":cap": _s("CAP#")},
        ):
            caps.append(Capability.model_validate_json(item["body"]["S"]))
        caps.sort(key=lambda c: (c.created_at, c.id))
        return caps

    def _query_all(self, **kwargs: Any) -> Iterator[Item]:
        start: Mapping[str, Any] | None = None
        while True:
            page_args = dict(kwargs, TableName=self.table)
            if start:
                page_args["ExclusiveStartKey"] = start
            out = self._call("query", **page_args)
            yield from out.get("Items", [])
            start = out.get("LastEvaluatedKey")
            if not start:
                return

    # -- sessions ---------------------------------------------------------------
    def create_session(self, session: Session) -> None:
        self._call(
            "put_item",
            TableName=self.table,
            Item=self._head_item(session),
            ConditionExpression="attribute_not_exists(pk)",
        )

    def _head_item(self, session: Session) -> Item:
        shard = activity_shard(session.id)
        return {
            "pk": _s(session_pk(session.id)),
            "sk": _s(SESSION_SK),
            "workspaceId": _s(session.workspace_id),
            "capabilityId": _s(session.capability_id),
            "externalRef": _s(session.external_ref),
            "principal": _s(json.dumps(session.principal)),
            "metadata": _s(json.dumps(session.metadata)),
            "status": _s(session.status),
            "createdAt": _s(session.created_at),
            "lastActiveAt": _s(session.last_active_at),
            "messageCount": _n(session.message_count),
            "gsi1pk": _s(f"WS#{session.workspace_id}#REF#{session.external_ref}"),
            "gsi1sk": _s(f"{session.created_at}#{session.id}"),
            "gsi2pk": _s(f"ACTIVE#{shard:02d}"),
            "gsi2sk": _s(session.last_active_at),
        }

    @staticmethod
    def _session_from(item: Item) -> Session:
        return Session(
            id=item["pk"]["S"].removeprefix("SESSION#"),
            workspace_id=item["workspaceId"]["S"],
            capability_id=item["capabilityId"]["S"],
            external_ref=item["externalRef"]["S"],
            principal=json.loads(item["principal"]["S"]),
            metadata=json.loads(item["metadata"]["S"]),
            status=item["status"]["S"],
            created_at=item["createdAt"]["S"],
            last_active_at=item["lastActiveAt"]["S"],
            message_count=int(item["messageCount"]["N"]),
        )

    def get_session(self, session_id: str) -> Session | None:
        out = self._call(
            "get_item",
            TableName=self.table,
            Key={"pk": _s(session_pk(session_id)), "sk": _s(SESSION_SK)},
            ConsistentRead=True,
        )
        item = out.get("Item")
        return self._session_from(item) if item else None

    def list_sessions(
        self,
        workspace_id: str,
        external_ref: str,
        limit: int,
        after: tuple[str, str] | None,
    ) -> tuple[list[Session], bool]:
        """An end user's sessions, newest first, after ``after`` = (createdAt, id) of the
        previous page's last session; and whether there may be more (LastEvaluatedKey)."""
        gsi1pk = f"WS#{workspace_id}#REF#{external_ref}"
        args: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": "byExternalRef",
            "KeyConditionExpression": "gsi1pk = :p",
            "ExpressionAttributeValues": {":p": _s(gsi1pk)},
            "ScanIndexForward": False,
            "Limit": limit,
        }
        if after is not None:
            # The start key is rebuilt here from a position: cursors carry no key layout.
            created_at, session_id = after
            args["ExclusiveStartKey"] = {
                "pk": _s(session_pk(session_id)),
                "sk": _s(SESSION_SK),
                "gsi1pk": _s(gsi1pk),
                "gsi1sk": _s(f"{created_at}#{session_id}"),
            }
        out = self._call("query", **args)
        sessions = [self._session_from(i) for i in out.get("Items", [])]
        return sessions, bool(out.get("LastEvaluatedKey"))

    def update_metadata(
        self, session_id: str, workspace_id: str, metadata: dict[str, Any]
    ) -> Session | None:
        """Replace metadata; None when the session is missing or another workspace's."""
        out = self._conditional(
            "update_item",
            TableName=self.table,
            Key={"pk": _s(session_pk(session_id)), "sk": _s(SESSION_SK)},
            UpdateExpression="SET metadata = :m",
            ConditionExpression="attribute_exists(pk) AND workspaceId = :ws",
            ExpressionAttributeValues={":m": _s(json.dumps(metadata)), ":ws": _s(workspace_id)},
            ReturnValues="ALL_NEW",
        )
        return None if out is None else self._session_from(out["Attributes"])

    def delete_session(self, session_id: str) -> int:
        """Delete the whole session partition (head first, so it disappears at once).
        Agent run traces live in another table and are never touched."""
        pk = session_pk(session_id)
        self._call("delete_item", TableName=self.table, Key={"pk": _s(pk), "sk": _s(SESSION_SK)})
        keys = [
            {"pk": item["pk"], "sk": item["sk"]}
            for item in self._query_all(
                KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues={":pk": _s(pk)},
                ProjectionExpression="pk, sk",
            )
        ]
        return self._delete_keys(keys) + 1

    # -- retention (byActivity) -------------------------------------------------
    @property
    def activity_shards(self) -> int:
        """How many ``ACTIVE#NN`` / ``ARCHIVED#NN`` partitions the byActivity index has."""
        return ACTIVITY_SHARDS

    def sessions_by_activity(
        self, status: str, shard: int, before: str, page_size: int = 100
    ) -> Iterator[tuple[str, str]]:
        """``(sessionId, since)`` of the sessions in one byActivity shard whose
        ``gsi2sk`` is earlier than ``before``, oldest first: ``status`` "active" reads
        ``ACTIVE#NN`` (since = lastActiveAt), "archived" reads ``ARCHIVED#NN`` (since =
        archivedAt). Pages are fetched lazily, so a caller that stops early stops reading.
        The index is eventually consistent: callers re-check with a conditional write."""
        prefix = {"active": "ACTIVE", "archived": "ARCHIVED"}[status]
        start: dict[str, Any] | None = None
        while True:
            args: dict[str, Any] = {
                "TableName": self.table,
                "IndexName": "byActivity",
                "KeyConditionExpression": "gsi2pk = :p AND gsi2sk < :before",
                "ExpressionAttributeValues": {
                    ":p": _s(f"{prefix}#{shard:02d}"),
                    ":before": _s(before),
                },
                "Limit": page_size,
            }
            if start:
                args["ExclusiveStartKey"] = start
            out = self._call("query", **args)
            for item in out.get("Items", []):
                yield item["pk"]["S"].removeprefix("SESSION#"), item["gsi2sk"]["S"]
            start = out.get("LastEvaluatedKey")
            if not start:
                return

    def archive_session(self, session_id: str, last_active_at: str, archived_at: str) -> bool:
        """Archive an active session that has not moved since ``last_active_at``: it
        stays readable, refuses turns, and moves to ``ARCHIVED#NN`` in byActivity. False
        when it is gone, already archived, or a turn landed meanwhile (it stays active)."""
        archived = self._conditional(
            "update_item",
            TableName=self.table,
            Key={"pk": _s(session_pk(session_id)), "sk": _s(SESSION_SK)},
            UpdateExpression=(
                "SET #st = :archived, archivedAt = :at, gsi2pk = :gsi2pk, gsi2sk = :at"
            ),
            ConditionExpression="#st = :active AND lastActiveAt = :seen",
            ExpressionAttributeNames={"#st": "status"},
            ExpressionAttributeValues={
                ":archived": _s("archived"),
                ":active": _s("active"),
                ":at": _s(archived_at),
                ":seen": _s(last_active_at),
                ":gsi2pk": _s(f"ARCHIVED#{activity_shard(session_id):02d}"),
            },
        )
        return archived is not None

    def purge_session(self, session_id: str, archived_at: str) -> int | None:
        """Delete an archived session's whole partition (head, summary, messages,
        digests, turn markers) if it is still archived at ``archived_at``; None (and
        nothing deleted) otherwise. Run traces live in the runs table: never touched.

        Unlike ``delete_session`` the head goes last, conditionally: a purge cut short
        (timeout, throttling) leaves the head in byActivity, so the next run finishes it
        rather than orphaning items no index can find. A final sweep after the head is
        gone catches a write that landed meanwhile (nothing can write without a head)."""
        pk = _s(session_pk(session_id))
        items = list(
            self._query_all(
                KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues={":pk": pk},
                ProjectionExpression="pk, sk, #st, archivedAt",
                ExpressionAttributeNames={"#st": "status"},
                ConsistentRead=True,
            )
        )
        head = next((i for i in items if i["sk"]["S"] == SESSION_SK), None)
        if (
            head is None
            or head.get("status", {}).get("S") != "archived"
            or head.get("archivedAt", {}).get("S") != archived_at
        ):
            return None
        deleted = self._delete_keys(
            [{"pk": i["pk"], "sk": i["sk"]} for i in items if i["sk"]["S"] != SESSION_SK]
        )
        try:
            self._client.delete_item(
                TableName=self.table,
                Key={"pk": pk, "sk": _s(SESSION_SK)},
                ConditionExpression="#st = :archived AND archivedAt = :at",
                ExpressionAttributeNames={"#st": "status"},
                ExpressionAttributeValues={":archived": _s("archived"), ":at": _s(archived_at)},
            )
            deleted += 1
        except ClientError as exc:
            # Deleted meanwhile (DELETE /v1/sessions/{id}): its items are going anyway.
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise _translate(exc) from exc
        except BotoCoreError as exc:
            raise _unavailable(exc) from exc
        leftovers = [
            {"pk": i["pk"], "sk": i["sk"]}
            for i in self._query_all(
                KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues={":pk": pk},
                ProjectionExpression="pk, sk",
                ConsistentRead=True,
            )
            if i["sk"]["S"] != SESSION_SK  # a head that failed the condition is not ours
        ]
        return deleted + self._delete_keys(leftovers)

    def _delete_keys(self, keys: list[Item]) -> int:
        for start in range(0, len(keys), 25):
            requests = [{"DeleteRequest": {"Key": k}} for k in keys[start : start + 25]]
            pending: dict[str, Any] = {self.table: requests}
            for attempt in range(8):
                out = self._call("batch_write_item", RequestItems=pending)
                pending = out.get("UnprocessedItems") or {}
                if not pending:
                    break
                time.sleep(min(0.05 * 2**attempt, 1.0))
            if pending:
                raise StoreUnavailable("could not delete every item of the session")
        return len(keys)

    # -- messages ---------------------------------------------------------------
    @staticmethod
    def _message_from(item: Item) -> Message:
        return Message(
            seq=int(item["sk"]["S"][len(MSG_PREFIX) :]),
            role=item["role"]["S"],
            content=item["content"]["S"],
            created_at=item["createdAt"]["S"],
            withheld=item.get("withheld", {}).get("BOOL", False),
        )

    def list_messages(
        self, session_id: str, after_seq: int, limit: int
    ) -> tuple[list[Message], bool]:
        """Messages with seq > after_seq, oldest first; and whether more exist."""
        messages: list[Message] = []
        start: dict[str, Any] | None = None
        while len(messages) <= limit:
            args: dict[str, Any] = {
                "TableName": self.table,
                "KeyConditionExpression": "pk = :pk AND sk BETWEEN :lo AND :hi",
                "ExpressionAttributeValues": {
                    ":pk": _s(session_pk(session_id)),
                    ":lo": _s(message_sk(after_seq + 1)),
                    ":hi": _s(message_sk(9_999_999_999)),
                },
                # Each message may carry one digest item; read enough for limit + 1 messages.
                "Limit": 2 * (limit + 1),
            }
            if start:
                args["ExclusiveStartKey"] = start
            out = self._call("query", **args)
            for item in out.get("Items", []):
                if not item["sk"]["S"].endswith(DIGEST_SUFFIX):
                    messages.append(self._message_from(item))
            start = out.get("LastEvaluatedKey")
            if not start:
                break
        return messages[:limit], len(messages) > limit

    def load_turn_state(
        self, session_id: str, max_messages: int, with_digests: bool
    ) -> TurnState | None:
        """One descending Query: summary, head, then the newest ``max_messages`` messages
        (and their digests). Never reads older history."""
        wanted = max_messages + (max_messages if with_digests else 0) + 2
        head: Item | None = None
        summary: Summary | None = None
        messages: list[Message] = []
        digests: dict[int, ToolDigest] = {}
        expiry: dict[int, float] = {}
        start: dict[str, Any] | None = None
        read = 0
        while read < wanted:
            args: dict[str, Any] = {
                "TableName": self.table,
                "KeyConditionExpression": "pk = :pk AND sk > :lo",
                "ExpressionAttributeValues": {
                    ":pk": _s(session_pk(session_id)),
                    ":lo": _s(MSG_PREFIX),
                },
                "ScanIndexForward": False,
                "ConsistentRead": True,
                "Limit": wanted - read,
            }
            if start:  # only when a page hit DynamoDB's 1 MB cap
                args["ExclusiveStartKey"] = start
            out = self._call("query", **args)
            for item in out.get("Items", []):
                read += 1
                sk = item["sk"]["S"]
                if sk == SESSION_SK:
                    head = item
                elif sk == SUMMARY_SK:
                    summary = Summary(
                        text=item["text"]["S"], through_seq=int(item["throughSeq"]["N"])
                    )
                elif sk.endswith(DIGEST_SUFFIX):
                    seq = int(sk[len(MSG_PREFIX) : -len(DIGEST_SUFFIX)])
                    digests[seq] = ToolDigest(
                        seq=seq, tools=list(item["tools"]["SS"]), text=item["text"]["S"]
                    )
                    expiry[seq] = float(item["expiresAt"]["N"])
                elif sk.startswith(MSG_PREFIX) and len(messages) < max_messages:
                    messages.append(self._message_from(item))
            start = out.get("LastEvaluatedKey")
            if not start:
                break
        if head is None:
            return None
        messages.reverse()
        return TurnState(
            session=self._session_from(head),
            summary=summary,
            recent=tuple(messages),
            digests=digests,
            digest_expiry=expiry,
            summary_requested_at=int(head.get("summaryRequestedAt", {}).get("N", "0")) / 1000,
        )

    def append_turn(self, session_id: str, expected_count: int, turn: TurnRecord) -> AppendResult:
        """Append a user message and its answer as one transaction.

        Conditional on the head's ``messageCount`` (so a racing turn cannot take the same
        seqs) and on the turn marker not existing (so a retried or repaired turn is
        recorded once). A lost race retries at the new count; the answer always gets
        ``userSeq + 1``.
        """
        pk = _s(session_pk(session_id))
        count = expected_count
        for attempt in range(MAX_RACE_RETRIES):
            user_seq, assistant_seq = count + 1, count + 2
            items = self._turn_items(pk, user_seq, assistant_seq, count, turn)
            try:
                self._client.transact_write_items(TransactItems=items)
                return AppendResult(user_seq, assistant_seq, assistant_seq)
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code", "")
                if code != "TransactionCanceledException":
                    raise _translate(exc) from exc
                reasons: list[dict[str, Any]] = list(exc.response.get("CancellationReasons") or [])  # type: ignore[arg-type]
                outcome = self._cancelled(session_id, reasons, turn)
                if isinstance(outcome, AppendResult):
                    return outcome
                if outcome is None:  # transient conflict: back off and retry at same count
                    time.sleep(min(0.01 * 2**attempt, 0.2))
                    continue
                count = outcome
                time.sleep(0.002 * attempt)
            except BotoCoreError as exc:
                raise _unavailable(exc) from exc
        raise StoreUnavailable("too many concurrent turns on this session")

    def _turn_items(
        self, pk: dict[str, str], user_seq: int, assistant_seq: int, count: int, turn: TurnRecord
    ) -> list[dict[str, Any]]:
        now = turn.created_at
        set_parts = [
            "messageCount = :new",
            "lastActiveAt = :now",
            "gsi2sk = :now",
        ]
        values: dict[str, Any] = {
            ":new": _n(assistant_seq),
            ":expected": _n(count),
            ":now": _s(now),
            ":active": _s("active"),
        }
        if turn.mark_summary_requested_at is not None:
            set_parts.append("summaryRequestedAt = :sra")
            # Whole milliseconds: a fixed-width number keeps the head's size stable.
            values[":sra"] = _n(int(turn.mark_summary_requested_at * 1000))
        items: list[dict[str, Any]] = [
            {
                "Update": {
                    "TableName": self.table,
                    "Key": {"pk": pk, "sk": _s(SESSION_SK)},
                    "UpdateExpression": "SET " + ", ".join(set_parts),
                    "ConditionExpression": "#st = :active AND messageCount = :expected",
                    "ExpressionAttributeNames": {"#st": "status"},
                    "ExpressionAttributeValues": values,
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            },
            {
                "Put": {
                    "TableName": self.table,
                    "Item": {
                        "pk": pk,
                        "sk": _s(TURN_PREFIX + turn.turn_id),
                        "userSeq": _n(user_seq),
                        "assistantSeq": _n(assistant_seq),
                        "ttl": _n(int(time.time()) + TURN_MARKER_TTL_SECONDS),
                    },
                    "ConditionExpression": "attribute_not_exists(sk)",
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            },
        ]
        for seq, role, content, withheld in (
            (user_seq, "user", turn.user_content, False),
            (assistant_seq, "assistant", turn.answer, turn.withheld),
        ):
            item = {
                "pk": pk,
                "sk": _s(message_sk(seq)),
                "role": _s(role),
                "content": _s(content),
                "createdAt": _s(now),
                "withheld": {"BOOL": withheld},
                "turnId": _s(turn.turn_id),
            }
            if role == "assistant" and turn.run_id:
                item["runId"] = _s(turn.run_id)
            items.append(
                {
                    "Put": {
                        "TableName": self.table,
                        "Item": item,
                        "ConditionExpression": "attribute_not_exists(sk)",
                    }
                }
            )
        if turn.digest_text is not None and turn.digest_tools and turn.digest_expires_at:
            items.append(
                {
                    "Put": {
                        "TableName": self.table,
                        "Item": {
                            "pk": pk,
                            "sk": _s(message_sk(assistant_seq) + DIGEST_SUFFIX),
                            "tools": {"SS": sorted(set(turn.digest_tools))},
                            "text": _s(turn.digest_text),
                            "expiresAt": _n(int(turn.digest_expires_at)),
                            "ttl": _n(int(turn.digest_expires_at)),
                        },
                    }
                }
            )
        return items

    def _cancelled(
        self, session_id: str, reasons: list[dict[str, Any]], turn: TurnRecord
    ) -> AppendResult | int | None:
        """Decide what a cancelled turn transaction means.

        Returns the recorded result (the turn marker already exists), the head's current
        messageCount to retry at, or None for a transient conflict."""
        codes = [r.get("Code", "None") for r in reasons]
        if len(codes) > 1 and codes[1] == "ConditionalCheckFailed":
            marker = reasons[1].get("Item") or self._get_marker(session_id, turn.turn_id)
            if marker:
                return AppendResult(
                    int(marker["userSeq"]["N"]),
                    int(marker["assistantSeq"]["N"]),
                    -1,
                    already_recorded=True,
                )
        if codes and codes[0] == "ConditionalCheckFailed":
            head = reasons[0].get("Item") or self._get_head_item(session_id)
            if not head:
                raise SessionNotFound("session not found")
            if head.get("status", {}).get("S") != "active":
                raise SessionArchived("the session is archived and accepts no new turns")
            return int(head["messageCount"]["N"])
        if any(
            c in ("TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded")
            for c in codes
        ):
            return None
        if any(c == "ValidationError" for c in codes):
            raise ValidationFailed("the turn could not be stored: " + ",".join(codes))
        if any(c == "ConditionalCheckFailed" for c in codes):
            # A message slot was taken while the head did not move: re-read the head.
            head = self._get_head_item(session_id)
            if not head:
                raise SessionNotFound("session not found")
            return int(head["messageCount"]["N"])
        raise StoreUnavailable("turn transaction cancelled: " + ",".join(codes))

    def _get_head_item(self, session_id: str) -> Item | None:
        out = self._call(
            "get_item",
            TableName=self.table,
            Key={"pk": _s(session_pk(session_id)), "sk": _s(SESSION_SK)},
            ConsistentRead=True,
        )
        item: Item | None = out.get("Item")
        return item

    def _get_marker(self, session_id: str, turn_id: str) -> Item | None:
        out = self._call(
            "get_item",
            TableName=self.table,
            Key={"pk": _s(session_pk(session_id)), "sk": _s(TURN_PREFIX + turn_id)},
            ConsistentRead=True,
        )
        item: Item | None = out.get("Item")
        return item

    # -- summary ----------------------------------------------------------------
    def get_summary(self, session_id: str) -> Summary | None:
        out = self._call(
            "get_item",
            TableName=self.table,
            Key={"pk": _s(session_pk(session_id)), "sk": _s(SUMMARY_SK)},
            ConsistentRead=True,
        )
        item = out.get("Item")
        if not item:
            return None
        return Summary(text=item["text"]["S"], through_seq=int(item["throughSeq"]["N"]))

    def advance_summary(self, session_id: str, previous_through: int, summary: Summary) -> bool:
        """Store a newer summary only if the stored one is still at ``previous_through``
        (compare-and-set), so the summary only moves forward and no message is folded
        twice; and only while the session exists, so a deleted conversation gets no
        leftover summary. Returns False when another run moved it first (or the session
        is gone)."""
        if previous_through == 0:
            condition = "attribute_not_exists(sk) OR throughSeq = :prev"
        else:
            condition = "throughSeq = :prev"
        pk = _s(session_pk(session_id))
        try:
            self._client.transact_write_items(
                TransactItems=[
                    {
                        "ConditionCheck": {
                            "TableName": self.table,
                            "Key": {"pk": pk, "sk": _s(SESSION_SK)},
                            "ConditionExpression": "attribute_exists(pk)",
                        }
                    },
                    {
                        "Put": {
                            "TableName": self.table,
                            "Item": {
                                "pk": pk,
                                "sk": _s(SUMMARY_SK),
                                "text": _s(summary.text),
                                "throughSeq": _n(summary.through_seq),
                            },
                            "ConditionExpression": (
                                f"({condition}) AND (attribute_not_exists(sk) OR throughSeq < :new)"
                            ),
                            "ExpressionAttributeValues": {
                                ":prev": _n(previous_through),
                                ":new": _n(summary.through_seq),
                            },
                        }
                    },
                ]
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "TransactionCanceledException":
                reasons = [r.get("Code") for r in exc.response.get("CancellationReasons", [])]
                if "ConditionalCheckFailed" in reasons:
                    return False
                raise StoreUnavailable(f"summary write cancelled: {reasons}") from exc
            raise _translate(exc) from exc
        except BotoCoreError as exc:
            raise _unavailable(exc) from exc
        return True

    def read_messages_range(self, session_id: str, first_seq: int, last_seq: int) -> list[Message]:
        """Messages first_seq..last_seq inclusive (bounded by the caller's chunk size)."""
        return [
            self._message_from(item)
            for item in self._query_all(
                KeyConditionExpression="pk = :pk AND sk BETWEEN :lo AND :hi",
                ExpressionAttributeValues={
                    ":pk": _s(session_pk(session_id)),
                    ":lo": _s(message_sk(first_seq)),
                    ":hi": _s(message_sk(last_seq)),
                },
                # The fold's target came from a consistent read: so must its messages.
                ConsistentRead=True,
            )
            if not item["sk"]["S"].endswith(DIGEST_SUFFIX)
        ]

    # -- runs -------------------------------------------------------------------
    def put_run(self, run: dict[str, Any]) -> None:
        self._call(
            "put_item",
            TableName=self.runs_table,
            Item={
                "runId": _s(run["runId"]),
                "workspaceId": _s(run["workspaceId"]),
                "body": _s(json.dumps(run)),
            },
        )

    def get_run(self, workspace_id: str, run_id: str) -> dict[str, Any] | None:
        out = self._call("get_item", TableName=self.runs_table, Key={"runId": _s(run_id)})
        item = out.get("Item")
        if not item or item["workspaceId"]["S"] != workspace_id:
            return None
        run: dict[str, Any] = json.loads(item["body"]["S"])
        return run


def encode_token(key: Mapping[str, Any] | None) -> str | None:
    """An opaque, URL-safe pagination token."""
    if not key:
        return None
    return base64.urlsafe_b64encode(json.dumps(key, sort_keys=True).encode()).decode().rstrip("=")


def decode_token(token: str | None) -> dict[str, Any] | None:
    if not token:
        return None
    try:
        padded = token + "=" * (-len(token) % 4)
        value = json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValidationFailed("nextToken is not a token this API issued") from exc
    if not isinstance(value, dict):
        raise ValidationFailed("nextToken is not a token this API issued")
    return value
