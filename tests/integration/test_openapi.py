"""The OpenAPI document: valid 3.1, served without a token, and in step with the routes
of template.yaml and of the contract (so a route cannot be added or dropped on one side
only)."""

from __future__ import annotations

import inspect

from openapi_spec_validator import validate

from convo_memory.domain import errors
from convo_memory.openapi import openapi_document
from local_runtime.aws_resources import function_specs
from tests.support.contract_routes import EXPECTED_ROUTES
from tests.support.inprocess_api import InProcessApi

NOT_IN_THE_DOCUMENT = {("ANY", "$default"), ("GET", "/studio")}  # the 404 catch-all, a page


def operations(document: dict[str, object]) -> set[tuple[str, str]]:
    paths = document["paths"]
    assert isinstance(paths, dict)
    return {(method.upper(), path) for path, ops in paths.items() for method in ops}


def test_the_document_is_valid_openapi_3_1() -> None:
    document = openapi_document("https://api.example.com")

    validate(document)

    assert document["openapi"] == "3.1.0"
    assert document["servers"] == [{"url": "https://api.example.com"}]


def test_the_document_the_template_and_the_contract_name_the_same_routes() -> None:
    served = {
        route
        for spec in function_specs().values()
        for route in spec.http_routes
        if route not in NOT_IN_THE_DOCUMENT
    }
    contract = set(EXPECTED_ROUTES) - NOT_IN_THE_DOCUMENT

    assert operations(openapi_document()) == served == contract


def test_every_contract_error_code_is_documented() -> None:
    codes = {
        cls.code
        for _, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, errors.ServiceError) and cls.code not in ("conflict",)
    }
    text = str(openapi_document())

    missing = {code for code in codes if f"'{code}'" not in text}

    assert missing == set()


def test_it_is_served_without_a_token_with_this_deployments_address(api: InProcessApi) -> None:
    response = api.call("GET", "/v1/openapi.json", headers={"host": "api.example.com"})

    assert response.status == 200
    assert response.body["openapi"] == "3.1.0"
    assert response.body["servers"] == [{"url": "http://api.example.com"}]
    assert ("POST", "/v1/sessions") in operations(response.body)
