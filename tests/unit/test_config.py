"""Deployment settings: validated once per cold start from the environment."""

from __future__ import annotations

import json
from typing import Any

import pytest

from convo_memory.config import Settings, SettingsError

REQUIRED = {"TABLE_NAME": "conversations", "RUNS_TABLE_NAME": "runs"}


def test_given_only_the_required_variables_when_loading_then_the_documented_defaults_apply():
    settings = Settings.from_env(REQUIRED)

    assert settings.table_name == "conversations"
    assert settings.runs_table_name == "runs"
    assert settings.idempotency_table_name == ""
    assert settings.summary_queue_url == ""
    assert settings.repair_queue_url == ""
    assert settings.max_input_chars == 32_000
    assert settings.digest_max_chars == 2_000
    assert settings.digest_retention_hours == 24
    assert settings.idle_archive_days == 7
    assert settings.purge_after_days == 30
    assert settings.cache_ttl_seconds == 30
    assert settings.summary_batch_turns == 5
    # No default summary model: each capability's own summarizes it.
    assert settings.summary_default_provider is None


def test_given_empty_values_when_loading_then_they_count_as_unset():
    env = {**REQUIRED, "MAX_INPUT_CHARS": "", "DIGEST_RETENTION_HOURS": "", "SUMMARY_QUEUE_URL": ""}

    settings = Settings.from_env(env)

    assert settings.max_input_chars == 32_000
    assert settings.digest_retention_hours == 24
    assert settings.summary_queue_url == ""


def test_given_every_variable_when_loading_then_each_lands_in_its_field():
    env = {
        **REQUIRED,
        "IDEMPOTENCY_TABLE_NAME": "idem",
        "TURN_LIMITS_TABLE_NAME": "limits",
        "SUMMARY_QUEUE_URL": "https://sqs.local/summary",
        "REPAIR_QUEUE_URL": "https://sqs.local/repair",
        "REPAIR_FUNCTION_NAME": "stack-RepairFunction-abc",
        "ERASURE_QUEUE_URL": "https://sqs.local/erasure",
        "FORK_COPY_QUEUE_URL": "https://sqs.local/fork-copy",
        "ERASURE_MAX_RECEIVE_COUNT": "7",
        "ERASURE_RECEIPT_DAYS": "90",
        "MAX_INPUT_CHARS": "5000",
        "DIGEST_MAX_CHARS": "800",
        "DIGEST_RETENTION_HOURS": "12",
        "IDLE_ARCHIVE_DAYS": "3",
        "PURGE_AFTER_DAYS": "10",
        "CACHE_TTL_SECONDS": "0",
        "SUMMARY_COALESCE_SECONDS": "2",
        "SUMMARY_DELAY_SECONDS": "20",
        "SUMMARY_BATCH_TURNS": "8",
        "SUMMARY_CONNECTION": "embedded",
        "MAX_STORED_ANSWER_CHARS": "50000",
        "ACTIVITY_GRANULARITY_SECONDS": "600",
        "DELETION_GRACE_SECONDS": "1200",
        "WORKSPACE_TURNS_PER_SECOND": "25",
        "WORKSPACE_TURN_BURST": "60",
        "WORKSPACE_MAX_SLOW_TURNS": "12",
        "BEDROCK_AVAILABLE": "false",
        "CURSOR_SIGNING_KEY": "k" * 32,
        "CURSOR_KEY_SECRET_ARN": "arn:aws:secretsmanager:us-east-1:123456789012:secret:cursor",
        "TOOL_ALLOWED_HOSTS": "127.0.0.1:8080, tools.internal",
        "TOOL_TIMEOUT_SECONDS": "4",
        "TURN_DEADLINE_SECONDS": "20",
        "STREAM_TURN_DEADLINE_SECONDS": "120",
        "PENDING_TURN_SECONDS": "600",
        "TOOL_SECRET_KEY_ID": "arn:aws:kms:us-east-1:123456789012:key/abc",
        "ATTACHMENTS_BUCKET": "stack-attachments",
    }

    settings = Settings.from_env(env)

    assert settings.cursor_signing_key is not None
    assert settings.cursor_signing_key.get_secret_value() == "k" * 32
    assert "k" * 32 not in repr(settings)  # a secret never lands in a log line
    assert settings.model_dump(exclude={"cursor_signing_key"}) == {
        "table_name": "conversations",
        "runs_table_name": "runs",
        "idempotency_table_name": "idem",
        "turn_limits_table_name": "limits",
        "summary_queue_url": "https://sqs.local/summary",
        "repair_queue_url": "https://sqs.local/repair",
        "repair_function_name": "stack-RepairFunction-abc",
        "erasure_queue_url": "https://sqs.local/erasure",
        "fork_copy_queue_url": "https://sqs.local/fork-copy",
        "erasure_max_receive_count": 7,
        "erasure_receipt_days": 90,
        "max_input_chars": 5_000,
        "max_stored_answer_chars": 50_000,
        "digest_max_chars": 800,
        "digest_retention_hours": 12,
        "idle_archive_days": 3,
        "purge_after_days": 10,
        "cache_ttl_seconds": 0,
        "activity_granularity_seconds": 600,
        "deletion_grace_seconds": 1200,
        "summary_coalesce_seconds": 2,
        "summary_delay_seconds": 20,
        "summary_batch_turns": 8,
        "summary_connection": "embedded",
        "summary_model_id": "",
        "provider_connections": {},
        "provider_timeout_cap_seconds": 25,
        "workspace_turns_per_second": 25,
        "workspace_turn_burst": 60,
        "workspace_max_slow_turns": 12,
        "bedrock_available": False,
        "provider_secret_arns": None,
        "provider_parameter_names": None,
        "cursor_key_secret_arn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:cursor",
        "tool_allowed_hosts": ("127.0.0.1:8080", "tools.internal"),
        "tool_timeout_seconds": 4,
        "turn_deadline_seconds": 20,
        "stream_turn_deadline_seconds": 120,
        "pending_turn_seconds": 600,
        "tool_secret_key_id": "arn:aws:kms:us-east-1:123456789012:key/abc",
        "attachments_bucket": "stack-attachments",
    }


def test_given_no_mapping_when_loading_then_the_process_environment_is_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TABLE_NAME", "from-env")
    monkeypatch.setenv("RUNS_TABLE_NAME", "runs-from-env")
    monkeypatch.setenv("MAX_INPUT_CHARS", "1234")

    settings = Settings.from_env()

    assert (settings.table_name, settings.runs_table_name) == ("from-env", "runs-from-env")
    assert settings.max_input_chars == 1234


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("MAX_INPUT_CHARS", "lots"),
        ("MAX_INPUT_CHARS", "0"),
        ("MAX_INPUT_CHARS", "300001"),
        ("DIGEST_MAX_CHARS", "99"),
        ("DIGEST_RETENTION_HOURS", "0"),
        ("DIGEST_RETENTION_HOURS", "-1"),
        ("IDLE_ARCHIVE_DAYS", "never"),
        ("PURGE_AFTER_DAYS", "0"),
        ("CACHE_TTL_SECONDS", "-1"),
        ("CACHE_TTL_SECONDS", "3601"),
        ("CURSOR_SIGNING_KEY", "too-short"),
        ("SUMMARY_COALESCE_SECONDS", "901"),
        ("SUMMARY_DELAY_SECONDS", "1.5"),
        ("SUMMARY_BATCH_TURNS", "0"),
        ("SUMMARY_BATCH_TURNS", "51"),
        ("SUMMARY_CONNECTION", "nowhere"),
        ("SUMMARY_MODEL_ID", "some-model"),
        ("MAX_STORED_ANSWER_CHARS", "999"),
        ("MAX_STORED_ANSWER_CHARS", "100001"),
        ("ACTIVITY_GRANULARITY_SECONDS", "59"),
        ("DELETION_GRACE_SECONDS", "300"),
    ],
)
def test_given_a_bad_value_when_loading_then_settings_error_names_the_variable(
    variable: str, value: str
) -> None:
    with pytest.raises(SettingsError) as raised:
        Settings.from_env({**REQUIRED, variable: value})

    assert variable in str(raised.value)


@pytest.mark.parametrize("missing", ["TABLE_NAME", "RUNS_TABLE_NAME"])
def test_given_a_missing_table_name_when_loading_then_settings_error_names_it(missing: str):
    env = {k: v for k, v in REQUIRED.items() if k != missing}

    with pytest.raises(SettingsError) as raised:
        Settings.from_env(env)

    assert missing in str(raised.value)


def test_given_a_digest_window_longer_than_the_idle_window_when_loading_then_it_is_refused():
    env = {**REQUIRED, "IDLE_ARCHIVE_DAYS": "2", "DIGEST_RETENTION_HOURS": "49"}

    with pytest.raises(SettingsError) as raised:
        Settings.from_env(env)

    assert "DIGEST_RETENTION_HOURS" in str(raised.value)


def test_given_a_digest_window_equal_to_the_idle_window_when_loading_then_it_is_accepted():
    env = {**REQUIRED, "IDLE_ARCHIVE_DAYS": "2", "DIGEST_RETENTION_HOURS": "48"}

    settings = Settings.from_env(env)

    assert (settings.digest_retention_hours, settings.idle_archive_days) == (48, 2)


def test_given_a_pause_that_may_outlast_the_digest_window_when_loading_then_it_is_refused():
    # A turn paused for the app's tools keeps their results until it ends.
    env = {**REQUIRED, "DIGEST_RETENTION_HOURS": "1", "PENDING_TURN_SECONDS": "3601"}

    with pytest.raises(SettingsError) as raised:
        Settings.from_env(env)

    assert "PENDING_TURN_SECONDS" in str(raised.value)
    same = Settings.from_env({**env, "PENDING_TURN_SECONDS": "3600"})
    assert same.pending_turn_seconds == 3600


def test_given_an_idle_window_longer_than_the_purge_window_when_loading_then_it_is_refused():
    env = {**REQUIRED, "IDLE_ARCHIVE_DAYS": "40", "PURGE_AFTER_DAYS": "30"}

    with pytest.raises(SettingsError) as raised:
        Settings.from_env(env)

    assert "IDLE_ARCHIVE_DAYS" in str(raised.value)


def test_given_an_activity_mark_as_coarse_as_half_the_idle_window_then_it_is_refused() -> None:
    env = {**REQUIRED, "IDLE_ARCHIVE_DAYS": "1", "ACTIVITY_GRANULARITY_SECONDS": "43201"}

    with pytest.raises(SettingsError) as raised:
        Settings.from_env(env)

    assert "ACTIVITY_GRANULARITY_SECONDS" in str(raised.value)
    assert Settings.from_env({**env, "ACTIVITY_GRANULARITY_SECONDS": "43200"})


def test_given_a_coalescing_window_longer_than_the_delay_then_it_is_refused() -> None:
    # The delayed job must start after the turns whose triggers it coalesced have landed.
    env = {**REQUIRED, "SUMMARY_COALESCE_SECONDS": "5", "SUMMARY_DELAY_SECONDS": "4"}

    with pytest.raises(SettingsError) as raised:
        Settings.from_env(env)

    assert "SUMMARY_COALESCE_SECONDS" in str(raised.value)


# ---------------------------------------------------------------- provider connections

SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:llm-key-AbCdEf"
OLLAMA = {
    "type": "openai",
    "baseUrl": "http://10.0.3.7:11434/v1",
    "models": ["llama3.*"],
    "apiKey": {"secretArn": SECRET},
    "timeoutSeconds": 20,
}


def test_given_the_contract_example_when_loading_then_connections_are_typed():
    raw = json.dumps(
        {
            "bedrock": {
                "type": "bedrock",
                "region": "us-east-1",
                "models": ["anthropic.*", "amazon.nova-*"],
            },
            "ollama": OLLAMA,
        }
    )

    settings = Settings.from_env(
        {**REQUIRED, "PROVIDER_CONNECTIONS": raw, "PROVIDER_SECRET_ARNS": f" {SECRET} ,"}
    )

    connections = settings.provider_connections
    assert connections.names() == ["embedded", "bedrock", "ollama"]
    ollama = connections.get("ollama")
    assert ollama is not None and ollama.api_key is not None
    assert (ollama.type, ollama.base_url, ollama.api_key.secret_arn) == (
        "openai",
        "http://10.0.3.7:11434/v1",
        SECRET,
    )
    assert ollama.timeout_within(settings.provider_timeout_cap_seconds) == 20
    assert settings.provider_secret_arns == (SECRET,)
    assert settings.provider_parameter_names is None  # absent: not checked


def test_given_no_connections_when_loading_then_only_embedded_exists():
    settings = Settings.from_env({**REQUIRED, "PROVIDER_CONNECTIONS": "{}"})

    assert settings.provider_connections.listing() == [
        {"connection": "embedded", "type": "embedded", "models": []}
    ]


def test_given_a_timeout_above_the_cap_when_serving_then_the_cap_wins():
    raw = json.dumps({"slow": {**OLLAMA, "apiKey": {"env": "LLM_KEY"}, "timeoutSeconds": 300}})

    settings = Settings.from_env(
        {**REQUIRED, "PROVIDER_CONNECTIONS": raw, "PROVIDER_TIMEOUT_CAP_SECONDS": "10"}
    )

    slow = settings.provider_connections.get("slow")
    assert slow is not None and slow.timeout_within(settings.provider_timeout_cap_seconds) == 10


@pytest.mark.parametrize(
    ("connections", "fragment"),
    [
        ("not json", "not valid JSON"),
        ("[1, 2]", "JSON object"),
        ({"x": {"type": "azure", "models": ["*"]}}, "type"),
        ({"x": {"type": "openai", "models": ["*"]}}, "baseUrl"),
        ({"x": {**OLLAMA, "baseUrl": "ftp://10.0.3.7/v1"}}, "http"),
        ({"x": {**OLLAMA, "baseUrl": "http://user:pw@10.0.3.7/v1"}}, "userinfo"),
        ({"x": {**OLLAMA, "baseUrl": "http://10.0.3.7/v1?x=1"}}, "query"),
        ({"x": {**OLLAMA, "baseUrl": "http://10.0.3.7/v1#top"}}, "fragment"),
        ({"x": {**OLLAMA, "baseUrl": "http://10.0.3.7/v1?"}}, "query"),
        ({"x": {**OLLAMA, "models": []}}, "models"),
        ({"x": {**OLLAMA, "headers": {"X-Api-Key": "k"}}}, "headers"),
        ({"x": {**OLLAMA, "apiKey": {"env": "AWS_SECRET_ACCESS_KEY"}}}, "AWS_"),
        ({"x": {**OLLAMA, "apiKey": {"env": "K", "secretArn": SECRET}}}, "exactly one"),
        ({"x": {**OLLAMA, "apiKey": {"parameterName": "no-slash"}}}, "parameterName"),
        ({"x": {**OLLAMA, "apiKey": {"secretArn": "arn:aws:s3:::bucket"}}}, "secretArn"),
        ({"x": {"type": "bedrock", "models": ["*"], "baseUrl": "http://10.0.0.1/v1"}}, "baseUrl"),
        ({"x": {"type": "bedrock", "models": ["*"], "region": "moon-1"}}, "region"),
        ({"embedded": {"type": "openai", "baseUrl": "http://h/v1", "models": ["*"]}}, "embedded"),
        ({"bad name!": {"type": "bedrock", "models": ["*"]}}, "connection name"),
        ({"x": {**OLLAMA, "timeoutSeconds": 0}}, "timeoutSeconds"),
    ],
)
def test_given_a_bad_connection_when_loading_then_settings_error_names_the_variable(
    connections: Any, fragment: str
) -> None:
    raw = connections if isinstance(connections, str) else json.dumps(connections)

    with pytest.raises(SettingsError) as raised:
        Settings.from_env({**REQUIRED, "PROVIDER_CONNECTIONS": raw})

    assert "PROVIDER_CONNECTIONS" in str(raised.value)
    assert fragment in str(raised.value)


@pytest.mark.parametrize(
    ("api_key", "variable", "allowed"),
    [
        ({"secretArn": SECRET}, "PROVIDER_SECRET_ARNS", ""),
        ({"secretArn": SECRET}, "PROVIDER_SECRET_ARNS", SECRET.replace("llm-key", "other")),
        ({"parameterName": "/llm/key"}, "PROVIDER_PARAMETER_NAMES", "/llm/other,/x"),
    ],
)
def test_given_a_key_outside_the_allowed_list_when_loading_then_it_is_refused(
    api_key: dict[str, str], variable: str, allowed: str
) -> None:
    raw = json.dumps({"ollama": {**OLLAMA, "apiKey": api_key}})

    with pytest.raises(SettingsError) as raised:
        Settings.from_env({**REQUIRED, "PROVIDER_CONNECTIONS": raw, variable: allowed})

    assert variable in str(raised.value) and "PROVIDER_CONNECTIONS" in str(raised.value)


def test_given_a_key_in_the_allowed_list_when_loading_then_it_is_accepted():
    raw = json.dumps({"ollama": {**OLLAMA, "apiKey": {"parameterName": "/llm/key"}}})

    settings = Settings.from_env(
        {**REQUIRED, "PROVIDER_CONNECTIONS": raw, "PROVIDER_PARAMETER_NAMES": "/x,/llm/key"}
    )

    assert settings.provider_parameter_names == ("/x", "/llm/key")


@pytest.mark.parametrize("value", ["0", "-1", "901", "soon"])
def test_given_a_bad_timeout_cap_when_loading_then_settings_error_names_it(value: str) -> None:
    with pytest.raises(SettingsError) as raised:
        Settings.from_env({**REQUIRED, "PROVIDER_TIMEOUT_CAP_SECONDS": value})

    assert "PROVIDER_TIMEOUT_CAP_SECONDS" in str(raised.value)


# ---------------------------------------------------------------- default summary model


def test_a_default_summary_model_the_connections_allow_is_accepted() -> None:
    env = {
        **REQUIRED,
        "PROVIDER_CONNECTIONS": json.dumps({"ollama": {**OLLAMA, "apiKey": {"env": "KEY"}}}),
        "SUMMARY_CONNECTION": "ollama",
        "SUMMARY_MODEL_ID": "llama3.2:1b",
    }

    settings = Settings.from_env(env)

    default = settings.summary_default_provider
    assert default is not None
    assert (default.connection, default.model_id) == ("ollama", "llama3.2:1b")


@pytest.mark.parametrize(
    ("summary", "variable"),
    [
        ({"SUMMARY_CONNECTION": "ollama", "SUMMARY_MODEL_ID": "mistral"}, "SUMMARY_MODEL_ID"),
        ({"SUMMARY_CONNECTION": "ollama"}, "SUMMARY_MODEL_ID"),
        ({"SUMMARY_CONNECTION": "bedrock", "SUMMARY_MODEL_ID": "x"}, "SUMMARY_CONNECTION"),
        ({"SUMMARY_CONNECTION": "embedded", "SUMMARY_MODEL_ID": "x"}, "SUMMARY_MODEL_ID"),
    ],
)
def test_a_default_summary_model_the_deployment_cannot_call_fails_the_start(
    summary: dict[str, str], variable: str
) -> None:
    env = {
        **REQUIRED,
        "PROVIDER_CONNECTIONS": json.dumps({"ollama": {**OLLAMA, "apiKey": {"env": "KEY"}}}),
        **summary,
    }

    with pytest.raises(SettingsError) as raised:
        Settings.from_env(env)

    assert variable in str(raised.value)


@pytest.mark.parametrize("value", ["-1", "10001", "2.5", "lots"])
def test_given_a_bad_turn_limit_when_loading_then_settings_error_names_it(value: str) -> None:
    with pytest.raises(SettingsError) as raised:
        Settings.from_env({**REQUIRED, "WORKSPACE_TURNS_PER_SECOND": value})

    assert "WORKSPACE_TURNS_PER_SECOND" in str(raised.value)


def test_given_other_bad_settings_the_token_lookup_settings_still_load() -> None:
    from convo_memory.config import token_lookup_settings

    env = {**REQUIRED, "CACHE_TTL_SECONDS": "5", "DIGEST_MAX_CHARS": "50"}

    with pytest.raises(SettingsError):
        Settings.from_env(env)
    assert token_lookup_settings(env) == ("conversations", 5.0)
    with pytest.raises(SettingsError) as raised:
        token_lookup_settings({**env, "CACHE_TTL_SECONDS": "3601"})
    assert "CACHE_TTL_SECONDS" in str(raised.value)
