"""Two of moto's costs that tell a test nothing, taken out while ``fake_aws`` is active
(the in-process backend only: the local runtime's moto server is untouched).

- A DynamoDB Query sorts every item of the table before keeping its partition's (or,
  on an index, the items with its key) and sorting those again: a module's tests share
  one table, so each query cost more the more tests had run. Here a query of the table
  reads its partition only, and a query of an index reads the items unsorted; what it
  returns is unchanged, since moto sorts and pages the kept items itself afterwards
  (tests/integration/test_moto_speedups.py compares both ways).
- A KMS key gets an RSA key pair of its own, symmetric keys included, for Sign and
  GetPublicKey, which nothing here calls (the stack's key encrypts): a third of what
  building the stack costs. One pair per key spec serves every key; encryption keeps
  each key's own material.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

import moto.kms.models
from moto.dynamodb.models.table import Item, Table

_REAL_QUERY = Table.query
_REAL_ALL_ITEMS = Table.all_items
_REAL_GENERATE_PRIVATE_KEY = moto.kms.models.generate_private_key
_QUERY = inspect.signature(_REAL_QUERY)
# The query under way in this thread: (table, hash key, index name).
_querying = threading.local()
_lock = threading.Lock()
_active = 0


@contextmanager
def moto_speedups() -> Iterator[None]:
    """The two shortcuts while inside (nested uses keep them until the outermost ends)."""
    global _active
    with _lock:
        _active += 1
        if _active == 1:
            _install()
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0:
                _uninstall()


def _install() -> None:
    moto.kms.models.generate_private_key = _key_pair
    if {"hash_key", "index_name"} <= _QUERY.parameters.keys():  # moto's, as read here
        Table.query = _query  # type: ignore[method-assign]
        Table.all_items = _all_items  # type: ignore[method-assign]


def _uninstall() -> None:
    moto.kms.models.generate_private_key = _REAL_GENERATE_PRIVATE_KEY
    Table.query = _REAL_QUERY  # type: ignore[method-assign]
    Table.all_items = _REAL_ALL_ITEMS  # type: ignore[method-assign]


def _query(self: Table, *args: Any, **kwargs: Any) -> Any:
    bound = _QUERY.bind(self, *args, **kwargs)
    previous = getattr(_querying, "query", None)
    _querying.query = (self, bound.arguments["hash_key"], bound.arguments.get("index_name"))
    try:
        return _REAL_QUERY(self, *args, **kwargs)
    finally:
        _querying.query = previous


def _all_items(self: Table) -> list[Item]:
    query = getattr(_querying, "query", None)
    if query is None or query[0] is not self:
        return _REAL_ALL_ITEMS(self)
    _, hash_key, index_name = query
    if index_name:
        partitions = list(self.items.values())
    else:
        found = self.items.get(hash_key)
        partitions = [] if found is None else [found]
    if self.range_key_attr:
        return [item for partition in partitions for item in partition.values()]
    return list(partitions)


@cache
def _key_pair(key_spec: str) -> Any:
    return _REAL_GENERATE_PRIVATE_KEY(key_spec)
