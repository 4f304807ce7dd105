"""The files a workspace uploaded (``ports.FileStore``): the bytes at
``<ws>/files/<id>`` in the bucket, the file as one item, ``pk = WS#<ws>``, ``sk =
FILE#<id>`` (name, size, type, purpose, times). A file that expires also sits in the
byActivity index under ``FILES#NN`` (sort key: when it expires), where the retention run
finds it to delete its bytes; its item carries a TTL a day later, and reads treat it as
gone from its expiry on."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

from convo_memory.adapters.attachments.bucket import Bucket
from convo_memory.adapters.attachments.store import upload_name
from convo_memory.adapters.dynamo.items import ACTIVITY_SHARDS, activity_shard
from convo_memory.adapters.dynamo.table import DynamoTable, Item, number_value, string_value
from convo_memory.domain.attachments import CheckedFile
from convo_memory.domain.file_types import BY_CODE
from convo_memory.domain.models import iso_at
from convo_memory.ports.files import UploadedFile

FILE_PREFIX = "FILE#"
EXPIRY_INDEX_PREFIX = "FILES"
# What the bucket's lifecycle backstop deletes (template.yaml, ExpiredUploadsBackstop).
EXPIRY_TAG = "convo-expires=true"
# DynamoDB's TTL deletes lazily; the item outlives its expiry by this much at least.
TTL_GRACE_SECONDS = 24 * 3600


def file_key(workspace_id: str, file_id: str) -> Item:
    return {"pk": string_value(f"WS#{workspace_id}"), "sk": string_value(FILE_PREFIX + file_id)}


def new_upload_id() -> str:
    return f"file-{secrets.token_hex(12)}"


class S3FileStore:
    def __init__(self, table: DynamoTable, bucket: Bucket) -> None:
        self._table = table
        self._bucket = bucket

    def put(
        self, workspace_id: str, file: CheckedFile, purpose: str, expires_at: int | None, now: int
    ) -> UploadedFile:
        uploaded = UploadedFile(
            file_id=new_upload_id(),
            filename=file.filename,
            bytes=len(file.data),
            mime_type=file.type.mime,
            purpose=purpose,
            created_at=now,
            expires_at=expires_at,
        )
        tags = EXPIRY_TAG if expires_at is not None else ""
        self._bucket.put(
            upload_name(workspace_id, uploaded.file_id), file.data, file.type.mime, tags
        )
        item: Item = {
            **file_key(workspace_id, uploaded.file_id),
            "name": string_value(file.filename),
            "bytes": number_value(len(file.data)),
            "code": string_value(file.type.code),
            "purpose": string_value(purpose),
            "createdAt": number_value(now),
        }
        if expires_at is not None:
            shard = activity_shard(uploaded.file_id)
            item |= {
                "expiresAt": number_value(expires_at),
                "ttl": number_value(expires_at + TTL_GRACE_SECONDS),
                "gsi2pk": string_value(f"{EXPIRY_INDEX_PREFIX}#{shard:02d}"),
                "gsi2sk": string_value(iso_at(expires_at)),
            }
        self._table.call("put_item", Item=item)
        return uploaded

    def get(self, workspace_id: str, file_id: str, now: int) -> UploadedFile | None:
        item = self._table.get(file_key(workspace_id, file_id))
        return _live(item, now) if item is not None else None

    def list(
        self, workspace_id: str, now: int, limit: int, after: str | None
    ) -> tuple[list[UploadedFile], bool]:
        files: list[UploadedFile] = []
        start = FILE_PREFIX + (after or "")
        for item in self._table.query_all(
            KeyConditionExpression="pk = :pk AND sk BETWEEN :lo AND :hi",
            ExpressionAttributeValues={
                ":pk": string_value(f"WS#{workspace_id}"),
                ":lo": string_value(start + ("\x00" if after else "")),
                ":hi": string_value(FILE_PREFIX + "~"),
            },
            Limit=limit + 1,
        ):
            live = _live(item, now)
            if live is None:
                continue
            if len(files) == limit:
                return files, True
            files.append(live)
        return files, False

    def delete(self, workspace_id: str, file_id: str) -> bool:
        out = self._table.call(
            "delete_item", Key=file_key(workspace_id, file_id), ReturnValues="ALL_OLD"
        )
        if not out.get("Attributes"):
            return False
        self._bucket.delete([upload_name(workspace_id, file_id)])
        return True

    def expired(self, now: int) -> Iterator[tuple[str, str]]:
        for shard in range(ACTIVITY_SHARDS):
            for item in self._table.query_all(
                IndexName="byActivity",
                KeyConditionExpression="gsi2pk = :p AND gsi2sk <= :now",
                ExpressionAttributeValues={
                    ":p": string_value(f"{EXPIRY_INDEX_PREFIX}#{shard:02d}"),
                    ":now": string_value(iso_at(now)),
                },
            ):
                workspace_id = item["pk"]["S"].removeprefix("WS#")
                yield workspace_id, item["sk"]["S"].removeprefix(FILE_PREFIX)


def _live(item: Item, now: int) -> UploadedFile | None:
    """The file an item holds; None once it has expired."""
    expires = int(item["expiresAt"]["N"]) if "expiresAt" in item else None
    if expires is not None and expires <= now:
        return None
    file_type = BY_CODE[item["code"]["S"]]
    return UploadedFile(
        file_id=item["sk"]["S"].removeprefix(FILE_PREFIX),
        filename=item["name"]["S"],
        bytes=int(item["bytes"]["N"]),
        mime_type=file_type.mime,
        purpose=item["purpose"]["S"],
        created_at=int(item["createdAt"]["N"]),
        expires_at=expires,
    )
