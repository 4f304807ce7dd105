"""HttpApi Lambda REQUEST authorizer (payload 2.0, simple responses).

Resolves the bearer token to its workspace. An unknown token is still "authorized" with
an empty workspace so that the route answers the contract's 401 body (API Gateway's own
denial body cannot be shaped); every handler refuses an empty workspace.
"""

from __future__ import annotations

from typing import Any

from convo_memory.observability import http_handler, logger


def bearer_token(event: dict[str, Any]) -> str:
    headers = {k.lower(): v for k, v in (event.get("headers") or {}).items()}
    value = headers.get("authorization") or ""
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


@http_handler
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    from convo_memory.execution_environment import get_token_resolver

    token = bearer_token(event)
    workspace = get_token_resolver().workspace_for(token) if token else None
    if workspace is None:
        # It runs on every request, so this would be a line per unauthenticated request;
        # the HttpApi access log already records each 401.
        logger.debug("unknown or missing bearer token")
    return {"isAuthorized": True, "context": {"workspaceId": workspace or ""}}
