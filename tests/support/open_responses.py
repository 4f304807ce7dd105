"""What the Open Responses specification requires of a Response, its items and its
streaming events: the required fields and their JSON types, written from the
specification's text (its Response resource, items, content parts, tools, usage and
streaming events), so a test can check every Response and event the door makes.

``problems(value)`` lists what does not conform (empty: it conforms); each entry names
the path, as ``response.tools[0].strict``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

# A field's JSON type: one of these names, or a tuple of them ("null" for null).
JsonType = str | tuple[str, ...]
NUMBER, INTEGER, STRING, BOOLEAN = "number", "integer", "string", "boolean"
OBJECT, ARRAY, NULL = "object", "array", "null"

RESPONSE: dict[str, JsonType] = {
    "id": STRING,
    "object": STRING,
    "created_at": INTEGER,
    "completed_at": (INTEGER, NULL),
    "status": STRING,
    "incomplete_details": (OBJECT, NULL),
    "model": STRING,
    "previous_response_id": (STRING, NULL),
    "instructions": (STRING, ARRAY, NULL),
    "output": ARRAY,
    "error": (OBJECT, NULL),
    "tools": ARRAY,
    "tool_choice": (STRING, OBJECT),
    "truncation": STRING,
    "parallel_tool_calls": BOOLEAN,
    "text": OBJECT,
    "top_p": NUMBER,
    "presence_penalty": NUMBER,
    "frequency_penalty": NUMBER,
    "top_logprobs": INTEGER,
    "temperature": NUMBER,
    "reasoning": (OBJECT, NULL),
    "user": (STRING, NULL),
    "usage": (OBJECT, NULL),
    "max_output_tokens": (INTEGER, NULL),
    "max_tool_calls": (INTEGER, NULL),
    "store": BOOLEAN,
    "background": BOOLEAN,
    "service_tier": STRING,
    "metadata": OBJECT,
    "safety_identifier": (STRING, NULL),
    "prompt_cache_key": (STRING, NULL),
}
MESSAGE: dict[str, JsonType] = {
    "type": STRING,
    "id": STRING,
    "status": STRING,
    "role": STRING,
    "content": ARRAY,
}
FUNCTION_CALL: dict[str, JsonType] = {
    "type": STRING,
    "id": STRING,
    "call_id": STRING,
    "name": STRING,
    "arguments": STRING,
    "status": STRING,
}
OUTPUT_TEXT: dict[str, JsonType] = {
    "type": STRING,
    "text": STRING,
    "annotations": ARRAY,
    "logprobs": ARRAY,
}
INPUT_TEXT: dict[str, JsonType] = {"type": STRING, "text": STRING}
FUNCTION_TOOL: dict[str, JsonType] = {
    "type": STRING,
    "name": STRING,
    "description": (STRING, NULL),
    "parameters": (OBJECT, NULL),
    "strict": (BOOLEAN, NULL),
}
USAGE: dict[str, JsonType] = {
    "input_tokens": INTEGER,
    "output_tokens": INTEGER,
    "total_tokens": INTEGER,
    "input_tokens_details": OBJECT,
    "output_tokens_details": OBJECT,
}
ERROR: dict[str, JsonType] = {"code": STRING, "message": STRING}
STATUSES = {"queued", "in_progress", "completed", "failed", "incomplete"}

# The five events that carry a Response, and the other events' fields.
RESPONSE_EVENTS = {
    "response.created",
    "response.in_progress",
    "response.completed",
    "response.failed",
    "response.incomplete",
}
WHERE: dict[str, JsonType] = {"item_id": STRING, "output_index": INTEGER}
PART: dict[str, JsonType] = {**WHERE, "content_index": INTEGER}
EVENTS: dict[str, dict[str, JsonType]] = {
    "response.output_item.added": {"output_index": INTEGER, "item": (OBJECT, NULL)},
    "response.output_item.done": {"output_index": INTEGER, "item": (OBJECT, NULL)},
    "response.content_part.added": {**PART, "part": OBJECT},
    "response.content_part.done": {**PART, "part": OBJECT},
    "response.output_text.delta": {**PART, "delta": STRING},
    "response.output_text.done": {**PART, "text": STRING},
    "response.function_call_arguments.delta": {**WHERE, "delta": STRING},
    "response.function_call_arguments.done": {**WHERE, "arguments": STRING},
}


def json_type(value: Any) -> str:
    if value is None:
        return NULL
    if isinstance(value, bool):
        return BOOLEAN
    if isinstance(value, int):
        return INTEGER
    if isinstance(value, float):
        return NUMBER
    if isinstance(value, str):
        return STRING
    if isinstance(value, list):
        return ARRAY
    return OBJECT if isinstance(value, Mapping) else type(value).__name__


def fields(value: Any, required: Mapping[str, JsonType], path: str) -> list[str]:
    """What ``value`` lacks of ``required``, or holds of another type."""
    if not isinstance(value, Mapping):
        return [f"{path}: not an object"]
    found = []
    for name, expected in required.items():
        allowed = expected if isinstance(expected, tuple) else (expected,)
        if name not in value:
            found.append(f"{path}.{name}: missing")
            continue
        actual = json_type(value[name])
        if actual not in allowed and not (actual == INTEGER and NUMBER in allowed):
            found.append(f"{path}.{name}: {actual}, not {' or '.join(allowed)}")
    return found


def item_problems(item: Any, path: str) -> list[str]:
    """An output item: a message (with its content parts) or a function call."""
    kind = item.get("type") if isinstance(item, Mapping) else None
    if kind == "function_call":
        return fields(item, FUNCTION_CALL, path)
    if kind != "message":
        return [f"{path}.type: {kind!r} is no item this service makes"]
    found = fields(item, MESSAGE, path)
    for index, part in enumerate(item.get("content") or ()):
        shape = OUTPUT_TEXT if part.get("type") == "output_text" else INPUT_TEXT
        found += fields(part, shape, f"{path}.content[{index}]")
    return found


def problems(response: Any, path: str = "response") -> list[str]:
    """What a Response lacks or holds wrongly, by the specification's requirements."""
    found = fields(response, RESPONSE, path)
    if found and any(entry.endswith("not an object") for entry in found):
        return found
    if response.get("object") != "response":
        found.append(f"{path}.object: {response.get('object')!r}, not 'response'")
    if response.get("status") not in STATUSES:
        found.append(f"{path}.status: {response.get('status')!r}")
    if response.get("truncation") not in ("auto", "disabled"):
        found.append(f"{path}.truncation: {response.get('truncation')!r}")
    nested: list[tuple[str, Any, Callable[[Any, str], list[str]]]] = [
        *(
            (f"{path}.output[{i}]", item, item_problems)
            for i, item in enumerate(response["output"])
        ),
        *(
            (f"{path}.tools[{i}]", tool, lambda v, p: fields(v, FUNCTION_TOOL, p))
            for i, tool in enumerate(response["tools"])
        ),
    ]
    if response.get("usage") is not None:
        nested.append((f"{path}.usage", response["usage"], lambda v, p: fields(v, USAGE, p)))
    if response.get("error") is not None:
        nested.append((f"{path}.error", response["error"], lambda v, p: fields(v, ERROR, p)))
    if not isinstance(response.get("text", {}).get("format"), Mapping):
        found.append(f"{path}.text.format: missing")
    for where, value, check in nested:
        found += check(value, where)
    return found


def event_problems(event: Any) -> list[str]:
    """What a streaming event lacks or holds wrongly: its type and sequence number, and
    the fields of its type (a Response's five events: the Response whole)."""
    found = fields(event, {"type": STRING, "sequence_number": INTEGER}, "event")
    kind = event.get("type")
    if kind in RESPONSE_EVENTS:
        return found + problems(event.get("response"), f"{kind}.response")
    if kind not in EVENTS:
        return [*found, f"event.type: {kind!r} is not an event of the specification"]
    found += fields(event, EVENTS[kind], kind)
    item = event.get("item")
    if isinstance(item, Mapping):
        found += item_problems(item, f"{kind}.item")
    return found
