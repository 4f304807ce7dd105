"""The conversations table's item layout: keys and the item <-> domain codecs.

One partition per session (``pk = SESSION#<sid>``)::

    ATT#<ws>#<owner>#<digest>   an attachment this session refers to (v5)
    FORK#<forkId>               a copy still due to a fork of this session (v4)
    HIST#SUMMARY#<through:010d> every version of the rolling summary a fold wrote (v4)
    MSG#<userSeq:010d>          a turn: the user message and its answer (seqs n, n+1)
    MSG#<userSeq:010d>#DIGEST   the tool digest of that turn (only turns that used tools)
    SESSION                     the head (its GSI keys put it in byExternalRef/byActivity)
    SUMMARY                     the rolling summary

and, per workspace (``pk = WS#<workspace>``), ``ERASURE#<id>``: an erasure's receipt.

"MSG#..." sorts before "SESSION" < "SUMMARY", so one descending Query reads the summary,
the head and then the newest turns (with their digests): everything a turn needs. The
fork markers and summary versions sort before "MSG#": that Query never reads them.

A session opened by an app's own key (the OpenAI-compatible door) also has a key item,
``pk = WS#<ws>#CAP#<cap>#KEY#<key>``, ``sk = SESSIONKEY``, naming the session: written with
the head in one conditional transaction (so concurrent first calls open one session),
read by ``GetItem`` (no scan), deleted with the session's contents. Workspace and
capability ids never hold ``#``, so no key can pose as another's.

A turn item's attribute names are one or two letters (``id`` turn id, ``at`` createdAt,
``u`` user message, ``a`` answer, ``w`` withheld, ``x`` truncated, ``r`` run id, ``k`` the
idempotency record of the request that served it, if it had an Idempotency-Key, ``p``
which stored parts its prompt was sent, ``domain.prompt_record``, ``b`` abandoned, v4;
(v4) ``q`` what a Responses request set and ``qx`` its response deleted,
``domain.responses``; (v5) ``f`` its attachments' references): DynamoDB
bills attribute names as data, and the serving path reads ten turns per request, so the
window of a default capability fits in one 4 KB read unit more often.

(v4) A turn that paused for the app's own tools is kept at its position until it ends:
a *pending* item (``id`` the pause's id, ``at`` when it paused, ``u`` the user message,
``pt`` the rest of its state as JSON, ``domain.paused_turns``; ``r`` its run, when a
trace was stored), which the turn's final item (or its abandoned record) replaces with a
put conditional on the pause's id. It holds the position (a racing turn moves on) and
is read by a turn's one Query; it is no message: transcript reads skip it. While it
waits it is in the byActivity index under ``PENDING#NN`` (sort key: when it stops
waiting), so the retention run finds a pause left too long.

The head carries no message count: it is the newest turn's position (read with it), so a
turn writes nothing but its own item. Its ``lastActiveAt`` is a coarse activity mark for
the byActivity index, moved at most once per granularity.
"""

from __future__ import annotations

import json
import zlib
from typing import Any

from convo_memory.adapters.dynamo.table import Item, number_value, string_value
from convo_memory.domain.attachments import decode_refs, encode_refs
from convo_memory.domain.models import ForkPoint, Message, Recall, Session, ToolDigest
from convo_memory.domain.paused_turns import PendingTurn
from convo_memory.domain.turn_records import AppendResult, TurnRecord, turn_messages

SESSION_SK = "SESSION"
SUMMARY_SK = "SUMMARY"
MSG_PREFIX = "MSG#"
DIGEST_SUFFIX = "#DIGEST"
# Above every turn key ("MSG#" + ten digits [+ "#DIGEST"]).
MSG_UPPER = "MSG#~"
# The byActivity index's partitions of each kind, shared by every workspace: written
# when a session opens or moves its hourly mark (so at 10,000 turns a second that each
# open a session, about 160 writes a second each). From 16 (v4): those items keep their
# keys, which are among these.
ACTIVITY_SHARDS = 64
INDEX_PREFIX = {"active": "ACTIVE", "archived": "ARCHIVED", "deleting": "DELETING"}
RECALL_ATTRIBUTE = "recall"
# The head's fence nonce (never shown by the API); the window the summary was made in,
# and the version kept beside it (replay.alignment > 1).
FENCE_NONCE = "fenceNonce"
# Forks (v4): the marker of a copy due to a fork (in the parent's partition) and the
# summary's versions; on a fork's head, its fork point and, while its older inherited
# messages are still being copied in, where from and below which user seq.
FORK_PREFIX = "FORK#"
FORK_OF = "forkOf"
COPY_FROM = "copyFrom"
COPY_BELOW = "copyBelow"
PROMPT_RECORD = "p"
ABANDONED = "b"
PENDING_STATE = "pt"
# On a paused turn's item only: a flag a projection can read without the state.
PENDING_MARK = "pd"
PENDING_INDEX_PREFIX = "PENDING"
# (v4) On a turn item: what its Responses request set (``domain.responses``), and that
# its response was deleted (the turn stays).
RESPONSE_SETTINGS = "q"
RESPONSE_DELETED = "qx"
# (v5) A turn's user message (``ru``) or answer (``ra``) removed as a conversation item.
REMOVED_USER = "ru"
REMOVED_ANSWER = "ra"
# (v4) On a turn that ended a pause (continued, or abandoned): the pause's id, which the
# paused response's id names.
ENDED_PAUSE = "ep"
# (v5) On a turn: its user message's attachments (``attachments.encode_refs``); in a
# session's partition, its references to attachments (``ATT#<ws>#<owner>#<digest>``).
ATTACHMENTS = "f"
ATTACHMENT_REFERENCE_PREFIX = "ATT#"


def session_pk(session_id: str) -> dict[str, str]:
    return string_value(f"SESSION#{session_id}")


def head_key(session_id: str) -> Item:
    return {"pk": session_pk(session_id), "sk": string_value(SESSION_SK)}


def summary_key(session_id: str) -> Item:
    return {"pk": session_pk(session_id), "sk": string_value(SUMMARY_SK)}


def turn_sk(user_seq: int) -> str:
    return f"{MSG_PREFIX}{user_seq:010d}"


def turn_key(session_id: str, user_seq: int) -> Item:
    return {"pk": session_pk(session_id), "sk": string_value(turn_sk(user_seq))}


def fork_marker_key(parent_id: str, fork_id: str) -> Item:
    return {"pk": session_pk(parent_id), "sk": string_value(f"{FORK_PREFIX}{fork_id}")}


def is_fork_marker(item: Item) -> bool:
    return str(item["sk"]["S"]).startswith(FORK_PREFIX)


def activity_shard(session_id: str) -> int:
    return zlib.crc32(session_id.encode()) % ACTIVITY_SHARDS


def activity_pk(status: str, session_id: str) -> str:
    return f"{INDEX_PREFIX[status]}#{activity_shard(session_id):02d}"


def external_ref_pk(workspace_id: str, external_ref: str) -> str:
    return f"WS#{workspace_id}#REF#{external_ref}"


SESSION_KEY_SK = "SESSIONKEY"


def session_key_key(workspace_id: str, capability_id: str, session_key: str) -> Item:
    return {
        "pk": string_value(f"WS#{workspace_id}#CAP#{capability_id}#KEY#{session_key}"),
        "sk": string_value(SESSION_KEY_SK),
    }


def session_key_item(session: Session) -> Item:
    """The key item of a session opened by its app's key (``session.session_key``)."""
    assert session.session_key is not None and session.capability_id is not None
    return {
        **session_key_key(session.workspace_id, session.capability_id, session.session_key),
        "sessionId": string_value(session.id),
        "createdAt": string_value(session.created_at),
    }


def is_digest(item: Item) -> bool:
    return str(item["sk"]["S"]).endswith(DIGEST_SUFFIX)


def is_attachment_reference(item: Item) -> bool:
    """(v5) A session's reference to an attachment (``adapters.attachments.store``): a
    deletion leaves it to the release that follows, which must read it."""
    return str(item["sk"]["S"]).startswith(ATTACHMENT_REFERENCE_PREFIX)


def is_pending(item: Item) -> bool:
    """A paused turn's item (v4): it holds its position, but is no message yet."""
    return PENDING_MARK in item


def is_turn(item: Item) -> bool:
    """A recorded turn's item (neither a digest nor a paused turn)."""
    return not is_digest(item) and not is_pending(item)


def user_seq_of_item(item: Item) -> int:
    """The user seq of a turn item or of a digest item."""
    return int(item["sk"]["S"][len(MSG_PREFIX) : len(MSG_PREFIX) + 10])


# -- heads --------------------------------------------------------------------------


def head_item(session: Session) -> Item:
    item: Item = {
        **head_key(session.id),
        "workspaceId": string_value(session.workspace_id),
        **bound_attributes(session),
        "metadata": string_value(json.dumps(session.metadata)),
        "status": string_value(session.status),
        "createdAt": string_value(session.created_at),
        "lastActiveAt": string_value(session.last_active_at),
        "gsi2pk": string_value(activity_pk("active", session.id)),
        "gsi2sk": string_value(session.last_active_at),
        **recall_attribute(session.recall),
        # The app's own key (OpenAI-compatible door), when it opened the session.
        **(
            {"sessionKey": string_value(session.session_key)}
            if session.session_key is not None
            else {}
        ),
    }
    if session.fence_nonce:
        item[FENCE_NONCE] = string_value(session.fence_nonce)
    if session.fork_of is not None:
        item[FORK_OF] = string_value(compact(session.fork_of.to_json_dict()))
    return item


def bound_attributes(session: Session) -> Item:
    """What binds a session to its capability and end user: ``capabilityId`` and
    ``externalRef`` (each absent while None: a conversation no response has bound yet,
    or bound without an end user), the principal, and the byExternalRef keys (only with
    an end user: a session without one is in no listing and no erasure)."""
    item: Item = {"principal": string_value(json.dumps(session.principal))}
    if session.capability_id is not None:
        item["capabilityId"] = string_value(session.capability_id)
    if session.external_ref is not None:
        item["externalRef"] = string_value(session.external_ref)
        item["gsi1pk"] = string_value(external_ref_pk(session.workspace_id, session.external_ref))
        item["gsi1sk"] = string_value(f"{session.created_at}#{session.id}")
    return item


def recall_attribute(recall: Recall | None) -> Item:
    """The head's ``recall`` attribute (JSON ``{text, fromSessions}``), when it has one.
    The byExternalRef index does not project it: listings never read it."""
    if recall is None:
        return {}
    # Not ASCII-escaped: an escape is six bytes where UTF-8 needs at most four.
    text = json.dumps(recall.to_json_dict(), separators=(",", ":"), ensure_ascii=False)
    return {RECALL_ATTRIBUTE: string_value(text)}


def session_from(head: Item, newest_turn: Item | None = None) -> Session:
    """A session from its head; the newest turn (when given) gives its message count and
    its exact last activity (the head's mark moves only once per granularity)."""
    count = 0
    # Listings read the byExternalRef index, which does not project the mark.
    last_active_at = str((head.get("lastActiveAt") or head["createdAt"])["S"])
    if newest_turn is not None:
        # A paused turn holds the position after the recorded ones (positions are
        # contiguous): its messages are not counted until it ends.
        count = user_seq_of_item(newest_turn) + (-1 if is_pending(newest_turn) else 1)
        last_active_at = max(last_active_at, turn_created_at(newest_turn))
    return Session(
        id=head["pk"]["S"].removeprefix("SESSION#"),
        workspace_id=head["workspaceId"]["S"],
        capability_id=_string(head, "capabilityId"),
        external_ref=_string(head, "externalRef"),
        principal=json.loads(head["principal"]["S"]),
        metadata=json.loads(head["metadata"]["S"]),
        status="archived" if head["status"]["S"] == "archived" else "active",
        created_at=head["createdAt"]["S"],
        last_active_at=last_active_at,
        message_count=count,
        recall=recall_from(head),
        session_key=head["sessionKey"]["S"] if "sessionKey" in head else None,
        fence_nonce=head[FENCE_NONCE]["S"] if FENCE_NONCE in head else None,
        fork_of=ForkPoint.model_validate_json(head[FORK_OF]["S"]) if FORK_OF in head else None,
        copying_from=head[COPY_FROM]["S"] if COPY_FROM in head else None,
    )


def _string(item: Item, name: str) -> str | None:
    return str(item[name]["S"]) if name in item else None


def recall_from(head: Item) -> Recall | None:
    stored = head.get(RECALL_ATTRIBUTE)
    return None if stored is None else Recall.model_validate_json(stored["S"])


def head_status(head: Item) -> str:
    return str(head.get("status", {}).get("S", ""))


# -- what a deletion or an erasure leaves, and what it removes ------------------------

# A deleted session's head from the DELETE's 204 on: keys (the service's own ids: the
# session's, its workspace's and capability's), status and times only.
TOMBSTONE_ATTRIBUTES = frozenset(
    {"pk", "sk", "workspaceId", "capabilityId", "status", "createdAt", "lastActiveAt"}
    | {"deletedAt", "gsi2pk", "gsi2sk"}
)
# Removed from the head by the write that marks it deleted (removing an attribute a head
# does not have is a no-op, so fields added later belong here too).
PERSONAL_HEAD_ATTRIBUTES: tuple[str, ...] = (
    "externalRef",
    "principal",
    "metadata",
    RECALL_ATTRIBUTE,
    # Not personal, but no more than keys, status and times stay on a tombstone.
    FENCE_NONCE,
    FORK_OF,
)
# Head attributes that name an item outside the session's partition which the session
# owns (the OpenAI-compatible door's session-key pointer, say): they stay on the head
# until ``owned_item_keys`` has been deleted, so an interrupted deletion can resume.
SESSION_KEY = "sessionKey"
OWNER_ATTRIBUTES: tuple[str, ...] = (SESSION_KEY, COPY_FROM)
# Removed with them: a fork being deleted keeps its copy mark beside ``COPY_FROM`` while
# its own marker stands, so that its forks can read through it (``fork_reads``).
OWNER_COMPANIONS: dict[str, str] = {COPY_FROM: COPY_BELOW}


def owned_item_keys(head: Item) -> list[Item]:
    """Keys of the items of this table, outside the session's partition, that the session
    owns and that go with it (a deletion, an erasure). Derived from the head as a sweep
    reads it (its ids and ``OWNER_ATTRIBUTES``: the deletion's first write has already
    removed ``PERSONAL_HEAD_ATTRIBUTES``): a fork still copying owns its marker in its
    parent's partition. An app's session key (``SESSION_KEY``) is not among them: it is
    released conditionally by ``sessions.delete_contents``, since a newer session may
    have claimed the key since."""
    if COPY_FROM not in head:
        return []
    fork_id = head["pk"]["S"].removeprefix("SESSION#")
    return [fork_marker_key(head[COPY_FROM]["S"], fork_id)]


def session_item_projection() -> tuple[str, dict[str, str]]:
    """What a sweep reads of each item of a session's partition: its key, the run id and
    idempotency record a turn names, and the head's status, ids and ``OWNER_ATTRIBUTES``."""
    read = ("pk", "sk", "r", "k", "status", "workspaceId", "capabilityId", *OWNER_ATTRIBUTES)
    names = {f"#o{i}": name for i, name in enumerate(read)}
    return ", ".join(names), names


# -- turns ---------------------------------------------------------------------------


def turn_item(session_id: str, user_seq: int, turn: TurnRecord) -> Item:
    item: Item = {
        **turn_key(session_id, user_seq),
        "id": string_value(turn.turn_id),
        "at": string_value(turn.created_at),
        "u": string_value(turn.user_content),
        "a": string_value(turn.answer),
    }
    if turn.withheld:
        item["w"] = {"BOOL": True}
    if turn.truncated:
        item["x"] = {"BOOL": True}
    if turn.run_id:
        item["r"] = string_value(turn.run_id)
    if turn.idempotency_record:
        item["k"] = string_value(turn.idempotency_record)
    if turn.prompt_record is not None:
        item[PROMPT_RECORD] = string_value(turn.prompt_record.encode(user_seq))
    if turn.abandoned:
        item[ABANDONED] = {"BOOL": True}
    if turn.response is not None:
        item[RESPONSE_SETTINGS] = string_value(turn.response)
    if turn.resolves is not None:
        item[ENDED_PAUSE] = string_value(turn.resolves)
    if turn.attachments:
        item[ATTACHMENTS] = string_value(encode_refs(turn.attachments))
    return item


def pending_item(session_id: str, user_seq: int, pending: PendingTurn) -> Item:
    """A paused turn kept at ``user_seq`` (in the byActivity index while it waits)."""
    kept = pending.keep_at(user_seq)
    item: Item = {
        **turn_key(session_id, user_seq),
        "id": string_value(kept.pause_id),
        "at": string_value(kept.since),
        "u": string_value(kept.user_input),
        PENDING_STATE: string_value(kept.to_json()),
        PENDING_MARK: {"BOOL": True},
        "gsi2pk": string_value(f"{PENDING_INDEX_PREFIX}#{activity_shard(session_id):02d}"),
        "gsi2sk": string_value(kept.expires),
    }
    if kept.traced and kept.run_id:
        item["r"] = string_value(kept.run_id)
    return item


def pending_from(item: Item) -> PendingTurn:
    return PendingTurn.from_json(item[PENDING_STATE]["S"], user_seq_of_item(item), item["u"]["S"])


def turn_id_of(item: Item) -> str:
    return str(item.get("id", {}).get("S", ""))


def response_deleted(item: Item) -> bool:
    return bool(item.get(RESPONSE_DELETED, {}).get("BOOL", False))


def turn_created_at(item: Item) -> str:
    return str(item.get("at", {}).get("S", ""))


def messages_from(item: Item) -> tuple[Message, Message]:
    return turn_messages(
        user_seq_of_item(item),
        item["u"]["S"],
        item["a"]["S"],
        turn_created_at(item),
        item.get("w", {}).get("BOOL", False),
        item.get("x", {}).get("BOOL", False),
        item.get(ABANDONED, {}).get("BOOL", False),
        removed=(
            item.get(REMOVED_USER, {}).get("BOOL", False),
            item.get(REMOVED_ANSWER, {}).get("BOOL", False),
        ),
        attachments=decode_refs(item[ATTACHMENTS]["S"]) if ATTACHMENTS in item else (),
    )


def recorded_at(item: Item) -> AppendResult:
    user_seq = user_seq_of_item(item)
    return AppendResult(user_seq, user_seq + 1, already_recorded=True)


def digest_item(session_id: str, user_seq: int, turn: TurnRecord) -> Item:
    assert turn.digest_text is not None and turn.digest_expires_at is not None
    expires = int(turn.digest_expires_at)
    return {
        "pk": session_pk(session_id),
        "sk": string_value(turn_sk(user_seq) + DIGEST_SUFFIX),
        "at": string_value(turn.created_at),
        "tools": {"SS": sorted(set(turn.digest_tools))},
        "text": string_value(turn.digest_text),
        "expiresAt": number_value(expires),
        "ttl": number_value(expires),
    }


def digest_from(item: Item) -> tuple[ToolDigest, float]:
    """A digest (keyed, like the API shows it, by its answer's seq) and its expiry."""
    seq = user_seq_of_item(item) + 1
    digest = ToolDigest(seq=seq, tools=list(item["tools"]["SS"]), text=item["text"]["S"])
    return digest, float(item["expiresAt"]["N"])


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))
