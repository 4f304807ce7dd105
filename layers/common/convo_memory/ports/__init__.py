"""Ports: every interface the services need from the outside world, by what they are
for: ``models`` (providers, tools, filters, summarizers), ``operations`` (queues,
invocations, metrics, turn limits) and ``stores`` (storage). The values they carry live
in ``convo_memory.domain``; every port is importable from here.

Adapters implement them (``convo_memory.adapters``); the unit tests use in-memory fakes
(``tests/fakes``), and one store test suite runs against both so they cannot drift.
Storage ports raise ``StoreUnavailable`` for capacity and availability errors and
``StoreRejected`` when a request can never succeed; nothing else escapes them.
"""

from __future__ import annotations

from convo_memory.ports.files import (
    AttachmentStore,
    FileFetcher,
    FileStore,
    OwnerKeys,
    UploadedFile,
)
from convo_memory.ports.models import (
    ContentFilter,
    ModelProvider,
    SecretSealer,
    Summarizer,
    TextSink,
    Toolbox,
    ToolCallingModel,
    ToolEventSink,
    ToolUrlPolicy,
)
from convo_memory.ports.operations import (
    AsyncInvokePort,
    MetricsPort,
    NoTurnLimit,
    NullMetrics,
    QueuePort,
    TurnLimiter,
    TurnsInFlight,
)
from convo_memory.ports.stores import (
    CapabilityStore,
    CopyOutcome,
    ErasureStore,
    ForkStore,
    RecallStore,
    ResponseStore,
    RetentionStore,
    RunStore,
    SessionStore,
    Stores,
    SummaryStore,
    TokenStore,
    TurnStore,
)
