"""Schemathesis against the local runtime, from the document it serves, with every check
(``st run --checks all``): its coverage, fuzzing and stateful phases, each bounded in
examples, on 127.0.0.1 only.

Every failure it reports must be one that docs/api.md ("What the document cannot say")
explains: a rule JSON Schema cannot state (an opaque signed ``nextToken``, an
``Idempotency-Key`` already used with another body, a comparison between two fields,
RE2 syntax, where a webhook's host resolves, a size in bytes) or one the contract
decides otherwise (a method a path does not have is ``404 not_found``). Anything else
fails the test, with schemathesis' own report of it.

Driven through schemathesis' engine in-process (the same engine as ``st run``), so that
each failure is seen with its response; its pytest plugin does not support this pytest.
"""

from __future__ import annotations

import copy
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import schemathesis
from jsonschema import Draft202012Validator
from schemathesis.config import SchemathesisConfig
from schemathesis.engine import Status, events, from_schema

from tests.support.runtime_process import DEV_TOKEN, RuntimeProcess

pytestmark = pytest.mark.e2e
# Fuzzing and stateful examples per operation (the coverage phase's cases do not depend
# on it). With this seed, 4 finds every kind of failure 8 found (each one docs/api.md
# explains), in 35-45 s instead of 55-65 on a loaded machine; 2 missed nextToken's.
EXAMPLES_PER_OPERATION = 4
SEED = 20_251_201
# A ceiling on the whole run (it takes well under a minute here): the engine is stopped
# there, and the test fails, rather than running on.
CEILING_SECONDS = 600.0
TURNS = (
    "POST /v1/capabilities/{capabilityId}/predict",
    "POST /v1/capabilities/{capabilityId}/predict/stream",
    "POST /v1/sessions/{sessionId}/messages",
)


@dataclass(frozen=True)
class Seen:
    """One failed check, with the answer that failed it."""

    check: str
    operation: str
    title: str
    status: int | None
    body: Any
    reproduce: str

    @property
    def code(self) -> str:
        error = self.body.get("error") if isinstance(self.body, dict) else None
        return str(error.get("code")) if isinstance(error, dict) else ""

    @property
    def message(self) -> str:
        error = self.body.get("error") if isinstance(self.body, dict) else None
        return str(error.get("message")) if isinstance(error, dict) else ""


@dataclass(frozen=True)
class Explained:
    """A kind of failure docs/api.md explains, and how to recognise it."""

    why: str
    check: str
    applies: Callable[[Seen], bool]


def refused(code: str, message: str = "") -> Callable[[Seen], bool]:
    pattern = re.compile(message)
    return lambda seen: (
        seen.status in (400, 404, 409, 422)
        and seen.code == code
        and bool(pattern.search(seen.message))
    )


EXPLAINED = (
    Explained(
        "nextToken is opaque and signed: only a value the service issued is accepted",
        "positive_data_acceptance",
        refused("validation_error", r"^nextToken is not a token this API issued"),
    ),
    Explained(
        "an Idempotency-Key already used with another body is 422 (IETF draft)",
        "positive_data_acceptance",
        lambda seen: seen.operation in TURNS and refused("idempotency_key_reused")(seen),
    ),
    Explained(
        "minMessages <= maxMessages compares two fields",
        "positive_data_acceptance",
        refused("validation_error", r"minMessages must be <= maxMessages"),
    ),
    Explained(
        "tool names are unique within a capability (unique by one property)",
        "positive_data_acceptance",
        refused("validation_error", r"tool names must be unique"),
    ),
    Explained(
        "blockedPatterns are RE2, bounded in compiled size",
        "positive_data_acceptance",
        refused("validation_error", r"is not valid RE2|compile to \d+ RE2 instructions"),
    ),
    Explained(
        "a webhook's url is taken only if it can be called: its host resolving to public "
        "addresses, or one the operator allows (and an IPv6 literal must be an address)",
        "positive_data_acceptance",
        refused(
            "validation_error",
            r"^tools\.\d+\.url: |^tools\.\d+: Value error, url is not a valid URL",
        ),
    ),
    Explained(
        "sizes in bytes of compact JSON, and depth of nesting",
        "positive_data_acceptance",
        refused("validation_error", r"is at most \d+ bytes|is at most \d+ levels deep"),
    ),
    Explained(
        "chat completions: the last message must be the user's, stateless messages must be "
        "text, an end user (user, safety_identifier or X-Convo-User, 1-256 characters, all "
        "equal) is required with X-Convo-Session-Key, X-Convo-Principal is JSON in a header "
        "(rules on the last item of a list, across a header and the body)",
        "positive_data_acceptance",
        lambda seen: (
            seen.operation == "POST /v1/chat/completions"
            and refused(
                "validation_error",
                r"^messages\.\d+\.(role|content) |^user is required with X-Convo-Session-Key"
                r"|^(user|safety_identifier|X-Convo-User) (must be 1-256|differs from)"
                r"|^X-Convo-Principal ",
            )(seen)
        ),
    ),
    Explained(
        "a bedrock-guardrail filter needs Amazon Bedrock, which the local runtime cannot "
        "reach: it could pass no answer (deployment configuration, like the connections)",
        "positive_data_acceptance",
        lambda seen: (
            seen.operation == "POST /v1/capabilities"
            and refused("validation_error", r"^contentFilter\.type: a bedrock-guardrail filter")(
                seen
            )
        ),
    ),
    Explained(
        "a fork's atSeq must be a recorded answer of the session: its transcript decides",
        "positive_data_acceptance",
        lambda seen: (
            seen.operation == "POST /v1/sessions/{sessionId}/forks"
            and refused("validation_error", r"^atSeq must be 0 or the seq of a recorded")(seen)
        ),
    ),
    Explained(
        "responses: the input's last item must be the user's message (or the function "
        "outputs that continue a paused turn), its items text; conversation and "
        "previous_response_id name one conversation, store false names none, the end user "
        "is 1-256 characters, X-Convo-Principal is JSON in a header (rules across fields "
        "and on the last item of a list)",
        "positive_data_acceptance",
        lambda seen: (
            seen.operation == "POST /v1/responses"
            and refused(
                "validation_error",
                r"^input(\.\d+)?(\.(role|type|content|id|arguments|call_id|name|output)(\.\d+)?)? "
                r"|^previous_response_id cannot be used with conversation"
                r"|^store false is stateless|^(user|safety_identifier) must be 1-256"
                r"|^X-Convo-Principal |^input must not be empty",
            )(seen)
        ),
    ),
    Explained(
        "a conversation's items page from an item id it issued (as nextToken, opaque)",
        "positive_data_acceptance",
        lambda seen: (
            seen.operation == "GET /v1/conversations/{conversationId}/items"
            and refused("validation_error", r"^after is not an item of this conversation")(seen)
        ),
    ),
    Explained(
        "(v5) an item id, and an item_reference's, names an item the service issued: any "
        "other is 404 item_not_found",
        "positive_data_acceptance",
        lambda seen: refused("item_not_found")(seen),
    ),
    Explained(
        "(v5) a conversation's items are read by their item types (a message's role and "
        "text parts, a call's call_id and name), as the Responses door reads input items",
        "positive_data_acceptance",
        lambda seen: (
            seen.operation == "POST /v1/conversations/{conversationId}/items"
            and refused(
                "validation_error",
                r"^items\.\d+(\.(role|type|content|id|arguments|call_id|name|output)(\.\d+)?)? ",
            )(seen)
        ),
    ),
    Explained(
        "(v5) an upload's bytes must be a type the service takes and agree with its name and "
        "declared type (magic bytes, UTF-8 text): the bytes decide, not the schema",
        "positive_data_acceptance",
        lambda seen: (
            seen.operation == "POST /v1/files" and refused("validation_error", r"^file ")(seen)
        ),
    ),
    Explained(
        "(v5) an attachment's fileId must name a file of the workspace (a store decides)",
        "positive_data_acceptance",
        lambda seen: seen.status == 404 and seen.code == "file_not_found",
    ),
    Explained(
        "a method a path does not have is 404 not_found, as any unknown route (contract)",
        "unsupported_method",
        lambda seen: seen.status == 404 and seen.code == "not_found",
    ),
)


def this_deployments_providers(document: dict[str, Any], providers: list[dict[str, Any]]) -> None:
    """What a client reads from GET /v1/providers (behind the token, so not in the public
    document): the connections this runtime has. The fuzzing keeps to ``embedded``,
    which takes no modelId (the shared runtime's ``fake`` connection is other modules'
    fake model)."""
    embedded = [p for p in providers if p["type"] == "embedded"]
    assert embedded, providers
    provider = document["components"]["schemas"]["ProviderConfig"]["properties"]
    provider["connection"] = {"enum": [p["connection"] for p in embedded]}
    provider["modelId"] = {"type": "null"}


def builtin_tools_only(document: dict[str, Any]) -> None:
    """Offline: a webhook tool would make the runtime resolve generated host names (and an
    agent turn could call them), so this copy offers the built-in tools only (webhook
    tools are tested against a tool server on 127.0.0.1 elsewhere)."""
    tool = document["components"]["schemas"]["NewToolSpec"]
    (builtin,) = [branch for branch in tool.pop("oneOf") if branch["title"] == "Built-in tool"]
    tool.update(builtin)


def failures_of(event: events.ScenarioFinished) -> list[Seen]:
    recorder = event.recorder
    found = []
    for case_id, checks in recorder.checks.items():
        for check in checks:
            if check.status != Status.FAILURE or check.failure_info is None:
                continue
            interaction = recorder.interactions.get(case_id)
            response = interaction.response if interaction is not None else None
            body: Any = None
            if response is not None:
                try:
                    body = json.loads(response.content or b"null")
                except ValueError:
                    body = (response.content or b"")[:500].decode("utf-8", "replace")
            failure = check.failure_info.failure
            found.append(
                Seen(
                    check=check.name,
                    operation=failure.operation or "",
                    title=failure.title,
                    status=response.status_code if response is not None else None,
                    body=body,
                    reproduce=check.failure_info.code_sample,
                )
            )
    return found


def test_schemathesis_with_every_check_finds_nothing_the_docs_do_not_explain(
    local_runtime: RuntimeProcess,
) -> None:
    status, _, served = local_runtime.call("GET", "/v1/openapi.json")
    assert status == 200
    document = copy.deepcopy(served)
    status, _, providers = local_runtime.call("GET", "/v1/providers", token=DEV_TOKEN)
    assert status == 200
    this_deployments_providers(document, providers["providers"])
    builtin_tools_only(document)

    config = SchemathesisConfig.from_dict(
        {
            "seed": SEED,
            "base-url": local_runtime.base_url,
            "workers": 1,
            "headers": {"Authorization": f"Bearer {DEV_TOKEN}"},
            "request-timeout": 30,
            "checks": {"enabled": True},  # every check, as `st run --checks all`
            "generation": {"max-examples": EXAMPLES_PER_OPERATION, "database": "none"},
            "cache": {"enabled": False},  # no crash files written into the checkout
        }
    )
    schema = schemathesis.openapi.from_dict(document, config=config)
    stream = from_schema(schema).execute()
    started = time.monotonic()
    seen: list[Seen] = []
    ran: dict[str, set[str]] = {}
    finished: events.EngineFinished | None = None
    fatal: list[str] = []
    for event in stream:
        if time.monotonic() - started > CEILING_SECONDS:
            stream.stop()
        if isinstance(event, events.ScenarioFinished):
            seen.extend(failures_of(event))
            for node in event.recorder.cases.values():
                ran.setdefault(str(event.phase.value), set()).add(node.value.operation.label)
        elif isinstance(event, events.FatalError | events.NonFatalError):
            fatal.append(repr(event))
        elif isinstance(event, events.EngineFinished):
            finished = event

    assert finished is not None and not fatal, fatal
    assert time.monotonic() - started <= CEILING_SECONDS, "stopped at the ceiling"
    # Every operation but the document itself went through each phase that generates.
    operations = {
        f"{method.upper()} {path}"
        for path, methods in served["paths"].items()
        for method in methods
        if path != "/v1/openapi.json"
    }
    assert operations <= ran.get("coverage", set()) and operations <= ran.get("fuzzing", set())
    assert ran.get("stateful"), ran.keys()

    unexplained = [
        s for s in seen if not any(e.check == s.check and e.applies(s) for e in EXPLAINED)
    ]
    assert not unexplained, "\n\n".join(
        f"{s.check} on {s.operation}: {s.title}\n{s.status} {s.body}\n{s.reproduce}"
        for s in unexplained[:10]
    )


def validator(document: dict[str, Any], component: str) -> Draft202012Validator:
    return Draft202012Validator(
        {"$ref": f"#/components/schemas/{component}", "components": document["components"]},
        format_checker=Draft202012Validator.FORMAT_CHECKER,
    )


CLAIM = "k" * 64
BOUNDARY_PRINCIPALS = [
    {f"c{n}": "v" for n in range(32)},
    {f"c{n}": "v" for n in range(33)},
    {CLAIM: "v" * 1024},
    {CLAIM + "k": "v"},
    {"tenant": "v" * 1025},
    {"": "v"},
    {},
]
BOUNDARY_INPUTS = ["", " ", "\t\n\u3000\u00a0\u2028", "\x1c\x1d", "\ufeff", "a", " a "]


def test_the_document_and_the_server_agree_at_the_bounds(local_runtime: RuntimeProcess) -> None:
    """The bounds the document states, tried at and just past each edge: a body is
    accepted exactly when the document says it is valid."""
    _, _, document = local_runtime.call("GET", "/v1/openapi.json")
    session = validator(document, "SessionCreate")
    turn = validator(document, "TurnInput")
    stream = document["paths"]["/v1/capabilities/{capabilityId}/predict/stream"]["post"]
    events_ = stream["responses"]["200"]["content"]["text/event-stream"]["schema"]["oneOf"]
    assert [e["properties"]["event"]["const"] for e in events_] == [
        "delta",
        "tool",
        "done",
        "error",
    ]

    for principal in BOUNDARY_PRINCIPALS:
        body = {"capabilityId": "cap-generative", "externalRef": "bounds", "principal": principal}
        status, _, answer = local_runtime.call("POST", "/v1/sessions", token=DEV_TOKEN, json=body)
        assert (status == 201) == session.is_valid(body), (principal.keys(), status, answer)
        assert status in (201, 422), answer

    for text in BOUNDARY_INPUTS:
        body = {"input": text}
        status, _, answer = local_runtime.call(
            "POST", "/v1/capabilities/cap-generative/predict", token=DEV_TOKEN, json=body
        )
        assert (status == 200) == turn.is_valid(body), (text, status, answer)
        assert status in (200, 422), answer
