"""This Lambda execution environment's container and boto3 clients, each built once
and reused by every invocation it serves (and by every function of the local runtime,
which runs them in one process): ``get_container`` for the handlers,
``get_token_resolver`` for the authorizer, ``aws_clients`` for whoever else needs a
client. What the container holds is ``convo_memory.bootstrap``'s."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from convo_memory.bootstrap import Container, build_adapters, build_services
from convo_memory.config import Settings, SettingsError
from convo_memory.services.auth import TokenResolver

if TYPE_CHECKING:
    from convo_memory.adapters.aws_clients import AwsClients
    from convo_memory.ports import MetricsPort

Clock = Callable[[], float]

logger = logging.getLogger(__name__)


def build_container(
    clients: AwsClients,
    settings: Settings | None = None,
    *,
    clock: Clock = time.time,
    monotonic: Clock = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    metrics: MetricsPort | None = None,
) -> Container:
    """A production container: adapters from ``settings`` (default: this environment's)
    over ``clients``, and the services over them (``convo_memory.bootstrap``)."""
    settings = settings or Settings.from_env()
    adapters, infrastructure = build_adapters(settings, clients, clock=clock, metrics=metrics)
    return build_services(adapters, infrastructure, settings, clock, monotonic, sleep)


_lock = threading.Lock()
_clients: AwsClients | None = None
_container: Container | None = None
# A configuration this execution environment could not load: logged once, then re-raised.
_settings_failure: SettingsError | None = None
_token_resolver: TokenResolver | None = None


def aws_clients() -> AwsClients:
    """The process's boto3 clients: one ``AwsClients``, each client built on first use
    (the container's, the authorizer's fallback, the operator CLI's, the local runtime's)."""
    global _clients
    with _lock:
        if _clients is None:
            from convo_memory.adapters.aws_clients import AwsClients

            _clients = AwsClients()
        return _clients


def get_container() -> Container:
    """The container of this Lambda execution environment, built on first use.

    An invalid configuration raises ``SettingsError`` on every call, and is logged once
    per execution environment, naming each bad variable: the handlers answer the
    contract's ``500 internal`` without logging it again."""
    global _container, _settings_failure
    if _container is not None:
        return _container
    clients = aws_clients()
    with _lock:
        if _container is None:
            if _settings_failure is not None:
                raise _settings_failure
            try:
                _container = build_container(clients)
            except SettingsError as exc:
                _settings_failure = exc
                logger.error(
                    "%s. This function answers 500 internal until the stack is updated "
                    "with a valid value.",
                    exc,
                )
                raise
        return _container


def get_token_resolver() -> TokenResolver:
    """The bearer-token look-up of the HttpApi authorizer.

    It needs only ``TABLE_NAME`` and ``CACHE_TTL_SECONDS``: when another setting is
    invalid it still resolves tokens, so that each route's own function answers the
    contract's ``500 internal`` (and logs the bad variable) instead of every route
    answering API Gateway's bare 500 for a failed authorizer."""
    global _token_resolver
    try:
        return get_container().tokens
    except SettingsError:
        if _token_resolver is None:
            from convo_memory.adapters import production
            from convo_memory.config import token_lookup_settings

            table_name, cache_ttl_seconds = token_lookup_settings()
            stores = production.table_stores(table_name, aws_clients())
            _token_resolver = TokenResolver(stores.tokens, cache_ttl_seconds)
        return _token_resolver


def set_container(container: Container | None) -> None:
    """Replace (or with None, forget) the container: tests and the local runtime."""
    global _container, _settings_failure, _token_resolver
    _container = container
    _settings_failure = None
    _token_resolver = None
