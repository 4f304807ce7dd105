"""Operator commands for a deployed stack.

    python -m convo_memory.cli create-workspace NAME --table <ConversationsTable> [--seed]
    python -m convo_memory.cli revoke-token --table <ConversationsTable> [TOKEN_ID]

``create-workspace`` creates a workspace and prints its API token once (only its hash is
stored) with the token's public id. ``revoke-token`` revokes a token by that id, or,
without one, by the token itself read from standard input (so it stays out of shell
history and process lists). Uses the ambient AWS credentials and region, like the AWS
CLI.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from convo_memory.ports import TokenStore


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m convo_memory.cli")
    sub = parser.add_subparsers(dest="command", required=True)
    create = sub.add_parser("create-workspace", help="create a workspace and print its token once")
    create.add_argument("name")
    create.add_argument("--table", required=True, help="the stack's ConversationsTable name")
    create.add_argument("--runs-table", default="unused", help=argparse.SUPPRESS)
    create.add_argument(
        "--seed", action="store_true", help="also add one demo capability of each kind"
    )
    revoke = sub.add_parser(
        "revoke-token", help="revoke a token by its id, or by the token read from stdin"
    )
    revoke.add_argument("token_id", nargs="?", help="the tok_... id printed at creation")
    revoke.add_argument("--table", required=True, help="the stack's ConversationsTable name")
    args = parser.parse_args(argv)

    from convo_memory.adapters.production import table_stores
    from convo_memory.execution_environment import aws_clients

    stores = table_stores(args.table, aws_clients())
    if args.command == "revoke-token":
        return _revoke(stores.tokens, args.token_id)

    from convo_memory.services.admin import create_workspace, seed_capabilities

    credentials = create_workspace(stores.tokens, args.name)
    if args.seed:
        seed_capabilities(stores.capabilities, credentials.workspace_id)
    print(f"workspace {credentials.name} ({credentials.workspace_id})", file=sys.stderr)
    print(f"token id {credentials.token_id} (revoke-token takes it)", file=sys.stderr)
    print("token (shown once; store it now):", file=sys.stderr)
    print(credentials.token)
    return 0


def _revoke(store: TokenStore, token_id: str | None) -> int:
    from convo_memory.services.admin import revoke_token

    try:
        if token_id:
            revoked = revoke_token(store, token_id=token_id)
        else:
            token = sys.stdin.readline().strip()
            if not token:
                print("give a token id, or the token on standard input", file=sys.stderr)
                return 2
            revoked = revoke_token(store, token=token)
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    if revoked is None:
        print("no such token (already revoked?)", file=sys.stderr)
        return 1
    print(
        f"revoked {revoked.token_id} of workspace {revoked.workspace_id}; it stops working "
        "once the authorizer's and the functions' caches expire",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
