"""Deployment settings: validated once per cold start from the environment."""

from __future__ import annotations

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
        "SUMMARY_QUEUE_URL": "https://sqs.local/summary",
        "REPAIR_QUEUE_URL": "https://sqs.local/repair",
        "MAX_INPUT_CHARS": "5000",
        "DIGEST_MAX_CHARS": "800",
        "DIGEST_RETENTION_HOURS": "12",
        "IDLE_ARCHIVE_DAYS": "3",
        "PURGE_AFTER_DAYS": "10",
        "CACHE_TTL_SECONDS": "0",
        "SUMMARY_COALESCE_SECONDS": "20",
        "SUMMARY_DELAY_SECONDS": "2",
        "CURSOR_SIGNING_KEY": "k" * 32,
        "CURSOR_KEY_SECRET_ARN": "arn:aws:secretsmanager:us-east-1:123456789012:secret:cursor",
    }

    settings = Settings.from_env(env)

    assert settings.cursor_signing_key is not None
    assert settings.cursor_signing_key.get_secret_value() == "k" * 32
    assert "k" * 32 not in repr(settings)  # a secret never lands in a log line
    assert settings.model_dump(exclude={"cursor_signing_key"}) == {
        "table_name": "conversations",
        "runs_table_name": "runs",
        "idempotency_table_name": "idem",
        "summary_queue_url": "https://sqs.local/summary",
        "repair_queue_url": "https://sqs.local/repair",
        "max_input_chars": 5_000,
        "digest_max_chars": 800,
        "digest_retention_hours": 12,
        "idle_archive_days": 3,
        "purge_after_days": 10,
        "cache_ttl_seconds": 0,
        "summary_coalesce_seconds": 20,
        "summary_delay_seconds": 2,
        "cursor_key_secret_arn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:cursor",
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


def test_given_an_idle_window_longer_than_the_purge_window_when_loading_then_it_is_refused():
    env = {**REQUIRED, "IDLE_ARCHIVE_DAYS": "40", "PURGE_AFTER_DAYS": "30"}

    with pytest.raises(SettingsError) as raised:
        Settings.from_env(env)

    assert "IDLE_ARCHIVE_DAYS" in str(raised.value)
