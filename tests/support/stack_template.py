"""template.yaml as CloudFormation would deploy it: after the SAM transform (run offline
with aws-sam-translator), with a small evaluator of intrinsic functions and of the IAM
statements the transform produced. The tests read alarms, log groups, concurrency and
each function's permissions from it, without an AWS account.

Physical names are symbolic and stable: a table, queue or function is named by its
logical id, in region ``us-east-1`` of account ``123456789012``.
"""

from __future__ import annotations

import copy
import fnmatch
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from local_runtime.aws_resources import DEFAULT_TEMPLATE, load_template

REGION = "us-east-1"
ACCOUNT = "123456789012"
PARTITION = "aws"
PSEUDO = {
    "AWS::Region": REGION,
    "AWS::AccountId": ACCOUNT,
    "AWS::Partition": PARTITION,
    "AWS::URLSuffix": "amazonaws.com",
    "AWS::StackName": "convo-memory",
    "AWS::StackId": f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/convo-memory/1",
}
NO_VALUE = object()


class _PolicyLoader:
    """The transform asks for AWS managed policy ARNs by name; the template uses none."""

    def load(self) -> dict[str, str]:
        return {}


def transformed_template(template_path: Path | str = DEFAULT_TEMPLATE) -> dict[str, Any]:
    """``template_path`` after the ``AWS::Serverless-2016-10-31`` transform (a copy: the
    transform runs once per template text and process)."""
    text = Path(template_path).read_text(encoding="utf-8")
    return copy.deepcopy(_transformed(text, str(template_path)))


@cache
def _transformed(text: str, template_path: str) -> dict[str, Any]:
    from samtranslator.translator.transform import transform

    template = load_template(template_path)
    for resource in (template.get("Resources") or {}).values():
        props = resource.get("Properties") or {}
        for key in ("CodeUri", "ContentUri"):
            if isinstance(props.get(key), str):  # what `sam package` uploads
                props[key] = f"s3://artifacts/{props[key].strip('/')}"
    saved = os.environ.get("AWS_DEFAULT_REGION")
    os.environ["AWS_DEFAULT_REGION"] = REGION  # the transform asks boto3 for a region
    try:
        result: dict[str, Any] = transform(template, {}, _PolicyLoader())
    finally:
        if saved is None:
            os.environ.pop("AWS_DEFAULT_REGION", None)
        else:
            os.environ["AWS_DEFAULT_REGION"] = saved
    return result


@dataclass
class Stack:
    """A transformed template with its parameters resolved (defaults, then overrides)."""

    template: dict[str, Any]
    overrides: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.parameters: dict[str, Any] = {}
        for name, spec in (self.template.get("Parameters") or {}).items():
            value = self.overrides.get(name, spec.get("Default"))
            if spec.get("Type") == "CommaDelimitedList" and isinstance(value, str):
                value = [] if value == "" else [item.strip() for item in value.split(",")]
            self.parameters[name] = value
        self.resources: dict[str, Any] = self.template["Resources"]

    # -- resources ------------------------------------------------------------------

    def of_type(self, resource_type: str) -> dict[str, Any]:
        """Resources of a type, with ``Condition`` honoured (absent when it is false)."""
        return {
            logical_id: resource
            for logical_id, resource in self.resources.items()
            if resource["Type"] == resource_type
            and ("Condition" not in resource or self.condition(resource["Condition"]))
        }

    def properties(self, logical_id: str) -> dict[str, Any]:
        """The resource's properties with every intrinsic function evaluated."""
        value = self.value(self.resources[logical_id].get("Properties") or {})
        assert isinstance(value, dict)
        return value

    # -- intrinsic functions ----------------------------------------------------------

    def condition(self, name: str) -> bool:
        return bool(self.value(self.template["Conditions"][name]))

    def value(self, node: Any) -> Any:
        """Evaluate ``node`` (Ref, GetAtt, Sub, Join, Split, Select, If, FindInMap,
        Equals, Not, And, Or, Condition); ``AWS::NoValue`` drops the key or item."""
        if isinstance(node, list):
            items = [self.value(item) for item in node]
            return [item for item in items if item is not NO_VALUE]
        if not isinstance(node, dict):
            return node
        if len(node) == 1:
            ((key, arg),) = node.items()
            handler = _FUNCTIONS.get(key)
            if handler is not None:
                return handler(self, arg)
        evaluated = {key: self.value(item) for key, item in node.items()}
        return {key: item for key, item in evaluated.items() if item is not NO_VALUE}

    def ref(self, name: str) -> Any:
        if name == "AWS::NoValue":
            return NO_VALUE
        if name in PSEUDO:
            return PSEUDO[name]
        if name in self.parameters:
            return self.parameters[name]
        resource_type = self.resources[name]["Type"]
        if resource_type == "AWS::SQS::Queue":
            return f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{name}"
        if resource_type in ("AWS::SNS::Topic", "AWS::SecretsManager::Secret"):
            return self.get_att(name, "Arn")
        return name  # tables, functions, log groups, APIs: their name is their id

    def get_att(self, name: str, attribute: str) -> str:
        resource_type = self.resources[name]["Type"]
        if attribute == "QueueName":
            return name
        if attribute == "Arn":
            service, kind = _ARN_KINDS.get(resource_type, ("", ""))
            if resource_type == "AWS::Logs::LogGroup":
                group = self.properties(name).get("LogGroupName", name)
                return f"arn:{PARTITION}:logs:{REGION}:{ACCOUNT}:log-group:{group}:*"
            if resource_type == "AWS::SQS::Queue":
                return f"arn:{PARTITION}:sqs:{REGION}:{ACCOUNT}:{name}"
            if resource_type == "AWS::SNS::Topic":
                return f"arn:{PARTITION}:sns:{REGION}:{ACCOUNT}:{name}"
            if resource_type == "AWS::SecretsManager::Secret":
                return f"arn:{PARTITION}:secretsmanager:{REGION}:{ACCOUNT}:secret:{name}"
            if resource_type == "AWS::S3::Bucket":
                return f"arn:{PARTITION}:s3:::{name}"
            if service:
                return f"arn:{PARTITION}:{service}:{REGION}:{ACCOUNT}:{kind}{name}"
        if attribute == "FunctionUrl":
            return f"https://{name}.lambda-url.{REGION}.on.aws/"
        return f"{name}.{attribute}"

    def sub(self, text: str, variables: Mapping[str, Any]) -> str:
        def replace(found: re.Match[str]) -> str:
            name = found.group(1)
            if name in variables:
                return str(variables[name])
            if "." in name and not name.startswith("AWS::"):
                resource, attribute = name.split(".", 1)
                return self.get_att(resource, attribute)
            return str(self.ref(name))

        return re.sub(r"\$\{([^}!]+)\}", replace, text)


_ARN_KINDS = {
    "AWS::DynamoDB::Table": ("dynamodb", "table/"),
    "AWS::Lambda::Function": ("lambda", "function:"),
    "AWS::IAM::Role": ("iam", "role/"),
}


def _sub(stack: Stack, arg: Any) -> str:
    if isinstance(arg, str):
        return stack.sub(arg, {})
    text, variables = arg
    return stack.sub(text, {k: stack.value(v) for k, v in variables.items()})


def _if(stack: Stack, arg: Any) -> Any:
    name, then, otherwise = arg
    return stack.value(then if stack.condition(name) else otherwise)


def _join(stack: Stack, arg: Any) -> str:
    delimiter, items = arg
    values = stack.value(items)
    return delimiter.join(str(item) for item in values)


def _find_in_map(stack: Stack, arg: Any) -> Any:
    name, first, second = (stack.value(part) for part in arg)
    return stack.template["Mappings"][name][first][second]


_FUNCTIONS: dict[str, Any] = {
    "Ref": lambda stack, arg: stack.ref(arg),
    "Fn::GetAtt": lambda stack, arg: stack.get_att(
        *(arg.split(".", 1) if isinstance(arg, str) else arg)
    ),
    "Fn::Sub": _sub,
    "Fn::If": _if,
    "Fn::Join": _join,
    "Fn::Split": lambda stack, arg: str(stack.value(arg[1])).split(arg[0]),
    "Fn::Select": lambda stack, arg: stack.value(arg[1])[int(stack.value(arg[0]))],
    "Fn::FindInMap": _find_in_map,
    # CloudFormation hands every parameter over as a string.
    "Fn::Equals": lambda stack, arg: str(stack.value(arg[0])) == str(stack.value(arg[1])),
    "Fn::Not": lambda stack, arg: not stack.value(arg[0]),
    "Fn::And": lambda stack, arg: all(stack.value(item) for item in arg),
    "Fn::Or": lambda stack, arg: any(stack.value(item) for item in arg),
    "Condition": lambda stack, arg: stack.condition(arg),
}


# --------------------------------------------------------------------------- IAM


@dataclass(frozen=True)
class Request:
    """One authorization question: may the function's role do ``action`` on ``resource``?
    ``context`` carries condition keys, e.g. ``{"dynamodb:LeadingKeys": ["TOKEN#ab"]}``."""

    action: str
    resource: str
    context: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def __str__(self) -> str:
        keys = f" {dict(self.context)}" if self.context else ""
        return f"{self.action} on {self.resource}{keys}"


def role_statements(stack: Stack, function: str) -> list[dict[str, Any]]:
    """Every statement of the inline policies of the function's execution role."""
    role_ref = stack.resources[function]["Properties"]["Role"]
    role = role_ref["Fn::GetAtt"][0] if isinstance(role_ref, dict) else role_ref
    statements: list[dict[str, Any]] = []
    for policy in stack.properties(role).get("Policies", []):
        found = policy["PolicyDocument"]["Statement"]
        statements.extend(found if isinstance(found, list) else [found])
    return statements


def _listed(value: Any) -> list[str]:
    return [str(item) for item in (value if isinstance(value, list) else [value])]


def _matches(patterns: Iterable[str], value: str, *, case: bool) -> bool:
    if case:
        return any(fnmatch.fnmatchcase(value, pattern) for pattern in patterns)
    return any(fnmatch.fnmatchcase(value.lower(), pattern.lower()) for pattern in patterns)


def _conditions_hold(condition: Mapping[str, Any], context: Mapping[str, Iterable[str]]) -> bool:
    for operator, tests in condition.items():
        for key, expected in tests.items():
            values = list(context.get(key, ()))
            patterns = _listed(expected)
            if operator == "ForAllValues:StringLike":
                if not all(_matches(patterns, value, case=True) for value in values):
                    return False
            elif operator == "StringEquals":
                if not values or not all(value in patterns for value in values):
                    return False
            else:  # an operator this evaluator does not model never grants anything
                return False
    return True


def allows(statements: Iterable[Mapping[str, Any]], request: Request) -> bool:
    """Whether an Allow statement grants ``request`` and no Deny statement refuses it."""
    allowed = False
    for statement in statements:
        if not _matches(_listed(statement.get("Action", [])), request.action, case=False):
            continue
        if not _matches(_listed(statement.get("Resource", [])), request.resource, case=True):
            continue
        if not _conditions_hold(statement.get("Condition") or {}, request.context):
            continue
        if statement["Effect"] == "Deny":
            return False
        allowed = True
    return allowed


def granted_actions(statements: Iterable[Mapping[str, Any]]) -> set[str]:
    """Every action an Allow statement names (patterns as written)."""
    return {
        action
        for statement in statements
        if statement["Effect"] == "Allow"
        for action in _listed(statement.get("Action", []))
    }
