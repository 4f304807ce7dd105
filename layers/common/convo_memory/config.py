"""Deployment settings, validated once per cold start from the environment."""

from __future__ import annotations

import os
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator


class SettingsError(RuntimeError):
    """The environment does not describe a valid deployment (fails the cold start)."""


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True)

    table_name: str = Field(min_length=1)
    runs_table_name: str = Field(min_length=1)
    idempotency_table_name: str = ""
    summary_queue_url: str = ""
    repair_queue_url: str = ""
    max_input_chars: int = Field(default=32_000, ge=1, le=300_000)
    digest_max_chars: int = Field(default=2_000, ge=100, le=100_000)
    digest_retention_hours: float = Field(default=24, gt=0)
    idle_archive_days: float = Field(default=7, gt=0)
    purge_after_days: float = Field(default=30, gt=0)
    cache_ttl_seconds: float = Field(default=30, ge=0, le=3600)
    # Coalescing window for summary triggers: at most one queued run per session per window.
    summary_coalesce_seconds: float = Field(default=10, ge=0, le=900)
    summary_delay_seconds: int = Field(default=1, ge=0, le=900)
    # The key that signs nextToken cursors: given directly (local runtime, tests), or the
    # Secrets Manager secret that holds it (AWS). Only the functions that page need one.
    cursor_signing_key: SecretStr | None = Field(default=None, min_length=16)
    cursor_key_secret_arn: str = ""

    @model_validator(mode="after")
    def _windows_narrowest_first(self) -> Settings:
        # Digests are cleared first, then idle sessions archived, then purged.
        if self.digest_retention_hours > self.idle_archive_days * 24:
            raise ValueError("DIGEST_RETENTION_HOURS must not exceed IDLE_ARCHIVE_DAYS")
        if self.idle_archive_days > self.purge_after_days:
            raise ValueError("IDLE_ARCHIVE_DAYS must not exceed PURGE_AFTER_DAYS")
        return self

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        names = {
            "table_name": "TABLE_NAME",
            "runs_table_name": "RUNS_TABLE_NAME",
            "idempotency_table_name": "IDEMPOTENCY_TABLE_NAME",
            "summary_queue_url": "SUMMARY_QUEUE_URL",
            "repair_queue_url": "REPAIR_QUEUE_URL",
            "max_input_chars": "MAX_INPUT_CHARS",
            "digest_max_chars": "DIGEST_MAX_CHARS",
            "digest_retention_hours": "DIGEST_RETENTION_HOURS",
            "idle_archive_days": "IDLE_ARCHIVE_DAYS",
            "purge_after_days": "PURGE_AFTER_DAYS",
            "cache_ttl_seconds": "CACHE_TTL_SECONDS",
            "summary_coalesce_seconds": "SUMMARY_COALESCE_SECONDS",
            "summary_delay_seconds": "SUMMARY_DELAY_SECONDS",
            "cursor_signing_key": "CURSOR_SIGNING_KEY",
            "cursor_key_secret_arn": "CURSOR_KEY_SECRET_ARN",
        }
        values = {field: env[var] for field, var in names.items() if env.get(var, "") != ""}
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            problems = "; ".join(
                f"{names.get(str(e['loc'][0]), 'settings') if e['loc'] else 'settings'}: {e['msg']}"
                for e in exc.errors()
            )
            raise SettingsError(f"invalid configuration: {problems}") from exc
