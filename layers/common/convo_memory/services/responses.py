"""Stored responses (v4): ``GET`` and ``DELETE /v1/responses/{id}`` and what a response
was sent (``.../input_items``). A response is its turn: found by its id with one read,
deleted by marking its turn (which stays in its conversation)."""

from __future__ import annotations

from convo_memory.domain.errors import ResponseNotFound
from convo_memory.domain.prompt_record import SentPrompt
from convo_memory.domain.responses import ResponseRef, StoredResponse
from convo_memory.ports import ResponseStore
from convo_memory.services.sessions import SessionService


class ResponseService:
    def __init__(self, responses: ResponseStore, sessions: SessionService) -> None:
        self._responses = responses
        self._sessions = sessions

    def get(self, workspace_id: str, response_id: str) -> StoredResponse:
        """The stored response ``response_id`` names: 404 ``response_not_found`` for one
        that is unknown, deleted, ``store: false`` or another workspace's, and for a
        pause that has ended (its turn is recorded, as the response that continued it).
        (v5) A pause that still waits is found, with its calls."""
        ref = ResponseRef.parse(response_id)
        # Scoped to the workspace: another's is known from the first read, and read no more.
        found = self._responses.find_response(ref, workspace_id) if ref is not None else None
        if found is None or found.deleted or found.pause:
            raise ResponseNotFound(f"response {response_id!r} not found")
        return found

    def delete(self, workspace_id: str, response_id: str) -> None:
        """Delete the response; its turn stays in its conversation."""
        found = self.recorded(workspace_id, response_id)
        if not self._responses.mark_deleted(found.ref, found.user_seq):
            raise ResponseNotFound(f"response {response_id!r} not found")

    def sent(self, workspace_id: str, response_id: str) -> tuple[StoredResponse, SentPrompt]:
        """The response and what its model was sent (``GET .../messages/{seq}/prompt``)."""
        found = self.recorded(workspace_id, response_id)
        prompt = self._sessions.sent_prompt(workspace_id, found.session.id, found.user_seq)
        return found, prompt

    def recorded(self, workspace_id: str, response_id: str) -> StoredResponse:
        """A stored response whose turn is recorded (a pause that waits is 404 here)."""
        found = self.get(workspace_id, response_id)
        if found.waiting:
            raise ResponseNotFound(f"response {response_id!r} is waiting for tool results")
        return found
