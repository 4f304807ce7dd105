"""One DynamoDB table behind a low-level client, with the one error translation every
store shares: nothing above this module sees a ``ClientError`` or a ``BotoCoreError``.

- capacity and availability errors (throttling, 5xx, timeouts, connection errors)
  become ``StoreUnavailable``: the request may succeed later (throttling is its
  subclass ``StoreThrottled``, for the turn limiter, to which it means a flood);
- a failed condition is reported by ``conditional`` as ``None`` (callers decide);
- everything else (validation errors, item size, unknown codes) becomes
  ``StoreRejected``: the request can never succeed as sent.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from convo_memory.domain.errors import StoreRejected, StoreThrottled, StoreUnavailable

Item = dict[str, Any]

# Capacity and availability errors: the request may succeed later.
UNAVAILABLE_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "InternalServerError",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "LimitExceededException",
        "TransactionInProgressException",
        "TransactionConflictException",
        "RequestTimeout",
        "RequestTimeoutException",
    }
)
# Of those, the ones that say the item's partition or the table took too much traffic.
THROTTLED_CODES = frozenset({"ProvisionedThroughputExceededException", "ThrottlingException"})
CONDITION_FAILED = "ConditionalCheckFailedException"
TRANSACTION_CANCELED = "TransactionCanceledException"
BATCH_SIZE = 25
BATCH_ATTEMPTS = 8


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def translate(exc: Exception) -> Exception:
    """The domain error for a botocore error (chosen by code, never by message text)."""
    if isinstance(exc, ClientError):
        code = error_code(exc)
        if code in THROTTLED_CODES:
            return StoreThrottled(f"DynamoDB throttled the request ({code})")
        if code in UNAVAILABLE_CODES:
            return StoreUnavailable(f"DynamoDB unavailable ({code})")
        return StoreRejected(f"DynamoDB refused the request ({code or 'unknown error'})")
    return StoreUnavailable(f"DynamoDB unreachable ({type(exc).__name__})")


def string_value(value: str) -> dict[str, str]:
    """A DynamoDB string attribute value (``{"S": ...}``)."""
    return {"S": value}


def number_value(value: int | float) -> dict[str, str]:
    """A DynamoDB number attribute value (``{"N": ...}``)."""
    return {"N": str(value)}


class DynamoTable:
    """Calls on one table; every store of the layer is built on one of these."""

    def __init__(self, client: Any, name: str) -> None:
        self.client = client
        self.name = name

    def call(self, operation: str, **kwargs: Any) -> Any:
        """``client.<operation>(TableName=..., **kwargs)`` with errors translated."""
        try:
            return getattr(self.client, operation)(TableName=self.name, **kwargs)
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc) from exc

    def conditional(self, operation: str, **kwargs: Any) -> tuple[bool, Item | None]:
        """A conditional write: ``(True, attributes)`` when it was applied, ``(False,
        current item or None)`` when its condition failed. Pass
        ``ReturnValuesOnConditionCheckFailure="ALL_OLD"`` to get the current item."""
        try:
            out = getattr(self.client, operation)(TableName=self.name, **kwargs)
        except ClientError as exc:
            if error_code(exc) == CONDITION_FAILED:
                item: Item | None = exc.response.get("Item")  # type: ignore[assignment]
                return False, item
            raise translate(exc) from exc
        except BotoCoreError as exc:
            raise translate(exc) from exc
        return True, out.get("Attributes")

    def transact(self, entries: list[Item]) -> list[str] | None:
        """A write transaction on this table (``entries``: TransactItems without their
        TableName). None when it was applied; else why it was canceled, one code per
        entry ("None" for an entry that did not cancel it, "ConditionalCheckFailed"
        for a failed condition)."""
        items = [
            {kind: {"TableName": self.name, **body}}
            for entry in entries
            for kind, body in entry.items()
        ]
        try:
            self.client.transact_write_items(TransactItems=items)
        except ClientError as exc:
            if error_code(exc) == TRANSACTION_CANCELED:
                reasons = exc.response.get("CancellationReasons") or []
                return [str(reason.get("Code", "None")) for reason in reasons]
            raise translate(exc) from exc
        except BotoCoreError as exc:
            raise translate(exc) from exc
        return None

    def get(self, key: Item, *, consistent: bool = True, **kwargs: Any) -> Item | None:
        item: Item | None = self.call("get_item", Key=key, ConsistentRead=consistent, **kwargs).get(
            "Item"
        )
        return item

    def query(self, **kwargs: Any) -> Any:
        return self.call("query", **kwargs)

    def query_all(self, **kwargs: Any) -> Iterator[Item]:
        """Every item of a query, page after page, fetched lazily."""
        start: Mapping[str, Any] | None = None
        while True:
            args = dict(kwargs)
            if start:
                args["ExclusiveStartKey"] = start
            out = self.query(**args)
            yield from out.get("Items", [])
            start = out.get("LastEvaluatedKey")
            if not start:
                return

    def batch_get(self, keys: list[Item], *, consistent: bool = True) -> list[Item]:
        """The items of up to 100 keys (those that exist), in one ``BatchGetItem`` (and
        another for keys DynamoDB left unprocessed, bounded)."""
        found: list[Item] = []
        pending: dict[str, Any] = {self.name: {"Keys": keys, "ConsistentRead": consistent}}
        for attempt in range(BATCH_ATTEMPTS):
            try:
                out = self.client.batch_get_item(RequestItems=pending)
            except (ClientError, BotoCoreError) as exc:
                raise translate(exc) from exc
            found += out.get("Responses", {}).get(self.name, [])
            pending = out.get("UnprocessedKeys") or {}
            if not pending:
                return found
            time.sleep(min(0.05 * 2**attempt, 1.0))
        raise StoreUnavailable("DynamoDB left keys unprocessed in a batch read")

    def delete_keys(self, keys: list[Item]) -> int:
        """Delete items by key in batches of 25, retrying unprocessed ones (bounded)."""
        return self._write_batches([{"DeleteRequest": {"Key": key}} for key in keys])

    def put_items(self, items: list[Item]) -> int:
        """Put whole items (unconditionally) in batches of 25, retrying unprocessed ones."""
        return self._write_batches([{"PutRequest": {"Item": item}} for item in items])

    def _write_batches(self, requests: list[Item]) -> int:
        for begin in range(0, len(requests), BATCH_SIZE):
            pending: dict[str, Any] = {self.name: requests[begin : begin + BATCH_SIZE]}
            for attempt in range(BATCH_ATTEMPTS):
                try:
                    out = self.client.batch_write_item(RequestItems=pending)
                except (ClientError, BotoCoreError) as exc:
                    raise translate(exc) from exc
                pending = out.get("UnprocessedItems") or {}
                if not pending:
                    break
                time.sleep(min(0.05 * 2**attempt, 1.0))
            if pending:
                raise StoreUnavailable("DynamoDB left items unprocessed in a batch write")
        return len(requests)
