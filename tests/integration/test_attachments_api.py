"""(v5) Images and files on the in-process stack (moto's DynamoDB and S3): the Files API
(a multipart upload, list, retrieve, content, delete), attachments kept by reference (one
object per distinct bytes of an owner, a turn's item a few hundred bytes bigger and no
base64 in any table), and objects that go with their sessions: deletion, an erasure, an
upload's expiry."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest

from convo_memory_client.files import multipart
from tests.support.erasure_jobs import run_erasure_jobs
from tests.support.fake_aws import REGION
from tests.support.inprocess_api import ApiResponse, InProcessApi
from tests.support.sample_files import data_url, padded_png, pdf, png
from tests.support.tenants import Tenant

pytestmark = pytest.mark.fresh_stack


def objects(api: InProcessApi) -> list[str]:
    s3 = boto3.client("s3", region_name=REGION)
    bucket = api.resources.buckets["AttachmentsBucket"]
    return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]


def every_item(api: InProcessApi) -> list[dict[str, Any]]:
    dynamodb = api.container.infrastructure.clients["dynamodb"]
    found: list[dict[str, Any]] = []
    for table in api.resources.tables.values():
        found += dynamodb.scan(TableName=table)["Items"]
    return found


def upload(api: InProcessApi, tenant: Tenant, data: bytes, name: str, mime: str) -> ApiResponse:
    body, content_type = multipart({"purpose": "user_data"}, name, data, mime)
    headers = {"content-type": content_type}
    return api.call("POST", "/v1/files", token=tenant.token, raw_body=body, headers=headers)


def chat(api: InProcessApi, tenant: Tenant, key: str, user: str, *parts: Any) -> ApiResponse:
    body = {
        "model": "cap-generative",
        "user": user,
        "messages": [{"role": "user", "content": list(parts)}],
    }
    headers = {"x-convo-session-key": key}
    return api.call(
        "POST", "/v1/chat/completions", token=tenant.token, json_body=body, headers=headers
    )


def image_part(data: bytes) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": data_url("image/png", data)}}


def test_the_files_api_uploads_lists_reads_and_deletes(api: InProcessApi, tenant: Tenant) -> None:
    created = upload(api, tenant, pdf(), "terms.pdf", "application/pdf")
    assert created.status == 200, created.body
    file = created.body
    assert (file["object"], file["bytes"], file["filename"], file["expires_at"]) == (
        "file", len(pdf()), "terms.pdf", None,
    )  # fmt: skip

    listed = api.call("GET", "/v1/files", token=tenant.token).body
    assert [f["id"] for f in listed["data"]] == [file["id"]]
    assert api.call("GET", f"/v1/files/{file['id']}", token=tenant.token).body == file
    content = api.call("GET", f"/v1/files/{file['id']}/content", token=tenant.token)
    assert content.status == 200 and base64.b64decode(content.body) == pdf()

    assert api.call("DELETE", f"/v1/files/{file['id']}", token=tenant.token).status == 200
    gone = api.call("GET", f"/v1/files/{file['id']}", token=tenant.token)
    assert (gone.status, gone.body["error"]["code"]) == (404, "file_not_found")
    assert objects(api) == []


def test_an_upload_the_service_does_not_take_stores_nothing(
    api: InProcessApi, tenant: Tenant
) -> None:
    lying = upload(api, tenant, png(), "terms.pdf", "application/pdf")
    assert (lying.status, lying.body["error"]["param"]) == (422, "file")
    too_big = upload(api, tenant, padded_png(4_000_001), "big.png", "image/png")
    assert too_big.status == 413 and "4,000,000" in too_big.body["error"]["message"]
    not_a_form = api.call("POST", "/v1/files", token=tenant.token, json_body={"file": "x"})
    assert not_a_form.status == 400
    assert (
        objects(api) == [] and api.call("GET", "/v1/files", token=tenant.token).body["data"] == []
    )


def test_attachments_are_kept_by_reference_once_per_owner(
    api: InProcessApi, tenant: Tenant
) -> None:
    first = chat(api, tenant, "k1", "ada", {"type": "text", "text": "Look"}, image_part(png()))
    assert first.status == 200, first.body
    again = chat(api, tenant, "k2", "ada", image_part(png()))  # another session, same user
    other = chat(api, tenant, "k3", "bob", image_part(png()))  # another end user

    assert [r.status for r in (again, other)] == [200, 200]
    assert len(objects(api)) == 2  # one per owner
    encoded = base64.b64encode(png()).decode()
    items = every_item(api)
    assert not any(encoded[:40] in json.dumps(item) for item in items)
    turns = [i for i in items if i.get("sk", {}).get("S", "").startswith("MSG#") and "f" in i]
    assert len(turns) == 3
    for turn in turns:  # what a turn keeps of its one attachment: its reference alone
        assert len("f") + len(turn["f"]["S"].encode()) <= 300

    session = first.body["convo"]["sessionId"]
    (message,) = [
        m
        for m in api.call("GET", f"/v1/sessions/{session}/messages", token=tenant.token).body[
            "messages"
        ]
        if m["role"] == "user"
    ]
    (ref,) = message["attachments"]
    assert (ref["type"], ref["mimeType"], ref["bytes"]) == ("image", "image/png", len(png()))
    read = api.call("GET", f"/v1/files/{ref['fileId']}/content", token=tenant.token)
    assert base64.b64decode(read.body) == png()


def test_objects_go_when_their_last_session_goes(api: InProcessApi, tenant: Tenant) -> None:
    one = chat(api, tenant, "k1", "ada", image_part(png())).body["convo"]["sessionId"]
    two = chat(api, tenant, "k2", "ada", image_part(png())).body["convo"]["sessionId"]
    chat(api, tenant, "k3", "bob", image_part(png(seed=9)))

    api.call("DELETE", f"/v1/sessions/{one}", token=tenant.token)
    assert len(objects(api)) == 2  # ada's other session still refers to hers
    api.call("DELETE", f"/v1/sessions/{two}", token=tenant.token)
    assert len(objects(api)) == 1

    erasure = api.call("POST", "/v1/erasures", token=tenant.token, json_body={"externalRef": "bob"})
    run_erasure_jobs(api)
    done = api.call("GET", f"/v1/erasures/{erasure.body['id']}", token=tenant.token).body
    assert done["status"] == "done" and objects(api) == []


def test_an_upload_that_expires_is_gone_from_its_expiry_and_deleted_by_retention(
    api: InProcessApi, tenant: Tenant
) -> None:
    fields = {
        "purpose": "vision",
        "expires_after[anchor]": "created_at",
        "expires_after[seconds]": "3600",
    }
    body, content_type = multipart(fields, "shot.png", png(), "image/png")
    created = api.call(
        "POST",
        "/v1/files",
        token=tenant.token,
        raw_body=body,
        headers={"content-type": content_type},
    ).body
    assert created["expires_at"] == created["created_at"] + 3600

    later = datetime.fromtimestamp(created["expires_at"] + 1, UTC)
    report = api.container.retention.run(later)

    assert report.files_expired == 1 and objects(api) == []
