"""The cursor key from Secrets Manager (the AWS path), against moto."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from convo_memory.adapters.aws_clients import AwsClients
from convo_memory.adapters.cursors import (
    CursorCodec,
    CursorKeyUnavailable,
    key_from_secret,
    key_source,
)
from convo_memory.config import Settings
from convo_memory.domain.errors import ValidationFailed
from convo_memory.execution_environment import build_container
from tests.support.fake_aws import fake_aws

SCOPE = ("messages", "ws_alpha", "ses_1")


@pytest.fixture
def secrets_client() -> Iterator[Any]:
    with fake_aws():
        yield boto3.client("secretsmanager", region_name="us-east-1")


def generated_secret(client: Any) -> str:
    """A secret like the template's: 64 generated characters, no punctuation."""
    password = client.get_random_password(PasswordLength=64, ExcludePunctuation=True)
    created = client.create_secret(Name="cursor-key", SecretString=password["RandomPassword"])
    return str(created["ARN"])


def counting(client: Any) -> tuple[Any, list[str]]:
    calls: list[str] = []
    client.meta.events.register(
        "before-call.secretsmanager.GetSecretValue", lambda **_: calls.append("get")
    )
    return client, calls


def test_the_container_signs_cursors_with_the_secret_fetched_once(secrets_client: Any) -> None:
    arn = generated_secret(secrets_client)
    client, calls = counting(secrets_client)
    settings = Settings.from_env(
        {"TABLE_NAME": "t", "RUNS_TABLE_NAME": "r", "CURSOR_KEY_SECRET_ARN": arn}
    )
    given = {"dynamodb": object(), "sqs": object(), "secretsmanager": client}
    container = build_container(AwsClients(given), settings)
    assert calls == []  # nothing read until a cursor is needed

    tokens = [container.infrastructure.cursors.issue({"after": n}, SCOPE) for n in range(3)]

    assert [container.infrastructure.cursors.open(t, SCOPE) for t in tokens] == [
        {"after": n} for n in range(3)
    ]
    assert calls == ["get"]
    # Another container with the same secret verifies it; one with another key does not.
    same = CursorCodec(key_source(settings, lambda: secrets_client))
    assert same.open(tokens[0], SCOPE) == {"after": 0}
    other = CursorCodec(lambda: b"some-other-deployment-key-0000000")
    with pytest.raises(ValidationFailed):
        other.open(tokens[0], SCOPE)


def test_a_missing_secret_is_a_configuration_error_not_a_client_error(
    secrets_client: Any,
) -> None:
    missing = "arn:aws:secretsmanager:us-east-1:123456789012:secret:nope-AbCdEf"

    with pytest.raises(CursorKeyUnavailable):
        key_from_secret(secrets_client, missing)


def test_the_template_grants_the_secret_only_to_the_functions_that_page_or_call_models() -> None:
    from local_runtime.aws_resources import load_template

    template = load_template(os.path.join(os.path.dirname(__file__), "..", "..", "template.yaml"))
    resources = template["Resources"]
    secret = resources["CursorKeySecret"]
    assert secret["Type"] == "AWS::SecretsManager::Secret"
    assert secret["Properties"]["GenerateSecretString"]["PasswordLength"] >= 32
    granted = {
        name
        for name, resource in resources.items()
        if resource["Type"] == "AWS::Serverless::Function"
        and "CursorKeySecret" in str(resource["Properties"].get("Policies"))
    }
    # Paging, and keying each conversation's prompt_cache_key (the model callers); (v5)
    # the keyed names of end users' attachments (the turns, and the erasure worker).
    users = {
        "ReadSessionsFunction",
        "PredictFunction",
        "StreamFunction",
        "SummarizeFunction",
        "EraseEndUserFunction",
    }
    assert granted == users
    for name in users:
        env = resources[name]["Properties"]["Environment"]["Variables"]
        assert env["CURSOR_KEY_SECRET_ARN"] == {"Ref": "CursorKeySecret"}
    assert "CursorKeySecret" not in str(template.get("Outputs"))
