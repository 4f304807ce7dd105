"""CORS answers for the doors a browser page calls from another origin.

On AWS the Studio page is served by the HttpApi and streams from the Function URL, a
different origin. API Gateway and the Function URL answer preflight themselves from the
template's CORS settings, and add ``Access-Control-Allow-Origin`` to the actual responses;
the streaming app behind the Lambda Web Adapter answers the ``OPTIONS`` requests that
reach it with the same rules, and the local runtime does both, as AWS does.

Pure: no I/O, no AWS, no Powertools. The API is authorized by a bearer token in the
``Authorization`` header, never by cookies, so credentials are never allowed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

ALLOWED_ORIGINS_ENV = "CORS_ALLOWED_ORIGINS"
# The template's default (see its AllowedOrigins parameter for why).
DEFAULT_ALLOWED_ORIGINS: tuple[str, ...] = ("*",)
# Ours, the OpenAI-compatible door's, and the ones OpenAI's JavaScript SDK adds to every
# request in a browser (``dangerouslyAllowBrowser``); the template lists the same.
ALLOWED_HEADERS: tuple[str, ...] = (
    "authorization",
    "content-type",
    "idempotency-key",
    "x-convo-session-id",
    "x-convo-session-key",
    "x-convo-principal",
    "x-convo-user",
    "x-stainless-arch",
    "x-stainless-lang",
    "x-stainless-os",
    "x-stainless-package-version",
    "x-stainless-retry-count",
    "x-stainless-runtime",
    "x-stainless-runtime-version",
    "x-stainless-timeout",
    "x-stainless-helper-method",
)
ALLOWED_METHODS: tuple[str, ...] = ("GET", "POST", "PATCH", "DELETE")
MAX_AGE_SECONDS = 600


@dataclass(frozen=True)
class PreflightAnswer:
    """The response to a preflight: a status and headers, never a body."""

    status: int
    headers: tuple[tuple[str, str], ...]

    @property
    def allowed(self) -> bool:
        """Whether the browser may go on with the actual request."""
        return any(name == "access-control-allow-origin" for name, _ in self.headers)


def allowed_origins(env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The allowed origins from ``CORS_ALLOWED_ORIGINS`` (comma-separated; ``*`` is any),
    or the template's default when it is unset or blank."""
    raw = (os.environ if env is None else env).get(ALLOWED_ORIGINS_ENV, "")
    origins = tuple(part.strip().rstrip("/") for part in raw.split(",") if part.strip())
    return origins or DEFAULT_ALLOWED_ORIGINS


def is_preflight(method: str, headers: Mapping[str, str]) -> bool:
    """An ``OPTIONS`` request carrying ``Origin`` and ``Access-Control-Request-Method``."""
    lowered = {name.lower() for name in headers}
    return (
        method.upper() == "OPTIONS"
        and "origin" in lowered
        and "access-control-request-method" in lowered
    )


def preflight(
    headers: Mapping[str, str],
    origins: Sequence[str] = DEFAULT_ALLOWED_ORIGINS,
    methods: Sequence[str] = ALLOWED_METHODS,
) -> PreflightAnswer:
    """Answer a CORS preflight given its request headers and the allowed origins.

    Allowed: ``204`` with the ``Access-Control-Allow-*`` headers (the origin itself is
    echoed, or ``*`` when any origin is allowed). Refused (unknown origin, method or
    header): ``204`` without them, which is how a browser learns it must not send the
    request; nothing else about the service is revealed.
    """
    lowered = {name.lower(): value.strip() for name, value in headers.items()}
    origin = lowered.get("origin", "")
    requested_method = lowered.get("access-control-request-method", "").upper()
    requested_headers = [
        name.strip().lower()
        for name in lowered.get("access-control-request-headers", "").split(",")
        if name.strip()
    ]
    vary = (("vary", "Origin, Access-Control-Request-Method, Access-Control-Request-Headers"),)
    any_origin = "*" in origins
    origin_ok = bool(origin) and (any_origin or origin.rstrip("/") in origins)
    method_ok = requested_method in {m.upper() for m in methods}
    headers_ok = all(name in ALLOWED_HEADERS for name in requested_headers)
    if not (origin_ok and method_ok and headers_ok):
        return PreflightAnswer(204, vary)
    return PreflightAnswer(
        204,
        (
            ("access-control-allow-origin", "*" if any_origin else origin),
            ("access-control-allow-methods", ", ".join(m.upper() for m in methods)),
            ("access-control-allow-headers", ", ".join(ALLOWED_HEADERS)),
            ("access-control-max-age", str(MAX_AGE_SECONDS)),
            *vary,
        ),
    )


def actual_response_headers(
    headers: Mapping[str, str], origins: Sequence[str] = DEFAULT_ALLOWED_ORIGINS
) -> tuple[tuple[str, str], ...]:
    """The CORS headers API Gateway and a Function URL add to an actual (not preflight)
    response, given the request's headers: ``Access-Control-Allow-Origin`` when the
    request names an allowed ``Origin`` (``*`` when any origin is allowed, else the origin
    itself, with ``Vary: Origin``); nothing for a request without one or from elsewhere.
    No ``Access-Control-Expose-Headers``: the template exposes none."""
    origin = next(
        (value.strip() for name, value in headers.items() if name.lower() == "origin"), ""
    )
    if not origin:
        return ()
    if "*" in origins:
        return (("access-control-allow-origin", "*"),)
    if origin.rstrip("/") in origins:
        return (("access-control-allow-origin", origin), ("vary", "Origin"))
    return ()


def is_cors_header(name: str) -> bool:
    """A response header that CORS settings own (API Gateway drops the backend's)."""
    return name.lower().startswith("access-control-")
