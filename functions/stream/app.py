"""The streaming door's entry point (``POST /v1/capabilities/{id}/predict/stream``).

On AWS the Lambda Web Adapter runs ``run.sh``, which starts this module as a small HTTP
server on ``$PORT``; the local runtime loads ``StreamDoor`` from it. The door itself
(input gate, auth, streaming, error mapping) lives in the common layer:
``convo_memory.doors.stream``.
"""

from __future__ import annotations

import os

from convo_memory.doors.stream import StreamDoor, StreamResponse, run_server

__all__ = ["StreamDoor", "StreamResponse", "run_server"]

if __name__ == "__main__":
    run_server(int(os.environ.get("PORT", "8080")))
