"""Who a chat-door call says it is, and what the door refuses before any turn, through
the HttpApi and the streaming Function URL's door alike (same status, same body):

- the end user by ``user``, ``safety_identifier`` or header ``X-Convo-User`` (for
  clients that cannot set ``user``): one is required with a session key, two that
  differ are 422;
- a session by id refuses a call whose end user or principal differs from the
  session's (409), as a session key does;
- a classic capability is 409 statelessly too;
- a known field of the wrong JSON type is 422 naming it (``param``), never coerced;
- a refused first call on a new key opens no session."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support import fake_aws
from tests.support.chat_door import DoorAnswer, chat_body, chat_http, chat_stream_door, keyed, user
from tests.support.inprocess_api import InProcessApi
from tests.support.tenants import Tenant, open_session, transcript

DOORS = [pytest.param(chat_http, id="HttpApi"), pytest.param(chat_stream_door, id="Function URL")]
GENERATIVE = "cap-generative"
PRINCIPAL = {"tenant_id": "store-a", "user_id": "u_1"}


def items(api: InProcessApi) -> int:
    return fake_aws.item_count(
        api.container.infrastructure.clients["dynamodb"], api.container.settings.table_name
    )


def both_doors(
    api: InProcessApi, tenant: Tenant, body: Any, headers: dict[str, str] | None = None
) -> DoorAnswer:
    """The HttpApi's answer, once the Function URL's door answered the same."""
    through_api = chat_http(api, tenant, body, headers)
    through_url = chat_stream_door(api, tenant, body, headers)
    assert (through_url.status, through_url.body) == (through_api.status, through_api.body)
    return through_api


def refused(answer: DoorAnswer, status: int, code: str) -> dict[str, Any]:
    assert (answer.status, answer.body["error"]["code"]) == (status, code), answer.body
    return dict(answer.body["error"])


def sessions_of(api: InProcessApi, tenant: Tenant, external_ref: str) -> list[dict[str, Any]]:
    listed = api.call(
        "GET", "/v1/sessions", token=tenant.token, query={"externalRef": external_ref}
    )
    return list(listed.body["sessions"])


# -- the end user, for clients that cannot send user -----------------------------------------


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize(
    ("named", "headers"),
    [
        pytest.param({"safety_identifier": "customer-51"}, {}, id="safety_identifier"),
        pytest.param({}, {"X-Convo-User": "customer-51"}, id="X-Convo-User"),
        pytest.param(
            {"user": "customer-51", "safety_identifier": "customer-51"},
            {"X-Convo-User": "customer-51"},
            id="all three, equal",
        ),
    ],
)
def test_the_end_user_may_be_named_without_user(
    api: InProcessApi, tenant: Tenant, door: Any, named: dict[str, str], headers: dict[str, str]
) -> None:
    key = f"k-end-user-{door.__name__}-{len(named)}-{len(headers)}"
    body = chat_body(GENERATIVE, user("My name is Ada."), **named)
    first = door(api, tenant, body, {**keyed(key), **headers})
    again = door(
        api, tenant, chat_body(GENERATIVE, user("And?"), **named), {**keyed(key), **headers}
    )

    assert first.status == again.status == 200, (first.body, again.body)
    session_id = first.body["convo"]["sessionId"]
    assert again.body["convo"]["sessionId"] == session_id
    session = api.call("GET", f"/v1/sessions/{session_id}", token=tenant.token).body
    assert (session["externalRef"], session["sessionKey"]) == ("customer-51", key)
    assert len(transcript(api, tenant, session_id)) == 4


@pytest.mark.parametrize(
    ("named", "headers", "param"),
    [
        ({}, {}, "user"),
        ({}, {"X-Convo-User": ""}, "X-Convo-User"),
        ({"safety_identifier": "x" * 257}, {}, "safety_identifier"),
    ],
)
def test_a_missing_or_malformed_end_user_is_422_and_opens_nothing(
    api: InProcessApi,
    tenant: Tenant,
    named: dict[str, str],
    headers: dict[str, str],
    param: str,
) -> None:
    before = items(api)
    body = chat_body(GENERATIVE, user("hi"), **named)

    answer = both_doors(api, tenant, body, {**keyed("k-ambiguous"), **headers})

    error = refused(answer, 422, "validation_error")
    assert (error["param"], error["type"]) == (param, "invalid_request_error")
    assert items(api) == before


@pytest.mark.parametrize(
    ("named", "headers", "end_user"),
    [
        ({"user": "a"}, {"X-Convo-User": "b"}, "b"),
        ({"user": "a", "safety_identifier": "b"}, {}, "a"),
        ({"safety_identifier": "a"}, {"X-Convo-User": "b"}, "b"),
        ({"safety_identifier": "a"}, {}, "a"),
    ],
)
def test_several_end_user_fields_never_conflict_the_first_in_order_names_it(
    api: InProcessApi,
    tenant: Tenant,
    named: dict[str, str],
    headers: dict[str, str],
    end_user: str,
) -> None:
    # (v5) X-Convo-User, else user, else safety_identifier (OpenAI suggests a hash there).
    key = f"k-order-{end_user}-{len(named)}-{len(headers)}"
    answer = chat_http(
        api, tenant, chat_body(GENERATIVE, user("hi"), **named), {**keyed(key), **headers}
    )

    assert answer.status == 200, answer.body
    session_id = answer.body["convo"]["sessionId"]
    session = api.call("GET", f"/v1/sessions/{session_id}", token=tenant.token).body
    assert session["externalRef"] == end_user


# -- a session by id: who the call says it is ------------------------------------------------


@pytest.mark.parametrize("door", DOORS)
def test_a_session_by_id_refuses_another_end_user_or_principal(
    api: InProcessApi, tenant: Tenant, door: Any
) -> None:
    session_id = open_session(api, tenant, principal=PRINCIPAL)  # externalRef customer-4471
    by_id = {"X-Convo-Session-Id": session_id}
    body = chat_body(GENERATIVE, user("hi"))

    changes = [
        ({"user": "customer-9"}, {}),
        ({"safety_identifier": "customer-9"}, {}),
        ({}, {"X-Convo-User": "customer-9"}),
    ]
    for named, headers in changes:
        answer = door(api, tenant, {**body, **named}, {**by_id, **headers})
        error = refused(answer, 409, "external_ref_immutable")
        assert error["type"] == "conflict_error"
        assert {k.lower(): v for k, v in answer.headers.items()}["x-should-retry"] == "false"
    other_principal = door(
        api, tenant, body, {**by_id, "X-Convo-Principal": json.dumps({"tenant_id": "store-b"})}
    )
    refused(other_principal, 409, "principal_immutable")
    assert transcript(api, tenant, session_id) == []  # nothing of the refused calls

    same = door(
        api,
        tenant,
        {**body, "user": "customer-4471"},
        {**by_id, "X-Convo-User": "customer-4471", "X-Convo-Principal": json.dumps(PRINCIPAL)},
    )
    unsaid = door(api, tenant, body, by_id)
    assert same.status == unsaid.status == 200, (same.body, unsaid.body)
    session = api.call("GET", f"/v1/sessions/{session_id}", token=tenant.token).body
    assert (session["externalRef"], session["principal"]) == ("customer-4471", PRINCIPAL)
    assert session["messageCount"] == 4


def test_by_id_the_header_names_the_end_user_before_the_body(
    api: InProcessApi, tenant: Tenant
) -> None:
    session_id = open_session(api, tenant)  # externalRef customer-4471
    body = chat_body(GENERATIVE, user("hi"), user="someone-else")

    answer = chat_http(
        api, tenant, body, {"X-Convo-Session-Id": session_id, "X-Convo-User": "customer-4471"}
    )

    assert answer.status == 200, answer.body


# -- a classic capability converses through no door ------------------------------------------


def test_a_classic_capability_is_409_statelessly_too(api: InProcessApi, tenant: Tenant) -> None:
    before = items(api)
    for stream in (False, True):
        answer = both_doors(api, tenant, chat_body("cap-classic", user("hi"), stream=stream))
        error = refused(answer, 409, "capability_not_conversational")
        assert error["type"] == "conflict_error"
    keyed_call = both_doors(api, tenant, chat_body("cap-classic", user("hi"), user="u"), keyed("k"))
    refused(keyed_call, 409, "capability_not_conversational")
    assert items(api) == before
    # Predict still serves it: the refusal is the chat door's.
    predicted = api.call(
        "POST", "/v1/capabilities/cap-classic/predict", token=tenant.token, json_body={"input": "x"}
    )
    assert predicted.status == 200, predicted.body


# -- JSON types ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"stream": "yes"}, "stream"),
        ({"stream": 1}, "stream"),
        ({"stream_options": {"include_usage": "true"}}, "stream_options.include_usage"),
        ({"temperature": "hot"}, "temperature"),
        ({"temperature": "0.5"}, "temperature"),
        ({"top_p": True}, "top_p"),
        ({"max_tokens": "64"}, "max_tokens"),
        ({"max_completion_tokens": 6.5}, "max_completion_tokens"),
        ({"user": 5}, "user"),
        ({"safety_identifier": ["a"]}, "safety_identifier"),
        ({"stop": 5}, "stop"),
        ({"stop": ["END", 5]}, "stop"),
        ({"model": 7}, "model"),
        ({"messages": [{"role": 1, "content": "hi"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ],
)
def test_a_known_field_of_the_wrong_json_type_is_422_naming_it(
    api: InProcessApi, tenant: Tenant, extra: dict[str, Any], param: str
) -> None:
    before = items(api)
    body = {**chat_body(GENERATIVE, user("hi"), user="u-types"), **extra}

    answer = both_doors(api, tenant, body, keyed("k-types"))

    error = refused(answer, 422, "validation_error")
    assert (error["param"], error["type"]) == (param, "invalid_request_error")
    assert error["message"].startswith(param.split(".")[0].split("[")[0])
    assert items(api) == before


def test_numbers_of_the_right_type_are_served(api: InProcessApi, tenant: Tenant) -> None:
    # An integer temperature is a JSON number; 64.0 is an integer, as JSON Schema has it.
    body = chat_body(GENERATIVE, user("hi"), temperature=1, top_p=1, max_tokens=64.0)
    assert chat_http(api, tenant, body).status == chat_stream_door(api, tenant, body).status == 200


# -- a refused first call on a new key -------------------------------------------------------


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize(
    ("text", "status", "code"),
    [("   ", 422, "validation_error"), ("x" * 32_001, 413, "payload_too_large")],
)
def test_a_refused_first_call_on_a_new_key_opens_no_session(
    api: InProcessApi, tenant: Tenant, door: Any, text: str, status: int, code: str
) -> None:
    end_user = f"first-{status}-{door.__name__}"
    before = items(api)

    answer = door(api, tenant, chat_body(GENERATIVE, user(text), user=end_user), keyed(end_user))

    refused(answer, status, code)
    assert sessions_of(api, tenant, end_user) == []
    assert items(api) == before  # neither a session nor a claim of the key
    served = door(api, tenant, chat_body(GENERATIVE, user("hi"), user=end_user), keyed(end_user))
    assert served.body["convo"]["turn"] == {"userSeq": 1, "assistantSeq": 2}
