"""The Studio Chat page: ``GET /studio`` (no auth).

A static page (``static/``: HTML, CSS, plain JS; no build step, nothing from a CDN) that
the operator drives with an API token of their own: every call it makes carries that
token, so serving it needs none. The CSS and the script are inlined and allowed by their
hashes, so the Content-Security-Policy needs no ``'unsafe-inline'`` and no other origin
than the API's and the streaming door's.

``STREAM_URL`` (on AWS the streaming Function URL) is injected into the page as a meta
tag; unset, as under ``make run``, the page streams from its own origin.
"""

from __future__ import annotations

import base64
import hashlib
import html
import logging
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

logger = logging.getLogger("convo_memory.studio")
STATIC = Path(__file__).resolve().parent / "static"
STREAM_URL_ENV = "STREAM_URL"


@dataclass(frozen=True)
class StudioPage:
    html: str
    content_security_policy: str


def stream_base(raw: str | None) -> str:
    """The streaming door's base URL without a trailing slash; "" (the page's own origin)
    when unset or not an absolute http(s) URL."""
    value = (raw or "").strip()
    if not value:
        return ""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        logger.warning("%s is not an absolute http(s) URL; using the page's origin", STREAM_URL_ENV)
        return ""
    return value.rstrip("/")


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _sha256(source: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(source.encode()).digest()).decode() + "'"


@lru_cache(maxsize=4)
def render(stream_url: str) -> StudioPage:
    """The page and its CSP for a stream base URL (read from ``static/`` once per container)."""
    css = (STATIC / "studio.css").read_text(encoding="utf-8")
    script = (STATIC / "studio.js").read_text(encoding="utf-8")
    if "</script" in script.lower() or "</style" in css.lower():
        raise ValueError("an inlined asset must not close its own element")
    page = (
        (STATIC / "index.html")
        .read_text(encoding="utf-8")
        .replace("{{STREAM_BASE}}", html.escape(stream_url, quote=True))
        .replace("{{STUDIO_CSS}}", css)
        .replace("{{STUDIO_JS}}", script)
    )
    connect = "'self'" + (f" {_origin(stream_url)}" if stream_url else "")
    policy = "; ".join(
        (
            "default-src 'none'",
            f"script-src {_sha256(script)}",
            f"style-src {_sha256(css)}",
            f"connect-src {connect}",
            # (v5) Attached images are read with the token and shown as blobs.
            "img-src 'self' data: blob:",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        )
    )
    return StudioPage(page, policy)


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    page = render(stream_base(os.environ.get(STREAM_URL_ENV)))
    return {
        "statusCode": 200,
        "headers": {
            "content-type": "text/html; charset=utf-8",
            "content-security-policy": page.content_security_policy,
            "x-content-type-options": "nosniff",
            "referrer-policy": "no-referrer",
            "x-frame-options": "DENY",
            "cache-control": "no-cache",
        },
        "body": page.html,
    }
