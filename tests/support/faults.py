"""Fault injection for DynamoDB through botocore's event hooks: a ``before-call`` handler
that returns a response short-circuits the request, so the table never sees it (moto's
stubber would still execute a request a ``before-send`` hook had answered)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from botocore.awsrequest import AWSResponse
from botocore.compat import HTTPHeaders


def dynamodb_error(code: str, status: int) -> tuple[AWSResponse, dict[str, Any]]:
    """What a ``before-call`` hook returns to answer a request with DynamoDB error ``code``."""
    parsed = {
        "Error": {"Code": code, "Message": "injected"},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return AWSResponse("https://dynamodb", status, HTTPHeaders(), None), parsed


def is_turn_put(params: dict[str, Any]) -> bool:
    """Whether a PutItem request (botocore's serialized request dict) writes a turn."""
    body = json.loads(params.get("body") or b"{}")
    sk = str(body.get("Item", {}).get("sk", {}).get("S", ""))
    return sk.startswith("MSG#") and not sk.endswith("#DIGEST")


def inject(
    client: Any, operation: str, fault: Callable[[dict[str, Any]], Any]
) -> Callable[[], None]:
    """Call ``fault(params)`` before each ``operation`` of ``client``: what it returns (a
    response, see ``dynamodb_error``) or raises replaces the request; ``None`` lets the
    request through. Returns a function that removes the fault."""

    def before_call(params: dict[str, Any], **_: Any) -> Any:
        return fault(params)

    event = f"before-call.dynamodb.{operation}"
    client.meta.events.register_first(event, before_call)
    return lambda: client.meta.events.unregister(event, before_call)
