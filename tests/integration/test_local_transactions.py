"""The local runtime's DynamoDB transactions: all or nothing, as on AWS, without moto's
backup of every table a transaction names (which made each one cost time in proportion
to the whole table)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from moto.dynamodb import models
from moto.dynamodb.models.table import Table

from local_runtime.aws_emulation import item_level_transactions

TABLE = "conversations"


def install(monkeypatch: pytest.MonkeyPatch) -> None:
    # Undone after the test: other modules of this process keep moto as it ships.
    backend = models.DynamoDBBackend
    monkeypatch.setattr(backend, "transact_write_items", backend.transact_write_items)
    monkeypatch.setattr(models, "copy", models.copy)
    item_level_transactions()


@pytest.fixture
def dynamodb(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    install(monkeypatch)

    def no_table_copies(self: Table, memo: dict[int, Any]) -> Table:
        raise AssertionError("a transaction deep-copied a whole table")

    monkeypatch.setattr(Table, "__deepcopy__", no_table_copies, raising=False)
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(
            TableName=TABLE,
            KeySchema=[
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
                {"AttributeName": "ref", "AttributeType": "S"},
            ],
            GlobalSecondaryIndexes=[
                {
                    "IndexName": "byRef",
                    "KeySchema": [{"AttributeName": "ref", "KeyType": "HASH"}],
                    "Projection": {"ProjectionType": "ALL"},
                }
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        yield client


def put(pk: str, sk: str, **attributes: str) -> dict[str, Any]:
    item = {"pk": {"S": pk}, "sk": {"S": sk}} | {k: {"S": v} for k, v in attributes.items()}
    return {"Put": {"TableName": TABLE, "Item": item}}


def item(client: Any, pk: str, sk: str) -> dict[str, Any] | None:
    found: dict[str, Any] | None = client.get_item(
        TableName=TABLE, Key={"pk": {"S": pk}, "sk": {"S": sk}}
    ).get("Item")
    return found


def by_ref(client: Any, ref: str) -> list[str]:
    items = client.query(
        TableName=TABLE,
        IndexName="byRef",
        KeyConditionExpression="#r = :r",
        ExpressionAttributeNames={"#r": "ref"},
        ExpressionAttributeValues={":r": {"S": ref}},
    )["Items"]
    return sorted(i["sk"]["S"] for i in items)


def test_a_transaction_writes_every_item_it_names(dynamodb: Any) -> None:
    dynamodb.transact_write_items(
        TransactItems=[put("S#1", "HEAD", ref="r1"), put("KEY#k", "KEY", ref="r1")]
    )

    assert by_ref(dynamodb, "r1") == ["HEAD", "KEY"]


def test_a_failed_condition_leaves_every_item_as_it_was_indexes_included(dynamodb: Any) -> None:
    dynamodb.transact_write_items(TransactItems=[put("S#1", "HEAD", ref="old", text="before")])
    before = item(dynamodb, "S#1", "HEAD")

    with pytest.raises(ClientError) as refused:
        dynamodb.transact_write_items(
            TransactItems=[
                put("S#1", "HEAD", ref="new", text="after"),  # applied, then undone
                put("S#2", "NEW", ref="new"),  # created, then removed
                {
                    "Update": {
                        "TableName": TABLE,
                        "Key": {"pk": {"S": "S#1"}, "sk": {"S": "MISSING"}},
                        "UpdateExpression": "SET #t = :t",
                        "ConditionExpression": "attribute_exists(pk)",
                        "ExpressionAttributeNames": {"#t": "text"},
                        "ExpressionAttributeValues": {":t": {"S": "x"}},
                    }
                },
            ]
        )

    assert refused.value.response["Error"]["Code"] == "TransactionCanceledException"
    assert item(dynamodb, "S#1", "HEAD") == before
    assert item(dynamodb, "S#2", "NEW") is None
    assert item(dynamodb, "S#1", "MISSING") is None
    assert by_ref(dynamodb, "old") == ["HEAD"]
    assert by_ref(dynamodb, "new") == []


def test_an_update_undone_restores_the_attributes_it_changed(dynamodb: Any) -> None:
    dynamodb.transact_write_items(TransactItems=[put("S#1", "HEAD", ref="r", n="1")])
    before = item(dynamodb, "S#1", "HEAD")

    with pytest.raises(ClientError):
        dynamodb.transact_write_items(
            TransactItems=[
                {
                    "Update": {
                        "TableName": TABLE,
                        "Key": {"pk": {"S": "S#1"}, "sk": {"S": "HEAD"}},
                        "UpdateExpression": "SET #n = :n REMOVE #r",
                        "ExpressionAttributeNames": {"#n": "n", "#r": "ref"},
                        "ExpressionAttributeValues": {":n": {"S": "2"}},
                    }
                },
                {
                    "ConditionCheck": {
                        "TableName": TABLE,
                        "Key": {"pk": {"S": "S#9"}, "sk": {"S": "HEAD"}},
                        "ConditionExpression": "attribute_exists(pk)",
                    }
                },
            ]
        )

    assert item(dynamodb, "S#1", "HEAD") == before
    assert by_ref(dynamodb, "r") == ["HEAD"]


def test_installing_twice_keeps_one_wrapper(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch)
    wrapper = models.DynamoDBBackend.transact_write_items
    item_level_transactions()

    assert models.DynamoDBBackend.transact_write_items is wrapper
