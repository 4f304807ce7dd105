"""The ``call_id``s an app is shown for a paused turn's calls (v5), and the way back.

A provider names its calls its own way (OpenAI ``call_...``, Bedrock ``tooluse_...``, the
embedded models ``call_1`` in every conversation). The app is shown ids the service
minted instead (``item_ids.app_call_id``), which name the conversation and the turn, so
that the outputs an app sends in a request that names nothing else still find their
pause. When the outputs come back, each minted id is turned into the provider's own
before the model sees them; a provider's own id (shown before v5) is taken as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from convo_memory.domain.item_ids import app_call_id
from convo_memory.domain.paused_turns import PendingTurn
from convo_memory.domain.tools import AppToolCall
from convo_memory.domain.turns import ToolOutput


def answered_before(pending: PendingTurn) -> int:
    """How many of the app's calls the turn had answered before its current pause."""
    return sum(1 for call in pending.calls if call.kind == "app")


def shown_ids(session_id: str, pending: PendingTurn) -> dict[str, str]:
    """The provider's id of each call the pause waits for, to the id the app is shown."""
    base = answered_before(pending)
    shown: dict[str, str] = {}
    for index, call in enumerate(pending.tool_calls):
        minted = app_call_id(session_id, pending.user_seq, base + index)
        shown[call.call_id] = minted or call.call_id
    return shown


def shown_calls(session_id: str, pending: PendingTurn) -> tuple[AppToolCall, ...]:
    """The calls a pause waits for, as the app is shown them (the ids the service minted)."""
    shown = shown_ids(session_id, pending)
    return tuple(replace(call, call_id=shown[call.call_id]) for call in pending.tool_calls)


def provider_outputs(
    session_id: str, pending: PendingTurn, outputs: Sequence[ToolOutput]
) -> tuple[ToolOutput, ...]:
    """The app's outputs with the provider's ids of the calls they answer (an id the
    service did not mint for this pause is left as it is, to be refused or matched as
    the provider's own)."""
    back = {shown: own for own, shown in shown_ids(session_id, pending).items()}
    return tuple(
        replace(output, call_id=back.get(output.call_id, output.call_id)) for output in outputs
    )
