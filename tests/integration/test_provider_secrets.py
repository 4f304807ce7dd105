"""Provider API keys resolved server-side: Secrets Manager and SSM SecureStrings (moto),
and an operator-chosen variable; cached per container with a TTL; errors that never
carry the key or its location."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from convo_memory.adapters.aws_clients import AwsClients
from convo_memory.adapters.secrets import SecretResolver
from convo_memory.domain.connections import ApiKeyRef
from convo_memory.domain.errors import ProviderError
from tests.support.fake_aws import fake_aws

REGION = "us-east-1"
KEY = "sk-live-0123456789"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def aws() -> Iterator[None]:
    with fake_aws(REGION):
        yield


@pytest.fixture
def built() -> list[tuple[str, str | None]]:
    return []


@pytest.fixture
def resolver(aws: None, built: list[tuple[str, str | None]]) -> SecretResolver:
    def client_for(service: str, region: str | None) -> Any:
        built.append((service, region))
        return AwsClients().secrets(service, region)

    return SecretResolver(client_for, ttl_seconds=300, clock=Clock())


def create_secret(value: str, name: str = "llm/key") -> str:
    client = boto3.client("secretsmanager", region_name=REGION)
    return str(client.create_secret(Name=name, SecretString=value)["ARN"])


def put_parameter(value: str, name: str = "/llm/key") -> str:
    boto3.client("ssm", region_name=REGION).put_parameter(
        Name=name, Value=value, Type="SecureString", Overwrite=True
    )
    return name


def test_a_secrets_manager_secret_is_read_and_cached(
    resolver: SecretResolver, built: list[tuple[str, str | None]]
) -> None:
    arn = create_secret(KEY)
    assert built == []  # clients are built on the first read only

    assert resolver.resolve(ApiKeyRef(secret_arn=arn)) == KEY

    boto3.client("secretsmanager", region_name=REGION).put_secret_value(
        SecretId=arn, SecretString="sk-rotated"
    )
    assert resolver.resolve(ApiKeyRef(secret_arn=arn)) == KEY  # within the TTL
    assert built == [("secretsmanager", REGION)]  # the region comes from the ARN


def test_a_rotated_secret_is_picked_up_after_the_ttl(aws: None) -> None:
    clock = Clock()
    resolver = SecretResolver(AwsClients().secrets, ttl_seconds=300, clock=clock)
    arn = create_secret(KEY)
    assert resolver.resolve(ApiKeyRef(secret_arn=arn)) == KEY
    boto3.client("secretsmanager", region_name=REGION).put_secret_value(
        SecretId=arn, SecretString="sk-rotated"
    )

    clock.now += 301

    assert resolver.resolve(ApiKeyRef(secret_arn=arn)) == "sk-rotated"


def test_a_json_secret_gives_its_api_key_field(resolver: SecretResolver) -> None:
    arn = create_secret(json.dumps({"apiKey": KEY, "note": "ollama"}))

    assert resolver.resolve(ApiKeyRef(secret_arn=arn)) == KEY


def test_an_ssm_securestring_is_read_decrypted(
    resolver: SecretResolver, built: list[tuple[str, str | None]]
) -> None:
    name = put_parameter(KEY)

    assert resolver.resolve(ApiKeyRef(parameter_name=name)) == KEY
    assert built == [("ssm", None)]  # the function's own region


def test_an_operator_variable_is_read_from_the_environment(
    resolver: SecretResolver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLM_KEY", KEY)

    assert resolver.resolve(ApiKeyRef(env="LLM_KEY")) == KEY


@pytest.mark.parametrize(
    "ref",
    [
        ApiKeyRef(secret_arn="arn:aws:secretsmanager:us-east-1:123456789012:secret:gone-AbCdEf"),
        ApiKeyRef(parameter_name="/llm/missing"),
        ApiKeyRef(env="LLM_KEY_UNSET"),
    ],
)
def test_an_unreadable_key_is_a_provider_error_that_names_nothing(
    resolver: SecretResolver, ref: ApiKeyRef, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="convo_memory")

    with pytest.raises(ProviderError) as raised:
        resolver.resolve(ref)

    message = raised.value.message
    assert raised.value.status == 502
    assert message == "Model provider error: the provider's API key could not be read."
    assert raised.value.__cause__ is None  # no botocore message chained to it
    location = ref.secret_arn or ref.parameter_name or ref.env or ""
    assert location not in caplog.text


def test_a_key_is_never_logged(resolver: SecretResolver, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="convo_memory")
    arn = create_secret(KEY)
    name = put_parameter(KEY, "/llm/other")

    resolver.resolve(ApiKeyRef(secret_arn=arn))
    resolver.resolve(ApiKeyRef(parameter_name=name))

    assert KEY not in caplog.text
