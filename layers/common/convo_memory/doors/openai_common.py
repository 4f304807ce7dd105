"""What the two OpenAI-compatible doors (chat completions and Responses) share: their
headers and content types, how a refusal names the field (OpenAI's ``param``), who a
call says it is (its end user and ``X-Convo-Principal``), the app's function tools and
how the model may call them, a round of the app's own tool exchange, and the ``convo``
member every answer carries. One module, so neither door imports the other's private
helpers."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from convo_memory.domain import request_rules
from convo_memory.domain.errors import ValidationFailed
from convo_memory.domain.tools import (
    AppTools,
    ToolChoice,
    ToolDefinition,
    ToolReply,
    ToolRequest,
    ToolRound,
)
from convo_memory.domain.turns import SessionOwner

if TYPE_CHECKING:
    from convo_memory.api import FunctionSpec
    from convo_memory.domain.turns import TurnResult

JSON = "application/json"
EVENT_STREAM = "text/event-stream; charset=utf-8"
PRINCIPAL_HEADER = "x-convo-principal"
USER_HEADER = "x-convo-user"
# Roles whose text joins the instructions; "developer" is OpenAI's newer name for "system".
SYSTEM_ROLES = frozenset({"system", "developer"})
# What the ``convo`` member of an answer carries: what the service did with the turn.
CONVO_FIELDS = ("sessionId", "turn", "recorded", "withheld", "runId")


def invalid(field: str, what: str) -> ValidationFailed:
    """A ``422`` naming ``field`` (OpenAI's ``param``) and saying what is wrong with it.
    ``field`` may be dotted (``input.2.content.0``): the error body names it in OpenAI's
    form (``input[2].content[0]``, ``edge.errors.openai_param``)."""
    return ValidationFailed(
        f"{field} {what}",
        details=[{"loc": field.split("."), "msg": what, "type": "value_error"}],
        param=field,
    )


def end_user_of(
    user: str | None, safety_identifier: str | None, headers: Mapping[str, str]
) -> str | None:
    """(v5) The end user a call names (a session's externalRef): header ``X-Convo-User``,
    else the body's ``user``, else its ``safety_identifier`` (OpenAI suggests a hash
    there, so both may be sent: they never conflict). Each is checked as an externalRef
    is (422 naming it). ``headers`` are lower-cased."""
    for field, value in (
        ("X-Convo-User", headers.get(USER_HEADER)),
        ("user", user),
        ("safety_identifier", safety_identifier),
    ):
        if value is not None:
            check_end_user(field, value)
            return value
    return None


def check_end_user(field: str, value: str) -> None:
    """An end user's id as a call names it (``user``, ``safety_identifier``,
    ``X-Convo-User``): 1-256 characters, as a session's externalRef."""
    if not 1 <= len(value) <= request_rules.MAX_EXTERNAL_REF_CHARS:
        raise invalid(
            field,
            f"must be 1-{request_rules.MAX_EXTERNAL_REF_CHARS} characters (your end user's id)",
        )


def session_owner(end_user: str | None, headers: Mapping[str, str]) -> SessionOwner:
    """Who the call says it is: ``end_user`` and its ``X-Convo-Principal`` (checked by
    the rules a session is opened with; 422). ``headers`` are lower-cased."""
    from convo_memory.api import SessionPatch

    principal, given = principal_header(headers.get(PRINCIPAL_HEADER))
    try:
        request_rules.parse_model(SessionPatch, {"principal": principal})
    except ValidationFailed as refused:
        raise invalid("X-Convo-Principal", refused.message.removeprefix("principal: ")) from None
    return SessionOwner(end_user, principal, given)


def principal_header(raw: str | None) -> tuple[dict[str, str] | None, bool]:
    """``X-Convo-Principal``: a JSON object of string claims, or absent."""
    if raw is None:
        return None, False
    try:
        value = json.loads(raw)
    except ValueError:
        raise invalid("X-Convo-Principal", "must be a JSON object of string claims") from None
    if value is not None and not (
        isinstance(value, dict) and all(isinstance(v, str) for v in value.values())
    ):
        raise invalid("X-Convo-Principal", "must be a JSON object of string claims")
    request_rules.inspect_value(value)
    return value, True


def app_tool_definitions(functions: Sequence[FunctionSpec]) -> tuple[ToolDefinition, ...]:
    """The app's functions (validated ``FunctionSpec``: both doors' bounds) as the model
    is offered them; ``422`` for a name used twice."""
    names = [function.name for function in functions]
    if len(set(names)) != len(names):
        raise invalid("tools", "each tool needs a name of its own")
    return tuple(
        ToolDefinition(
            function.name,
            function.description,
            function.parameters or {"type": "object", "properties": {}},
        )
        for function in functions
    )


def offered_tools(
    definitions: tuple[ToolDefinition, ...],
    mode: str | None,
    named: str | None,
    parallel: bool | None,
    name_field: str,
) -> AppTools:
    """The app's tools with how the model may call them: ``mode`` ``auto`` (or None),
    ``none``, ``required``, or ``function`` with the tool ``named`` (``422`` naming
    ``name_field`` when it names none of them)."""
    if mode in (None, "auto"):
        return AppTools(definitions, ToolChoice("auto", None, parallel))
    if mode == "none":
        return AppTools(definitions, ToolChoice("none", None, parallel))
    if mode == "required":
        return AppTools(definitions, ToolChoice("required", None, parallel))
    if named not in [definition.name for definition in definitions]:
        raise invalid(name_field, "names no tool of tools")
    return AppTools(definitions, ToolChoice("function", named, parallel))


def refuse_choice_without_tools(choice: Any) -> None:
    """A ``tool_choice`` that asks for a call while no tools are offered (422)."""
    if choice not in (None, "auto", "none"):
        raise invalid("tool_choice", "asks for a tool call, but no tools are offered")


def tool_round(
    text: str, requests: tuple[ToolRequest, ...], outputs: Mapping[str, str]
) -> ToolRound | None:
    """One round of the app's own tool exchange: the calls and one output for each of
    them (None when the outputs do not answer exactly those calls)."""
    if set(outputs) != {request.call_id for request in requests}:
        return None
    replies = tuple(ToolReply(r.call_id, r.name, outputs[r.call_id]) for r in requests)
    return ToolRound(text, requests, replies)


def convo_extension(result: TurnResult) -> dict[str, Any]:
    """The ``convo`` member: what the service did with the turn."""
    kept = result.to_json()
    return {name: kept[name] for name in CONVO_FIELDS}
