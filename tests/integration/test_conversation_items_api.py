"""(v5) A conversation's items on the in-process stack over moto: added once (an SDK that
strips ids adds each run's input before it and its output after it), read one by one,
and removed: a removed message is left out of listings and replay (roles still
alternate), a fork at a removed answer is 422, and reading it is 404 item_not_found."""

from __future__ import annotations

from typing import Any

from tests.support.inprocess_api import InProcessApi
from tests.support.responses_door import ask, respond_http
from tests.support.tenants import Tenant, transcript


def items_path(conversation: str, item: str = "") -> str:
    return f"/v1/conversations/{conversation}/items" + (f"/{item}" if item else "")


def add(api: InProcessApi, tenant: Tenant, conversation: str, *items: dict[str, Any]) -> Any:
    answer = api.call(
        "POST", items_path(conversation), token=tenant.token, json_body={"items": list(items)}
    )
    assert answer.status == 200, answer.body
    return answer.body


def said(role: str, text: str) -> dict[str, Any]:
    kind = "input_text" if role == "user" else "output_text"
    return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}


def test_runs_that_add_their_input_then_their_output_record_each_message_once(
    api: InProcessApi, tenant: Tenant
) -> None:
    conversation = api.call("POST", "/v1/conversations", token=tenant.token, json_body={}).body[
        "id"
    ]
    add(api, tenant, conversation, said("user", "One."))  # the first run's input, before it
    add(api, tenant, conversation, said("assistant", "Noted."))  # and its output, after it
    listed = api.call(
        "GET", items_path(conversation), token=tenant.token, query={"order": "asc"}
    ).body
    first_user = listed["data"][0]

    # The second run: the history (the user's message keeps its id), its input added first.
    add(api, tenant, conversation, said("user", "Two."))
    history = [first_user, said("assistant", "Noted."), said("user", "Two.")]
    answered = respond_http(api, tenant, {"model": "cap-generative", "input": history}).body
    add(api, tenant, conversation, said("assistant", answered["output_text"]))

    assert answered["conversation"]["id"] == conversation
    messages = transcript(api, tenant, conversation)
    assert [(m["role"], m["content"]) for m in messages][::2] == [
        ("user", "One."),
        ("user", "Two."),
    ]
    assert len(messages) == 4
    one = api.call("GET", items_path(conversation, first_user["id"]), token=tenant.token)
    assert one.status == 200 and one.body == first_user


def test_a_removed_answer_leaves_listings_and_replay_and_cannot_be_forked_at(
    api: InProcessApi, tenant: Tenant
) -> None:
    first = ask(api, tenant, "My name is Ada.")
    conversation = first["conversation"]["id"]
    answer_id = first["output"][0]["id"]

    removed = api.call("DELETE", items_path(conversation, answer_id), token=tenant.token)

    assert removed.status == 200, removed.body
    assert [m["role"] for m in transcript(api, tenant, conversation)] == ["user"]
    gone = api.call("GET", items_path(conversation, answer_id), token=tenant.token)
    assert (gone.status, gone.body["error"]["code"]) == (404, "item_not_found")
    fork = api.call(
        "POST", f"/v1/sessions/{conversation}/forks", token=tenant.token, json_body={"atSeq": 2}
    )
    assert fork.status == 422, fork.body
    # The next turn replays the user's message alone (the prompt joins it with the input).
    ask(api, tenant, "Who am I?", conversation=conversation)
    sent = api.call("GET", f"/v1/sessions/{conversation}/messages/4/prompt", token=tenant.token)
    assert [(m["role"], m["content"]) for m in sent.body["messages"]] == [
        ("user", "My name is Ada.")
    ]
    again = api.call("DELETE", items_path(conversation, answer_id), token=tenant.token)
    assert again.status == 200  # removing twice changes nothing more
