"""The layer's boto3 clients share one data loader per process: a client built after the
first reads nothing from disk again, while each still has a session of its own (boto3's
sessions are not thread-safe)."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.loaders import JSONFileLoader

from convo_memory.adapters.aws_clients import DEFAULT_PATIENCE, SECRETS_PATIENCE, build_client
from tests.support.fake_aws import FAKE_CREDENTIALS


@pytest.fixture(autouse=True)
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {**FAKE_CREDENTIALS, "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)


def files_read_while(monkeypatch: pytest.MonkeyPatch, build: Any) -> list[str]:
    read: list[str] = []
    load_file = JSONFileLoader.load_file

    def counting(self: JSONFileLoader, file_path: str) -> Any:
        read.append(file_path)
        return load_file(self, file_path)

    monkeypatch.setattr(JSONFileLoader, "load_file", counting)
    build()
    monkeypatch.setattr(JSONFileLoader, "load_file", load_file)
    return read


def test_a_second_client_of_a_service_reads_no_file(monkeypatch: pytest.MonkeyPatch) -> None:
    build_client("sqs", None, DEFAULT_PATIENCE)  # whatever this process built before

    again = files_read_while(
        monkeypatch, lambda: build_client("sqs", "eu-west-1", SECRETS_PATIENCE)
    )

    assert again == []


def test_each_client_has_a_session_of_its_own_over_the_one_loader() -> None:
    first = build_client("dynamodb", None, DEFAULT_PATIENCE)
    second = build_client("dynamodb", None, DEFAULT_PATIENCE)

    assert first is not second
    assert first.meta.events is not second.meta.events
    assert first._loader is second._loader
    assert first.meta.config.connect_timeout == DEFAULT_PATIENCE.connect_timeout
