"""template.yaml for agent tools: the KMS key that seals webhook signing secrets, who may
use it and how, the tool settings, and the local resources built from them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from local_runtime.aws_resources import ensure_resources, function_specs, load_template
from tests.support.fake_aws import fake_aws

TEMPLATE = Path(__file__).resolve().parents[2] / "template.yaml"
SEALS = {"CapabilitiesFunction"}
OPENS = {"PredictFunction", "StreamFunction"}
KEY_ARN = {"Fn::GetAtt": ["ToolSecretKey", "Arn"]}
CONTEXT_CONDITION = {
    "ForAllValues:StringEquals": {"kms:EncryptionContextKeys": ["workspaceId", "capabilityId"]},
    "Null": {
        "kms:EncryptionContext:workspaceId": "false",
        "kms:EncryptionContext:capabilityId": "false",
    },
}


def resources() -> dict[str, Any]:
    found: dict[str, Any] = load_template(TEMPLATE)["Resources"]
    return found


def kms_statements(function: str) -> list[dict[str, Any]]:
    statements = []
    for policy in resources()[function]["Properties"].get("Policies", []):
        if isinstance(policy, dict) and "Statement" in policy:
            statements += [s for s in policy["Statement"] if s.get("Resource") == KEY_ARN]
    return statements


def test_the_key_rotates_and_outlives_the_stack_like_the_tables() -> None:
    key = resources()["ToolSecretKey"]
    assert key["Type"] == "AWS::KMS::Key"
    assert key["DeletionPolicy"] == key["UpdateReplacePolicy"] == "Retain"
    assert key["Properties"]["EnableKeyRotation"] is True
    alias = resources()["ToolSecretKeyAlias"]
    assert alias["Properties"]["TargetKeyId"] == {"Ref": "ToolSecretKey"}


def test_only_the_capabilities_function_seals_and_only_the_turn_doors_open() -> None:
    for function in function_specs(TEMPLATE):
        statements = kms_statements(function)
        actions = sorted(a for s in statements for a in s["Action"])
        expected = (
            ["kms:Encrypt"] if function in SEALS else ["kms:Decrypt"] if function in OPENS else []
        )
        assert actions == expected, function
        for statement in statements:
            # Always with the workspace and the capability as encryption context.
            assert statement["Condition"] == CONTEXT_CONDITION
        variables = (resources()[function]["Properties"].get("Environment") or {}).get(
            "Variables", {}
        )
        assert (variables.get("TOOL_SECRET_KEY_ID") == KEY_ARN) == (function in SEALS | OPENS)


def test_tool_settings_are_parameters_with_their_defaults() -> None:
    template = load_template(TEMPLATE)
    parameters = template["Parameters"]
    assert parameters["ToolAllowedHosts"]["Type"] == "CommaDelimitedList"
    assert parameters["ToolAllowedHosts"]["Default"] == ""
    deadline = parameters["TurnDeadlineSeconds"]
    assert (deadline["Default"], deadline["MinValue"], deadline["MaxValue"]) == (25, 1, 28)
    variables = template["Globals"]["Function"]["Environment"]["Variables"]
    assert variables["TOOL_ALLOWED_HOSTS"] == {"Fn::Join": [",", {"Ref": "ToolAllowedHosts"}]}
    assert variables["TURN_DEADLINE_SECONDS"] == {"Ref": "TurnDeadlineSeconds"}


@pytest.fixture
def session() -> Iterator[boto3.session.Session]:
    with fake_aws():
        yield boto3.session.Session(region_name="us-east-1")


def test_the_local_runtime_creates_the_key_once_and_hands_it_to_the_functions(
    session: boto3.session.Session,
) -> None:
    first = ensure_resources(session, template_path=TEMPLATE)
    again = ensure_resources(session, template_path=TEMPLATE)

    kms = session.client("kms")
    assert first.kms_keys == again.kms_keys and set(first.kms_keys) == {"ToolSecretKey"}
    assert len(kms.list_keys()["Keys"]) == 1
    env = first.env()
    assert env["TOOL_SECRET_KEY_ID"] == first.kms_keys["ToolSecretKey"]
    assert env["TOOL_ALLOWED_HOSTS"] == "" and env["TURN_DEADLINE_SECONDS"] == "25"
    context = {"workspaceId": "ws_1", "capabilityId": "cap_1"}
    sealed = kms.encrypt(
        KeyId=env["TOOL_SECRET_KEY_ID"], Plaintext=b"whsec_x", EncryptionContext=context
    )["CiphertextBlob"]
    assert kms.decrypt(CiphertextBlob=sealed, EncryptionContext=context)["Plaintext"] == b"whsec_x"
