"""``GET /v1/openapi.json`` (no token): the OpenAPI 3.1 document of the HTTP API, made
from the routes of every function (``convo_memory.edge.openapi``); and, when the deployment
turns it on (``SWAGGER_UI``), ``GET /v1/docs``: Swagger UI over that document.

This function's code is the whole ``functions`` directory, so that it can read every
handler's routes; it runs ``openapi/app.py``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from aws_lambda_powertools.event_handler import Response

from convo_memory.edge.api_contract import PUBLIC, answers
from convo_memory.edge.resolver import ApiResolver, json_response
from convo_memory.observability import http_handler

app = ApiResolver()
FUNCTIONS = Path(__file__).resolve().parent.parent
SWAGGER_UI_ENV = "SWAGGER_UI"


def served_at() -> str | None:
    """This deployment's address, as the request reached it."""
    event = app.current_event
    host = event.headers.get("host") or event.request_context.domain_name
    # API Gateway sets X-Forwarded-Proto; the local runtime serves plain http.
    scheme = event.headers.get("x-forwarded-proto") or "http"
    return f"{scheme}://{host}" if host else None


@app.get(
    "/v1/openapi.json",
    summary="This document",
    tags=["meta"],
    responses=answers(200, public=True),
    openapi_extensions=PUBLIC,
)
def get_open_api() -> Response[dict[str, Any]]:
    from convo_memory.edge.openapi import openapi_document

    document = openapi_document(FUNCTIONS, served_at())
    return json_response(200, document, headers={"Cache-Control": "public, max-age=300"})


@app.get("/v1/docs", include_in_schema=False)
def swagger_ui() -> Response[str]:
    """Swagger UI over the document, its script and styles inlined (nothing is fetched
    from another origin); ``not_found`` unless the deployment turned it on."""
    from convo_memory.edge.openapi import openapi_document

    if os.environ.get(SWAGGER_UI_ENV, "").lower() != "true":
        return json_response(404, {"error": {"code": "not_found", "message": "no such route"}})
    page = swagger_page(openapi_document(FUNCTIONS, served_at()))
    # The page holds the token its user types: not framed, no referrer sent.
    headers = {"X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer"}
    headers["X-Content-Type-Options"] = "nosniff"
    return Response(200, content_type="text/html; charset=utf-8", body=page, headers=headers)


def swagger_page(document: dict[str, Any]) -> str:
    """Swagger UI over ``document``: Powertools' page, with the script and the styles
    it bundles inlined."""
    from importlib.resources import files

    from aws_lambda_powertools.event_handler.openapi.swagger_ui import generate_swagger_html

    assets = files("aws_lambda_powertools.event_handler.openapi.swagger_ui")
    script = (assets / "swagger-ui-bundle.min.js").read_text(encoding="utf-8")
    styles = (assets / "swagger-ui.min.css").read_text(encoding="utf-8")
    # Inside <script>: "</" would end it.
    spec = json.dumps(document, ensure_ascii=False).replace("</", "<\\/")
    return generate_swagger_html(spec, script, styles, "", None)


@http_handler
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return app.resolve(event, context)
