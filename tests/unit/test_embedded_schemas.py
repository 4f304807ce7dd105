"""The embedded models follow the app's schemas (contract v5): an app tool's arguments
conform to its ``parameters``, an answer under structured output is JSON of its schema,
an agent's own webhooks keep ``{"query"}``, and a fork's answer differs from its
parent's while answers outside forks stay as they were."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import jsonschema
import pytest

from convo_memory.adapters.providers.embedded import EmbeddedAgentProvider, EmbeddedChatProvider
from convo_memory.domain.generation import GenerationOptions
from convo_memory.domain.prompt import ChatMessage, Prompt
from convo_memory.domain.tools import AppTools, ToolChoice, ToolDefinition

MODELS = [
    pytest.param(EmbeddedChatProvider, id="generative"),
    pytest.param(lambda: EmbeddedAgentProvider(tools=[]), id="agent"),
]
BOOK = {
    "type": "object",
    "properties": {
        "restaurant": {"type": "string", "maxLength": 40},
        "party": {"type": "integer", "minimum": 1, "maximum": 12},
        "day": {"type": "string", "format": "date"},
        "seating": {"enum": ["inside", "terrace"]},
        "vegetarian": {"type": "boolean"},
    },
    "required": ["restaurant", "party", "day", "seating", "vegetarian"],
    "additionalProperties": False,
}


def prompt(text: str, **options: Any) -> Prompt:
    return Prompt(
        system="",
        messages=(ChatMessage("user", text),),
        user_input=text,
        options=GenerationOptions(**options),
    )


def app_tools(
    *tools: tuple[str, dict[str, Any]], choice: str = "auto"
) -> tuple[ToolDefinition, ...]:
    definitions = tuple(ToolDefinition(name, "", schema) for name, schema in tools)
    return AppTools(definitions, ToolChoice(choice)).offered  # type: ignore[arg-type]


@pytest.mark.parametrize("model", MODELS)
def test_an_app_tools_arguments_conform_to_its_parameters(model: Any) -> None:
    text = "book_table for 4 at Chez Marie on 2025-06-14"

    step = model().step(prompt(text), (), app_tools(("book_table", BOOK)), timeout=5)

    [request] = step.requests
    jsonschema.validate(request.input, BOOK, format_checker=jsonschema.FormatChecker())
    assert request.input["party"] == 4 and request.input["day"] == "2025-06-14"
    assert request.input["restaurant"].startswith("book_table for 4 at Chez")


@pytest.mark.parametrize("model", MODELS)
def test_a_required_tool_choice_calls_the_only_tool_with_valid_arguments(model: Any) -> None:
    # pydantic-ai's output tool: offered alone, under tool_choice "required".
    output_tool = ("final_result", BOOK)

    step = model().step(
        prompt("a table please"),
        (),
        app_tools(output_tool),
        timeout=5,
        choice=ToolChoice("required"),
    )

    [request] = step.requests
    assert request.name == "final_result"
    jsonschema.validate(request.input, BOOK)


def test_an_agents_own_webhook_keeps_its_query_beside_the_apps_tool() -> None:
    webhook = ToolDefinition("track", "", {"type": "object", "properties": {}})
    tools = (webhook, *app_tools(("book_table", BOOK)))
    text = "track it, then book_table"

    step = EmbeddedAgentProvider(tools=[]).step(prompt(text), (), tools, timeout=5)

    assert (step.requests[0].name, step.requests[0].input) == ("track", {"query": text})
    jsonschema.validate(step.requests[1].input, BOOK)


@pytest.mark.parametrize("model", MODELS)
def test_an_answer_under_a_json_schema_is_json_of_the_schema(model: Any) -> None:
    schema_format = {"type": "json_schema", "json_schema": {"name": "b", "schema": BOOK}}
    responses_format = {"type": "json_schema", "name": "b", "schema": BOOK}  # text.format
    text = "Chez Marie, 3 of us, 2025-07-01"

    for response_format in (schema_format, responses_format):
        answer = model().step(prompt(text, response_format=response_format), (), (), timeout=5)
        made = json.loads(answer.text)
        jsonschema.validate(made, BOOK)
        assert made["restaurant"] == text and made["party"] == 3


@pytest.mark.parametrize("model", MODELS)
def test_an_answer_under_json_object_is_an_object_carrying_the_plain_answer(model: Any) -> None:
    text, answer_format = "hello there", {"type": "json_object"}
    plain = model().step(prompt(text), (), (), timeout=5).text

    answer = model().step(prompt(text, response_format={"type": "json_object"}), (), (), timeout=5)

    assert json.loads(answer.text) == {"answer": plain}
    streamed = "".join(EmbeddedChatProvider().stream(prompt(text, response_format=answer_format)))
    assert json.loads(streamed) == {"answer": EmbeddedChatProvider().complete(prompt(text)).text}


@pytest.mark.parametrize("model", MODELS)
def test_a_forks_answer_differs_from_its_parents_and_from_its_siblings(model: Any) -> None:
    parent = prompt("tell me a joke")
    one, other = replace(parent, branch="ses_fork_one"), replace(parent, branch="ses_fork_two")

    answers = [model().step(p, (), (), timeout=5).text for p in (parent, one, other, one)]

    assert answers[0] == 'You said: "tell me a joke". I remember 0 earlier messages.'
    assert len(set(answers[:3])) == 3  # a fork's answer is another take
    assert answers[1] == answers[3]  # ... the same one every time
    assert all('You said: "tell me a joke".' in answer for answer in answers)
