"""Erasing end users on DynamoDB: receipts (``WS#<workspace>`` / ``ERASURE#<id>`` in the
conversations table) and the steps that erase one session, over the conversations, runs
and idempotency tables.

Exactly-once counting without a progress list: a step that removes something and a
receipt counter move together, in one transaction (the head's deletion with
``sessionsErased``, a trace's with ``tracesErased``), and the removal is conditional, so
a step repeated after an interruption removes and counts nothing twice. A claimed head
stays in the byExternalRef index (status ``deleting``, ``erasureId``) until it is
removed, so a redelivered job finds every session its first attempt had claimed.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from convo_memory.adapters.dynamo import items
from convo_memory.adapters.dynamo.forks import hand_over_to_forks
from convo_memory.adapters.dynamo.runs import FAILED_RUNS_INDEX, FAILED_SESSION
from convo_memory.adapters.dynamo.sessions import delete_contents, session_items
from convo_memory.adapters.dynamo.table import (
    DynamoTable,
    Item,
    error_code,
    number_value,
    string_value,
    translate,
)
from convo_memory.domain.erasures import Erasure, ErasureStatus, SessionOfEndUser
from convo_memory.domain.errors import StoreRejected, StoreUnavailable
from convo_memory.domain.models import parse_iso

# A claimed head keeps its index keys (so the job can list it again) and nothing personal
# the job does not need: the externalRef stays for the claim's condition.
_MARK = "lastActiveAt"
_CLAIM_REMOVES = ("principal", "metadata", "recall", "gsi2pk", "gsi2sk")


# -- an erasure's receipt (pk = WS#<workspace>, sk = ERASURE#<id>) ---------------------


def erasure_key(workspace_id: str, erasure_id: str) -> Item:
    return {"pk": string_value(f"WS#{workspace_id}"), "sk": string_value(f"ERASURE#{erasure_id}")}


def erasure_item(erasure: Erasure, expires_at: int | None = None) -> Item:
    item: Item = {
        **erasure_key(erasure.workspace_id, erasure.id),
        "externalRef": string_value(erasure.external_ref),
        "traces": string_value(erasure.traces),
        "status": string_value(erasure.status),
        "createdAt": string_value(erasure.created_at),
        "sessionsErased": number_value(erasure.sessions_erased),
        "tracesErased": number_value(erasure.traces_erased),
        "tracesKept": number_value(erasure.traces_kept),
    }
    if erasure.finished_at:
        item["finishedAt"] = string_value(erasure.finished_at)
    if expires_at is not None:
        item["ttl"] = number_value(expires_at)
    return item


def erasure_from(item: Item) -> Erasure:
    return Erasure(
        id=item["sk"]["S"].removeprefix("ERASURE#"),
        workspace_id=item["pk"]["S"].removeprefix("WS#"),
        external_ref=item["externalRef"]["S"],
        traces=item["traces"]["S"],
        status=item["status"]["S"],
        created_at=item["createdAt"]["S"],
        finished_at=item.get("finishedAt", {}).get("S"),
        sessions_erased=int(item.get("sessionsErased", {}).get("N", "0")),
        traces_erased=int(item.get("tracesErased", {}).get("N", "0")),
        traces_kept=int(item.get("tracesKept", {}).get("N", "0")),
    )


class DynamoErasureStore:
    def __init__(
        self,
        table: DynamoTable,
        runs: DynamoTable,
        idempotency: DynamoTable | None,
        receipt_days: float = 30,
    ) -> None:
        self._table = table
        self._runs = runs
        self._idempotency = idempotency
        self._receipt_seconds = receipt_days * 86_400

    # -- receipts -------------------------------------------------------------------------

    def put_erasure(self, erasure: Erasure) -> None:
        created, _ = self._table.conditional(
            "put_item",
            Item=erasure_item(erasure),
            ConditionExpression="attribute_not_exists(pk)",
        )
        if not created:  # ids are random: a collision is a defect
            raise StoreRejected(f"erasure id {erasure.id} already exists")

    def get_erasure(self, workspace_id: str, erasure_id: str) -> Erasure | None:
        item = self._table.get(erasure_key(workspace_id, erasure_id))
        return erasure_from(item) if item else None

    def delete_erasure(self, workspace_id: str, erasure_id: str) -> None:
        self._table.call("delete_item", Key=erasure_key(workspace_id, erasure_id))

    def start_erasure(self, workspace_id: str, erasure_id: str) -> Erasure | None:
        _, item = self._table.conditional(
            "update_item",
            Key=erasure_key(workspace_id, erasure_id),
            UpdateExpression="SET #st = :running REMOVE finishedAt, #ttl",
            ConditionExpression="attribute_exists(pk) AND #st <> :done",
            ExpressionAttributeNames={"#st": "status", "#ttl": "ttl"},
            ExpressionAttributeValues={
                ":running": string_value("running"),
                ":done": string_value("done"),
            },
            ReturnValues="ALL_OLD",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
        return erasure_from(item) if item else None

    def finish_erasure(
        self, workspace_id: str, erasure_id: str, status: ErasureStatus, finished_at: str
    ) -> bool:
        # The receipt names the end user: it expires some days after the erasure ended.
        expires = int(parse_iso(finished_at) + self._receipt_seconds)
        finished, _ = self._table.conditional(
            "update_item",
            Key=erasure_key(workspace_id, erasure_id),
            UpdateExpression="SET #st = :status, finishedAt = :at, #ttl = :ttl",
            ConditionExpression="#st = :running",
            ExpressionAttributeNames={"#st": "status", "#ttl": "ttl"},
            ExpressionAttributeValues={
                ":status": string_value(status),
                ":at": string_value(finished_at),
                ":ttl": number_value(expires),
                ":running": string_value("running"),
            },
        )
        return finished

    def _count(self, workspace_id: str, erasure_id: str, **counters: int) -> dict[str, Any]:
        """A transaction item that adds to the receipt's counters."""
        names = {f"#c{i}": name for i, name in enumerate(counters)}
        values = {f":c{i}": number_value(value) for i, value in enumerate(counters.values())}
        return {
            "Update": {
                "TableName": self._table.name,
                "Key": erasure_key(workspace_id, erasure_id),
                "UpdateExpression": "ADD " + ", ".join(f"#c{i} :c{i}" for i in range(len(names))),
                "ConditionExpression": "attribute_exists(pk)",
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": values,
            }
        }

    # -- sessions -------------------------------------------------------------------------

    def sessions_of(
        self, workspace_id: str, external_ref: str, created_until: str
    ) -> list[SessionOfEndUser]:
        found = []
        for head in self._table.query_all(
            IndexName="byExternalRef",
            # Sort keys are "<createdAt>#<id>"; "~" sorts after every id character.
            KeyConditionExpression="gsi1pk = :p AND gsi1sk < :upper",
            ExpressionAttributeValues={
                ":p": string_value(items.external_ref_pk(workspace_id, external_ref)),
                ":upper": string_value(f"{created_until}#~"),
            },
            ProjectionExpression="pk, createdAt, #st",
            ExpressionAttributeNames={"#st": "status"},
        ):
            found.append(
                SessionOfEndUser(
                    session_id=head["pk"]["S"].removeprefix("SESSION#"),
                    created_at=head["createdAt"]["S"],
                    # The index does not project erasureId: claiming tells whose it is.
                    live=items.head_status(head) in ("active", "archived"),
                )
            )
        return found

    def claim_session(
        self, session_id: str, workspace_id: str, external_ref: str, erasure_id: str, at: str
    ) -> bool:
        claimed, _ = self._table.conditional(
            "update_item",
            Key=items.head_key(session_id),
            UpdateExpression=(
                "SET #st = :del, erasureId = :e, deletedAt = if_not_exists(deletedAt, :at) "
                "REMOVE " + ", ".join(_CLAIM_REMOVES)
            ),
            ConditionExpression=(
                "workspaceId = :ws AND externalRef = :ref AND "
                "(erasureId = :e OR (attribute_not_exists(erasureId) AND #st IN (:a, :r)))"
            ),
            ExpressionAttributeNames={"#st": "status"},
            ExpressionAttributeValues={
                ":del": string_value("deleting"),
                ":e": string_value(erasure_id),
                ":at": string_value(at),
                ":ws": string_value(workspace_id),
                ":ref": string_value(external_ref),
                ":a": string_value("active"),
                ":r": string_value("archived"),
            },
        )
        return claimed

    def newest_activity(self, session_ids: list[str]) -> str | None:
        # One small read a head (only when the slow-turn set is off: see ErasureService).
        marks = []
        for session_id in session_ids:
            head = self._table.get(items.head_key(session_id), ProjectionExpression=_MARK)
            if head is not None and _MARK in head:
                marks.append(str(head[_MARK]["S"]))
        return max(marks, default=None)

    def session_runs(self, session_id: str) -> list[str]:
        runs = {item["r"]["S"] for item in session_items(self._table, session_id) if "r" in item}
        return sorted(runs | set(self._failed_runs(session_id)))

    def _failed_runs(self, session_id: str) -> list[str]:
        """Runs of the session whose turn failed (the sparse failedRunsBySession index)."""
        return [
            item["runId"]["S"]
            for item in self._runs.query_all(
                IndexName=FAILED_RUNS_INDEX,
                KeyConditionExpression=f"{FAILED_SESSION} = :sid",
                ExpressionAttributeValues={":sid": string_value(session_id)},
            )
        ]

    def keep_traces(self, session_id: str, erasure_id: str, count: int) -> int:
        _, attributes = self._table.conditional(
            "update_item",
            Key=items.head_key(session_id),
            UpdateExpression="SET tracesKept = if_not_exists(tracesKept, :n)",
            ConditionExpression="erasureId = :e",
            ExpressionAttributeValues={":n": number_value(count), ":e": string_value(erasure_id)},
            ReturnValues="ALL_NEW",
        )
        if attributes is None:  # no longer ours: removed meanwhile, its count is in
            return 0
        return int(attributes["tracesKept"]["N"])

    def erase_run(self, workspace_id: str, erasure_id: str, run_id: str) -> bool:
        return self._transact(
            {
                "Delete": {
                    "TableName": self._runs.name,
                    "Key": {"runId": string_value(run_id)},
                    "ConditionExpression": "attribute_exists(runId) AND workspaceId = :ws",
                    "ExpressionAttributeValues": {":ws": string_value(workspace_id)},
                }
            },
            self._count(workspace_id, erasure_id, tracesErased=1),
        )

    def erase_contents(self, session_id: str) -> int:
        found = session_items(self._table, session_id)
        self._delete_idempotency_records(found)
        # Then as a deletion does (the owned items too), from the same read.
        return delete_contents(self._table, session_id, found)

    def remove_session(
        self, session_id: str, workspace_id: str, erasure_id: str, traces_kept: int
    ) -> bool:
        return self._transact(
            {
                "Delete": {
                    "TableName": self._table.name,
                    "Key": items.head_key(session_id),
                    "ConditionExpression": "erasureId = :e",
                    "ExpressionAttributeValues": {":e": string_value(erasure_id)},
                }
            },
            self._count(workspace_id, erasure_id, sessionsErased=1, tracesKept=traces_kept),
        )

    def sweep_session(self, session_id: str, erase_traces: bool) -> tuple[int, list[str]]:
        found = session_items(self._table, session_id)
        head = next((item for item in found if item["sk"]["S"] == items.SESSION_SK), None)
        if head is not None and items.head_status(head) != "deleting":
            return 0, []  # live: not ours to sweep (ids are never reused; a safety net)
        rest = [item for item in found if item is not head]
        # (v5) An attachment's reference is the release's to delete (the sweep's caller).
        rest = [item for item in rest if not items.is_attachment_reference(item)]
        hand_over_to_forks(self._table, session_id, rest)
        runs: list[str] = []
        if erase_traces:
            runs = sorted(
                {item["r"]["S"] for item in rest if "r" in item}
                | set(self._failed_runs(session_id))
            )
        self._delete_idempotency_records(rest)
        keys = [{"pk": item["pk"], "sk": item["sk"]} for item in rest]
        return self._table.delete_keys(keys), runs

    # -- shared ---------------------------------------------------------------------------

    def _delete_idempotency_records(self, found: list[Item]) -> None:
        records = sorted({item["k"]["S"] for item in found if "k" in item})
        if records and self._idempotency is not None:
            self._idempotency.delete_keys([{"id": string_value(record)} for record in records])

    def _transact(self, *items: dict[str, Any]) -> bool:
        """Apply the writes together: True, or False when a condition failed (nothing
        applied). Capacity and conflict errors raise ``StoreUnavailable``."""
        try:
            self._table.client.transact_write_items(TransactItems=list(items))
        except ClientError as exc:
            if error_code(exc) == "TransactionCanceledException":
                reasons = exc.response.get("CancellationReasons") or []
                codes = {str(reason.get("Code", "")) for reason in reasons}
                if "ConditionalCheckFailed" in codes:
                    return False
                # A conflict with another transaction, or throttling: worth a retry.
                raise StoreUnavailable(
                    f"transaction cancelled ({', '.join(sorted(codes))})"
                ) from exc
            raise translate(exc) from exc
        except BotoCoreError as exc:
            raise translate(exc) from exc
        return True
