"""(v5) The S3 attachment store on moto: one object per distinct bytes of an owner,
counted by the sessions that refer to it; a release that races a keep never deletes
the bytes a keep just stored; an erasure's sweep of an owner leaves nothing of them."""

from __future__ import annotations

from typing import Any

from convo_memory.adapters.attachments.bucket import Bucket
from convo_memory.adapters.attachments.store import S3AttachmentStore, object_key
from convo_memory.adapters.dynamo.table import DynamoTable
from convo_memory.domain.attachments import InlineFile, check_file
from tests.support.inprocess_api import InProcessApi
from tests.support.sample_files import png

WS, OWNER = "ws_store", "u" + "a" * 24


def store_of(api: InProcessApi) -> tuple[S3AttachmentStore, DynamoTable, Any, str]:
    clients = api.container.infrastructure.clients
    table = DynamoTable(clients["dynamodb"], api.resources.tables["ConversationsTable"])
    bucket = api.resources.buckets["AttachmentsBucket"]
    return (
        S3AttachmentStore(table, Bucket(lambda: clients["s3"], bucket)),
        table,
        clients["s3"],
        bucket,
    )


def keys(s3: Any, bucket: str, owner: str = OWNER) -> list[str]:
    found = s3.list_objects_v2(Bucket=bucket, Prefix=f"{WS}/{owner}/").get("Contents", [])
    return [o["Key"] for o in found]


def test_one_object_per_owner_counted_until_the_last_session_releases_it(api: InProcessApi) -> None:
    store, _, s3, bucket = store_of(api)
    file = check_file(InlineFile(png(seed=11), "image/png", "a.png", "x"))

    first = store.keep(WS, OWNER, "ses_a", file)
    again = store.keep(WS, OWNER, "ses_b", file)
    store.share("ses_b", "ses_fork")

    assert first.file_id == again.file_id and first.stored == again.stored
    assert len(keys(s3, bucket)) == 1
    assert store.read(WS, first) == png(seed=11)
    assert (store.release("ses_a"), store.release("ses_b")) == (0, 0)
    assert store.find(WS, OWNER, file.digest) is not None  # the fork still refers to it
    assert store.release("ses_fork") == 1
    assert keys(s3, bucket) == [] and store.find(WS, OWNER, file.digest) is None
    assert store.release("ses_fork") == 0  # a retried release changes nothing


def test_a_keep_during_a_release_stores_a_new_generation_the_release_leaves(
    api: InProcessApi,
) -> None:
    store, table, s3, bucket = store_of(api)
    file = check_file(InlineFile(png(seed=12), "image/png", "b.png", "x"))
    old = store.keep(WS, OWNER, "ses_c", file)
    # A release of ses_c has emptied the set and marked the object (it deletes next).
    table.call(
        "update_item",
        Key=object_key(WS, OWNER, file.digest),
        UpdateExpression="DELETE rf :s SET dy = :d",
        ExpressionAttributeValues={":s": {"SS": ["ses_c"]}, ":d": {"S": "release-1"}},
    )

    new = store.keep(WS, OWNER, "ses_d", file)  # the same bytes, sent again meanwhile

    assert new.stored != old.stored
    s3.delete_object(Bucket=bucket, Key=f"{WS}/{OWNER}/{file.digest}.{old.stored}")  # the release
    assert store.read(WS, new) == png(seed=12)
    assert store.find(WS, OWNER, file.digest) == new.model_copy(update={"filename": "b.png"})


def test_removing_an_owner_leaves_only_what_a_live_session_refers_to(api: InProcessApi) -> None:
    store, _, s3, bucket = store_of(api)
    owner = "u" + "b" * 24
    gone = check_file(InlineFile(png(seed=13), "image/png", "c.png", "x"))
    store.keep(WS, owner, "ses_erased", gone)
    s3.put_object(Bucket=bucket, Key=f"{WS}/{owner}/stray.0000", Body=b"x")  # a keep cut short
    live_session = api.call(
        "POST",
        "/v1/sessions",
        token=_token(api),
        json_body={"capabilityId": "cap-generative", "externalRef": "someone"},
    ).body["id"]
    kept = check_file(InlineFile(png(seed=14), "image/png", "d.png", "x"))
    ref = store.keep(WS, owner, live_session, kept)

    store.remove_owner(WS, owner)

    assert keys(s3, bucket, owner) == [f"{WS}/{owner}/{kept.digest}.{ref.stored}"]


def _token(api: InProcessApi) -> str:
    from tests.support.inprocess_api import new_workspace

    return new_workspace(api, "store")[1]
