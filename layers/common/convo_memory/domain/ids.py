"""Ids the service issues: ``<prefix>_<20 hex digits>`` (``ses_``, ``run_``, ``cap_``, ``ws_``)."""

from __future__ import annotations

import secrets


def new_id(prefix: str) -> str:
    """A fresh random id of its kind, e.g. ``new_id("ses")`` -> ``ses_3f9a...``."""
    return f"{prefix}_{secrets.token_hex(10)}"
