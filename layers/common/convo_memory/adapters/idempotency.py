"""Idempotency-Key support on top of Powertools' idempotency utility.

The key is scoped per workspace (two tenants may pick the same key); the payload that
must match on a retry is the route plus the request body.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from convo_memory.domain.errors import (
    IdempotencyInProgress,
    IdempotencyKeyReused,
    StoreUnavailable,
)


class IdempotentRunner:
    def __init__(
        self, table_name: str, client: Any, expires_after_seconds: int = 24 * 3600
    ) -> None:
        from aws_lambda_powertools.utilities.idempotency import (
            DynamoDBPersistenceLayer,
            IdempotencyConfig,
            idempotent_function,
        )

        self.config = IdempotencyConfig(
            event_key_jmespath="scope",
            payload_validation_jmespath="request",
            expires_after_seconds=expires_after_seconds,
            raise_on_no_idempotency_key=True,
        )
        persistence = DynamoDBPersistenceLayer(table_name=table_name, boto3_client=client)

        @idempotent_function(
            data_keyword_argument="call", persistence_store=persistence, config=self.config
        )
        def run(call: dict[str, Any], compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
            return compute()

        self._run = run

    def run(
        self,
        *,
        workspace_id: str,
        key: str,
        route: str,
        body: Any,
        compute: Callable[[], dict[str, Any]],
        lambda_context: Any = None,
    ) -> dict[str, Any]:
        """Run ``compute`` once per (workspace, key); a retry gets the first result."""
        from aws_lambda_powertools.utilities.idempotency.exceptions import (
            IdempotencyAlreadyInProgressError,
            IdempotencyPersistenceLayerError,
            IdempotencyValidationError,
        )

        if lambda_context is not None:
            self.config.register_lambda_context(lambda_context)
        call = {"scope": f"{workspace_id}#{key}", "request": {"route": route, "body": body}}
        try:
            result: dict[str, Any] = self._run(call=call, compute=compute)
        except IdempotencyAlreadyInProgressError:
            raise IdempotencyInProgress(
                "a request with this Idempotency-Key is still being processed; retry later"
            ) from None
        except IdempotencyValidationError:
            raise IdempotencyKeyReused(
                "this Idempotency-Key was already used with a different request"
            ) from None
        except IdempotencyPersistenceLayerError as exc:
            raise StoreUnavailable(f"idempotency store unavailable: {exc}") from exc
        return result
