"""What a newcomer runs first works as written, on ``python -m local_runtime``: the
``aws lambda invoke`` commands of the README and of events/README.md (verbatim, their
port aside, on a machine where AWS was never configured), the README's Python client
example, and a Bedrock guardrail, which the local runtime cannot run, refused at the
capability's creation with a 422 that says what is missing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from botocore.exceptions import NoCredentialsError, NoRegionError

from tests.support.aws_cli import documented_invocations, run_lambda_invoke
from tests.support.runtime_process import REPO, RuntimeProcess

pytestmark = pytest.mark.e2e
DOCUMENTS = (REPO / "README.md", REPO / "events" / "README.md")


def clean_machine(tmp_path: Path) -> Path:
    """A working directory like a fresh clone's: the sample events, nothing of AWS."""
    (tmp_path / "events").symlink_to(REPO / "events")
    return tmp_path


@pytest.mark.parametrize("document", DOCUMENTS, ids=["README", "events-README"])
def test_the_documented_lambda_invoke_runs_verbatim_without_aws_configuration(
    local_runtime: RuntimeProcess, tmp_path: Path, document: Path
) -> None:
    (command,) = documented_invocations(document.read_text(encoding="utf-8"))
    cwd = clean_machine(tmp_path)

    response = run_lambda_invoke(command, cwd, local_runtime.lambda_url)

    assert response["StatusCode"] == 200 and "FunctionError" not in response
    answer = json.loads((cwd / "out.json").read_text())
    assert answer["statusCode"] == 200, answer
    assert "output" in json.loads(answer["body"])


def test_the_machine_really_has_no_aws_configuration(
    local_runtime: RuntimeProcess, tmp_path: Path
) -> None:
    (command,) = documented_invocations((REPO / "README.md").read_text(encoding="utf-8"))
    cwd = clean_machine(tmp_path)

    with pytest.raises(NoRegionError):
        run_lambda_invoke(command.replace("--region us-east-1", ""), cwd, local_runtime.lambda_url)
    with pytest.raises(NoCredentialsError):
        run_lambda_invoke(command.replace("--no-sign-request", ""), cwd, local_runtime.lambda_url)


def test_the_readme_client_example_runs_verbatim(local_runtime: RuntimeProcess) -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = re.search(
        r"<!-- client-example:start -->\n```python\n(.*?)```\n<!-- client-example:end -->",
        text,
        re.S,
    )
    assert block, "README has no client example"
    script = block.group(1).replace("http://127.0.0.1:3000", local_runtime.base_url)

    done = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "TOKEN": local_runtime.tokens["dev"]},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert 'You said: "Can I still cancel it?"' in done.stdout


def test_a_bedrock_guardrail_is_refused_at_creation_naming_what_is_missing(
    local_runtime: RuntimeProcess,
) -> None:
    body = {
        "name": "guarded",
        "kind": "generative",
        "contentFilter": {
            "type": "bedrock-guardrail",
            "guardrailId": "gr-123",
            "guardrailVersion": "1",
        },
    }

    status, _, refused = local_runtime.call(
        "POST", "/v1/capabilities", token=local_runtime.tokens["dev"], json=body
    )

    assert status == 422 and refused["error"]["code"] == "validation_error"
    assert refused["error"]["details"][0]["loc"] == ["contentFilter", "type"]
    assert "needs Amazon Bedrock" in refused["error"]["message"]
    listed = local_runtime.call("GET", "/v1/capabilities", token=local_runtime.tokens["dev"])
    assert "guarded" not in {capability["name"] for capability in listed[2]["capabilities"]}
