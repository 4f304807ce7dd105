"""Property: whatever an app sends to the OpenAI-compatible doors of ``make run`` (the
chat door, the Responses door and ``POST /v1/conversations``), shaped as their bodies
are (messages and items of any role and kind, content parts of any type, the app's
tools with any JSON Schema, ``tool_choice``, ``response_format`` and ``text``, with any
JSON where a known field is), the answer is never a 5xx, every error is the contract's
with OpenAI's ``type``, and a refused call opens nothing: no session for its end user
(each example names an end user of its own, and a key of its own on the chat door).

``test_input_gate_property`` sends any body to every route; this one goes deeper into
the two doors whose bodies are the most nested. On the shared runtime, in the second
workspace (its turn limit is not the dev workspace's), bounded in examples.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.runtime_process import OTHER_TOKEN, RuntimeProcess

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning"),
]

EXAMPLES_PER_DOOR = 150
OPENAI_TYPES = {
    "invalid_request_error",
    "authentication_error",
    "not_found_error",
    "conflict_error",
    "rate_limit_error",
    "api_error",
}
TOOL_NAMES = ["get_weather", "lookup_order", "f"]

# -- JSON, anywhere a known field is ---------------------------------------------------------

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.text(max_size=12),
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=6,
)


def either(*shapes: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly the field's own shape (seven times in eight), else any JSON in its place."""
    own = st.one_of(*shapes)
    # Hypothesis draws small integers most: 0..6 is the field's shape, 7 any JSON.
    return st.integers(0, 7).flatmap(lambda draw: json_values if draw == 7 else own)


names = st.sampled_from(["a", "b", "city", "n", "when", ""])
says = st.sampled_from(
    ["hello", "get_weather in Paris?", "lookup_order 12345", "f", "", " ", "x" * 300]
)
call_ids = either(st.sampled_from(["call_1", "call_2", "c"]), st.just("x" * 5000))

# -- JSON Schemas, as the app's tools and structured output carry them -------------------------

schema_types = st.sampled_from(
    ["object", "string", "integer", "number", "boolean", "array", "null"]
)
schema_leaves = st.one_of(
    st.fixed_dictionaries({"type": either(schema_types, st.lists(schema_types, max_size=2))}),
    st.just({}),
    st.fixed_dictionaries({"enum": st.lists(json_scalars, max_size=3)}),
    st.fixed_dictionaries({"const": json_scalars}),
    st.fixed_dictionaries(
        {"type": st.just("string")},
        optional={
            "format": st.sampled_from(["date-time", "date", "email", "uuid", "uri", "nope"]),
            "pattern": st.sampled_from(["^[a-z]+$", "(", "\\d{3}-\\d{2}", "[", "a{99999}"]),
            "minLength": st.integers(-1, 5),
            "maxLength": st.integers(0, 3),
        },
    ),
    st.fixed_dictionaries(
        {"type": st.sampled_from(["integer", "number"])},
        optional={"minimum": json_scalars, "maximum": json_scalars, "multipleOf": json_scalars},
    ),
    st.fixed_dictionaries({"$ref": st.sampled_from(["#", "#/properties/a", "#/$defs/x", "x:y"])}),
)
schemas = st.recursive(
    schema_leaves,
    lambda children: st.one_of(
        st.fixed_dictionaries(
            {"type": st.just("object"), "properties": st.dictionaries(names, children, max_size=3)},
            optional={
                "required": either(st.lists(names, max_size=3)),
                "additionalProperties": either(st.booleans(), children),
                "$defs": st.dictionaries(st.just("x"), children, max_size=1),
            },
        ),
        st.fixed_dictionaries(
            {"type": st.just("array"), "items": either(children)},
            optional={"minItems": st.integers(-1, 3), "maxItems": st.integers(0, 3)},
        ),
        st.sampled_from(["anyOf", "oneOf", "allOf"]).flatmap(
            lambda key: st.fixed_dictionaries({key: st.lists(children, max_size=3)})
        ),
    ),
    max_leaves=6,
)
any_schema = either(schemas)

# -- the chat door ------------------------------------------------------------------------------

chat_parts = either(
    st.fixed_dictionaries({"type": st.just("text"), "text": either(says)}),
    st.fixed_dictionaries(
        {"type": st.just("image_url"), "image_url": either(st.fixed_dictionaries({"url": says}))}
    ),
    st.fixed_dictionaries({"type": json_values, "text": json_values}),
)
chat_call = st.fixed_dictionaries(
    {
        "id": call_ids,
        "type": either(st.just("function")),
        "function": either(
            st.fixed_dictionaries(
                {"name": either(st.sampled_from(TOOL_NAMES)), "arguments": either(says)}
            )
        ),
    }
)
chat_calls = st.lists(either(chat_call), max_size=2)
chat_messages = st.fixed_dictionaries(
    {"role": either(st.sampled_from(["user", "assistant", "system", "developer", "tool"]))},
    optional={
        "content": either(says, st.lists(chat_parts, max_size=3), st.none()),
        "tool_calls": either(chat_calls),
        "tool_call_id": call_ids,
        "name": json_values,
    },
)
function_specs = st.fixed_dictionaries(
    {"name": either(st.sampled_from(TOOL_NAMES))},
    optional={"description": either(says), "parameters": any_schema, "strict": json_values},
)
chat_tools = st.lists(
    either(
        st.fixed_dictionaries({"type": either(st.just("function")), "function": function_specs})
    ),
    max_size=3,
)
response_formats = either(
    st.fixed_dictionaries({"type": st.sampled_from(["text", "json_object"])}),
    st.fixed_dictionaries(
        {
            "type": st.just("json_schema"),
            "json_schema": either(
                st.fixed_dictionaries(
                    {"name": either(st.sampled_from(["answer", "x y"]))},
                    optional={"schema": any_schema, "strict": json_values},
                )
            ),
        }
    ),
)
# A continuation: the user's message, the calls, and tool messages that answer them (on a
# new key they answer no pause: 409, and nothing may be opened).
continuations = st.tuples(
    st.lists(chat_call, min_size=1, max_size=2), st.lists(chat_messages, max_size=1)
).map(
    lambda found: [
        {"role": "user", "content": "get_weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": found[0]},
        *found[1],
        *(
            {"role": "tool", "tool_call_id": call.get("id"), "content": "sunny"}
            for call in found[0]
        ),
    ]
)
chat_bodies = st.fixed_dictionaries(
    {
        "model": either(st.sampled_from(["cap-generative", "cap-agent", "cap-classic", "nope"])),
        "messages": either(st.lists(chat_messages, min_size=1, max_size=4), continuations),
    },
    optional={
        "tools": either(chat_tools),
        "tool_choice": either(
            st.sampled_from(["auto", "none", "required", "other"]),
            st.fixed_dictionaries(
                {"type": st.just("function"), "function": st.fixed_dictionaries({"name": names})}
            ),
        ),
        "parallel_tool_calls": either(st.booleans()),
        "response_format": response_formats,
        "stream": either(st.booleans()),
        "stream_options": either(st.fixed_dictionaries({"include_usage": st.booleans()})),
        "max_tokens": either(st.integers(1, 50)),
        "temperature": either(st.floats(0, 2)),
        "stop": either(st.lists(st.text(max_size=3), max_size=2)),
        "n": either(st.just(1)),
    },
)

# -- the Responses door and conversations -------------------------------------------------------

response_parts = either(
    st.fixed_dictionaries(
        {
            "type": st.sampled_from(["input_text", "output_text", "text", "refusal"]),
            "text": either(says),
        }
    ),
    st.fixed_dictionaries({"type": st.sampled_from(["input_image", "input_file", "input_audio"])}),
    st.fixed_dictionaries({"type": json_values, "text": json_values}),
)
message_items = st.fixed_dictionaries(
    {
        "type": either(st.just("message")),
        "role": either(st.sampled_from(["user", "assistant", "system", "developer"])),
        "content": either(says, st.lists(response_parts, max_size=3)),
    },
    optional={"id": json_values, "status": json_values},
)
response_items = st.one_of(
    message_items,
    message_items,
    st.fixed_dictionaries(
        {"type": st.just("function_call"), "call_id": call_ids},
        optional={"name": either(st.sampled_from(TOOL_NAMES)), "arguments": either(says)},
    ),
    st.fixed_dictionaries(
        {"type": st.just("function_call_output"), "call_id": call_ids},
        optional={"output": either(says, st.lists(response_parts, max_size=2))},
    ),
    st.fixed_dictionaries(
        {"type": st.sampled_from(["item_reference", "reasoning", "web_search_call"])},
        optional={"id": json_values},
    ),
    st.dictionaries(st.sampled_from(["type", "role", "content", "call_id"]), json_values),
)
response_tools = st.lists(
    either(
        st.fixed_dictionaries(
            {"type": either(st.sampled_from(["function", "web_search"]))},
            optional={
                "name": either(st.sampled_from(TOOL_NAMES)),
                "description": either(says),
                "parameters": any_schema,
                "strict": json_values,
            },
        )
    ),
    max_size=3,
)
text_options = either(
    st.fixed_dictionaries(
        {},
        optional={
            "format": either(
                st.fixed_dictionaries({"type": st.sampled_from(["text", "json_object"])}),
                st.fixed_dictionaries(
                    {"type": st.just("json_schema"), "name": either(names), "schema": any_schema},
                    optional={"strict": json_values},
                ),
            ),
            "verbosity": either(st.sampled_from(["low", "medium", "high"])),
        },
    )
)
response_bodies = st.fixed_dictionaries(
    {
        "model": either(st.sampled_from(["cap-generative", "cap-agent", "cap-classic", "nope"])),
        "input": either(says, st.lists(response_items, min_size=1, max_size=4)),
    },
    optional={
        "tools": either(response_tools),
        "tool_choice": either(
            st.sampled_from(["auto", "none", "required", "other"]),
            st.fixed_dictionaries({"type": st.just("function"), "name": names}),
        ),
        "text": text_options,
        "instructions": either(says),
        "store": either(st.booleans()),
        "stream": either(st.booleans()),
        "metadata": either(st.dictionaries(names, st.text(max_size=5), max_size=2)),
        "max_output_tokens": either(st.integers(1, 50)),
        "temperature": either(st.floats(0, 2)),
        "parallel_tool_calls": either(st.booleans()),
        "background": either(st.just(False)),
        "reasoning": json_values,
        "truncation": json_values,
    },
)
# Which conversation: mostly a new one, else one named that does not exist (404) or JSON.
response_targets = st.one_of(
    st.just({}),
    st.just({}),
    st.just({}),
    st.fixed_dictionaries({"conversation": either(st.just("ses_missing"))}),
    st.fixed_dictionaries(
        {"previous_response_id": either(st.sampled_from(["resp_missing", "x" * 300]))}
    ),
)
response_bodies = st.builds(
    lambda body, target: {**body, **target}, response_bodies, response_targets
)
conversation_bodies = st.fixed_dictionaries(
    {},
    optional={
        "items": either(st.lists(either(message_items), max_size=3)),
        "metadata": json_values,
    },
)


# -- the checks --------------------------------------------------------------------------------


def assert_openai_error(status: int, body: Any, what: str) -> None:
    assert isinstance(body, dict) and set(body) == {"error"}, what
    error = body["error"]
    assert isinstance(error.get("message"), str) and error["message"], what
    assert isinstance(error.get("code"), str) and error.get("type") in OPENAI_TYPES, what


def opened_for(runtime: RuntimeProcess, end_user: str) -> list[str]:
    """The sessions of this workspace whose end user is ``end_user``."""
    status, _, listed = runtime.call(
        "GET", f"/v1/sessions?externalRef={end_user}", token=OTHER_TOKEN
    )
    assert status == 200, listed
    return [session["id"] for session in listed["sessions"]]


def send(runtime: RuntimeProcess, path: str, body: Any, headers: dict[str, str]) -> tuple[int, Any]:
    status, _, answer = runtime.call(
        "POST", path, token=OTHER_TOKEN, raw_body=json.dumps(body), headers=headers
    )
    return status, answer


def checked(
    runtime: RuntimeProcess, path: str, body: Any, headers: dict[str, str], end_user: str | None
) -> None:
    status, answer = send(runtime, path, body, headers)
    what = f"POST {path} {json.dumps(body)[:400]} {headers} -> {status} {str(answer)[:300]}"
    assert status < 500, what
    if status >= 400:
        assert_openai_error(status, answer, what)
        if end_user is not None:
            assert opened_for(runtime, end_user) == [], f"a refused call opened: {what}"


PROPERTY = settings(
    max_examples=EXAMPLES_PER_DOOR,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def test_the_chat_door_answers_any_body_without_a_5xx_and_a_refusal_opens_nothing(
    local_runtime: RuntimeProcess,
) -> None:
    @PROPERTY
    @given(body=chat_bodies, keyed=st.booleans(), user_in_header=st.booleans())
    def check(body: dict[str, Any], keyed: bool, user_in_header: bool) -> None:
        end_user = f"prop-{uuid.uuid4().hex[:12]}"
        headers = {"X-Convo-Session-Key": end_user} if keyed else {}
        if user_in_header:
            headers["X-Convo-User"] = end_user
        else:
            body = {**body, "user": end_user}
        checked(local_runtime, "/v1/chat/completions", body, headers, end_user if keyed else None)

    check()


def test_the_responses_door_answers_any_body_without_a_5xx_and_a_refusal_opens_nothing(
    local_runtime: RuntimeProcess,
) -> None:
    @PROPERTY
    @given(body=response_bodies)
    def check(body: dict[str, Any]) -> None:
        end_user = f"prop-{uuid.uuid4().hex[:12]}"
        checked(local_runtime, "/v1/responses", {**body, "user": end_user}, {}, end_user)

    check()


def test_a_new_conversation_answers_any_items_without_a_5xx(
    local_runtime: RuntimeProcess,
) -> None:
    @PROPERTY
    @given(body=conversation_bodies)
    def check(body: dict[str, Any]) -> None:
        checked(local_runtime, "/v1/conversations", body, {}, None)

    # The probe's 500: a part whose type is an object.
    part = {"text": "", "type": {}}
    status, answer = send(
        local_runtime,
        "/v1/conversations",
        {"items": [{"content": [part], "role": "user", "type": "message"}]},
        {},
    )
    assert status == 422 and answer["error"]["param"] == "items[0].content[0]", answer
    check()
