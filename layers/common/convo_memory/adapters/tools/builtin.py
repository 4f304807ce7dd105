"""The built-in demo tools, ``lookup_order`` and ``search_kb``: deterministic, offline.

They receive the session's principal like a webhook does (it shows in the run trace);
being demos, their answers do not depend on it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

from convo_memory.domain.tools import ToolDefinition

_ORDER_ID = re.compile(r"^\d{3,12}$")

_ORDER_STATES: tuple[tuple[str, int | None], ...] = (
    # (status, base ETA in days; None once delivered)
    ("processing", 3),
    ("shipped", 1),
    ("out for delivery", 0),
    ("delivered", None),
)

_KB_ARTICLES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("Returns and refunds", "Items can be returned within 30 days.", ("return", "refund")),
    ("Shipping times", "Standard shipping takes 3-5 business days.", ("ship", "deliver")),
    ("Account access", "Reset your password from the sign-in page.", ("password", "login")),
    ("Billing", "Invoices are emailed on the first day of each month.", ("bill", "invoice")),
)

BUILTIN_DEFINITIONS: dict[str, ToolDefinition] = {
    "lookup_order": ToolDefinition(
        name="lookup_order",
        description="Looks up an order's status and delivery ETA by its order number.",
        input_schema={
            "type": "object",
            "properties": {
                "orderId": {"type": "string", "description": "The order number (3-12 digits)."}
            },
            "required": ["orderId"],
        },
    ),
    "search_kb": ToolDefinition(
        name="search_kb",
        description="Searches the help-centre articles and returns the best match.",
        input_schema={
            "type": "object",
            "properties": {"query": {"type": "string", "description": "What to search for."}},
            "required": ["query"],
        },
    ),
}


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def lookup_order(order_id: str) -> tuple[dict[str, Any], str]:
    """Deterministic order status: the status and ETA are derived from the number."""
    number = int(order_id)
    status, base_eta = _ORDER_STATES[number % len(_ORDER_STATES)]
    eta_days = None if base_eta is None else base_eta + number % 3
    result: dict[str, Any] = {"orderId": order_id, "status": status, "etaDays": eta_days}
    return result, order_fact(result)


def order_fact(result: Mapping[str, Any]) -> str:
    """``lookup_order``'s result as a sentence."""
    order_id, status, eta_days = result["orderId"], result["status"], result["etaDays"]
    if eta_days is None:
        return f"order {order_id} is {status}"
    if eta_days == 0:
        return f"order {order_id} is {status}, arriving today"
    return f"order {order_id} is {status}, arriving in {_plural(eta_days, 'day')}"


def search_kb(query: str) -> tuple[dict[str, Any], str]:
    """Deterministic knowledge-base search: a keyword match, else a hash of the query."""
    lowered = query.casefold()
    index = next(
        (i for i, (_, _, keys) in enumerate(_KB_ARTICLES) if any(k in lowered for k in keys)),
        None,
    )
    if index is None:
        digest = hashlib.sha256(query.encode("utf-8")).digest()
        index = digest[0] % len(_KB_ARTICLES)
    title, answer, _ = _KB_ARTICLES[index]
    result = {
        "query": query[:200],
        "articleId": f"KB-{1001 + index}",
        "title": title,
        "answer": answer,
    }
    return result, kb_fact(result)


def kb_fact(result: Mapping[str, Any]) -> str:
    """``search_kb``'s result as a sentence."""
    return f'the article "{result["title"]}" says: {result["answer"]}'


def run_builtin(
    name: str, tool_input: Mapping[str, Any], principal: Mapping[str, str] | None
) -> dict[str, Any]:
    """Run built-in tool ``name``; raises ``ValueError`` on input it cannot use."""
    del principal  # received like a webhook's, unused by the demo data
    if name == "lookup_order":
        order_id = str(tool_input.get("orderId", "")).strip()
        if not _ORDER_ID.match(order_id):
            raise ValueError("orderId must be an order number of 3 to 12 digits")
        return lookup_order(order_id)[0]
    if name == "search_kb":
        query = tool_input.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ValueError("query must be a non-empty string")
        return search_kb(query.strip())[0]
    raise ValueError(f"no built-in tool {name!r}")
