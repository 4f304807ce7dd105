"""The app's schemas on ``make run``'s embedded model, end to end (contract v5): clients
that validate what the model sends them run their loops on the local runtime with no
model of their own. LangChain's ``bind_tools`` with a tool of several typed parameters
runs its loop; pydantic-ai's ``output_type`` gets its object, from its output tool
(called under ``tool_choice: "required"``) and from native structured output; the chat
door's ``json_schema`` answers JSON the schema validates (checked with ``jsonschema``)."""

from __future__ import annotations

import json
from datetime import date
from typing import Literal

import jsonschema
import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from openai import AsyncOpenAI, OpenAI
from pydantic import BaseModel, Field
from pydantic_ai import Agent, NativeOutput
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from tests.support.runtime_process import DEV_TOKEN, RuntimeProcess

pytestmark = pytest.mark.e2e
MODEL = "cap-generative"  # the embedded generative model of make run's dev workspace
ASK = "Please book_table at Chez Marie for 4 people on 2025-06-14"


class Booking(BaseModel):
    restaurant: str = Field(min_length=3)
    party: int = Field(ge=1, le=12)
    day: date
    seating: Literal["inside", "terrace"]


@tool
def book_table(
    restaurant: str, party: int, day: date, seating: Literal["inside", "terrace"]
) -> str:
    """Book a table at a restaurant."""
    return f"Booked for {party} on {day.isoformat()}, {seating}"


def test_langchain_bind_tools_runs_its_loop_with_a_tool_of_typed_parameters(
    local_runtime: RuntimeProcess,
) -> None:
    llm = ChatOpenAI(
        base_url=local_runtime.base_url + "/v1",
        api_key=DEV_TOKEN,
        model=MODEL,
        default_headers={"X-Convo-Session-Key": "e2e-schemas-langchain"},
        model_kwargs={"user": "e2e-schemas-user"},
    ).bind_tools([book_table])
    history: list = [HumanMessage(ASK)]

    called = llm.invoke(history)
    [call] = called.tool_calls
    result = book_table.invoke(call["args"])  # LangChain validates the arguments here
    history += [called, ToolMessage(result, tool_call_id=call["id"])]
    answer = llm.invoke(history)

    assert call["name"] == "book_table" and call["args"]["party"] == 4
    assert result == "Booked for 4 on 2025-06-14, inside"
    assert answer.tool_calls == []
    assert f'You said: "{ASK}".' in str(answer.content)
    assert 'I used book_table: "Booked for 4 on 2025-06-14, inside".' in str(answer.content)


def pydantic_ai_model(local_runtime: RuntimeProcess) -> OpenAIChatModel:
    client = AsyncOpenAI(base_url=local_runtime.base_url + "/v1", api_key=DEV_TOKEN)
    return OpenAIChatModel(MODEL, provider=OpenAIProvider(openai_client=client))


def test_pydantic_ai_gets_its_output_object_from_its_tool_and_natively(
    local_runtime: RuntimeProcess,
) -> None:
    model = pydantic_ai_model(local_runtime)
    by_tool = Agent(model, output_type=Booking)  # its output tool, tool_choice "required"
    native = Agent(model, output_type=NativeOutput(Booking))  # response_format json_schema

    from_tool = by_tool.run_sync("Chez Marie, 4 people, 2025-06-14").output
    from_format = native.run_sync("Chez Marie, 2 people, 2025-07-01").output

    assert from_tool == Booking(
        restaurant="Chez Marie, 4 people, 2025-06-14",
        party=4,
        day=date(2025, 6, 14),
        seating="inside",
    )
    assert (from_format.party, from_format.day) == (2, date(2025, 7, 1))


def test_the_chat_doors_json_schema_answers_json_its_schema_validates(
    local_runtime: RuntimeProcess,
) -> None:
    client = OpenAI(base_url=local_runtime.base_url + "/v1", api_key=DEV_TOKEN)
    schema = {
        **Booking.model_json_schema(),
        "additionalProperties": False,
        "properties": {
            **Booking.model_json_schema()["properties"],
            "notes": {"type": "array", "items": {"type": "string", "maxLength": 20}, "minItems": 2},
            "id": {"type": "string", "format": "uuid"},
        },
    }
    schema["required"] = [*schema["required"], "notes", "id"]

    completion = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Chez Marie for 3 on 2025-05-02"}],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "booking", "schema": schema, "strict": True},
        },
        extra_headers={"X-Convo-Session-Key": "e2e-schemas-json"},
        user="e2e-schemas-user",
    )

    answer = json.loads(completion.choices[0].message.content or "")
    jsonschema.validate(answer, schema, format_checker=jsonschema.FormatChecker())
    assert answer["party"] == 3 and answer["day"] == "2025-05-02"
    assert answer["restaurant"] == "Chez Marie for 3 on 2025-05-02"
