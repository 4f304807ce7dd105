"""A documented ``aws lambda invoke ...`` command, run the way the AWS CLI runs it, on a
machine with no AWS configuration: no ``~/.aws`` files, no ``AWS_*`` variables, no
instance metadata. The CLI is botocore under argument parsing, so this is botocore with
the command's own options and nothing else: without ``--region`` the client cannot be
made ("You must specify a region"), and without ``--no-sign-request`` the request needs
credentials that such a machine does not have. (The AWS CLI itself is not a dependency
of the tests.)"""

from __future__ import annotations

import argparse
import os
import re
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import botocore.session
from botocore import UNSIGNED
from botocore.config import Config

# A documented invocation: ``aws lambda invoke`` and its options, over continued lines.
COMMAND = re.compile(r"^aws lambda invoke (?:.*\\\n)*.*$", re.M)


def documented_invocations(text: str) -> list[str]:
    """Every ``aws lambda invoke`` command of a document, its continued lines joined."""
    return [match.replace("\\\n", " ") for match in COMMAND.findall(text)]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aws lambda invoke", exit_on_error=False)
    parser.add_argument("--endpoint-url")
    parser.add_argument("--region")
    parser.add_argument("--no-sign-request", action="store_true")
    parser.add_argument("--function-name", required=True)
    parser.add_argument("--payload")
    parser.add_argument("outfile")
    return parser


@contextmanager
def no_aws_configuration(home: Path) -> Iterator[None]:
    """The process environment of a machine where AWS was never set up."""
    saved = dict(os.environ)
    for name in list(os.environ):
        if name.startswith("AWS_") or name == "BOTO_CONFIG":
            del os.environ[name]
    os.environ.update(
        {
            "HOME": str(home),
            "AWS_CONFIG_FILE": str(home / ".aws" / "config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(home / ".aws" / "credentials"),
            "AWS_EC2_METADATA_DISABLED": "true",
        }
    )
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def run_lambda_invoke(command: str, cwd: Path, lambda_url: str) -> dict[str, Any]:
    """Run ``command`` (``aws lambda invoke ...``, its endpoint replaced by
    ``lambda_url``) in ``cwd`` with no AWS configuration: the invoke's response (the
    payload is written to the command's outfile, as the CLI does). Raises what the CLI
    would report: an unknown option, no region, no credentials."""
    words = shlex.split(command)
    assert words[:3] == ["aws", "lambda", "invoke"], command
    args = _parser().parse_args(words[3:])
    payload = args.payload or ""
    if payload.startswith("fileb://"):
        body = (cwd / payload.removeprefix("fileb://")).read_bytes()
    else:
        body = payload.encode()
    endpoint = lambda_url if args.endpoint_url else None
    with no_aws_configuration(cwd):
        session = botocore.session.Session()
        config = Config(
            signature_version=UNSIGNED if args.no_sign_request else None,
            retries={"max_attempts": 1},
            read_timeout=60,
        )
        client: Any = session.create_client(
            "lambda", region_name=args.region, endpoint_url=endpoint, config=config
        )
        response: dict[str, Any] = client.invoke(FunctionName=args.function_name, Payload=body)
    (cwd / args.outfile).write_bytes(response["Payload"].read())
    return response
