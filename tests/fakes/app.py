"""The application wired by the real composition root (``bootstrap.build_container``)
with a fake for every port: what the unit tier tests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from convo_memory.bootstrap import Container, build_container
from convo_memory.config import Settings
from convo_memory.domain.models import Capability, CapabilityCreate, SessionCreate
from convo_memory.ports import ContentFilter, Summarizer
from tests.fakes.adapters import FakeClock, FakeContentFilter, FakeMetrics, FakeProvider, FakeQueue
from tests.fakes.stores import FakeDatabase

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
    metrics: FakeMetrics
    clock: FakeClock

    def capability(self, cap_id: str, kind: str = "generative", ws: str = WS, **extra: Any) -> str:
        body = CapabilityCreate.model_validate({"name": cap_id, "kind": kind, **extra})
        self.container.catalog.create(ws, body, cap_id=cap_id)
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
        return self.container.sessions.create(ws, body).id

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
    **settings: Any,
) -> FakeApp:
    """The whole application over fakes. ``settings`` override deployment settings
    (snake_case ``Settings`` fields)."""
    db = FakeDatabase()
    clock = FakeClock()
    provider = provider or FakeProvider("the answer")
    content_filter = FakeContentFilter(blocked)
    summary_queue, repair_queue, metrics = FakeQueue(), FakeQueue(), FakeMetrics()

    def filter_for(capability: Capability) -> ContentFilter | None:
        # As the adapter cache does: a filter only for capabilities that configure one.
        return content_filter if capability.content_filter is not None else None

    def summarizer_for(capability: Capability) -> Summarizer:
        if summarizer is None:
            raise AssertionError("this test's app has no summarizer")
        return summarizer

    container = build_container(
        fake_settings(**settings),
        stores=db.stores,
        summary_queue=summary_queue if with_summary_queue else None,
        repair_queue=repair_queue if with_repair_queue else None,
        metrics=metrics,
        provider_for=lambda capability: provider,
        filter_for=filter_for,
        summarizer_for=summarizer_for,
        clock=clock,
    )
    return FakeApp(
        db, container, provider, content_filter, summary_queue, repair_queue, metrics, clock
    )
