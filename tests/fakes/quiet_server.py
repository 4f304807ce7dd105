"""The threading HTTP server the fake servers share: quiet about clients that hang up,
quick to stop."""

from __future__ import annotations

import sys
from http.server import ThreadingHTTPServer
from typing import Any


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def serve_forever(self, poll_interval: float = 0.05) -> None:
        # shutdown() waits for the loop's next poll: 0.5 s by default, on every stop.
        super().serve_forever(poll_interval)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up (a timeout test) is expected, not an error.
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)
