"""The one OpenAPI 3.1 document of the HTTP API (``GET /v1/openapi.json``), made from the
routes themselves: each HttpApi function declares its routes on its ``ApiResolver``
(``functions/*/app.py``); here they are declared again on one resolver, which Powertools
turns into one document in one pass (so a model has one name everywhere). Then what
Powertools leaves to its caller: path parameters named and bounded as the API and the
gate have them, the headers a route documents, the components its declared answers name
(``convo_memory.edge.api_contract``), this deployment's address.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import re
import sys
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.alias_generators import to_camel
from pydantic.json_schema import models_json_schema

from convo_memory import api as wire_models
from convo_memory.domain import request_rules
from convo_memory.edge.resolver import ApiResolver

TITLE = "convo-memory"
API_VERSION = "2.1.0"
DESCRIPTION = (
    "Conversation memory for stateless predictions: sessions, bounded replay, rolling "
    'summaries, agent tools. Every error is {"error": {"code", "message"}}.'
)
REF = "#/components/schemas/{model}"
ID_SCHEMA = {"type": "string", "minLength": 1, "maxLength": request_rules.MAX_ID_CHARS}


def route_modules(functions: Path) -> list[Any]:
    """The handler modules of ``functions`` (``<function>/app.py``) that serve HttpApi
    routes, each loaded once under a name of its own (every handler is ``app``)."""
    modules = []
    for path in sorted(functions.glob("*/app.py")):
        if "ApiResolver(" not in path.read_text(encoding="utf-8"):
            continue
        digest = hashlib.sha256(str(path).encode()).hexdigest()[:8]
        name = f"convo_memory_routes_{path.parent.name}_{digest}"
        module = sys.modules.get(name)
        if module is None:
            spec = importlib.util.spec_from_file_location(name, path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
        if isinstance(getattr(module, "app", None), ApiResolver):
            modules.append(module)
    return modules


@cache
def _document(functions: Path) -> dict[str, Any]:
    from aws_lambda_powertools.event_handler import APIGatewayHttpResolver
    from aws_lambda_powertools.event_handler.openapi.models import HTTPBearer

    every_route = APIGatewayHttpResolver()
    documented: dict[str, list[dict[str, Any]]] = {}
    for module in route_modules(functions):
        for declaration in module.app.declarations:
            arguments = dict(declaration.arguments)
            arguments["operation_id"] = arguments.get("operation_id") or to_camel(
                declaration.handler.__name__
            )
            every_route.route(**arguments)(declaration.handler)
            extensions = arguments.get("openapi_extensions") or {}
            documented[arguments["operation_id"]] = list(extensions.get("parameters", ()))
    schema = every_route.get_openapi_schema(
        title=TITLE,
        version=API_VERSION,
        description=DESCRIPTION,
        security_schemes={"bearer": HTTPBearer()},
        security=[{"bearer": []}],
    )
    document: dict[str, Any] = schema.model_dump(by_alias=True, exclude_none=True, mode="json")
    document["paths"] = {
        _camel_path(path): {
            method: _finished(operation, documented.get(operation["operationId"], []))
            for method, operation in operations.items()
        }
        for path, operations in document["paths"].items()
    }
    _add_named_components(document["components"]["schemas"], document)
    # Powertools' own validation errors: the contract's ErrorBody stands for them.
    for unused in ("HTTPValidationError", "ValidationError", "ResponseValidationError"):
        document["components"]["schemas"].pop(unused, None)
    return document


def _camel_path(path: str) -> str:
    return "/".join(
        "{" + to_camel(part[1:-1]) + "}" if part.startswith("{") else part
        for part in path.split("/")
    )


def _finished(operation: dict[str, Any], headers: list[dict[str, Any]]) -> dict[str, Any]:
    """A route's operation with its path ids named and bounded as the gate names and
    bounds them (unless the route typed one itself), and the headers it documents."""
    parameters = []
    for parameter in operation.get("parameters", []):
        if parameter["in"] == "path":
            parameter["name"] = to_camel(parameter["name"])
            schema = parameter["schema"]
            schema.pop("title", None)
            if not {"pattern", "minLength", "maxLength"} & schema.keys():
                schema.update(ID_SCHEMA)
        parameters.append(parameter)
    names = {(p["in"], p["name"]) for p in parameters}
    parameters += [h for h in headers if (h["in"], h["name"]) not in names]
    if parameters:
        operation["parameters"] = parameters
    for response in operation["responses"].values():
        if response.get("content") == {}:  # an answer without a body (204)
            del response["content"]
    return operation


def _add_named_components(schemas: dict[str, Any], document: dict[str, Any]) -> None:
    """The models that declared answers name (``api_contract.ref``: an error body, a
    stream's events) but no signature does, in serialization mode, as answers are."""
    missing = _refs(document) - schemas.keys()
    while missing:
        models: list[tuple[type[BaseModel], Literal["serialization"]]] = [
            (getattr(wire_models, name), "serialization") for name in sorted(missing)
        ]
        _, generated = models_json_schema(models, by_alias=True, ref_template=REF)
        for name, schema in generated.get("$defs", {}).items():
            schemas.setdefault(name, schema)
        missing = _refs(schemas) - schemas.keys()


def _refs(value: Any) -> set[str]:
    return set(re.findall(r'"#/components/schemas/([^"]+)"', json.dumps(value)))


def openapi_document(functions: Path, server_url: str | None = None) -> dict[str, Any]:
    """The document of every route the handlers in ``functions`` serve; ``server_url`` is
    where this deployment answers (if known)."""
    document = copy.deepcopy(_document(functions.resolve()))
    document["servers"] = [{"url": server_url or "/"}]
    return document
