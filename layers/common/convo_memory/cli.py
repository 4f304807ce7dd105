"""Operator commands for a deployed stack.

    python -m convo_memory.cli create-workspace NAME --table <ConversationsTable> [--seed]

Creates a workspace and prints its API token once (only its hash is stored). Uses the
ambient AWS credentials and region, like the AWS CLI.
"""

from __future__ import annotations

import argparse
import sys


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
    args = parser.parse_args(argv)

    import boto3

    from convo_memory.adapters.dynamo.stores import dynamo_stores
    from convo_memory.services.admin import create_workspace, seed_capabilities

    stores = dynamo_stores(boto3.client("dynamodb"), args.table, args.runs_table)
    credentials = create_workspace(stores.tokens, args.name)
    if args.seed:
        seed_capabilities(stores.capabilities, credentials.workspace_id)
    print(f"workspace {credentials.name} ({credentials.workspace_id})", file=sys.stderr)
    print("token (shown once; store it now):", file=sys.stderr)
    print(credentials.token)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
