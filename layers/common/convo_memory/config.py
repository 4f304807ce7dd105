"""Deployment settings, validated once per cold start from the environment. Settings
only parse: what the services make of them is the composition root's
(``convo_memory.bootstrap.policies``)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from convo_memory.domain.allowed_hosts import parse_allowed_hosts
from convo_memory.domain.connections import (
    ProviderConnections,
    decode_connections,
    provider_problem,
)
from convo_memory.domain.models import ProviderConfig
from convo_memory.domain.time_budget import RECORDING_MARGIN_SECONDS

# Each setting and the environment variable it is read from (the template sets them).
ENVIRONMENT_VARIABLES: dict[str, str] = {
    "table_name": "TABLE_NAME",
    "runs_table_name": "RUNS_TABLE_NAME",
    "idempotency_table_name": "IDEMPOTENCY_TABLE_NAME",
    "turn_limits_table_name": "TURN_LIMITS_TABLE_NAME",
    "summary_queue_url": "SUMMARY_QUEUE_URL",
    "repair_queue_url": "REPAIR_QUEUE_URL",
    "repair_function_name": "REPAIR_FUNCTION_NAME",
    "erasure_queue_url": "ERASURE_QUEUE_URL",
    "fork_copy_queue_url": "FORK_COPY_QUEUE_URL",
    "erasure_max_receive_count": "ERASURE_MAX_RECEIVE_COUNT",
    "erasure_receipt_days": "ERASURE_RECEIPT_DAYS",
    "max_input_chars": "MAX_INPUT_CHARS",
    "max_stored_answer_chars": "MAX_STORED_ANSWER_CHARS",
    "digest_max_chars": "DIGEST_MAX_CHARS",
    "digest_retention_hours": "DIGEST_RETENTION_HOURS",
    "idle_archive_days": "IDLE_ARCHIVE_DAYS",
    "purge_after_days": "PURGE_AFTER_DAYS",
    "cache_ttl_seconds": "CACHE_TTL_SECONDS",
    "activity_granularity_seconds": "ACTIVITY_GRANULARITY_SECONDS",
    "deletion_grace_seconds": "DELETION_GRACE_SECONDS",
    "summary_coalesce_seconds": "SUMMARY_COALESCE_SECONDS",
    "summary_delay_seconds": "SUMMARY_DELAY_SECONDS",
    "summary_batch_turns": "SUMMARY_BATCH_TURNS",
    "summary_connection": "SUMMARY_CONNECTION",
    "summary_model_id": "SUMMARY_MODEL_ID",
    "provider_connections": "PROVIDER_CONNECTIONS",
    "provider_timeout_cap_seconds": "PROVIDER_TIMEOUT_CAP_SECONDS",
    "tool_allowed_hosts": "TOOL_ALLOWED_HOSTS",
    "tool_timeout_seconds": "TOOL_TIMEOUT_SECONDS",
    "turn_deadline_seconds": "TURN_DEADLINE_SECONDS",
    "stream_turn_deadline_seconds": "STREAM_TURN_DEADLINE_SECONDS",
    "pending_turn_seconds": "PENDING_TURN_SECONDS",
    "tool_secret_key_id": "TOOL_SECRET_KEY_ID",
    "workspace_turns_per_second": "WORKSPACE_TURNS_PER_SECOND",
    "workspace_turn_burst": "WORKSPACE_TURN_BURST",
    "workspace_max_slow_turns": "WORKSPACE_MAX_SLOW_TURNS",
    "bedrock_available": "BEDROCK_AVAILABLE",
    "cursor_signing_key": "CURSOR_SIGNING_KEY",
    "cursor_key_secret_arn": "CURSOR_KEY_SECRET_ARN",
    "attachments_bucket": "ATTACHMENTS_BUCKET",
}


class SettingsError(RuntimeError):
    """The environment does not describe a valid deployment (fails the cold start)."""


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True)

    table_name: str = Field(min_length=1)
    runs_table_name: str = Field(min_length=1)
    idempotency_table_name: str = ""
    # The per-workspace turn counters; without it, turns are not limited.
    turn_limits_table_name: str = ""
    summary_queue_url: str = ""
    repair_queue_url: str = ""
    # The repair function, invoked asynchronously when the repair queue takes no job.
    repair_function_name: str = ""
    # Erasure jobs and the delayed sweeps of deleted and erased sessions; a job reports
    # ``failed`` on its last delivery (the queue's maxReceiveCount).
    erasure_queue_url: str = ""
    # Fork copies (``ForkCopyJob``), on a queue and a worker of their own: a tenant's
    # storm of forks delays no one's erasures.
    fork_copy_queue_url: str = ""
    erasure_max_receive_count: int = Field(default=5, ge=1, le=1000)
    # A finished erasure's receipt (it names the end user) is deleted this long after.
    erasure_receipt_days: float = Field(default=30, ge=1, le=3650)
    max_input_chars: int = Field(default=32_000, ge=1, le=100_000)
    # Longer answers are stored cut (``truncated: true``); the client receives all of it.
    max_stored_answer_chars: int = Field(default=100_000, ge=1_000, le=100_000)
    digest_max_chars: int = Field(default=2_000, ge=100, le=50_000)
    # Lower bounds are inclusive (``ge``) so that the template's MinValue can equal them.
    digest_retention_hours: float = Field(default=24, ge=1)
    idle_archive_days: float = Field(default=7, ge=1)
    purge_after_days: float = Field(default=30, ge=1)
    cache_ttl_seconds: float = Field(default=30, ge=0, le=3600)
    # The session head's lastActiveAt (and the byActivity index) move at most this often.
    activity_granularity_seconds: float = Field(default=3600, ge=60, le=86_400)
    # A deleted session's emptied head is removed this long after the deletion: longer
    # than any turn or summary job already in flight can take to land a write.
    deletion_grace_seconds: float = Field(default=900, ge=360, le=86_400)
    # Coalescing window for summary triggers (per container); a trigger's queue delay is
    # at least as long, so the run it starts sees the turns it coalesced.
    summary_coalesce_seconds: float = Field(default=2, ge=0, le=900)
    summary_delay_seconds: int = Field(default=2, ge=0, le=900)
    # Turns folded ahead per summary model call (at most one call per this many turns in
    # a steady conversation).
    summary_batch_turns: int = Field(default=5, ge=1, le=50)
    # The deployment's default summary model for capabilities without summary.provider
    # (empty: each capability's own connection and model).
    summary_connection: str = Field(default="", max_length=64)
    summary_model_id: str = Field(default="", max_length=256)
    # The operator's model connections (JSON); ``embedded`` always exists.
    provider_connections: ProviderConnections = Field(
        default_factory=ProviderConnections.embedded_only
    )
    # No provider call waits longer than this, whatever a connection asks for.
    provider_timeout_cap_seconds: float = Field(default=25, ge=0.1, le=900)
    # The per-workspace turn rate, across every turn door (0: no limit), and the turns
    # a workspace may start at the same moment: 40 at once, or 20 a second for 4 s.
    workspace_turns_per_second: int = Field(default=10, ge=0, le=10_000)
    workspace_turn_burst: int = Field(default=40, ge=1, le=100_000)
    # Turns of one workspace that have run for more than a second, in flight at once
    # (0: no cap); spread over items of at most 32 (adapters/dynamo/limiter_layout.py).
    workspace_max_slow_turns: int = Field(default=8, ge=0, le=10_000)
    # Whether Amazon Bedrock can be called (the local runtime's emulation has none): a
    # Bedrock guardrail is refused at a capability's creation without it.
    bedrock_available: bool = True
    # What IAM lets the functions read. None (variable absent): not checked, e.g. locally.
    provider_secret_arns: tuple[str, ...] | None = None
    provider_parameter_names: tuple[str, ...] | None = None
    # Agent tools: hosts (``host`` or ``host:port``) webhook tools may use whatever their
    # address and scheme; the per-call timeout; the turn's deadline for the tool loop
    # (from the start of the turn, leaving time to record it before API Gateway's 30 s);
    # the KMS key that encrypts webhook signing secrets.
    tool_allowed_hosts: tuple[str, ...] = ()
    tool_timeout_seconds: float = Field(default=10, gt=0, le=300)
    # (v4) A turn paused for the app's own tools is recorded as abandoned after this long
    # (by the next request, or the retention run).
    pending_turn_seconds: float = Field(default=900, ge=60, le=86_400)
    # API Gateway stops waiting at 30 s: a turn ends (and is recorded) before that.
    turn_deadline_seconds: float = Field(default=25, ge=1, le=28)
    # The streaming Function URL waits as long as its function runs (300 s): a streamed
    # turn may take longer, and still ends in time to be recorded.
    stream_turn_deadline_seconds: float = Field(default=240, ge=1, le=280)
    tool_secret_key_id: str = ""
    # (v5) The bucket that holds images and files (none: attachments are not stored).
    attachments_bucket: str = ""

    @field_validator("tool_allowed_hosts", mode="before")
    @classmethod
    def _allowed_hosts(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = tuple(item.strip() for item in value.split(",") if item.strip())
        parse_allowed_hosts(value)  # a malformed entry fails the start, named
        return value

    @field_validator("provider_connections", mode="before")
    @classmethod
    def _decode_connections(cls, value: Any) -> Any:
        return decode_connections(value) if isinstance(value, str) else value

    @field_validator("provider_secret_arns", "provider_parameter_names", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(item.strip() for item in value.split(",") if item.strip())
        return value

    @model_validator(mode="after")
    def _keys_readable(self) -> Settings:
        # Refuse at start-up what IAM would refuse on the first call.
        for name, key in self.provider_connections.api_keys():
            allowed, variable, value = (
                (self.provider_secret_arns, "PROVIDER_SECRET_ARNS", key.secret_arn)
                if key.secret_arn is not None
                else (self.provider_parameter_names, "PROVIDER_PARAMETER_NAMES", key.parameter_name)
            )
            if value is not None and allowed is not None and value not in allowed:
                raise ValueError(
                    f"PROVIDER_CONNECTIONS: connection {name!r} reads its apiKey from "
                    f"{key.source} {value!r}, which {variable} does not list"
                )
        return self

    @model_validator(mode="after")
    def _summary_model_served(self) -> Settings:
        # Refuse at start-up a default summary model this deployment cannot call.
        if self.summary_model_id and not self.summary_connection:
            raise ValueError("SUMMARY_MODEL_ID needs SUMMARY_CONNECTION")
        if self.summary_connection:
            problem = provider_problem(
                self.provider_connections, self.summary_connection, self.summary_model_id or None
            )
            if problem is not None:
                field, message = problem
                variable = "SUMMARY_CONNECTION" if field == "connection" else "SUMMARY_MODEL_ID"
                raise ValueError(f"{variable}: {message}")
        return self

    @property
    def summary_default_provider(self) -> ProviderConfig | None:
        """The operator's default summary model, or None (each capability's own)."""
        if not self.summary_connection:
            return None
        return ProviderConfig(
            connection=self.summary_connection, model_id=self.summary_model_id or None
        )

    @property
    def turn_lifetime(self) -> float:
        """The longest a turn runs and writes: a streamed one's deadline, then its
        recording."""
        longest = max(self.turn_deadline_seconds, self.stream_turn_deadline_seconds)
        return longest + RECORDING_MARGIN_SECONDS

    # The key that signs nextToken cursors: given directly (local runtime, tests), or the
    # Secrets Manager secret that holds it (AWS). Only the functions that page need one.
    cursor_signing_key: SecretStr | None = Field(default=None, min_length=16)
    cursor_key_secret_arn: str = ""

    @model_validator(mode="after")
    def _windows_narrowest_first(self) -> Settings:
        # Digests are cleared first, then idle sessions archived, then purged.
        if self.digest_retention_hours > self.idle_archive_days * 24:
            raise ValueError("DIGEST_RETENTION_HOURS must not exceed IDLE_ARCHIVE_DAYS")
        # A paused turn holds its tools' results: no longer than a digest would.
        if self.pending_turn_seconds > self.digest_retention_hours * 3600:
            raise ValueError("PENDING_TURN_SECONDS must not exceed DIGEST_RETENTION_HOURS")
        if self.idle_archive_days > self.purge_after_days:
            raise ValueError("IDLE_ARCHIVE_DAYS must not exceed PURGE_AFTER_DAYS")
        if self.activity_granularity_seconds * 2 > self.idle_archive_days * 86_400:
            raise ValueError(
                "ACTIVITY_GRANULARITY_SECONDS must be at most half of IDLE_ARCHIVE_DAYS"
            )
        if self.summary_coalesce_seconds > self.summary_delay_seconds:
            raise ValueError("SUMMARY_COALESCE_SECONDS must not exceed SUMMARY_DELAY_SECONDS")
        return self

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        names = dict(ENVIRONMENT_VARIABLES)
        # Allow-lists count as set even when empty (the template always sets them).
        lists = {
            "provider_secret_arns": "PROVIDER_SECRET_ARNS",
            "provider_parameter_names": "PROVIDER_PARAMETER_NAMES",
        }
        values: dict[str, Any] = {
            field: env[var] for field, var in names.items() if env.get(var, "") != ""
        }
        values.update({field: env[var] for field, var in lists.items() if var in env})
        names.update(lists)
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            problems = "; ".join(_problem(e["loc"], e["msg"], names) for e in exc.errors())
            raise SettingsError(f"invalid configuration: {problems}") from exc


def _problem(loc: tuple[Any, ...], message: str, names: Mapping[str, str]) -> str:
    """``VARIABLE: where.inside: message`` for one validation error."""
    if not loc:
        return f"settings: {message}"
    where = ".".join(str(part) for part in loc[1:])
    variable = names.get(str(loc[0]), "settings")
    return f"{variable}: {where}: {message}" if where else f"{variable}: {message}"


def token_lookup_settings(env: Mapping[str, str] | None = None) -> tuple[str, float]:
    """``(TABLE_NAME, CACHE_TTL_SECONDS)``, validated by the same rules as ``Settings``
    but alone: what resolving a bearer token needs, whatever else is invalid."""
    env = os.environ if env is None else env
    fields = Settings.model_fields
    lookup = create_model(
        "TokenLookupSettings",
        table_name=(str, fields["table_name"]),
        cache_ttl_seconds=(float, fields["cache_ttl_seconds"]),
    )
    names = {"table_name": "TABLE_NAME", "cache_ttl_seconds": "CACHE_TTL_SECONDS"}
    values = {field: env[var] for field, var in names.items() if env.get(var, "") != ""}
    try:
        valid = lookup.model_validate(values).model_dump()
    except ValidationError as exc:
        problems = "; ".join(_problem(e["loc"], e["msg"], names) for e in exc.errors())
        raise SettingsError(f"invalid configuration: {problems}") from exc
    return str(valid["table_name"]), float(valid["cache_ttl_seconds"])
