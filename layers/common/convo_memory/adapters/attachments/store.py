"""Conversations' attachments (``ports.AttachmentStore``): bytes in the bucket, counted
references in the conversations table.

- An **object** is ``<ws>/<owner>/<digest>.<gen>`` in the bucket and one item,
  ``pk = ATT#<ws>#<owner>``, ``sk = OBJ#<digest>``: ``rf`` (a string set of the
  sessions that refer to it), ``gn`` (which generation of the key holds the bytes),
  ``cd`` its type, ``sz`` its size, ``nm`` its first name, ``ok`` once the bytes are
  in, ``dy`` while its last release deletes it. A string set's ``ADD`` and ``DELETE``
  are idempotent, so a retried keep or release counts once.
- A **reference** of a session is an item in its own partition, ``sk =
  ATT#<ws>#<owner>#<digest>`` (before ``MSG#``: no turn Query reads it), written before the
  object's set names the session, so whatever removes the session finds what it referred
  to (a turn that failed after storing included). Deletions leave these items to
  ``release``, which deletes them after dropping the session from each set.

An object whose set empties is marked ``dying`` (conditional on the set being empty),
its bytes deleted, then its item (conditional on the same mark). A keep that finds the
mark takes the object over with a new generation, so a release in flight deletes only
the old generation's bytes, never the new ones.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator

from convo_memory.adapters.attachments.bucket import Bucket
from convo_memory.adapters.dynamo.items import ATTACHMENT_REFERENCE_PREFIX
from convo_memory.adapters.dynamo.table import DynamoTable, Item, number_value, string_value
from convo_memory.domain.attachments import (
    CheckedFile,
    FileRef,
    inline_file_id,
    is_upload_id,
    parse_inline_id,
)
from convo_memory.domain.file_types import BY_CODE

REF_PREFIX = ATTACHMENT_REFERENCE_PREFIX
OBJECT_PREFIX = "OBJ#"
# An object item's attributes (short: several are DynamoDB reserved words in full).
REFS, GEN, CODE, SIZE, NAME, STORED, DYING = "rf", "gn", "cd", "sz", "nm", "ok", "dy"


def owner_pk(workspace_id: str, owner: str) -> dict[str, str]:
    return string_value(f"ATT#{workspace_id}#{owner}")


def object_key(workspace_id: str, owner: str, digest: str) -> Item:
    return {"pk": owner_pk(workspace_id, owner), "sk": string_value(OBJECT_PREFIX + digest)}


def reference_key(session_id: str, workspace_id: str, owner: str, digest: str) -> Item:
    return {
        "pk": string_value(f"SESSION#{session_id}"),
        "sk": string_value(f"{REF_PREFIX}{workspace_id}#{owner}#{digest}"),
    }


def object_name(workspace_id: str, ref: FileRef) -> str:
    """Where the bucket holds an attachment's bytes (an upload's, or an inline one's)."""
    if is_upload_id(ref.file_id):
        return upload_name(workspace_id, ref.file_id)
    owner, digest = parse_inline_id(ref.file_id) or ("", "")
    return f"{workspace_id}/{owner}/{digest}.{ref.stored}"


def upload_name(workspace_id: str, file_id: str) -> str:
    return f"{workspace_id}/files/{file_id}"


class S3AttachmentStore:
    def __init__(self, table: DynamoTable, bucket: Bucket) -> None:
        self._table = table
        self._bucket = bucket

    def keep(self, workspace_id: str, owner: str, session_id: str, file: CheckedFile) -> FileRef:
        digest = file.digest
        self._table.call("put_item", Item=reference_key(session_id, workspace_id, owner, digest))
        item = self._add_ref(workspace_id, owner, digest, session_id, file)
        if DYING in item:
            item = self._take_over(workspace_id, owner, digest, item)
        gen = item[GEN]["S"]
        if STORED not in item:
            name = f"{workspace_id}/{owner}/{digest}.{gen}"
            self._bucket.put(name, file.data, file.type.mime)
            self._table.conditional(
                "update_item",
                Key=object_key(workspace_id, owner, digest),
                UpdateExpression="SET ok = :t",
                ConditionExpression="gn = :g",
                ExpressionAttributeValues={":t": {"BOOL": True}, ":g": string_value(gen)},
            )
        file_id = inline_file_id(owner, digest)
        return FileRef(
            type=file.kind,
            file_id=file_id,
            filename=file.filename,
            bytes=len(file.data),
            mime_type=file.type.mime,
            stored=gen,
        )

    def _add_ref(
        self, workspace_id: str, owner: str, digest: str, session_id: str, file: CheckedFile
    ) -> Item:
        out = self._table.call(
            "update_item",
            Key=object_key(workspace_id, owner, digest),
            UpdateExpression=(
                "ADD rf :s SET gn = if_not_exists(gn, :g), cd = if_not_exists(cd, :c), "
                "sz = if_not_exists(sz, :b), nm = if_not_exists(nm, :n)"
            ),
            ExpressionAttributeValues={
                ":s": {"SS": [session_id]},
                ":g": string_value(secrets.token_hex(4)),
                ":c": string_value(file.type.code),
                ":b": number_value(len(file.data)),
                ":n": string_value(file.filename),
            },
            ReturnValues="ALL_NEW",
        )
        attributes: Item = out["Attributes"]
        return attributes

    def _take_over(self, workspace_id: str, owner: str, digest: str, item: Item) -> Item:
        """An object whose last release is deleting it gets a new generation (the
        release deletes the old one's bytes only); its bytes are stored again."""
        _, now = self._table.conditional(
            "update_item",
            Key=object_key(workspace_id, owner, digest),
            UpdateExpression="SET gn = :g REMOVE dy, ok",
            ConditionExpression="dy = :d",
            ExpressionAttributeValues={
                ":g": string_value(secrets.token_hex(4)),
                ":d": item[DYING],
            },
            ReturnValues="ALL_NEW",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
        return now if now is not None else item

    def find(self, workspace_id: str, owner: str, digest: str) -> FileRef | None:
        item = self._table.get(object_key(workspace_id, owner, digest))
        if item is None or STORED not in item or DYING in item:
            return None
        return _ref_of(owner, digest, item)

    def refer(self, workspace_id: str, owner: str, session_id: str, digest: str) -> FileRef | None:
        self._table.call("put_item", Item=reference_key(session_id, workspace_id, owner, digest))
        applied, item = self._table.conditional(
            "update_item",
            Key=object_key(workspace_id, owner, digest),
            UpdateExpression="ADD rf :s",
            ConditionExpression="attribute_exists(ok) AND attribute_not_exists(dy)",
            ExpressionAttributeValues={":s": {"SS": [session_id]}},
            ReturnValues="ALL_NEW",
        )
        if not applied or item is None:
            return None
        return _ref_of(owner, digest, item)

    def read(self, workspace_id: str, ref: FileRef) -> bytes | None:
        return self._bucket.get(object_name(workspace_id, ref))

    def link(self, workspace_id: str, ref: FileRef, seconds: int) -> str:
        return self._bucket.link(object_name(workspace_id, ref), seconds, ref.filename)

    def share(self, parent_id: str, fork_id: str) -> int:
        shared = 0
        for workspace_id, owner, digest in self._references(parent_id):
            self._table.call("put_item", Item=reference_key(fork_id, workspace_id, owner, digest))
            applied, _ = self._table.conditional(
                "update_item",
                Key=object_key(workspace_id, owner, digest),
                UpdateExpression="ADD rf :s",
                ConditionExpression="attribute_exists(gn) AND attribute_not_exists(dy)",
                ExpressionAttributeValues={":s": {"SS": [fork_id]}},
            )
            shared += int(applied)
        return shared

    def release(self, session_id: str) -> int:
        deleted = 0
        found = list(self._references(session_id))
        for workspace_id, owner, digest in found:
            applied, item = self._table.conditional(
                "update_item",
                Key=object_key(workspace_id, owner, digest),
                UpdateExpression="DELETE rf :s",
                ConditionExpression="attribute_exists(pk)",
                ExpressionAttributeValues={":s": {"SS": [session_id]}},
                ReturnValues="ALL_NEW",
            )
            if applied and item is not None and REFS not in item:
                deleted += self._delete_object(workspace_id, owner, digest)
        self._table.delete_keys([reference_key(session_id, *found_ref) for found_ref in found])
        return deleted

    def _delete_object(self, workspace_id: str, owner: str, digest: str) -> int:
        """Delete an object no session refers to: marked, its bytes, then its item."""
        token = string_value(secrets.token_hex(8))
        key = object_key(workspace_id, owner, digest)
        marked, item = self._table.conditional(
            "update_item",
            Key=key,
            UpdateExpression="SET dy = :d",
            ConditionExpression="attribute_exists(pk) AND attribute_not_exists(rf) "
            "AND attribute_not_exists(dy)",
            ExpressionAttributeValues={":d": token},
            ReturnValues="ALL_NEW",
        )
        if not marked or item is None:
            return 0  # referred to again, or another release deletes it
        self._bucket.delete([f"{workspace_id}/{owner}/{digest}.{item[GEN]['S']}"])
        self._table.conditional(
            "delete_item",
            Key=key,
            ConditionExpression="dy = :d AND attribute_not_exists(rf)",
            ExpressionAttributeValues={":d": token},
        )
        return 1

    def remove_owner(self, workspace_id: str, owner: str) -> int:
        deleted, live = 0, set()
        for item in self._table.query_all(
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": owner_pk(workspace_id, owner)},
            ConsistentRead=True,
        ):
            digest = item["sk"]["S"].removeprefix(OBJECT_PREFIX)
            refs = set(item.get(REFS, {}).get("SS", []))
            if refs & self._live_sessions(refs):
                live.add(f"{digest}.{item[GEN]['S']}")
                continue
            if refs:
                self._table.call(
                    "update_item",
                    Key=object_key(workspace_id, owner, digest),
                    UpdateExpression="DELETE rf :s",
                    ExpressionAttributeValues={":s": {"SS": sorted(refs)}},
                )
            deleted += self._delete_object(workspace_id, owner, digest)
        prefix = f"{workspace_id}/{owner}/"
        orphans = [k for k in self._bucket.keys(prefix) if k.removeprefix(prefix) not in live]
        self._bucket.delete(orphans)
        return deleted + len(orphans)

    def _live_sessions(self, session_ids: set[str]) -> set[str]:
        """Those of ``session_ids`` whose head exists and is not being deleted."""
        live: set[str] = set()
        ids = sorted(session_ids)
        for begin in range(0, len(ids), 100):
            keys = [
                {"pk": string_value(f"SESSION#{sid}"), "sk": string_value("SESSION")}
                for sid in ids[begin : begin + 100]
            ]
            for head in self._table.batch_get(keys):
                if head.get("status", {}).get("S") in ("active", "archived"):
                    live.add(head["pk"]["S"].removeprefix("SESSION#"))
        return live

    def _references(self, session_id: str) -> Iterator[tuple[str, str, str]]:
        """(workspace, owner, digest) of each attachment the session refers to."""
        for item in self._table.query_all(
            KeyConditionExpression="pk = :pk AND begins_with(sk, :att)",
            ExpressionAttributeValues={
                ":pk": string_value(f"SESSION#{session_id}"),
                ":att": string_value(REF_PREFIX),
            },
            ProjectionExpression="sk",
            ConsistentRead=True,
        ):
            workspace_id, owner, digest = item["sk"]["S"].removeprefix(REF_PREFIX).split("#")
            yield workspace_id, owner, digest


def _ref_of(owner: str, digest: str, item: Item) -> FileRef:
    """The reference to an object, as its item describes it."""
    file_type = BY_CODE[item[CODE]["S"]]
    return FileRef(
        type=file_type.kind,
        file_id=inline_file_id(owner, digest),
        filename=item[NAME]["S"],
        bytes=int(item[SIZE]["N"]),
        mime_type=file_type.mime,
        stored=item[GEN]["S"],
    )
