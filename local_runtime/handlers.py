"""Lambda handlers loaded in-process, like warm containers.

Each function's handler is imported from its file path (``CodeUri`` + ``Handler``)
under a module name of its own (``lambda_<LogicalId>_app``), on first use; later
invocations reuse it, the way a warm Lambda container keeps its module-level state.
Concurrent invocations of one function get environments of their own (``..._app_2``).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

ACCOUNT_ID = "123456789012"

Handler = Callable[[Any, Any], Any]


class UnknownFunctionError(LookupError):
    """No function with this name in the template."""


class HandlerLoadError(RuntimeError):
    """The handler's file or attribute cannot be loaded (Lambda's Runtime.ImportModuleError)."""


@dataclass(frozen=True)
class LambdaFunction:
    """What the runtime needs to know about one ``AWS::Serverless::Function``."""

    name: str
    code_uri: Path
    handler: str
    timeout_seconds: float = 3.0
    memory_mb: int = 128
    # ReservedConcurrentExecutions: this many environments (else the registry's default).
    reserved_concurrency: int | None = None

    @property
    def module_path(self) -> str:
        module, _, _ = self.handler.rpartition(".")
        return module

    @property
    def attribute(self) -> str:
        return self.handler.rpartition(".")[2]

    @property
    def handler_file(self) -> Path:
        return self.code_uri.joinpath(*self.module_path.split(".")).with_suffix(".py")

    @property
    def module_name(self) -> str:
        """A module name of its own: every function has an ``app.py``."""
        return f"lambda_{self.name}_{self.module_path.replace('.', '_')}"


def region() -> str:
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"


def function_arn(name: str) -> str:
    return f"arn:aws:lambda:{region()}:{ACCOUNT_ID}:function:{name}"


@dataclass
class LambdaContext:
    """The attributes of the Lambda Python runtime's context object that handlers use."""

    function_name: str
    memory_limit_in_mb: int
    invoked_function_arn: str
    aws_request_id: str
    timeout_seconds: float = 3.0
    function_version: str = "$LATEST"
    log_group_name: str = ""
    log_stream_name: str = "local"
    identity: Any = None
    client_context: Any = None
    _deadline: float = field(default=0.0, repr=False)

    def __post_init__(self) -> None:
        if not self.log_group_name:
            self.log_group_name = f"/aws/lambda/{self.function_name}"
        if not self._deadline:
            self._deadline = time.monotonic() + self.timeout_seconds

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


class TooManyRequestsError(RuntimeError):
    """Every execution environment of the function stayed busy (Lambda throttles: 429)."""


class _EnvironmentPool:
    """The warm execution environments of one function.

    Lambda runs one invocation at a time per environment and starts another one for a
    concurrent request. Handlers rely on that (Powertools' resolver keeps the current
    event on a module-level ``app``), so each environment here is a module instance of
    its own: loaded on first need (a cold start), reused afterwards (warm).
    """

    def __init__(self, spec: LambdaFunction, max_environments: int, wait_seconds: float) -> None:
        self._spec = spec
        self._max = max_environments
        self._wait = wait_seconds
        self._free: list[Handler] = []
        self._count = 0
        self._instances: set[int] = set()  # module-name suffixes in use
        self._condition = threading.Condition()

    def acquire(self) -> Handler:
        deadline = time.monotonic() + self._wait
        with self._condition:
            while not self._free and self._count >= self._max:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TooManyRequestsError(
                        f"{self._spec.name}: {self._max} concurrent executions all busy"
                    )
                self._condition.wait(remaining)
            if self._free:
                return self._free.pop()
            self._count += 1
            instance = min(set(range(1, self._max + 1)) - self._instances)
            self._instances.add(instance)
        try:
            return _load_handler(self._spec, instance)
        except BaseException:
            with self._condition:
                self._count -= 1
                self._instances.discard(instance)
                self._condition.notify()
            raise

    def release(self, handler: Handler) -> None:
        with self._condition:
            self._free.append(handler)
            self._condition.notify()


class FunctionRegistry:
    """The template's functions by logical id; each runs in lazily started environments,
    as many at once as its reserved concurrency (else ``max_environments``)."""

    def __init__(
        self,
        specs: Iterable[LambdaFunction],
        max_environments: int = 10,
        wait_seconds: float = 30.0,
    ) -> None:
        from local_runtime.isolation import isolate_resolver_state

        # Environments are threads of this process: keep Powertools' request per thread.
        isolate_resolver_state()
        self._specs = {spec.name: spec for spec in specs}
        self._pools = {
            name: _EnvironmentPool(
                spec, spec.reserved_concurrency or max_environments, wait_seconds
            )
            for name, spec in self._specs.items()
        }

    @property
    def specs(self) -> Mapping[str, LambdaFunction]:
        return self._specs

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def spec(self, name: str) -> LambdaFunction:
        try:
            return self._specs[name]
        except KeyError:
            raise UnknownFunctionError(name) from None

    def context(self, name: str, request_id: str | None = None) -> LambdaContext:
        spec = self.spec(name)
        return LambdaContext(
            function_name=spec.name,
            memory_limit_in_mb=spec.memory_mb,
            invoked_function_arn=function_arn(spec.name),
            aws_request_id=request_id or str(uuid.uuid4()),
            timeout_seconds=spec.timeout_seconds,
        )

    def invoke(self, name: str, event: Any, request_id: str | None = None) -> Any:
        """Run the handler with ``event`` in a free environment; its exceptions propagate."""
        self.spec(name)
        pool = self._pools[name]
        handler = pool.acquire()
        try:
            return handler(event, self.context(name, request_id))
        finally:
            pool.release(handler)


def _load_handler(spec: LambdaFunction, instance: int = 1) -> Handler:
    path = spec.handler_file
    module_name = spec.module_name if instance == 1 else f"{spec.module_name}_{instance}"
    if not path.is_file():
        raise HandlerLoadError(f"Unable to import module '{spec.module_path}': no file {path}")
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    if module_spec is None or module_spec.loader is None:
        raise HandlerLoadError(f"Unable to import module '{spec.module_path}' from {path}")
    module: ModuleType = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module
    try:
        module_spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    handler = getattr(module, spec.attribute, None)
    if not callable(handler):
        del sys.modules[module_name]
        raise HandlerLoadError(
            f"Handler '{spec.attribute}' missing on module '{spec.module_path}' ({path})"
        )
    return handler
