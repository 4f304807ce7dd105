"""Ids the service mints for a conversation's items (v5), and what they name.

Every id names its conversation and its position as recorded, so that a request that
resends an app's history with the ids the service gave its items can be bound to that
conversation without naming it (``ItemPlace``):

- a message: ``msg_<sessionId>_<seq>`` (v4's form, unchanged);
- a call of the app's tools, paused for: its ``function_call`` item
  ``fc_<sessionId>_<userSeq>_<n>`` and its ``call_id`` ``call_<session>_<userSeq>_<n>``,
  where ``<session>`` is the session id without its ``ses_`` prefix and ``n`` counts the
  app's calls of that turn from 0. A ``call_id`` is at most 40 characters of
  ``[A-Za-z0-9_-]``: OpenAI's chat API and Bedrock's ``toolUseId`` refuse longer ones, and
  an app sends them back to whichever model it talks to next.

Nothing here proves an id is the caller's: a place is only a claim until the
conversation it names is read within the caller's workspace.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_CALL_ID_CHARS = 40
_SESSION = re.compile(r"ses_(?P<body>[A-Za-z0-9-]{1,64})")
_MESSAGE = re.compile(r"msg_(?P<session>ses_[A-Za-z0-9-]{1,64})_(?P<seq>[1-9][0-9]{0,9})")
_FUNCTION_CALL = re.compile(
    r"fc_(?P<session>ses_[A-Za-z0-9-]{1,64})_(?P<seq>[1-9][0-9]{0,9})_(?P<n>[0-9]{1,4})"
)
_CALL_ID = re.compile(
    r"call_(?P<body>[A-Za-z0-9-]{1,64})_(?P<seq>[1-9][0-9]{0,9})_(?P<n>[0-9]{1,4})"
)


@dataclass(frozen=True, order=True)
class ItemPlace:
    """Where an item of a conversation is: its session and the seq of the answer of its
    turn (``answer_seq``: a user message's answer follows it; a call belongs to the
    turn at ``answer_seq - 1``). ``seq``: the message's own seq (a call's: its turn's
    user seq)."""

    answer_seq: int
    session_id: str
    seq: int
    # A call of the app's tools (its turn may still be waiting), not a message.
    call: bool = False


def place_of_message(item_id: str) -> ItemPlace | None:
    """The place a message item id names (None: not one the service minted)."""
    match = _MESSAGE.fullmatch(item_id)
    if match is None:
        return None
    seq = int(match["seq"])
    return ItemPlace(seq + seq % 2, match["session"], seq)


def place_of_function_call(item_id: str) -> ItemPlace | None:
    """The place a ``function_call`` item id names (its turn's)."""
    match = _FUNCTION_CALL.fullmatch(item_id)
    if match is None or int(match["seq"]) % 2 == 0:
        return None
    return ItemPlace(int(match["seq"]) + 1, match["session"], int(match["seq"]), call=True)


def place_of_call_id(call_id: str) -> ItemPlace | None:
    """The place a ``call_id`` the service minted names (its turn's)."""
    match = _CALL_ID.fullmatch(call_id)
    if match is None or int(match["seq"]) % 2 == 0:
        return None
    seq = int(match["seq"])
    return ItemPlace(seq + 1, f"ses_{match['body']}", seq, call=True)


def place_of_item_id(item_id: str) -> ItemPlace | None:
    """The place any item id the service minted names: a message's or a call's."""
    return place_of_message(item_id) or place_of_function_call(item_id)


def function_call_item_id(session_id: str, user_seq: int, n: int) -> str:
    """The id of the ``n``-th call of the app's tools in the turn at ``user_seq``."""
    return f"fc_{session_id}_{user_seq}_{n}"


def app_call_id(session_id: str, user_seq: int, n: int) -> str | None:
    """The ``call_id`` the app is shown for the ``n``-th call of its tools in the turn at
    ``user_seq`` (None when the session's id cannot make one within 40 characters: the
    provider's own is shown then)."""
    match = _SESSION.fullmatch(session_id)
    if match is None:
        return None
    minted = f"call_{match['body']}_{user_seq}_{n}"
    return minted if len(minted) <= MAX_CALL_ID_CHARS else None
