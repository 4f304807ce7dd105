"""The rolling summary's items in a session's partition: ``SUMMARY`` (the summary a
turn reads, and with ``replay.alignment > 1`` the version kept beside it) and
``HIST#SUMMARY#<through:010d>`` (every version a fold wrote, v4: what a fork starts
from and a prompt record names). The rest of the layout is ``items``'."""

from __future__ import annotations

from convo_memory.adapters.dynamo.items import session_pk, summary_key
from convo_memory.adapters.dynamo.table import Item, number_value, string_value
from convo_memory.domain.models import Summary
from convo_memory.domain.summary_plan import SummaryVersion

# The window the summary was made in, and the version kept beside it (alignment > 1).
MADE_AT = "madeAtWindow"


EARLIER_TEXT = "earlierText"


EARLIER_THROUGH = "earlierThroughSeq"


EARLIER_MADE_AT = "earlierMadeAtWindow"


SUMMARY_VERSION_PREFIX = "HIST#SUMMARY#"


def summary_version_sk(through_seq: int) -> str:
    return f"{SUMMARY_VERSION_PREFIX}{through_seq:010d}"


def summary_version_key(session_id: str, through_seq: int) -> Item:
    return {"pk": session_pk(session_id), "sk": string_value(summary_version_sk(through_seq))}


def summary_from(item: Item) -> Summary:
    return Summary(text=item["text"]["S"], through_seq=int(item["throughSeq"]["N"]))


def summary_versions_from(item: Item) -> tuple[SummaryVersion, ...]:
    """The stored version and the one kept beside it (when there is one), each with the
    window it was made in (0 when not recorded)."""
    versions = [SummaryVersion(summary_from(item), _number(item, MADE_AT))]
    if EARLIER_THROUGH in item and int(item[EARLIER_THROUGH]["N"]) > 0:
        earlier = Summary(
            text=item.get(EARLIER_TEXT, {}).get("S", ""),
            through_seq=int(item[EARLIER_THROUGH]["N"]),
        )
        versions.append(SummaryVersion(earlier, _number(item, EARLIER_MADE_AT)))
    return tuple(versions)


def summary_version_item(session_id: str, version: SummaryVersion) -> Item:
    """A version of the rolling summary, as a fold wrote it (with the window it was made
    in): kept for the session's life (a fork starts from one; a prompt record names one)."""
    item: Item = {
        **summary_version_key(session_id, version.summary.through_seq),
        "text": string_value(version.summary.text),
        "throughSeq": number_value(version.summary.through_seq),
    }
    if version.made_at_window:
        item[MADE_AT] = number_value(version.made_at_window)
    return item


def summary_version_from(item: Item) -> SummaryVersion:
    """A kept version (``summary_version_item``)."""
    return SummaryVersion(summary_from(item), _number(item, MADE_AT))


def _number(item: Item, name: str) -> int:
    return int(item[name]["N"]) if name in item else 0


def summary_item(
    session_id: str,
    summary: Summary,
    earlier: SummaryVersion | None = None,
    made_at_window: int = 0,
) -> Item:
    item: Item = {
        **summary_key(session_id),
        "text": string_value(summary.text),
        "throughSeq": number_value(summary.through_seq),
    }
    if made_at_window:
        item[MADE_AT] = number_value(made_at_window)
    if earlier is not None:
        item[EARLIER_THROUGH] = number_value(earlier.summary.through_seq)
        if earlier.summary.text:
            item[EARLIER_TEXT] = string_value(earlier.summary.text)
        if earlier.made_at_window:
            item[EARLIER_MADE_AT] = number_value(earlier.made_at_window)
    return item
