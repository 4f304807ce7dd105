"""Fetching an attachment's ``https`` URL once, under the rules webhook tools follow
(``adapters.tools.url_policy``): public addresses only unless the operator allows the
host, the connection made to the address that was checked, no redirect followed, the
body read up to the limit and the whole fetch within its timeout."""

from __future__ import annotations

import http.client
import ssl

from convo_memory.adapters.deadline_http import Deadline, ResponseBodyTooLarge, send
from convo_memory.adapters.tools.url_policy import ToolUrlRefused, UrlPolicy
from convo_memory.domain.errors import PayloadTooLarge, ValidationFailed

FETCH_SECONDS = 10.0
USER_AGENT = "convo-memory-attachments/1"


class UrlFetcher:
    """Implements ``ports.FileFetcher`` over the deployment's URL policy."""

    def __init__(
        self,
        policy: UrlPolicy,
        timeout: float = FETCH_SECONDS,
        tls_context: ssl.SSLContext | None = None,
    ) -> None:
        self._policy = policy
        self._timeout = timeout
        self._tls = tls_context

    def fetch(self, url: str, max_bytes: int) -> tuple[bytes, str | None]:
        """The bytes at ``url`` and their declared Content-Type."""
        deadline = Deadline(self._timeout)
        try:
            target = self._policy.target(url, deadline)
            tls = (self._tls or ssl.create_default_context()) if target.scheme == "https" else None
            headers = {"Accept": "*/*", "User-Agent": USER_AGENT}
            with send(
                "GET",
                target.host,
                target.port,
                target.path,
                b"",
                headers,
                deadline,
                addresses=[target.address],
                tls=tls,
            ) as exchange:
                if not 200 <= exchange.status < 300:
                    raise ValidationFailed(f"the URL answered HTTP {exchange.status}")
                content_type = exchange.response.getheader("Content-Type")
                return exchange.read_up_to(max_bytes), content_type
        except ToolUrlRefused as refused:
            raise ValidationFailed(f"the URL may not be fetched: {refused}") from None
        except ResponseBodyTooLarge:
            raise PayloadTooLarge(f"the URL's content is larger than {max_bytes:,} bytes") from None
        except TimeoutError:
            raise ValidationFailed(f"the URL did not answer within {self._timeout:.0f} s") from None
        except (OSError, http.client.HTTPException) as exc:
            raise ValidationFailed(f"the URL could not be fetched ({type(exc).__name__})") from None
