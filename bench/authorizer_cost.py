"""The missing-header 401, priced per million requests.

This stack's HttpApi authorizer has no identity source and no cache: it runs on every
request, a missing ``Authorization`` header included, so that every 401 is the
contract's body. The alternative caches its answer per ``Authorization`` header, and
API Gateway then answers a request without the header itself, with
``{"message":"Unauthorized"}``. The difference is the authorizer's invocations: one per
request, or one per cache miss. Its warm duration is measured here (in process, a token
found in the container's cache, as most requests are); the prices are published ones.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from bench.prices import (
    DYNAMODB_USD_PER_MILLION_READ_UNITS,
    HTTP_API_USD_PER_MILLION_REQUESTS,
    LAMBDA_ARM_USD_PER_GB_SECOND,
    LAMBDA_USD_PER_MILLION_REQUESTS,
)
from bench.stats import median

CACHE_HIT_RATES = (0.5, 0.9, 0.99)


def cost_per_million(billed_ms: int, memory_mb: int, hit_rate: float) -> dict[str, float]:
    """USD per million API requests: API Gateway, and the authorizer's Lambda requests
    and duration when a fraction ``hit_rate`` of them is answered from a cache."""
    invocations = round(1_000_000 * (1 - hit_rate))
    gb_seconds = invocations * billed_ms / 1000 * memory_mb / 1024
    requests_usd = invocations / 1_000_000 * LAMBDA_USD_PER_MILLION_REQUESTS
    duration_usd = gb_seconds * LAMBDA_ARM_USD_PER_GB_SECOND
    return {
        "hitRate": hit_rate,
        "invocations": invocations,
        "lambdaUsd": requests_usd + duration_usd,
        "apiGatewayUsd": HTTP_API_USD_PER_MILLION_REQUESTS,
        "totalUsd": HTTP_API_USD_PER_MILLION_REQUESTS + requests_usd + duration_usd,
    }


def authorizer_figures(runs: int, progress: Callable[[str], None]) -> dict[str, Any]:
    """The authorizer's warm duration (median of ``runs`` invocations, known token,
    unknown token, no header) and the cost of each design per million requests."""
    from local_runtime.aws_resources import function_specs
    from tests.support.inprocess_api import inprocess_stack, new_workspace

    memory_mb = function_specs()["AuthorizerFunction"].memory_size
    progress("authorizer warm duration")
    with inprocess_stack() as api:
        _, token = new_workspace(api, "bench-authorizer")
        headers = {
            "known token": {"authorization": f"Bearer {token}"},
            "unknown token": {"authorization": "Bearer not-a-token-of-anyone"},
            "no header": {},
        }
        durations: dict[str, float] = {}
        for label, given in headers.items():
            event = {"version": "2.0", "type": "REQUEST", "headers": given}
            api.invoke("AuthorizerFunction", event)  # warm: container built, token cached
            spent = []
            for _ in range(runs):
                began = time.perf_counter()
                api.invoke("AuthorizerFunction", event)
                spent.append(time.perf_counter() - began)
            durations[label] = median(spent)
    billed_ms = max(1, math.ceil(durations["known token"] * 1000))
    return {
        "runs": runs,
        "memoryMb": memory_mb,
        "warmSeconds": durations,
        "billedMs": billed_ms,
        "uncached": cost_per_million(billed_ms, memory_mb, 0.0),
        "cached": [cost_per_million(billed_ms, memory_mb, rate) for rate in CACHE_HIT_RATES],
        "tokenReadUsdPerMillionWorstCase": DYNAMODB_USD_PER_MILLION_READ_UNITS,
    }
