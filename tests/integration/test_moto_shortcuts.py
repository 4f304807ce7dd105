"""moto's shortcuts (local_runtime/moto_shortcuts.py, the local runtime's and the test
stack's) change no answer: the same queries, of a table and of an index, page by page and
backwards, return the same items, counts and next keys with them as without them; KMS
keys that share a key pair still encrypt each with material of its own; what is read
once (a response class's methods, moto's own services) is what is read each time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import moto.backends
import moto.core.responses
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from local_runtime import moto_shortcuts as shortcuts
from local_runtime.moto_shortcuts import moto_shortcuts
from tests.support.fake_aws import FAKE_CREDENTIALS, REGION, environment

TABLE = "shortcuts"


@pytest.fixture
def dynamodb() -> Iterator[Any]:
    """A table with a sort key and an index, a few partitions of items, in plain moto."""
    with environment({**FAKE_CREDENTIALS, "AWS_DEFAULT_REGION": REGION}), mock_aws():
        client = boto3.client("dynamodb", region_name=REGION)
        client.create_table(
            TableName=TABLE,
            BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[
                {"AttributeName": name, "AttributeType": "S"}
                for name in ("pk", "sk", "gsi1pk", "gsi1sk")
            ],
            KeySchema=[
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            GlobalSecondaryIndexes=[
                {
                    "IndexName": "byRef",
                    "KeySchema": [
                        {"AttributeName": "gsi1pk", "KeyType": "HASH"},
                        {"AttributeName": "gsi1sk", "KeyType": "RANGE"},
                    ],
                    "Projection": {"ProjectionType": "ALL"},
                }
            ],
        )
        for session in range(6):
            for seq in range(9, 0, -1):  # written out of order
                item = {
                    "pk": {"S": f"SESSION#{session}"},
                    "sk": {"S": f"MSG#{seq:04d}"},
                    "n": {"N": str(seq % 4)},
                }
                if seq == 1:  # one index entry per session, two end users
                    item["gsi1pk"] = {"S": f"REF#{session % 2}"}
                    item["gsi1sk"] = {"S": f"2026-01-0{session + 1}#{session}"}
                client.put_item(TableName=TABLE, Item=item)
        yield client


QUERIES: list[dict[str, Any]] = [
    {
        "KeyConditionExpression": "pk = :p",
        "ExpressionAttributeValues": {":p": {"S": "SESSION#3"}},
    },
    {
        "KeyConditionExpression": "pk = :p AND sk BETWEEN :a AND :b",
        "ExpressionAttributeValues": {
            ":p": {"S": "SESSION#2"},
            ":a": {"S": "MSG#0003"},
            ":b": {"S": "MSG#0007"},
        },
        "ScanIndexForward": False,
    },
    {
        "KeyConditionExpression": "pk = :p AND begins_with(sk, :m)",
        "FilterExpression": "n = :n",
        "ExpressionAttributeValues": {
            ":p": {"S": "SESSION#0"},
            ":m": {"S": "MSG#"},
            ":n": {"N": "1"},
        },
        "Limit": 4,
    },
    {
        "KeyConditionExpression": "pk = :p",
        "ExpressionAttributeValues": {":p": {"S": "SESSION#missing"}},
    },
    {
        "IndexName": "byRef",
        "KeyConditionExpression": "gsi1pk = :r AND gsi1sk < :upper",
        "ExpressionAttributeValues": {":r": {"S": "REF#1"}, ":upper": {"S": "2026-01-05#~"}},
        "Limit": 1,
    },
    {
        "IndexName": "byRef",
        "KeyConditionExpression": "gsi1pk = :r",
        "ExpressionAttributeValues": {":r": {"S": "REF#0"}},
        "ScanIndexForward": False,
    },
]


def every_page(client: Any, query: dict[str, Any]) -> list[dict[str, Any]]:
    """Each page's items, counts and next key, following the next keys to the end."""
    pages: list[dict[str, Any]] = []
    start: dict[str, Any] | None = None
    while True:
        args = {"TableName": TABLE, **query, **({"ExclusiveStartKey": start} if start else {})}
        out = client.query(**args)
        pages.append(
            {k: out.get(k) for k in ("Items", "Count", "ScannedCount", "LastEvaluatedKey")}
        )
        start = out.get("LastEvaluatedKey")
        if not start:
            return pages


@pytest.mark.parametrize("query", QUERIES, ids=lambda query: query["KeyConditionExpression"])
def test_a_query_answers_the_same_with_the_shortcut(dynamodb: Any, query: dict[str, Any]) -> None:
    plain = every_page(dynamodb, query)

    with moto_shortcuts():
        short_cut = every_page(dynamodb, query)

    assert short_cut == plain
    assert sum(page["Count"] for page in plain) > 0 or "missing" in str(query)


def test_keys_sharing_a_key_pair_still_encrypt_and_decrypt_each_with_its_own_key() -> None:
    with (
        environment({**FAKE_CREDENTIALS, "AWS_DEFAULT_REGION": REGION}),
        mock_aws(),
        moto_shortcuts(),
    ):
        kms = boto3.client("kms", region_name=REGION)
        keys = [kms.create_key()["KeyMetadata"]["KeyId"] for _ in range(2)]
        sealed = [kms.encrypt(KeyId=key, Plaintext=b"whsec_1")["CiphertextBlob"] for key in keys]

        for key, blob in zip(keys, sealed, strict=True):
            assert kms.decrypt(CiphertextBlob=blob, KeyId=key)["Plaintext"] == b"whsec_1"
        with pytest.raises(ClientError):
            kms.decrypt(CiphertextBlob=sealed[0], KeyId=keys[1])


def test_what_is_read_once_is_what_moto_reads_each_time() -> None:
    from moto.dynamodb.responses import DynamoHandler
    from moto.sqs.responses import SQSResponse

    plain = {
        handler: set(moto.core.responses.method_names_from_class(handler))
        for handler in (DynamoHandler, SQSResponse)
    }
    modules = list(moto.backends.list_of_moto_modules())

    with moto_shortcuts():
        for handler, names in plain.items():
            assert set(moto.core.responses.method_names_from_class(handler)) == names
            assert "query" in names or "receive_message" in names
        assert list(moto.backends.list_of_moto_modules()) == modules
        assert {"dynamodb", "sqs", "s3", "kms"} <= set(modules)

    # Uninstalled: moto's own functions again.
    assert moto.core.responses.method_names_from_class(DynamoHandler) == sorted(
        plain[DynamoHandler]
    )


EVERY_TYPE = {
    "pk": {"S": "SESSION#typed"},
    "sk": {"S": "MSG#0001"},
    "s": {"S": 'text with "quotes" and \u00e9'},
    "n": {"N": "1.50"},
    "b": {"B": b"\x00\x01binary"},
    "ss": {"SS": ["x", "y"]},
    "ns": {"NS": ["1", "2"]},
    "bs": {"BS": [b"q", b"r"]},
    "m": {"M": {"none": {"NULL": True}, "l": {"L": [{"BOOL": False}, {"N": "3"}]}}},
}
TYPED_KEY = {"pk": EVERY_TYPE["pk"], "sk": EVERY_TYPE["sk"]}


def item_operations(client: Any) -> list[Any]:
    """Each item operation's answer, as boto3 reads it (request ids left out), on an item
    holding every attribute type."""
    answers = [
        client.put_item(TableName=TABLE, Item=EVERY_TYPE, ReturnConsumedCapacity="TOTAL"),
        client.get_item(TableName=TABLE, Key=TYPED_KEY),
        client.get_item(TableName=TABLE, Key={**TYPED_KEY, "sk": {"S": "MSG#none"}}),
        client.query(
            TableName=TABLE,
            KeyConditionExpression="pk = :p",
            ExpressionAttributeValues={":p": EVERY_TYPE["pk"]},
            ReturnConsumedCapacity="INDEXES",
        ),
        client.scan(TableName=TABLE, Limit=3),
        client.update_item(
            TableName=TABLE,
            Key=TYPED_KEY,
            UpdateExpression="SET x = :x",
            ExpressionAttributeValues={":x": {"B": b"\xff"}},
            ReturnValues="ALL_OLD",
        ),
        client.batch_get_item(RequestItems={TABLE: {"Keys": [TYPED_KEY]}}),
        client.transact_get_items(TransactItems=[{"Get": {"TableName": TABLE, "Key": TYPED_KEY}}]),
        client.delete_item(TableName=TABLE, Key=TYPED_KEY, ReturnValues="ALL_OLD"),
    ]
    for answer in answers:
        answer.pop("ResponseMetadata", None)
    return answers


def test_item_operations_answer_the_same_written_directly(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = item_operations(dynamodb)
    walked: list[str] = []
    real = shortcuts._REAL_DYNAMO_RESULT

    def walk(result: Any, context: Any) -> Any:
        walked.append(context.operation_model.name)
        return real(result, context)

    monkeypatch.setattr(shortcuts, "_REAL_DYNAMO_RESULT", walk)
    with moto_shortcuts():
        direct = item_operations(dynamodb)

    assert direct == plain
    assert walked == []  # every answer above written directly
    assert plain[1]["Item"]["b"] == {"B": b"\x00\x01binary"}
    assert "Item" not in plain[2] and plain[5]["Attributes"]["bs"] == {"BS": [b"q", b"r"]}
