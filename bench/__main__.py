"""``python -m bench [--quick] [--json]``: see bench/__init__.py for the figures."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO


@dataclass(frozen=True)
class Plan:
    turns_per_door: int
    stream_runs: int
    import_runs: int
    cold_runs: int
    summary_blocks: int
    summary_turns_per_block: int
    filter_runs: int = 5
    # One conversation, measured turn by turn: the summary's cost next to the turns'.
    summary_cost_turns: int = 100
    authorizer_runs: int = 100
    # Turns of the outage soak (figure 12), at each fault rate.
    outage_turns: int = 400
    # Turns each of predict and the OpenAI-compatible doors, timed (figures 14 and 20).
    door_turns: int = 200
    # The conversation of figure 15 (prompts a provider can cache), at each alignment.
    prompt_cache_turns: int = 200


FULL = Plan(5, 7, 7, 3, 4, 15, 7, 200)
QUICK = Plan(2, 3, 3, 1, 2, 10, 3, 50, outage_turns=100, door_turns=40, prompt_cache_turns=60)


DEFAULT_LOG = Path(".bench") / "bench.log"


class Progress:
    """Where a run says what it is measuring: one line on a terminal, rewritten in place
    (nothing on a pipe or a file, which get the report only); the handlers' own output
    goes to the log file meanwhile (``logs_to``)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.live = stream.isatty()
        self.last = ""

    def __call__(self, message: str) -> None:
        self.last = message
        if self.live:
            self.stream.write(f"\r\033[K[bench] {message[:150]}")
            self.stream.flush()

    def done(self, text: str) -> None:
        if self.live:
            self.stream.write("\r\033[K")
        self.stream.write(f"[bench] {text}\n")
        self.stream.flush()


@contextmanager
def logs_to(path: Path) -> Iterator[TextIO]:
    """While measuring, whatever the handlers print (Powertools logs and metrics, on
    stdout; warnings and tracebacks, on stderr) goes to ``path``, so that the terminal
    shows the progress line and stdout carries only the report (valid JSON with
    --json). Yields the terminal's stderr, for the progress line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved_out, saved_err = os.dup(1), os.dup(2)
    terminal = os.fdopen(os.dup(2), "w", encoding="utf-8", errors="replace")
    with open(path, "w", encoding="utf-8") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield terminal
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved_out, 1)
            os.dup2(saved_err, 2)
            os.close(saved_out)
            os.close(saved_err)
            terminal.close()


def _attempt(
    results: dict[str, Any], name: str, step: Callable[[], Any], errors: dict[str, str]
) -> None:
    try:
        results[name] = step()
    except Exception as exc:
        traceback.print_exc()
        errors[name] = f"{type(exc).__name__}: {exc}"


def run(plan: Plan, quick: bool, progress: Callable[[str], None]) -> dict[str, Any]:
    from bench.agents import agent_turn_figure
    from bench.app_tools import app_tools_figure
    from bench.attachments_cost import attachments_figure
    from bench.authorizer_cost import authorizer_figures
    from bench.chat_door import chat_door_figure
    from bench.cold import built_import_times, first_invocation, import_times
    from bench.content_filter import filter_figures
    from bench.costs import cost_figure
    from bench.erasure_cost import erasure_figure
    from bench.forks_cost import forks_figure
    from bench.langchain_history import langchain_history_figure
    from bench.limiter_scale import FULL_PLAN, QUICK_PLAN, limiter_scale_figure
    from bench.prompt_cache import prompt_cache_figure
    from bench.recall_cost import recall_cost_figure
    from bench.resilience import outage_figure, rate_limit_figure
    from bench.responses_door import responses_door_figure
    from bench.serving import serving_figures, summarizer_isolation
    from bench.slow_tenants import slow_tenant_figure
    from bench.summary_cost import summary_cost

    began = time.monotonic()
    results: dict[str, Any] = {}
    errors: dict[str, str] = {}
    progress("import times (fresh interpreters)")
    _attempt(results, "importTimes", lambda: import_times(plan.import_runs, progress), errors)
    progress("import times from the built artifacts (make build)")
    _attempt(
        results,
        "builtImportTimes",
        lambda: built_import_times(plan.import_runs, progress),
        errors,
    )
    _attempt(results, "firstInvocation", lambda: first_invocation(plan.cold_runs, progress), errors)
    _attempt(
        results,
        "serving",
        lambda: serving_figures(plan.turns_per_door, plan.stream_runs, progress),
        errors,
    )
    progress("predict latency, summarizer working vs failing")
    _attempt(
        results,
        "summarizer",
        lambda: summarizer_isolation(plan.summary_turns_per_block, plan.summary_blocks),
        errors,
    )
    _attempt(results, "contentFilter", lambda: filter_figures(plan.filter_runs, progress), errors)
    _attempt(results, "agentTurn", lambda: agent_turn_figure(progress), errors)
    progress(f"summary cost per turn over a {plan.summary_cost_turns}-turn conversation")
    _attempt(
        results,
        "summaryCost",
        lambda: summary_cost(plan.summary_cost_turns, progress),
        errors,
    )
    if "summaryCost" in results:
        _attempt(results, "millionTurns", lambda: cost_figure(results["summaryCost"]), errors)
    _attempt(
        results,
        "authorizer",
        lambda: authorizer_figures(plan.authorizer_runs, progress),
        errors,
    )
    _attempt(results, "rateLimit", lambda: rate_limit_figure(progress), errors)
    _attempt(results, "outage", lambda: outage_figure(plan.outage_turns, progress), errors)
    _attempt(results, "recallCost", lambda: recall_cost_figure(progress), errors)
    _attempt(results, "chatDoor", lambda: chat_door_figure(plan.door_turns, progress), errors)
    progress(f"prompt cache over a {plan.prompt_cache_turns}-turn conversation")
    today = results.get("millionTurns", {}).get("modelUsd")
    _attempt(
        results,
        "promptCache",
        lambda: prompt_cache_figure(plan.prompt_cache_turns, progress, today),
        errors,
    )
    _attempt(results, "erasure", lambda: erasure_figure(progress), errors)
    _attempt(results, "slowTenants", lambda: slow_tenant_figure(progress), errors)
    _attempt(results, "forks", lambda: forks_figure(progress), errors)
    _attempt(results, "appTools", lambda: app_tools_figure(progress), errors)
    _attempt(
        results,
        "responsesDoor",
        lambda: responses_door_figure(plan.door_turns, progress),
        errors,
    )
    _attempt(results, "langchainHistory", lambda: langchain_history_figure(progress), errors)
    scale_plan = QUICK_PLAN if quick else FULL_PLAN
    _attempt(results, "limiterScale", lambda: limiter_scale_figure(progress, scale_plan), errors)
    _attempt(results, "attachments", lambda: attachments_figure(progress), errors)
    results["meta"] = {
        "quick": quick,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "seconds": time.monotonic() - began,
        "plan": plan.__dict__,
    }
    if errors:
        results["errors"] = errors
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    parser.add_argument("--json", action="store_true", help="print machine-readable results")
    parser.add_argument(
        "--log",
        type=Path,
        default=DEFAULT_LOG,
        help=f"where the service's own logs go while measuring (default {DEFAULT_LOG})",
    )
    args = parser.parse_args(argv)
    from bench.render import render

    plan = QUICK if args.quick else FULL
    with logs_to(args.log) as terminal:
        progress = Progress(terminal)
        progress.done(f"measuring 23 figures; the service's logs go to {args.log}")
        results = run(plan, args.quick, progress)
        progress.done(f"done in {results['meta']['seconds']:.0f} s")
    results["meta"]["log"] = str(args.log)
    if args.json:
        print(json.dumps(results, indent=2, sort_keys=True))
    else:
        sys.stdout.write(render(results))
    return 1 if results.get("errors") else 0


if __name__ == "__main__":
    sys.exit(main())
