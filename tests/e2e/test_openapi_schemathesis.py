"""Schemathesis against the local runtime, from the document it serves: generated
requests to every operation (bounded), and every answer checked against the document
(status documented, content type, body schema) and for server errors.

Driven through schemathesis' Python API and Hypothesis directly (its pytest plugin does
not support this pytest yet)."""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.support.runtime_process import DEV_TOKEN, RuntimeProcess

pytestmark = pytest.mark.e2e
EXAMPLES_PER_OPERATION = 12
CHECKS = [
    schemathesis.checks.not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


def test_every_answer_matches_the_document_and_none_is_a_server_error(
    local_runtime: RuntimeProcess,
) -> None:
    schema = schemathesis.openapi.from_url(f"{local_runtime.base_url}/v1/openapi.json")
    headers = {"Authorization": f"Bearer {DEV_TOKEN}"}
    operations = [result.ok() for result in schema.get_all_operations() if isinstance(result, Ok)]
    # Every route of the API but the document itself (which schemathesis leaves out).
    assert len(operations) >= 15

    calls: dict[str, int] = {}
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=EXAMPLES_PER_OPERATION,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def exercise(case: Any) -> None:
            calls[case.operation.label] = calls.get(case.operation.label, 0) + 1
            case.call_and_validate(
                base_url=local_runtime.base_url, headers=headers, checks=CHECKS, timeout=30
            )

        exercise()

    # Each operation was really exercised, with several generated requests.
    assert set(calls) == {op.label for op in operations}
    assert min(calls.values()) >= 3
