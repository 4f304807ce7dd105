"""The rules a request's values follow, whichever door or route they arrive by: ids that
one of ours could be (else a 404 of their kind, before any store call), message seqs,
nesting depth and valid Unicode, and how a schema violation is told (422
``validation_error``, naming the first field as the request named it).

The input gate (``convo_memory.edge.input_gate``) applies them to every request; the doors
apply them to the values they read further (a conversation's id, an end user's id, a list
of function tools), so a door never calls back into the edge for a rule. Pure: the
standard library and the domain; pydantic is imported by ``parse_model`` when it runs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from convo_memory.domain.errors import (
    CapabilityNotFound,
    FileNotFound,
    InvalidJson,
    ItemNotFound,
    NotFound,
    ResponseNotFound,
    RunNotFound,
    SessionNotFound,
    ValidationFailed,
)
from convo_memory.domain.text_rules import has_lone_surrogate

if TYPE_CHECKING:
    from pydantic import BaseModel

Model = TypeVar("Model", bound="BaseModel")

MAX_DEPTH = 32
MAX_ID_CHARS = 128
MAX_EXTERNAL_REF_CHARS = 256
# Every id the service issues or seeds: ``ses_<hex>``, ``run_<hex>``, ``cap-generative``.
PLAUSIBLE_ID = re.compile(rf"[A-Za-z0-9_-]{{1,{MAX_ID_CHARS}}}")


def inspect_value(value: Any, max_depth: int = MAX_DEPTH) -> None:
    """Refuse nesting deeper than ``max_depth`` (400) and unpaired surrogates (422, naming
    the first string found to hold one: OpenAI's doors show it as ``param``).

    Iterative, so no depth reaches Python's recursion limit. The 400 wins when a value
    has both problems: the whole value is walked before a surrogate is reported."""
    surrogate: tuple[str, ...] | None = None
    stack: list[tuple[Any, int, tuple[str, ...]]] = [(value, 1, ())]
    while stack:
        item, depth, path = stack.pop()
        if isinstance(item, dict):
            if depth > max_depth:
                raise InvalidJson(f"the request body is nested deeper than {max_depth} levels")
            for key, child in item.items():
                if surrogate is None and has_lone_surrogate(key):
                    surrogate = path
                stack.append((child, depth + 1, (*path, str(key))))
        elif isinstance(item, list):
            if depth > max_depth:
                raise InvalidJson(f"the request body is nested deeper than {max_depth} levels")
            stack.extend((child, depth + 1, (*path, str(i))) for i, child in enumerate(item))
        elif isinstance(item, str) and surrogate is None and has_lone_surrogate(item):
            surrogate = path
    if surrogate is not None:
        named = ".".join(step for step in surrogate if not has_lone_surrogate(step))
        raise ValidationFailed(
            "a string holds an unpaired surrogate; strings must be valid Unicode",
            param=named or "body",
        )


SEQ = re.compile(r"[1-9][0-9]{0,9}")


def path_seq(value: str) -> int:
    """A message seq in a path: a positive integer (``422 validation_error`` otherwise)."""
    if not SEQ.fullmatch(value):
        raise ValidationFailed(
            "seq must be a message's seq: a positive integer",
            details=[{"loc": ["path", "seq"], "msg": "not a positive integer"}],
        )
    return int(value)


def check_path_id(name: str, value: str) -> None:
    """A 404 of the parameter's kind for a value none of our ids could be (a seq: 422)."""
    if PLAUSIBLE_ID.fullmatch(value):
        return
    lowered = name.lower()
    if lowered == "seq":
        path_seq(value)
    if "capability" in lowered:
        raise CapabilityNotFound("capability not found")
    if "session" in lowered or "conversation" in lowered:  # a conversation is a session
        raise SessionNotFound("session not found")
    if "response" in lowered:
        raise ResponseNotFound("response not found")
    if "item" in lowered:
        raise ItemNotFound("item not found")
    if "run" in lowered:
        raise RunNotFound("run not found")
    if "file" in lowered:
        raise FileNotFound("file not found")
    raise NotFound("not found")


def parse_model(model: type[Model], data: Any) -> Model:
    """``data`` validated as a ``model`` (a request model of ``convo_memory.api``);
    schema violations become 422 ``validation_error`` with per-field details."""
    from pydantic import ValidationError

    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_context=False, include_input=False)
        raise schema_refusal(errors, data) from None


def schema_refusal(errors: Iterable[Mapping[str, Any]], data: Any) -> ValidationFailed:
    """The 422 ``validation_error`` for pydantic's ``errors`` of a request's ``data``:
    the first one in the message (``where: what``) and as the field it names
    (``param``), each in the details (``loc``, ``msg``, ``type``). A route's typed
    parameters are refused in the same words (``convo_memory.edge.resolver``), their body's places
    named as the body model names them."""
    details = [
        {"loc": [str(p) for p in err["loc"]], "msg": err["msg"], "type": err["type"]}
        for err in errors
    ]
    first = details[0] if details else {"loc": [], "msg": "invalid"}
    where = ".".join(first["loc"]) or "body"
    field = field_path(data, first["loc"]) or None
    return ValidationFailed(f"{where}: {first['msg']}", details=details, param=field)


def field_path(data: Any, loc: Sequence[str]) -> str:
    """The path of the field an error's ``loc`` points at in ``data`` (``stop``, not
    ``stop.constrained-str``): the steps that name a key or an index of what was sent, and
    a last one that names a missing field."""
    steps: list[str] = []
    here = data
    for index, step in enumerate(loc):
        if isinstance(here, dict) and step in here:
            here = here[step]
        elif isinstance(here, list) and step.isdigit() and int(step) < len(here):
            here = here[int(step)]
        elif isinstance(here, dict) and index == len(loc) - 1:
            pass  # a required field that was not sent
        else:
            continue  # a step of the model's own (a union's member), not of the body
        steps.append(step)
    return ".".join(steps)
