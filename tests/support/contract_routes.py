"""The routes the contract and docs/architecture.md name, and the function serving each:
what template.yaml and the OpenAPI document are checked against."""

from __future__ import annotations

# Every route of CONTRACT.md and the function docs/architecture.md gives it.
EXPECTED_ROUTES = {
    ("POST", "/v1/capabilities"): "CapabilitiesFunction",
    ("GET", "/v1/capabilities"): "CapabilitiesFunction",
    ("GET", "/v1/capabilities/{capabilityId}"): "CapabilitiesFunction",
    ("GET", "/v1/runs/{runId}"): "CapabilitiesFunction",
    ("GET", "/v1/providers"): "CapabilitiesFunction",
    ("POST", "/v1/sessions"): "CreateSessionFunction",
    ("GET", "/v1/sessions"): "ReadSessionsFunction",
    ("GET", "/v1/sessions/{sessionId}"): "ReadSessionsFunction",
    ("PATCH", "/v1/sessions/{sessionId}"): "ModifySessionFunction",
    ("DELETE", "/v1/sessions/{sessionId}"): "ModifySessionFunction",
    ("GET", "/v1/sessions/{sessionId}/messages"): "ReadSessionsFunction",
    ("GET", "/v1/sessions/{sessionId}/context"): "ReadSessionsFunction",
    ("GET", "/v1/sessions/{sessionId}/messages/{seq}/prompt"): "ReadSessionsFunction",
    ("POST", "/v1/sessions/{sessionId}/forks"): "ForkSessionFunction",
    ("POST", "/v1/capabilities/{capabilityId}/predict"): "PredictFunction",
    ("POST", "/v1/capabilities/{capabilityId}/predict/stream"): "PredictFunction",
    ("POST", "/v1/sessions/{sessionId}/messages"): "PredictFunction",
    # The OpenAI-compatible door (the streaming Function URL serves them too).
    ("POST", "/v1/chat/completions"): "PredictFunction",
    ("GET", "/v1/models"): "PredictFunction",
    # The Responses door and conversations (v4): POST /v1/responses streams there too.
    ("POST", "/v1/responses"): "PredictFunction",
    ("GET", "/v1/responses/{responseId}"): "ReadSessionsFunction",
    ("DELETE", "/v1/responses/{responseId}"): "ModifySessionFunction",
    ("GET", "/v1/responses/{responseId}/input_items"): "ReadSessionsFunction",
    ("POST", "/v1/conversations"): "CreateSessionFunction",
    ("GET", "/v1/conversations/{conversationId}"): "ReadSessionsFunction",
    ("POST", "/v1/conversations/{conversationId}"): "ModifySessionFunction",
    ("DELETE", "/v1/conversations/{conversationId}"): "ModifySessionFunction",
    ("GET", "/v1/conversations/{conversationId}/items"): "ReadSessionsFunction",
    # (v5) Conversation items: added (as imported history) and read one by one.
    ("POST", "/v1/conversations/{conversationId}/items"): "ModifySessionFunction",
    ("GET", "/v1/conversations/{conversationId}/items/{itemId}"): "ReadSessionsFunction",
    ("DELETE", "/v1/conversations/{conversationId}/items/{itemId}"): "ModifySessionFunction",
    ("POST", "/v1/erasures"): "ErasuresFunction",
    ("GET", "/v1/erasures/{erasureId}"): "ErasuresFunction",
    # (v5) The Files API.
    ("POST", "/v1/files"): "FilesFunction",
    ("GET", "/v1/files"): "FilesFunction",
    ("GET", "/v1/files/{fileId}"): "FilesFunction",
    ("DELETE", "/v1/files/{fileId}"): "FilesFunction",
    ("GET", "/v1/files/{fileId}/content"): "FilesFunction",
    # Unknown routes: the contract's not_found body (served without a token).
    ("ANY", "$default"): "CapabilitiesFunction",
    # The Studio Chat page (served without a token; its calls carry the operator's).
    ("GET", "/studio"): "StudioFunction",
    ("GET", "/v1/openapi.json"): "OpenApiFunction",
    # Swagger UI over that document (404 unless the deployment turns it on).
    ("GET", "/v1/docs"): "OpenApiFunction",
}
# The routes served without the authorizer.
PUBLIC_PATHS = {"$default", "/studio", "/v1/openapi.json", "/v1/docs"}
