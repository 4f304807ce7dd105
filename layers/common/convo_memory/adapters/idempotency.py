"""Idempotency-Key support on top of Powertools' idempotency utility.

The key is scoped per workspace (two tenants may pick the same key); the payload that
must match on a retry is the route plus the request body.

A record is ``{id, status, data, validation, expiration, in_progress_expiration}``:
``data`` is the first response (a turn's answer and its session id), ``validation`` a
hash of the request. Its id is ``turn#<md5 of "<workspace>#<key>">`` on every door and
function (a fixed ``key_prefix``: Powertools would otherwise prefix the function's name,
so a key would guard one function only). The serving path records that id with the turn
(``request_scope``), so erasing a session removes its turns' records; every record also
expires ``expires_after_seconds`` (24 h) after it was written: Powertools ignores it from
then on, and DynamoDB's TTL (``expiration``) deletes it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from convo_memory import request_scope
from convo_memory.domain.errors import (
    IdempotencyInProgress,
    IdempotencyKeyReused,
    StoreUnavailable,
)

RECORD_PREFIX = "turn"


class IdempotentRunner:
    def __init__(
        self, table_name: str, client: Any, expires_after_seconds: int = 24 * 3600
    ) -> None:
        from aws_lambda_powertools.utilities.idempotency import (
            DynamoDBPersistenceLayer,
            IdempotencyConfig,
            idempotent_function,
        )

        self.table_name = table_name
        self.config = IdempotencyConfig(
            event_key_jmespath="scope",
            payload_validation_jmespath="request",
            expires_after_seconds=expires_after_seconds,
            raise_on_no_idempotency_key=True,
        )
        persistence = DynamoDBPersistenceLayer(table_name=table_name, boto3_client=client)

        @idempotent_function(
            data_keyword_argument="call",
            persistence_store=persistence,
            config=self.config,
            key_prefix=RECORD_PREFIX,
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
        scope = f"{workspace_id}#{key}"
        call = {"scope": scope, "request": {"route": route, "body": body}}

        def guarded() -> dict[str, Any]:
            with request_scope.guarded_by(self.record_id(scope)):
                return compute()

        try:
            result: dict[str, Any] = self._run(call=call, compute=guarded)
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

    def record_id(self, scope: str) -> str:
        """The id Powertools gives the record of ``scope`` (``<workspace>#<key>``): the
        prefix and the configured hash of the key's JSON, as its persistence layer
        computes it (an integration test holds the two equal)."""
        digest = getattr(hashlib, self.config.hash_function)
        return f"{RECORD_PREFIX}#{digest(json.dumps(scope, sort_keys=True).encode()).hexdigest()}"
