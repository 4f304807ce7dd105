"""The turn limiter's table alone on moto (as template.yaml's TurnLimitsTable: key ``id``),
for the limiter's own tests and the benchmark: two clients on it, one whose requests are
measured (serialized, as DynamoDB applies each write to an item atomically: turns race
on their own threads), and one to look at the table without being measured."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import boto3
from moto import mock_aws

from tests.support.inprocess_api import serialized

TABLE = "turn-limits"


@contextmanager
def turn_limits_table(name: str = TABLE) -> Iterator[tuple[Any, Any]]:
    """Inside moto: ``(client, side)`` on a new table ``name``."""
    with mock_aws():
        client, side = (
            boto3.client(
                "dynamodb",
                region_name="us-east-1",
                aws_access_key_id="testing",
                aws_secret_access_key="testing",
            )
            for _ in range(2)
        )
        client.create_table(
            TableName=name,
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            BillingMode="PAY_PER_REQUEST",
        )
        yield serialized(client), side
