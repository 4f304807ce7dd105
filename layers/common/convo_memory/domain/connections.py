"""Provider connections: the model endpoints and credentials an operator declares.

A workspace never supplies an endpoint, a credential or the name of an environment
variable; a capability names a connection and a model the connection allows. This module
is the typed, validated form of the deployment's ``PROVIDER_CONNECTIONS`` JSON (pure:
no I/O, no boto3), and the rule that decides whether a capability's provider fits it.
"""

from __future__ import annotations

import fnmatch
import re
import urllib.parse
from collections.abc import Iterator, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel, field_validator, model_validator
from pydantic.alias_generators import to_camel

ConnectionType = Literal["embedded", "bedrock", "openai"]
# How long Bedrock keeps a cached prompt prefix after its last use (CachePointBlock.ttl).
PromptCacheTtl = Literal["5m", "1h"]
EMBEDDED = "embedded"

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d{1,2}$")
_SECRET_ARN = re.compile(
    r"^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:[\w/+=.@-]{1,512}$"
)
_PARAMETER_NAME = re.compile(r"^/[\w.\-/]{1,1010}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# The function's own AWS credentials live in AWS_* variables: never a provider key.
_FORBIDDEN_ENV_PREFIX = "AWS_"
# Bedrock models whose Converse requests take cache points (Bedrock's prompt caching
# user guide), as model-id globs; a cross-Region inference profile's prefix ("us.",
# "eu.", "apac.", "global.") is ignored. A connection's ``promptCaching`` overrides it.
PROMPT_CACHING_MODELS = (
    "anthropic.claude-3-7-sonnet-*",
    "anthropic.claude-3-5-haiku-*",
    "anthropic.claude-sonnet-4*",
    "anthropic.claude-opus-4*",
    "anthropic.claude-haiku-4*",
    "amazon.nova-micro-*",
    "amazon.nova-lite-*",
    "amazon.nova-pro-*",
    "amazon.nova-premier-*",
)
_INFERENCE_PROFILE_PREFIX = re.compile(r"^(?:us|us-gov|eu|apac|jp|au|ca|global)\.")


class _Strict(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class ApiKeyRef(_Strict):
    """Where the server reads a connection's API key: exactly one of a Secrets Manager
    secret, an SSM SecureString parameter, or an environment variable the operator chose."""

    secret_arn: str | None = None
    parameter_name: str | None = None
    env: str | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> ApiKeyRef:
        given = [v for v in (self.secret_arn, self.parameter_name, self.env) if v is not None]
        if len(given) != 1:
            raise ValueError("apiKey takes exactly one of secretArn, parameterName or env")
        if self.secret_arn is not None and not _SECRET_ARN.match(self.secret_arn):
            raise ValueError("apiKey.secretArn must be a Secrets Manager secret ARN")
        if self.parameter_name is not None and not _PARAMETER_NAME.match(self.parameter_name):
            raise ValueError("apiKey.parameterName must be a full SSM parameter name (/path/name)")
        if self.env is not None:
            if not _ENV_NAME.match(self.env):
                raise ValueError("apiKey.env must be an environment variable name")
            if self.env.upper().startswith(_FORBIDDEN_ENV_PREFIX):
                raise ValueError("apiKey.env must not name an AWS_* variable")
        return self

    @property
    def source(self) -> Literal["secretArn", "parameterName", "env"]:
        """Which kind of reference this is (for logs: never the value)."""
        if self.secret_arn is not None:
            return "secretArn"
        if self.parameter_name is not None:
            return "parameterName"
        return "env"


def check_base_url(url: str) -> str:
    """An http(s) URL with a host and no userinfo, query or fragment (the service only
    ever appends ``/chat/completions`` to it). Returns it without a trailing slash."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError("baseUrl must be an http(s) URL with a host")
    if "@" in parsed.netloc:
        raise ValueError("baseUrl must not carry credentials (userinfo)")
    if parsed.query or parsed.fragment or "?" in url or "#" in url:
        raise ValueError("baseUrl must not have a query or a fragment")
    try:
        parsed.port  # noqa: B018 - raises on a malformed port
    except ValueError as exc:
        raise ValueError("baseUrl has an invalid port") from exc
    return url.rstrip("/")


class Connection(_Strict):
    """One operator-declared connection. ``models`` are fnmatch-style globs of the model
    ids a capability may name; ``timeoutSeconds`` is capped by the deployment;
    ``maxTokens`` and ``temperature`` apply to every call through the connection.
    ``promptCaching`` (bedrock only) says whether requests carry cache points; unset,
    the models in ``PROMPT_CACHING_MODELS`` get them; ``promptCacheTtl`` (bedrock only,
    ``5m`` or ``1h``) how long a cached prefix lives (unset: the model's default, 5
    minutes). ``streamUsage`` (openai only, default true) says whether a stream asks for
    its token counts; false for a server that refuses ``stream_options``.
    ``promptCacheKey`` (openai only, default true) says whether requests carry a
    ``prompt_cache_key``; false for a server that refuses unknown fields. (v5)
    ``attachments`` (openai only): images sent as their bytes (``data``, the default)
    or as a short-lived presigned URL (``url``), for a server that can reach S3."""

    type: ConnectionType
    models: tuple[str, ...] = ()
    region: str | None = None
    base_url: str | None = Field(default=None, max_length=2048)
    api_key: ApiKeyRef | None = None
    timeout_seconds: float | None = Field(default=None, gt=0, le=900)
    max_tokens: int | None = Field(default=None, ge=1, le=200_000)
    temperature: float | None = Field(default=None, ge=0, le=2)
    prompt_caching: bool | None = None
    prompt_cache_ttl: PromptCacheTtl | None = None
    stream_usage: bool | None = None
    prompt_cache_key: bool | None = None
    attachments: Literal["data", "url"] | None = None

    @field_validator("models")
    @classmethod
    def _globs(cls, models: tuple[str, ...]) -> tuple[str, ...]:
        for glob in models:
            if not glob or len(glob) > 256:
                raise ValueError("each models entry is a glob of 1-256 characters")
        return models

    @field_validator("base_url")
    @classmethod
    def _url(cls, url: str | None) -> str | None:
        return None if url is None else check_base_url(url)

    @model_validator(mode="after")
    def _fields_of_type(self) -> Connection:
        if self.region is not None and not _REGION.match(self.region):
            raise ValueError("region must be an AWS region name such as us-east-1")
        if self.type == EMBEDDED:
            extra = [
                name
                for name in ("region", "base_url", "api_key", "max_tokens", "temperature")
                if getattr(self, name) is not None
            ]
            if extra or self.models:
                raise ValueError("an embedded connection takes only its type")
        elif self.type == "bedrock":
            if self.base_url is not None or self.api_key is not None:
                raise ValueError("a bedrock connection takes no baseUrl or apiKey (IAM signs)")
        elif self.type == "openai":
            if self.base_url is None:
                raise ValueError("an openai connection needs a baseUrl")
            if self.region is not None:
                raise ValueError("an openai connection takes no region")
        if self.prompt_caching is not None and self.type != "bedrock":
            raise ValueError(
                "promptCaching applies to bedrock connections (OpenAI-compatible providers "
                "cache a repeated prompt prefix on their own)"
            )
        if self.prompt_cache_ttl is not None and self.type != "bedrock":
            raise ValueError(
                "promptCacheTtl applies to bedrock connections (OpenAI-compatible providers "
                "decide how long they keep a cached prefix)"
            )
        if self.prompt_cache_ttl is not None and self.prompt_caching is False:
            raise ValueError("promptCacheTtl needs prompt caching (promptCaching is false)")
        if self.stream_usage is not None and self.type != "openai":
            raise ValueError("streamUsage applies to openai connections")
        if self.prompt_cache_key is not None and self.type != "openai":
            raise ValueError("promptCacheKey applies to openai connections")
        if self.attachments is not None and self.type != "openai":
            raise ValueError("attachments applies to openai connections")
        if self.type != EMBEDDED and not self.models:
            raise ValueError("models must list at least one glob of allowed model ids")
        return self

    @property
    def needs_model_id(self) -> bool:
        """Whether a capability must name a model (every type but embedded)."""
        return self.type != EMBEDDED

    def allows(self, model_id: str) -> bool:
        """Whether one of the connection's globs matches ``model_id`` (case-sensitive)."""
        return any(fnmatch.fnmatchcase(model_id, glob) for glob in self.models)

    @property
    def asks_stream_usage(self) -> bool:
        """Whether streams through this (openai) connection ask for their token counts."""
        return self.type == "openai" and self.stream_usage is not False

    @property
    def sends_prompt_cache_key(self) -> bool:
        """Whether requests through this (openai) connection carry a prompt_cache_key."""
        return self.type == "openai" and self.prompt_cache_key is not False

    def caches_prompts(self, model_id: str) -> bool:
        """Whether requests for ``model_id`` carry Bedrock cache points: the connection's
        ``promptCaching`` when set, else whether the model is a documented one."""
        if self.type != "bedrock":
            return False
        if self.prompt_caching is not None:
            return self.prompt_caching
        base = _INFERENCE_PROFILE_PREFIX.sub("", model_id)
        return any(fnmatch.fnmatchcase(base, glob) for glob in PROMPT_CACHING_MODELS)

    def timeout_within(self, cap_seconds: float) -> float:
        """The connection's timeout, never above the deployment's cap (the cap when unset)."""
        if self.timeout_seconds is None:
            return cap_seconds
        return min(self.timeout_seconds, cap_seconds)


EMBEDDED_CONNECTION = Connection(type=EMBEDDED)


class ProviderConnections(RootModel[dict[str, Connection]]):
    """The deployment's connections by name. ``embedded`` always exists; the operator
    may not redefine it as anything else."""

    model_config = ConfigDict(frozen=True)

    @field_validator("root")
    @classmethod
    def _names(cls, connections: dict[str, Connection]) -> dict[str, Connection]:
        for name, connection in connections.items():
            if not _NAME.match(name):
                raise ValueError(
                    f"connection name {name!r} must be 1-64 letters, digits, '_', '.' or '-'"
                )
            if name == EMBEDDED and connection.type != EMBEDDED:
                raise ValueError("the connection 'embedded' is built in and stays embedded")
        return connections

    @classmethod
    def embedded_only(cls) -> ProviderConnections:
        """A deployment without operator connections (the template's default)."""
        return cls({})

    def get(self, name: str) -> Connection | None:
        """The connection called ``name``, or None when the deployment has none."""
        if name == EMBEDDED:
            return self.root.get(EMBEDDED, EMBEDDED_CONNECTION)
        return self.root.get(name)

    def names(self) -> list[str]:
        """``embedded`` first, then the operator's connections in their declared order."""
        return [EMBEDDED, *(name for name in self.root if name != EMBEDDED)]

    def items(self) -> Iterator[tuple[str, Connection]]:
        """(name, connection) pairs in ``names()`` order."""
        for name in self.names():
            connection = self.get(name)
            assert connection is not None
            yield name, connection

    def api_keys(self) -> Iterator[tuple[str, ApiKeyRef]]:
        """(connection name, key reference) for every connection that has a key."""
        for name, connection in self.items():
            if connection.api_key is not None:
                yield name, connection.api_key

    def listing(self) -> list[dict[str, Any]]:
        """What ``GET /v1/providers`` shows: never a URL, a region or a credential."""
        return [
            {"connection": name, "type": connection.type, "models": list(connection.models)}
            for name, connection in self.items()
        ]


def provider_problem(
    connections: ProviderConnections, connection_name: str, model_id: str | None
) -> tuple[str, str] | None:
    """Why ``{connection, modelId}`` cannot be served by this deployment, as
    ``(field, message)`` with field ``connection`` or ``modelId``; None when it can.

    The embedded connection takes no modelId; the others need one that their ``models``
    globs match."""
    connection = connections.get(connection_name)
    if connection is None:
        known = ", ".join(connections.names())
        return "connection", f"unknown connection {connection_name!r} (available: {known})"
    if not connection.needs_model_id:
        if model_id is not None:
            return "modelId", f"connection {connection_name!r} ({connection.type}) takes no modelId"
        return None
    if not model_id:
        return "modelId", f"connection {connection_name!r} needs a modelId"
    if not connection.allows(model_id):
        return "modelId", f"connection {connection_name!r} does not allow the model {model_id!r}"
    return None


def decode_connections(raw: str | Mapping[str, Any]) -> dict[str, Any]:
    """The object of ``PROVIDER_CONNECTIONS`` JSON text (blank text: no connections).

    Raises ``ValueError`` when the text is not JSON or not an object."""
    import json

    data: Any = raw
    if isinstance(raw, str):
        if not raw.strip():
            return {}
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise ValueError(f"not valid JSON: {exc}") from None
    if not isinstance(data, Mapping):
        raise ValueError("must be a JSON object of connections by name")
    return dict(data)


def parse_connections(raw: str | Mapping[str, Any]) -> ProviderConnections:
    """``PROVIDER_CONNECTIONS`` (JSON text or a decoded object), validated.

    Raises ``ValueError`` (pydantic's ``ValidationError`` is one) naming the location."""
    return ProviderConnections.model_validate(decode_connections(raw))
