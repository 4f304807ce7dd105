"""Records what the handlers ask AWS for, as IAM authorization requests per function.

Hooks botocore's ``before-parameter-build`` events of the in-process stack's DynamoDB and SQS
clients (and, v5, S3's), so it sees the real adapters' real calls (Powertools' idempotency included),
and turns each into the IAM actions, resources and ``dynamodb:LeadingKeys`` AWS would
check: a transaction is one request per item, a batch write one per table.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from local_runtime.aws_resources import DEFAULT_PREFIX
from tests.support.stack_template import ACCOUNT, PARTITION, REGION, Request

# The partition key of the table and of each index (a Query's leading key).
HASH_KEYS = {None: {"pk", "id", "runId"}, "byExternalRef": {"gsi1pk"}, "byActivity": {"gsi2pk"}}
_TRANSACT = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
}


def _logical(physical: str) -> str:
    return physical.removeprefix(DEFAULT_PREFIX)


def table_arn(table: str, index: str | None = None) -> str:
    arn = f"arn:{PARTITION}:dynamodb:{REGION}:{ACCOUNT}:table/{_logical(table)}"
    return f"{arn}/index/{index}" if index else arn


def _leading_key(item: dict[str, Any] | None) -> tuple[str, ...]:
    for name in ("pk", "id", "runId"):
        if item and name in item:
            return (next(iter(item[name].values())),)
    return ()


def _query_leading_key(params: dict[str, Any]) -> tuple[str, ...]:
    names = params.get("ExpressionAttributeNames") or {}
    values = params.get("ExpressionAttributeValues") or {}
    keys = HASH_KEYS.get(params.get("IndexName"), set())
    for attribute, placeholder in re.findall(
        r"(#?\w+)\s*=\s*(:\w+)", params.get("KeyConditionExpression", "")
    ):
        if names.get(attribute, attribute) in keys:
            return (next(iter(values[placeholder].values())),)
    return ()


def dynamodb_requests(operation: str, params: dict[str, Any]) -> list[Request]:
    """The IAM requests one DynamoDB API call makes."""
    action = f"dynamodb:{operation}"
    if operation == "TransactWriteItems":
        found = []
        for entry in params["TransactItems"]:
            ((kind, item),) = entry.items()
            key = item.get("Key") or item.get("Item")
            found.append(
                Request(
                    f"dynamodb:{_TRANSACT[kind]}",
                    table_arn(item["TableName"]),
                    {"dynamodb:LeadingKeys": _leading_key(key)},
                )
            )
        return found
    if operation in ("BatchWriteItem", "BatchGetItem"):
        found = []
        for table, entries in params["RequestItems"].items():
            keys: list[str] = []
            for entry in entries if isinstance(entries, list) else entries["Keys"]:
                request = entry.get("PutRequest") or entry.get("DeleteRequest") or {}
                keys += _leading_key(request.get("Item") or request.get("Key") or entry)
            context = {"dynamodb:LeadingKeys": tuple(keys)}
            found.append(Request(action, table_arn(table), context))
        return found
    table = params["TableName"]
    if operation == "Query":
        index = params.get("IndexName")
        leading = _query_leading_key(params)
        return [Request(action, table_arn(table, index), {"dynamodb:LeadingKeys": leading})]
    key = params.get("Key") or params.get("Item")
    return [Request(action, table_arn(table), {"dynamodb:LeadingKeys": _leading_key(key)})]


def sqs_requests(operation: str, params: dict[str, Any]) -> list[Request]:
    queue = _logical(params["QueueUrl"].rsplit("/", 1)[1])
    return [Request(f"sqs:{operation}", f"arn:{PARTITION}:sqs:{REGION}:{ACCOUNT}:{queue}")]


# (v5) An S3 operation and the IAM action it needs; ``None``: on the bucket, not an object.
_S3_ACTIONS = {
    "PutObject": "s3:PutObject",
    "GetObject": "s3:GetObject",
    "DeleteObject": "s3:DeleteObject",
    "DeleteObjects": "s3:DeleteObject",
    "ListObjectsV2": "s3:ListBucket",
    "HeadObject": "s3:GetObject",
}


def s3_requests(operation: str, params: dict[str, Any], buckets: dict[str, str]) -> list[Request]:
    """The IAM requests one S3 API call makes (its bucket by logical id)."""
    bucket = buckets.get(params["Bucket"], params["Bucket"])
    arn = f"arn:{PARTITION}:s3:::{bucket}"
    action = _S3_ACTIONS.get(operation, f"s3:{operation}")
    if operation == "ListObjectsV2":
        return [Request(action, arn)]
    keys = (
        [o["Key"] for o in params["Delete"]["Objects"]] if "Delete" in params else [params["Key"]]
    )
    found = [Request(action, f"{arn}/{key}") for key in keys]
    if params.get("Tagging"):
        found += [Request("s3:PutObjectTagging", f"{arn}/{key}") for key in keys]
    return found


class AwsCallRecorder:
    """Who asked AWS for what: requests by the function that was running."""

    def __init__(self) -> None:
        self.by_function: dict[str, list[Request]] = defaultdict(list)
        self.current: str | None = None

    def attach(
        self, dynamodb: Any, sqs: Any, s3: Any = None, buckets: dict[str, str] | None = None
    ) -> AwsCallRecorder:
        """Record the clients' calls (``buckets``: physical bucket name -> logical id)."""
        dynamodb.meta.events.register("before-parameter-build.dynamodb", self._dynamodb)
        sqs.meta.events.register("before-parameter-build.sqs", self._sqs)
        if s3 is not None:
            self._buckets = dict(buckets or {})
            s3.meta.events.register("before-parameter-build.s3", self._s3)
        return self

    @contextmanager
    def running(self, function: str) -> Iterator[None]:
        """Attribute the calls made inside the block (threads included) to ``function``."""
        previous, self.current = self.current, function
        try:
            yield
        finally:
            self.current = previous

    def _dynamodb(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        if self.current is not None:
            self.by_function[self.current].extend(dynamodb_requests(model.name, params))

    def _s3(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        if self.current is not None:
            self.by_function[self.current].extend(s3_requests(model.name, params, self._buckets))

    def _sqs(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        if self.current is not None:
            self.by_function[self.current].extend(sqs_requests(model.name, params))
