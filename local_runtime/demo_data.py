"""What the sample events in ``events/`` name, seeded so that they invoke as they are.

The events carry ``workspaceId: ws-dev`` in their authorizer context and the demo ids
below in their paths and bodies; ``make run`` gives its dev workspace that id and seeds
these records in it (every start; already existing records are left as they are).
"""

from __future__ import annotations

import contextlib
from typing import Any

from convo_memory.domain.erasures import Erasure
from convo_memory.domain.errors import StoreRejected
from convo_memory.domain.models import Session, iso, utc_now

DEV_WORKSPACE_ID = "ws-dev"
# The conversational demo capability the events predict against (seed_capabilities).
DEMO_CAPABILITY_ID = "cap-agent"
DEMO_SESSION_ID = "ses-0000000000000000000000"
# A second one, for events/delete_session.json: the others never find theirs deleted.
DEMO_SESSION_TO_DELETE_ID = "ses-1111111111111111111111"
DEMO_RUN_ID = "run-0000000000000000000000"
# A finished erasure (events/get_erasure.json, events/erasure_sqs.json) of an end user
# who never had a session, and whom events/request_erasure.json erases again.
DEMO_ERASURE_ID = "era-0000000000000000000000"
DEMO_ERASED_REF = "customer-0000"
# The end user and principal of events/create_session.json.
DEMO_EXTERNAL_REF = "customer-4471"
DEMO_PRINCIPAL = {"tenant_id": "store-a", "user_id": "u_913"}
DEMO_INPUT = "Where is order 12345?"
DEMO_OUTPUT = (
    'You said: "Where is order 12345?". I used lookup_order: order 12345 is shipped, '
    "arriving in 1 day. I remember 0 earlier messages."
)


def workspace_id_for(name: str) -> str:
    """The fixed id of a seeded workspace: ``ws-dev`` for the dev workspace."""
    return f"ws-{name}"


def seed_demo_records(stores: Any, workspace_id: str) -> None:
    """The demo sessions, the demo agent run trace and the demo erasure, in
    ``workspace_id``."""
    now = iso(utc_now())
    for session_id in (DEMO_SESSION_ID, DEMO_SESSION_TO_DELETE_ID):
        if stores.sessions.get_session(session_id) is not None:
            continue
        session = Session(
            id=session_id,
            workspace_id=workspace_id,
            capability_id=DEMO_CAPABILITY_ID,
            external_ref=DEMO_EXTERNAL_REF,
            principal=DEMO_PRINCIPAL,
            metadata={"channel": "web"},
            status="active",
            created_at=now,
            last_active_at=now,
            message_count=0,
        )
        # Rejected: deleted by events/delete_session.json, in a store that outlives a run.
        with contextlib.suppress(StoreRejected):
            stores.sessions.create_session(session)
    if stores.runs.get_run(workspace_id, DEMO_RUN_ID) is None:
        stores.runs.put_run(demo_run(workspace_id, now))
    if stores.erasures.get_erasure(workspace_id, DEMO_ERASURE_ID) is None:
        stores.erasures.put_erasure(
            Erasure(
                id=DEMO_ERASURE_ID,
                workspace_id=workspace_id,
                external_ref=DEMO_ERASED_REF,
                traces="keep",
                status="done",
                created_at=now,
                finished_at=now,
            )
        )


def demo_run(workspace_id: str, at: str) -> dict[str, Any]:
    """The trace of the demo agent answering events/predict.json (one tool call)."""
    return {
        "runId": DEMO_RUN_ID,
        "workspaceId": workspace_id,
        "capabilityId": DEMO_CAPABILITY_ID,
        "sessionId": None,
        "principal": None,
        "input": DEMO_INPUT,
        "output": DEMO_OUTPUT,
        "status": "completed",
        "stopReason": "answered",
        "modelCalls": 2,
        "maxToolSteps": 5,
        "steps": [
            {
                "type": "tool_call",
                "tool": "lookup_order",
                "input": {"orderId": "12345"},
                "principal": None,
                "output": '{"etaDays": 1, "orderId": "12345", "status": "shipped"}',
                "status": "ok",
                "startedAt": at,
                "durationMs": 0.0,
            }
        ],
        "startedAt": at,
        "finishedAt": at,
    }
