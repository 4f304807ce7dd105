"""The client's command line.

    python -m convo_memory_client export --base-url URL --token TOKEN --external-ref REF

writes the end user's data to standard output as JSON Lines (``convo_memory_client.export``).
``--base-url`` and ``--token`` default to ``CONVO_BASE_URL`` and ``CONVO_TOKEN`` (a token on
the command line is visible to other users of the machine). Exit code 0 when everything
was written; otherwise non-zero, with one line on standard error saying why.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from contextlib import redirect_stderr, redirect_stdout
from typing import IO, NoReturn

from convo_memory_client.client import Conversations
from convo_memory_client.errors import ConversationsError
from convo_memory_client.export import export_end_user

PROG = "python -m convo_memory_client"
USAGE_ERROR = 2
FAILED = 1


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on standard error (not the whole usage)."""

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_ERROR, f"{self.prog}: {message} (see --help)\n")


def _parser(env: Mapping[str, str]) -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Command line of the Conversations API client.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    export = commands.add_parser(
        "export",
        help="an end user's sessions and messages, as JSON Lines on standard output",
        description="Write every session of an end user (newest first), each followed by "
        "its messages (oldest first), as JSON Lines on standard output.",
    )
    export.add_argument(
        "--base-url",
        default=env.get("CONVO_BASE_URL"),
        help="the API's root URL (default: $CONVO_BASE_URL)",
    )
    export.add_argument(
        "--token",
        default=env.get("CONVO_TOKEN"),
        help="the workspace's API token (default: $CONVO_TOKEN)",
    )
    export.add_argument("--external-ref", required=True, help="your id of the end user")
    return parser


def _one_line(text: str) -> str:
    return " ".join(text.split())


def main(
    argv: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
) -> int:
    """Run the command; its exit code."""
    env = os.environ if env is None else env
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    try:  # argparse writes usage, help and its errors to the process's streams, then exits
        with redirect_stdout(out), redirect_stderr(err):
            args = _parser(env).parse_args(argv)
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else USAGE_ERROR
    for name, flag, variable in (
        ("base_url", "--base-url", "CONVO_BASE_URL"),
        ("token", "--token", "CONVO_TOKEN"),
    ):
        if not getattr(args, name):
            err.write(f"{PROG}: {flag} (or {variable}) is required\n")
            return USAGE_ERROR
    try:
        client = Conversations(args.base_url, args.token)
        export_end_user(client, args.external_ref, out.write)
        out.flush()
    except ConversationsError as error:
        err.write(_one_line(f"{PROG} export: {error}") + "\n")
        return FAILED
    except (OSError, ValueError) as error:  # a closed pipe, a malformed URL
        err.write(_one_line(f"{PROG} export: {error}") + "\n")
        return FAILED
    return 0


if __name__ == "__main__":
    sys.exit(main())
