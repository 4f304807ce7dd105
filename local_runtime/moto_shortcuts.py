"""Costs of moto's that tell nobody anything, taken out while installed: by the local
runtime for its whole life, by the tests' in-process backend (tests/support/fake_aws.py)
while a test uses it. Nothing moto answers changes (tests/integration/test_moto_shortcuts.py
compares every page of a query both ways, and keys sharing a key pair still encrypt).

- A DynamoDB Query sorts every item of the table before keeping its partition's (or,
  on an index, the items with its key) and sorting those again: each query cost more
  the more the table held, so a long ``make run`` (or a test module sharing one table)
  grew slower with every conversation. Here a query of the table reads its partition
  only, and a query of an index reads the items unsorted; moto sorts and pages the kept
  items itself afterwards, as before.
- A KMS key gets an RSA key pair of its own, symmetric keys included, for Sign and
  GetPublicKey, which nothing here calls (the stack's key encrypts): a third of what
  building the stack costs. One pair per key spec serves every key; encryption keeps
  each key's own material.
- Every request looks up the names of its response class's methods (``inspect``, each
  time), and moto's server lists its own package directory to route each request: both
  are the same for the life of the process, so each is read once.
- moto writes a DynamoDB item operation's answer by walking its output shape member by
  member (about an eighth of what a test stack or a local runtime spends). Its result is
  DynamoDB JSON already, but for binary values: here it is written as JSON directly,
  binary values in base64 as the shape walk writes them. Any other operation, or a
  result holding anything else, takes moto's own way.
"""

from __future__ import annotations

import base64
import inspect
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

import moto.backends
import moto.core.responses
import moto.kms.models
from moto import settings as moto_settings
from moto.core.serialize import JSONSerializer
from moto.dynamodb.models.table import Item, Table
from moto.dynamodb.responses import DynamoResult

_REAL_QUERY = Table.query
_REAL_ALL_ITEMS = Table.all_items
_REAL_GENERATE_PRIVATE_KEY = moto.kms.models.generate_private_key
_REAL_METHOD_NAMES = moto.core.responses.method_names_from_class
_REAL_MODULES = moto.backends.list_of_moto_modules
_REAL_DYNAMO_RESULT = DynamoResult.execute_result
# The operations whose answers are items, counts, keys and consumed capacity only.
ITEM_OPERATIONS = frozenset(
    {
        "GetItem",
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "Query",
        "Scan",
        "BatchGetItem",
        "BatchWriteItem",
        "TransactGetItems",
        "TransactWriteItems",
    }
)
_QUERY = inspect.signature(_REAL_QUERY)
# The query under way in this thread: (table, hash key, index name).
_querying = threading.local()
_lock = threading.Lock()
_active = 0


def install() -> None:
    """The shortcuts on until as many ``uninstall`` calls (nested users keep them)."""
    global _active
    with _lock:
        _active += 1
        if _active == 1:
            _install()


def uninstall() -> None:
    global _active
    with _lock:
        _active -= 1
        if _active == 0:
            _uninstall()


@contextmanager
def moto_shortcuts() -> Iterator[None]:
    """The shortcuts while inside."""
    install()
    try:
        yield
    finally:
        uninstall()


def _install() -> None:
    moto.kms.models.generate_private_key = _key_pair
    moto.core.responses.method_names_from_class = _method_names  # type: ignore[assignment]
    moto.backends.list_of_moto_modules = _moto_modules
    DynamoResult.execute_result = _dynamo_result  # type: ignore[method-assign,assignment]
    if {"hash_key", "index_name"} <= _QUERY.parameters.keys():  # moto's, as read here
        Table.query = _query  # type: ignore[method-assign]
        Table.all_items = _all_items  # type: ignore[method-assign]


def _uninstall() -> None:
    moto.kms.models.generate_private_key = _REAL_GENERATE_PRIVATE_KEY
    moto.core.responses.method_names_from_class = _REAL_METHOD_NAMES
    moto.backends.list_of_moto_modules = _REAL_MODULES
    DynamoResult.execute_result = _REAL_DYNAMO_RESULT  # type: ignore[method-assign]
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


@cache
def _method_names(clazz: object) -> frozenset[str]:
    # moto only asks ``action in names``: a set answers that, read once per class.
    return frozenset(_REAL_METHOD_NAMES(clazz))


@cache
def _moto_modules() -> tuple[str, ...]:
    return tuple(_REAL_MODULES())


class _NotPlain(Exception):
    """A value the direct JSON does not write as the shape walk would."""


def _blob(value: Any) -> str:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    raise _NotPlain(type(value).__name__)


def _dynamo_result(self: DynamoResult, context: Any) -> Any:
    answer: Any = self.result
    plain = (
        context.operation_model.name in ITEM_OPERATIONS
        and context.serializer_class is JSONSerializer
        and not moto_settings.PRETTIFY_RESPONSES
        and not getattr(context.response, "RESPONSE_KEY_PATH_TO_TRANSFORMER", None)
        and isinstance(answer, dict)
    )
    if plain:
        members = context.operation_model.output_shape.members
        result = {k: v for k, v in answer.items() if k in members}  # what the walk keeps
        try:
            body = json.dumps(result, default=_blob)
        except (_NotPlain, TypeError, ValueError):
            pass
        else:
            if "null" not in body:  # the shape walk leaves out an absent member
                return 200, {"Content-Type": "application/x-amz-json-1.0"}, body
    return _REAL_DYNAMO_RESULT(self, context)
