"""Idempotency-Key support on top of Powertools' idempotency utility.

The key is scoped per workspace (two tenants may pick the same key); the payload that
must match on a retry is the route plus the request body.

A record is ``{id, status, data, validation, expiration, in_progress_expiration}``:
``data`` is the first response (a turn's result as JSON), ``validation`` a hash of the
request. Its id is ``turn#<md5 of "<workspace>#<key>">`` on every door and function (a
fixed ``key_prefix``: Powertools would otherwise prefix the function's name, so a key
would guard one function only). The work is given that id, and the serving path records
it with the turn, so erasing a session removes its turns' records; every record also
expires ``expires_after_seconds`` (24 h) after it was written: Powertools ignores it from
then on, and DynamoDB's TTL (``expiration``) deletes it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from convo_memory.domain.errors import (
    IdempotencyInProgress,
    IdempotencyKeyReused,
    StoreUnavailable,
)

if TYPE_CHECKING:
    from convo_memory.domain.time_budget import TimeLeft

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
        compute: Callable[[str], dict[str, Any]],
        time_left: TimeLeft | None = None,
    ) -> dict[str, Any]:
        """Run ``compute`` once per (workspace, key), given the id of the key's record;
        a retry gets the first result. ``time_left`` is how long the request may run: an
        in-progress record expires with it (else with Powertools' default)."""
        from aws_lambda_powertools.utilities.idempotency.exceptions import (
            IdempotencyAlreadyInProgressError,
            IdempotencyPersistenceLayerError,
            IdempotencyValidationError,
        )

        if time_left is not None:
            # Powertools reads the time left (``get_remaining_time_in_millis``), nothing else.
            self.config.register_lambda_context(cast(Any, time_left))
        scope = f"{workspace_id}#{key}"
        call = {"scope": scope, "request": {"route": route, "body": body}}
        try:
            result: dict[str, Any] = self._run(
                call=call, compute=partial(compute, self.record_id(scope))
            )
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
