"""The services' policies, as the deployment's settings make them: settings only parse
and validate the environment (``convo_memory.config``); what a service does with them
is decided here, in the composition root."""

from __future__ import annotations

from convo_memory.config import Settings
from convo_memory.services.conversations import ImportLimits
from convo_memory.services.erasure_policy import MAX_QUEUE_DELAY_SECONDS, ErasurePolicy
from convo_memory.services.retention import RetentionPolicy
from convo_memory.services.summaries import CHUNK_MESSAGES, SummaryPolicy
from convo_memory.services.turns import TurnPolicy


def turn_policy(settings: Settings) -> TurnPolicy:
    """What a turn may take, keep and wait for."""
    return TurnPolicy(
        max_input_chars=settings.max_input_chars,
        max_stored_answer_chars=settings.max_stored_answer_chars,
        digest_max_chars=settings.digest_max_chars,
        digest_retention_seconds=settings.digest_retention_hours * 3600,
        activity_granularity_seconds=settings.activity_granularity_seconds,
        turn_deadline_seconds=settings.turn_deadline_seconds,
        pending_turn_seconds=settings.pending_turn_seconds,
    )


def import_limits(settings: Settings) -> ImportLimits:
    """(v4) What history an app brings to a new conversation may be."""
    return ImportLimits(settings.max_input_chars, settings.max_stored_answer_chars)


def summary_policy(settings: Settings) -> SummaryPolicy:
    """How far ahead summaries fold, and in what calls."""
    # A steady conversation's batch is always one summarizer call.
    chunk = max(CHUNK_MESSAGES, 2 * settings.summary_batch_turns)
    return SummaryPolicy(batch_turns=settings.summary_batch_turns, chunk_messages=chunk)


def retention_policy(settings: Settings) -> RetentionPolicy:
    """The windows a scheduled retention run enforces."""
    return RetentionPolicy(
        idle_archive_days=settings.idle_archive_days,
        purge_after_days=settings.purge_after_days,
        deletion_grace_seconds=settings.deletion_grace_seconds,
    )


def erasure_policy(settings: Settings) -> ErasurePolicy:
    """When a deletion's sweep runs, and how long an erasure waits out turns in flight."""
    # A deletion's sweep runs once no write in flight can land: DeletionGraceSeconds
    # (at least 360 s, longer than any function runs) or SQS's longest delay, 900 s.
    delay = min(MAX_QUEUE_DELAY_SECONDS, int(settings.deletion_grace_seconds))
    return ErasurePolicy(
        sweep_delay_seconds=delay,
        turn_budget_seconds=settings.turn_lifetime,
        activity_granularity_seconds=settings.activity_granularity_seconds,
    )
