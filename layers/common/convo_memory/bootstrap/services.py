"""The services over their ports, as the composition root wires them: each service is
handed every collaborator it uses, with the deployment's policies
(``bootstrap.policies``); what the handlers call is the ``Container``."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from convo_memory.bootstrap.adapters import Adapters, Infrastructure
from convo_memory.bootstrap.policies import (
    erasure_policy,
    import_limits,
    retention_policy,
    summary_policy,
    turn_policy,
)
from convo_memory.config import Settings
from convo_memory.domain.attachment_plan import form_of
from convo_memory.services.agent_loop import AgentLoop
from convo_memory.services.answering import Answerer
from convo_memory.services.attachments import AttachmentService
from convo_memory.services.auth import TokenResolver
from convo_memory.services.catalog import CapabilityCatalog
from convo_memory.services.conversations import ConversationService
from convo_memory.services.erasures import ErasureService
from convo_memory.services.files import FileService
from convo_memory.services.forks import ForkService
from convo_memory.services.paused_turns import PausedTurns
from convo_memory.services.recall import RecallTaker
from convo_memory.services.recording import TurnRecorder
from convo_memory.services.responses import ResponseService
from convo_memory.services.retention import RetentionService
from convo_memory.services.runs import RunTraces
from convo_memory.services.session_keys import SessionKeys
from convo_memory.services.session_states import SessionStates
from convo_memory.services.sessions import SessionService
from convo_memory.services.summaries import SummaryService
from convo_memory.services.summary_trigger import SummaryTrigger
from convo_memory.services.turn_endings import TurnEndings
from convo_memory.services.turn_routing import TurnRouter
from convo_memory.services.turns import TurnService

Clock = Callable[[], float]
Sleep = Callable[[float], None]


@dataclass(frozen=True)
class Container:
    """The services over their adapters: what the handlers call."""

    settings: Settings
    adapters: Adapters
    infrastructure: Infrastructure
    catalog: CapabilityCatalog
    runs: RunTraces
    sessions: SessionService
    turns: TurnService
    recorder: TurnRecorder
    summaries: SummaryService
    retention: RetentionService
    tokens: TokenResolver
    # Sessions found or opened by an app's own key (the OpenAI-compatible door).
    session_keys: SessionKeys
    erasures: ErasureService
    # Forks (v4): creating them, and the job that copies their older inherited messages.
    forks: ForkService
    # (v4) Conversations (the Responses door's and /v1/conversations) and stored responses.
    conversations: ConversationService
    responses: ResponseService
    # (v5) A turn's images and documents, and the Files API.
    attachments: AttachmentService
    files: FileService


def build_services(
    adapters: Adapters,
    infrastructure: Infrastructure,
    settings: Settings,
    clock: Clock = time.time,
    monotonic: Clock = time.monotonic,
    sleep: Sleep = time.sleep,
) -> Container:
    """The services over ``adapters``, with the deployment's policies from ``settings``
    (``sleep``: the backoff of a failed transcript write or erasure step)."""
    stores = adapters.stores
    catalog = _catalog(adapters, settings)
    trigger, recorder = _recording(adapters, settings, clock, monotonic, sleep)
    attachments = _attachments(adapters, catalog, clock)
    erasures = _erasures(adapters, settings, clock, sleep, attachments)
    sessions = SessionService(
        stores.sessions,
        stores.turns,
        catalog,
        clock,
        recall=RecallTaker(stores.recall),
        after_delete=_after_delete(attachments, erasures if adapters.erasure_queue else None),
    )
    keys = SessionKeys(sessions, stores.sessions, catalog, sleep)
    forks = _forks(adapters, catalog, trigger, clock, attachments)
    conversations = ConversationService(
        sessions, stores.turns, stores.responses, forks, import_limits(settings), clock
    )
    parts = (recorder, trigger, keys, conversations)
    return Container(
        settings=settings,
        adapters=adapters,
        infrastructure=infrastructure,
        catalog=catalog,
        runs=RunTraces(stores.runs),
        sessions=sessions,
        turns=_turns(adapters, settings, catalog, parts, clock, monotonic, attachments),
        recorder=recorder,
        summaries=_summaries(adapters, settings, catalog, clock),
        retention=_retention(adapters, settings, attachments),
        tokens=TokenResolver(stores.tokens, settings.cache_ttl_seconds),
        session_keys=keys,
        erasures=erasures,
        forks=forks,
        conversations=conversations,
        responses=ResponseService(stores.responses, sessions),
        attachments=attachments,
        files=FileService(adapters.files, adapters.attachments, clock),
    )


def _catalog(adapters: Adapters, settings: Settings) -> CapabilityCatalog:
    """Capabilities, checked against the deployment's connections and tool URL policy."""
    return CapabilityCatalog(
        adapters.stores.capabilities,
        settings.cache_ttl_seconds,
        connections=settings.provider_connections,
        tool_urls=adapters.tool_urls,
        sealer=adapters.sealer,
        bedrock_available=settings.bedrock_available,
    )


def _retention(
    adapters: Adapters, settings: Settings, attachments: AttachmentService
) -> RetentionService:
    """The scheduled run: archive, purge, finish deletions, end paused turns, expire files."""
    policy = retention_policy(settings)
    return RetentionService(adapters.stores.retention, policy, adapters.metrics, files=attachments)


def _attachments(adapters: Adapters, catalog: CapabilityCatalog, clock: Clock) -> AttachmentService:
    """(v5) A turn's images and documents, over the bucket, checked against what each
    capability's model takes."""
    return AttachmentService(
        catalog,
        lambda capability: form_of(adapters.provider_for(capability)),
        adapters.attachments,
        adapters.files,
        adapters.file_fetcher,
        adapters.owner_keys,
        clock,
    )


def _after_delete(
    attachments: AttachmentService, erasures: ErasureService | None
) -> Callable[[str, str], None]:
    """What follows a session's deletion: its attachments released, its delayed sweep."""

    def after(workspace_id: str, session_id: str) -> None:
        attachments.release(session_id)
        if erasures is not None:
            erasures.schedule_sweep(workspace_id, session_id)

    return after


def _recording(
    adapters: Adapters, settings: Settings, clock: Clock, monotonic: Clock, sleep: Sleep
) -> tuple[SummaryTrigger, TurnRecorder]:
    """What asks for summaries after turns, and what records turns (or hands them over)."""
    metrics = adapters.metrics
    timing = (settings.summary_coalesce_seconds, settings.summary_delay_seconds)
    trigger = SummaryTrigger(adapters.summary_queue, *timing, metrics, clock)
    recorder = TurnRecorder(
        adapters.stores.turns,
        adapters.stores.sessions,
        adapters.repair_queue,
        metrics,
        after_repair=trigger.after_repair,
        repair_fallback=adapters.repair_fallback,
        monotonic=monotonic,
        sleep=sleep,
    )
    return trigger, recorder


def _turns(
    adapters: Adapters,
    settings: Settings,
    catalog: CapabilityCatalog,
    parts: tuple[TurnRecorder, SummaryTrigger, SessionKeys, ConversationService],
    clock: Clock,
    monotonic: Clock,
    attachments: AttachmentService,
) -> TurnService:
    """The serving path: a capability's model (or agent loop), filter and tools."""
    recorder, trigger, keys, conversations = parts
    policy = turn_policy(settings)
    answerer = Answerer(
        adapters.provider_for,
        adapters.filter_for,
        adapters.stores.runs,
        adapters.metrics,
        toolbox_for=adapters.toolbox_for,
        loop=AgentLoop(tool_timeout_seconds=settings.tool_timeout_seconds, monotonic=monotonic),
        monotonic=monotonic,
    )
    stores = adapters.stores
    states = SessionStates(
        catalog,
        stores.sessions,
        stores.turns,
        policy.activity_granularity_seconds,
        conversations.bind,
    )
    pauses = PausedTurns(
        recorder, adapters.metrics, pending_turn_seconds=policy.pending_turn_seconds, clock=clock
    )
    return TurnService(
        catalog=catalog,
        answerer=answerer,
        endings=TurnEndings(recorder, pauses, trigger),
        keys=keys,
        conversations=conversations,
        pauses=pauses,
        states=states,
        router=TurnRouter(states, conversations),
        policy=policy,
        attachments=attachments,
        clock=clock,
        monotonic=monotonic,
    )


def _erasures(
    adapters: Adapters,
    settings: Settings,
    clock: Clock,
    sleep: Callable[[float], None],
    attachments: AttachmentService,
) -> ErasureService:
    """End users' erasures and deleted sessions' sweeps, which wait out turns in flight."""
    return ErasureService(
        adapters.stores.erasures,
        adapters.erasure_queue,
        adapters.metrics,
        erasure_policy(settings),
        clock,
        sleep,
        turns_in_flight=adapters.turn_limiter.turns_in_flight,
        files=attachments,
    )


def _forks(
    adapters: Adapters,
    catalog: CapabilityCatalog,
    trigger: SummaryTrigger,
    clock: Clock,
    attachments: AttachmentService,
) -> ForkService:
    """Forks (counted against the workspace's turn limit on their route), and the job
    (on the fork copy queue) that copies their older messages in."""
    return ForkService(
        adapters.stores.sessions,
        adapters.stores.forks,
        catalog,
        clock,
        copy_queue=adapters.fork_copy_queue,
        summarize=trigger.after_fork,
        metrics=adapters.metrics,
        admit=adapters.turn_limiter.admit,
        files=attachments,
    )


def _summaries(
    adapters: Adapters, settings: Settings, catalog: CapabilityCatalog, clock: Clock
) -> SummaryService:
    stores = adapters.stores
    return SummaryService(
        sessions=stores.sessions,
        turns=stores.turns,
        summaries=stores.summaries,
        catalog=catalog,
        summarizer_for=adapters.summarizer_for,
        policy=summary_policy(settings),
        metrics=adapters.metrics,
        clock=clock,
    )
