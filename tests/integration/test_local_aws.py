"""The local runtime's own AWS requests are answered in process by the emulator's app,
behind the same lock and fault switch as its server (local_runtime/aws_emulation.py);
requests for any other address still go out, and stopping the emulator takes the
handler away."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import botocore.handlers
import moto.core.responses
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from local_runtime.aws_emulation import SerializedMotoServer
from tests.support.fake_aws import FAKE_CREDENTIALS

ONE_ATTEMPT = Config(retries={"total_max_attempts": 1})
_MOTOS_OWN = moto.core.responses.method_names_from_class


@pytest.fixture
def outage(tmp_path: Path) -> Path:
    return tmp_path / "turn-writes-fail"


@pytest.fixture
def emulator(outage: Path) -> Iterator[SerializedMotoServer]:
    server = SerializedMotoServer(
        ip_address="127.0.0.1", port=0, verbose=False, fail_turn_writes_while=str(outage)
    )
    server.start()
    server.answer_in_process()
    try:
        yield server
    finally:
        server.stop()


def client(server: SerializedMotoServer, service: str) -> Any:
    host, port = server.get_host_and_port()
    session: Any = boto3.session.Session(
        aws_access_key_id=FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        region_name="us-east-1",
    )
    return session.client(service, endpoint_url=f"http://{host}:{port}", config=ONE_ATTEMPT)


def table(dynamodb: Any) -> str:
    """A new table (moto's backend is the process's: tables outlive an emulator)."""
    name = f"t-{uuid.uuid4().hex}"
    dynamodb.create_table(
        TableName=name,
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    return name


def test_requests_for_the_emulator_are_answered_in_process(emulator: SerializedMotoServer) -> None:
    dynamodb = client(emulator, "dynamodb")
    name = table(dynamodb)
    item = {"pk": {"S": "SESSION#a"}, "sk": {"S": "META"}, "blob": {"B": b"\x00\xff"}}

    dynamodb.put_item(TableName=name, Item=item)
    got = dynamodb.get_item(TableName=name, Key={"pk": item["pk"], "sk": item["sk"]})

    assert got["Item"] == item
    assert emulator.in_process is not None and emulator.in_process.answered == 3


def test_s3_bodies_cross_whole_both_ways(emulator: SerializedMotoServer) -> None:
    s3 = client(emulator, "s3")
    bucket = f"files-{uuid.uuid4().hex}"
    s3.create_bucket(Bucket=bucket)
    body = bytes(range(256)) * 1024  # 256 KiB, every byte value

    s3.put_object(Bucket=bucket, Key="dir/a b.png", Body=body)
    read = s3.get_object(Bucket=bucket, Key="dir/a b.png")

    assert read["Body"].read() == body
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["dir/a b.png"]


def test_the_fault_switch_holds_in_process(emulator: SerializedMotoServer, outage: Path) -> None:
    dynamodb = client(emulator, "dynamodb")
    name = table(dynamodb)
    turn = {"pk": {"S": "SESSION#a"}, "sk": {"S": "MSG#0000000001"}}
    outage.touch()

    with pytest.raises(ClientError) as failed:
        dynamodb.put_item(TableName=name, Item=turn)
    dynamodb.put_item(TableName=name, Item={**turn, "sk": {"S": "META"}})  # not a turn
    outage.unlink()
    dynamodb.put_item(TableName=name, Item=turn)

    assert failed.value.response["Error"]["Code"] == "InternalServerError"
    assert dynamodb.get_item(TableName=name, Key=turn, ConsistentRead=True)["Item"] == turn


def test_other_addresses_go_out_and_stopping_removes_the_handler(
    emulator: SerializedMotoServer,
) -> None:
    handler = emulator.in_process
    elsewhere = boto3.session.Session(
        aws_access_key_id="x", aws_secret_access_key="y", region_name="us-east-1"
    ).client("dynamodb", endpoint_url="http://127.0.0.1:9", config=ONE_ATTEMPT)

    with pytest.raises(Exception) as refused:  # port 9 (discard) is closed here
        elsewhere.list_tables()
    emulator.stop()

    assert "Could not connect" in str(refused.value)
    assert handler is not None and handler.answered == 0
    assert ("before-send", handler) not in botocore.handlers.BUILTIN_HANDLERS
    assert moto.core.responses.method_names_from_class is _MOTOS_OWN  # shortcuts off
