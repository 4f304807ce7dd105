"""What the embedded models make of a JSON Schema (domain/schema_instances.py): values
that a well-kept validator (``jsonschema``, in the tests only) and pydantic accept, made
of the input's words, and bounded whatever the schema asks."""

from __future__ import annotations

import json
from datetime import date, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal
from uuid import UUID

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from convo_memory.domain.schema_instances import MAX_TOTAL_CHARS, MAX_VALUES, schema_instance

TEXT = "Book a table for 4 people at Chez Marie on 2025-06-14, mail ana@example.org"


def valid(schema: Any, instance: Any) -> None:
    """``instance`` conforms to ``schema``, its formats checked too."""
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    cls(schema, format_checker=cls.FORMAT_CHECKER).validate(instance)


class Cuisine(StrEnum):
    FRENCH = "french"
    THAI = "thai"


class Guest(BaseModel):
    name: str = Field(min_length=2, max_length=12)
    email: str = Field(json_schema_extra={"format": "email"})


class Booking(BaseModel):
    restaurant: str
    party: Annotated[int, Field(ge=1, le=20)]
    day: date
    at: datetime
    cuisine: Cuisine
    seating: Literal["inside", "terrace"]
    guests: list[Guest] = Field(min_length=2, max_length=3)
    tags: list[str] = Field(default_factory=list, json_schema_extra={"uniqueItems": True})
    budget: float | None = Field(default=None, gt=0, multiple_of=0.5)
    reference: UUID
    note: str | None = None
    kind: Literal["booking"] = "booking"


SCHEMAS: list[Any] = [
    {"type": "object", "properties": {"query": {"type": "string"}}},
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "number"}}},
    {"type": "string", "minLength": 200, "maxLength": 210},
    {"type": "string", "maxLength": 5},
    {"type": "string", "pattern": "^[A-Z]{3}-\\d{2}$"},
    {"type": "string", "pattern": "^[a-z]+$"},
    {"type": "string", "pattern": "^(?:\\+33|0)[1-9](?:[ .-]?\\d{2}){4}$"},
    {"type": "string", "pattern": "^[^@\\s]+@[^@\\s]+\\.[a-z]{2,}$", "maxLength": 40},
    {"type": ["null", "integer"], "exclusiveMinimum": 7, "multipleOf": 3},
    {"type": "number", "minimum": -2.5, "maximum": -2.25, "multipleOf": 0.25},
    {"type": "integer", "maximum": -40},
    {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "type": "integer",
        "minimum": 0,
        "maximum": 7,
        "exclusiveMinimum": True,
        "multipleOf": 7,
    },
    {"const": {"x": [1, 2]}},
    {"enum": ["red", "green"]},
    {"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 3, "uniqueItems": True},
    {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "boolean"}], "items": False},
    {"type": "array", "contains": {"type": "integer"}, "items": {"type": ["string", "integer"]}},
    {"type": "object", "minProperties": 3, "additionalProperties": {"type": "integer"}},
    {
        "type": "object",
        "required": ["id"],
        "additionalProperties": False,
        "properties": {"id": {"type": "string", "format": "uuid"}},
    },
    {"oneOf": [{"type": "null"}, {"type": "string", "format": "date-time"}]},
    {
        "allOf": [
            {"properties": {"a": {"type": "string"}}, "required": ["a"]},
            {"properties": {"b": {"type": "boolean"}}, "required": ["b"]},
        ]
    },
    {
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {
                    "value": {"type": "integer"},
                    "next": {"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}]},
                },
                "required": ["value"],
            }
        },
        "$ref": "#/$defs/Node",
    },
    {
        "definitions": {"when": {"type": "string", "format": "date"}},
        "type": "object",
        "properties": {
            "on": {"$ref": "#/definitions/when"},
            "site": {"type": "string", "format": "uri"},
            "ip": {"type": "string", "format": "ipv4"},
        },
        "required": ["on", "site", "ip"],
    },
    Booking.model_json_schema(),
]


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda s: json.dumps(s)[:60])
def test_what_is_made_conforms_to_the_schema(schema: Any) -> None:
    valid(schema, schema_instance(schema, TEXT))


def test_a_pydantic_model_accepts_what_is_made_of_its_schema_with_the_inputs_words() -> None:
    made = schema_instance(Booking.model_json_schema(), TEXT)

    booking = Booking.model_validate(made)

    assert booking.restaurant == TEXT  # a free string carries the input
    assert booking.party == 4  # the input's number, in range
    assert booking.day == date(2025, 6, 14)  # the input's own date
    assert all(guest.email == "ana@example.org" for guest in booking.guests)
    assert (booking.cuisine, booking.seating, booking.kind) == (Cuisine.FRENCH, "inside", "booking")
    assert len(booking.guests) == 2 and all(2 <= len(g.name) <= 12 for g in booking.guests)


def test_it_is_deterministic() -> None:
    schema = Booking.model_json_schema()
    assert schema_instance(schema, TEXT) == schema_instance(schema, TEXT)


def test_numbers_take_the_inputs_numbers_in_order_when_they_fit() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer", "maximum": 5}},
        "required": ["a", "b"],
    }
    assert schema_instance(schema, "multiply 6 and 7") == {"a": 6, "b": 1}
    assert schema_instance(schema, "multiply 6 and 2") == {"a": 6, "b": 2}


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "#"},
        {"type": "object", "properties": {"x": {"$ref": "#"}}, "required": ["x"]},
        {"type": "array", "minItems": 10**9, "items": {"type": "string", "minLength": 10**9}},
        {"type": "object", "minProperties": 10**6},
        {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
        {"$ref": "https://example.com/schema.json"},
        {"type": "string", "pattern": "(a+)+$"},
        {"type": "string", "pattern": "(unclosed"},
        {"type": "integer", "minimum": 5, "maximum": 4},
    ],
    ids=lambda s: json.dumps(s)[:50],
)
def test_a_hostile_schema_gets_a_bounded_answer(schema: Any) -> None:
    made = schema_instance(schema, "x" * 5_000)

    size = len(json.dumps(made))
    assert size <= MAX_TOTAL_CHARS + MAX_VALUES * 20


def test_a_self_referencing_required_chain_stops_at_the_depth_bound() -> None:
    schema = {"type": "object", "properties": {"x": {"$ref": "#"}}, "required": ["x"]}
    made = schema_instance(schema, "hi")
    depth = 0
    while isinstance(made, dict) and "x" in made:
        made, depth = made["x"], depth + 1
    assert 5 <= depth <= 20


# -- any schema of the followed keywords -----------------------------------------------

FORMATS = ["date", "date-time", "time", "email", "uuid", "ipv4", "ipv6", "hostname", "uri"]


def numbers() -> st.SearchStrategy[dict[str, Any]]:
    def schema(kind: str, low: int, span: int, step: Any, exclusive: bool) -> dict[str, Any]:
        made: dict[str, Any] = {"type": kind, "minimum": low, "maximum": low + span}
        if step is not None and span >= step:
            made["multipleOf"] = step
        if exclusive and span > (step or 1) * 2:
            made["exclusiveMinimum"] = made.pop("minimum")
        return made

    return st.builds(
        schema,
        st.sampled_from(["integer", "number"]),
        st.integers(-50, 50),
        st.integers(0, 30),
        st.sampled_from([None, 1, 2, 5]),
        st.booleans(),
    )


def strings() -> st.SearchStrategy[dict[str, Any]]:
    lengths = st.builds(
        lambda low, span: {"type": "string", "minLength": low, "maxLength": low + span},
        st.integers(0, 30),
        st.integers(0, 30),
    )
    formats = st.sampled_from(FORMATS).map(lambda f: {"type": "string", "format": f})
    return st.one_of(lengths, formats)


LEAVES = st.one_of(
    numbers(),
    strings(),
    st.sampled_from([{"type": "boolean"}, {"type": "null"}, {}, {"const": [1, "a"]}]),
    st.lists(
        st.one_of(st.text(max_size=4), st.integers()), min_size=1, max_size=3, unique=True
    ).map(lambda values: {"enum": values}),
)


def objects(
    children: st.SearchStrategy[Any], letters: str = "a-z", closed: bool = True
) -> st.SearchStrategy[dict[str, Any]]:
    names = st.from_regex(rf"[{letters}]{{1,6}}", fullmatch=True)
    return st.dictionaries(names, children, max_size=4).flatmap(
        lambda props: (
            st.lists(st.sampled_from(sorted(props)), unique=True).map(
                lambda required: {
                    "type": "object",
                    "properties": props,
                    "required": required,
                    **({"additionalProperties": False} if closed else {}),
                }
            )
            if props
            else st.just({"type": "object"})
        )
    )


SCHEMA_TREES = st.recursive(
    LEAVES,
    lambda children: st.one_of(
        objects(children),
        st.builds(
            lambda items, fewest, unique: {
                "type": "array",
                "items": items,
                "minItems": fewest,
                # Unique strings can always be made; unique booleans or nulls not.
                "uniqueItems": unique
                and items.get("type") == "string"
                and items.get("maxLength", 1) >= 1,
            },
            children,
            st.integers(0, 3),
            st.booleans(),
        ),
        st.lists(children, min_size=1, max_size=3).map(lambda branches: {"anyOf": branches}),
        # Parts that can hold together: objects open to each other's properties.
        st.tuples(objects(children, "a-m", False), objects(children, "n-z", False)).map(
            lambda pair: {"allOf": list(pair)}
        ),
    ),
    max_leaves=12,
)
# A definition referred to from the root's properties (and through allOf).
WITH_DEFINITIONS = st.tuples(SCHEMA_TREES, SCHEMA_TREES).map(
    lambda pair: {
        "$defs": {"a": pair[0]},
        "type": "object",
        "properties": {"x": {"$ref": "#/$defs/a"}, "y": {"allOf": [{"$ref": "#/$defs/a"}]}},
        "required": ["x", "y"],
    }
)
INPUTS = st.text(alphabet="ab 0123456789-@.:xyz/", max_size=60)


@settings(max_examples=150, deadline=None)
@given(st.one_of(SCHEMA_TREES, WITH_DEFINITIONS), INPUTS)
def test_any_schema_of_the_followed_keywords_gets_a_value_it_accepts(
    schema: Any, text: str
) -> None:
    valid(schema, schema_instance(schema, text))
