"""moto for every AWS call a test makes: its stand-in credentials and region in the
environment, and nothing there (an endpoint, a profile) that could send a call elsewhere.
The one copy of that set-up, for fixtures and for the in-process stack."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from functools import cache
from typing import Any

import boto3
import botocore.session
from moto import mock_aws

from convo_memory.adapters.aws_clients import AwsClients
from local_runtime.moto_shortcuts import moto_shortcuts

REGION = "us-east-1"
FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
}
# Tests empty a module's queues between its tests: SQS allows one purge a minute.
_MOTO_SETTINGS = {"MOTO_SQS_ENFORCE_STRICT_QUEUE_PURGE_BEHAVIOUR": "false"}
# What would point boto3 away from moto's in-process backend.
_ELSEWHERE = ("AWS_ENDPOINT_URL", "AWS_PROFILE")


@contextmanager
def environment(values: Mapping[str, str], *, remove: tuple[str, ...] = ()) -> Iterator[None]:
    """``os.environ`` with ``values`` set and ``remove`` unset; all of it as it was after."""
    saved = dict(os.environ)
    for name in remove:
        os.environ.pop(name, None)
    os.environ.update(values)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextmanager
def fake_aws(region: str = REGION) -> Iterator[None]:
    """Every AWS call inside goes to moto (a fresh, empty backend unless another
    ``fake_aws`` or ``mock_aws`` is already active), signed with fake credentials, in
    ``region`` unless a client names another. ``boto3.client`` builds on one botocore
    session for the whole process (see ``aws_session``); moto's slow paths are
    short-cut (local_runtime/moto_shortcuts.py)."""
    with (
        environment(
            {**FAKE_CREDENTIALS, **_MOTO_SETTINGS, "AWS_DEFAULT_REGION": region}, remove=_ELSEWHERE
        ),
        mock_aws(),
        moto_shortcuts(),
    ):
        boto3.DEFAULT_SESSION = aws_session(region)  # moto puts the previous one back
        yield


def aws_session(region: str = REGION) -> boto3.session.Session:
    """A boto3 session over the process's one botocore session: a fresh botocore session
    reads every service model from disk again, most of what a client costs. One per
    region: each boto3 session registers its handlers on the botocore session, and S3's
    (its transfer methods) may be registered once only."""
    return _aws_session(region)


@cache
def _aws_session(region: str) -> boto3.session.Session:
    return boto3.session.Session(botocore_session=_botocore_session(), region_name=region)


@cache
def _botocore_session() -> botocore.session.Session:
    return botocore.session.get_session()


@cache
def set_up_clients(region: str = REGION) -> AwsClients:
    """``ensure_resources``' clients over the process's session, each built once and kept
    across ``fake_aws`` blocks (moto's stubber is on every session made after moto's
    import; ``mock_aws`` switches it on and off): building four clients was a third of
    creating a stack's tables, queues, bucket and key. For set-up only: a test that
    registers handlers on a client builds its own."""
    session = aws_session(region)
    return AwsClients(build=lambda service, _region, _patience: session.client(service))  # type: ignore[call-overload]


def empty_tables(names: Iterable[str], region: str = REGION) -> None:
    """Every item of these moto tables gone, each table and its indexes kept: a test
    starts from empty tables without creating them again."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.dynamodb.models import dynamodb_backends

    backend = dynamodb_backends[DEFAULT_ACCOUNT_ID][region]
    for name in names:
        backend.get_table(name).items.clear()


def item_count(dynamodb: Any, table: str) -> int:
    """How many items ``table`` holds, in one cheap request: moto counts them on every
    DescribeTable (DynamoDB itself refreshes ItemCount about every six hours), where a
    COUNT scan reads every item."""
    return int(dynamodb.describe_table(TableName=table)["Table"]["ItemCount"])
