"""The application wired by the real composition root (``bootstrap.build_services``)
over fake ``Adapters``: a fake for every port, what the unit tier tests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from convo_memory.adapters.aws_clients import AwsClients
from convo_memory.adapters.cursors import CursorCodec
from convo_memory.adapters.registry import AdapterRegistry
from convo_memory.adapters.tools.url_policy import UrlPolicy
from convo_memory.api import CapabilityCreate, SessionCreate
from convo_memory.bootstrap import Adapters, Container, Infrastructure, build_services
from convo_memory.config import Settings
from convo_memory.domain.allowed_hosts import parse_allowed_hosts
from convo_memory.domain.models import Capability
from convo_memory.ports import ContentFilter, NoTurnLimit, Summarizer, Toolbox
from tests.fakes.adapters import (
    FakeClock,
    FakeContentFilter,
    FakeMetrics,
    FakeProvider,
    FakeQueue,
    FakeResolver,
    FakeSealer,
    FakeToolbox,
)
from tests.fakes.attachments import (
    FakeAttachmentStore,
    FakeFetcher,
    FakeFileStore,
    FakeOwnerKeys,
)
from tests.fakes.stores import FakeDatabase

# Public addresses the fake DNS gives webhook hosts (documentation ranges are not public).
PUBLIC_TOOL_HOSTS = {"tools.example.com": ["93.184.216.34"], "api.example.net": ["8.8.8.8"]}

WS = "ws_alpha"


def fake_settings(**overrides: Any) -> Settings:
    """Deployment settings for the unit tier (table names are never used by fakes)."""
    values: dict[str, Any] = {"table_name": "fake-table", "runs_table_name": "fake-runs"}
    values.update(overrides)
    return Settings.model_validate(values)


@dataclass
class FakeApp:
    db: FakeDatabase
    container: Container
    provider: FakeProvider
    content_filter: FakeContentFilter
    summary_queue: FakeQueue
    repair_queue: FakeQueue
    erasure_queue: FakeQueue
    metrics: FakeMetrics
    clock: FakeClock
    toolbox: FakeToolbox
    sealer: FakeSealer
    resolver: FakeResolver
    fork_copy_queue: FakeQueue
    # (v5) Attachments' bytes and references, and the URLs an attachment may name.
    attachments: FakeAttachmentStore
    fetcher: FakeFetcher

    def capability(self, cap_id: str, kind: str = "generative", ws: str = WS, **extra: Any) -> str:
        body = CapabilityCreate.model_validate({"name": cap_id, "kind": kind, **extra})
        self.container.catalog.create(ws, body.definition(), cap_id=cap_id)
        return cap_id

    def session(
        self,
        cap_id: str,
        ws: str = WS,
        principal: dict[str, str] | None = None,
        external_ref: str = "end-user-1",
        metadata: dict[str, Any] | None = None,
    ) -> str:
        body = SessionCreate(
            capability_id=cap_id,
            external_ref=external_ref,
            principal=principal,
            metadata=metadata or {},
        )
        return self.container.sessions.create(ws, body.new_session()).id

    def settle(self) -> None:
        """Forget the set-up's store calls so a test counts only its own."""
        self.db.calls.clear()


def fake_app(
    *,
    provider: FakeProvider | None = None,
    blocked: tuple[str, ...] = ("forbidden",),
    summarizer: Summarizer | None = None,
    with_repair_queue: bool = True,
    with_summary_queue: bool = True,
    toolbox_for: Callable[[Capability], Toolbox] | None = None,
    monotonic: Callable[[], float] | None = None,
    **settings: Any,
) -> FakeApp:
    """The whole application over fakes. ``settings`` override deployment settings
    (snake_case ``Settings`` fields). Agent tools answer from a ``FakeToolbox`` (unless
    ``toolbox_for`` builds real ones); webhook hosts resolve through a ``FakeResolver``."""
    db = FakeDatabase()
    clock = FakeClock()
    provider = provider or FakeProvider("the answer")
    content_filter = FakeContentFilter(blocked)
    summary_queue, repair_queue, metrics = FakeQueue(), FakeQueue(), FakeMetrics()
    erasure_queue, fork_copy_queue = FakeQueue(), FakeQueue()
    toolbox, sealer, resolver = (
        FakeToolbox(provider=provider),
        FakeSealer(),
        FakeResolver(PUBLIC_TOOL_HOSTS),
    )
    wall = fake_settings(**settings)

    def filter_for(capability: Capability) -> ContentFilter | None:
        # As the adapter cache does: a filter only for capabilities that configure one.
        return content_filter if capability.content_filter is not None else None

    def summarizer_for(capability: Capability) -> Summarizer:
        if summarizer is None:
            raise AssertionError("this test's app has no summarizer")
        return summarizer

    tool_urls = UrlPolicy(parse_allowed_hosts(wall.tool_allowed_hosts), resolve=resolver)
    attachments, fetcher = FakeAttachmentStore(), FakeFetcher()
    adapters = Adapters(
        stores=db.stores,
        metrics=metrics,
        summary_queue=summary_queue if with_summary_queue else None,
        repair_queue=repair_queue if with_repair_queue else None,
        erasure_queue=erasure_queue,
        repair_fallback=None,
        turn_limiter=NoTurnLimit(),
        provider_for=lambda capability: provider,
        filter_for=filter_for,
        summarizer_for=summarizer_for,
        toolbox_for=toolbox_for or (lambda capability: toolbox),
        tool_urls=tool_urls,
        sealer=sealer,
        fork_copy_queue=fork_copy_queue,
        attachments=attachments,
        files=FakeFileStore(attachments),
        file_fetcher=fetcher,
        owner_keys=FakeOwnerKeys(),
    )
    infrastructure = Infrastructure(
        cursors=CursorCodec(lambda: b"unit-tier-cursor-key-0123456789abcdef"),
        idempotency=None,
        registry=AdapterRegistry(),
        clients=AwsClients(),  # never asked: every port above is a fake
    )
    extra: dict[str, Any] = {} if monotonic is None else {"monotonic": monotonic}
    # A failed write's backoff: no waiting in unit tests.
    container = build_services(
        adapters, infrastructure, wall, clock, sleep=lambda seconds: None, **extra
    )
    return FakeApp(
        db,
        container,
        provider,
        content_filter,
        summary_queue,
        repair_queue,
        erasure_queue,
        metrics,
        clock,
        toolbox,
        sealer,
        resolver,
        fork_copy_queue,
        attachments,
        fetcher,
    )
