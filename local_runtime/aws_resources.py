"""template.yaml as the single source of truth for the local runtime and the tests.

Reads the SAM template and

* creates its DynamoDB tables, SQS queues and KMS keys against any endpoint (moto
  server, moto's in-process mock, DynamoDB Local, ...), so local resources cannot drift
  from the stack;
* resolves the functions' environment from the template's ``Globals`` and parameter
  defaults;
* lists every function's handler, HttpApi routes and SQS event source, so the local
  runtime routes requests and messages exactly as API Gateway and Lambda would.

Physical names are ``<prefix><LogicalId>`` (default prefix ``convo-local-``).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import yaml
from botocore.exceptions import BotoCoreError, ClientError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.literals import QueueAttributeNameType

    from convo_memory.adapters.aws_clients import AwsClients

DEFAULT_TEMPLATE = Path(__file__).resolve().parent.parent / "template.yaml"
DEFAULT_PREFIX = "convo-local-"
DEFAULT_REGION = "us-east-1"

_TABLE = "AWS::DynamoDB::Table"
_QUEUE = "AWS::SQS::Queue"
_KMS_KEY = "AWS::KMS::Key"
_BUCKET = "AWS::S3::Bucket"
_FUNCTION = "AWS::Serverless::Function"

# Lambda's own defaults when neither the function nor Globals set them.
_LAMBDA_DEFAULT_TIMEOUT = 3
_LAMBDA_DEFAULT_MEMORY_MB = 128

# Queues the functions do not read from the environment but the local runtime and the
# tests do (to inspect poison messages).
_EXTRA_QUEUE_ENV = {
    "SUMMARY_DLQ_URL": "SummaryDLQ",
    "REPAIR_DLQ_URL": "RepairDLQ",
    "ERASURE_DLQ_URL": "ErasureDLQ",
}

# CloudFormation property -> SQS attribute; values are sent as strings.
_QUEUE_ATTRIBUTES: tuple[QueueAttributeNameType, ...] = (
    "ContentBasedDeduplication",
    "DeduplicationScope",
    "DelaySeconds",
    "FifoQueue",
    "FifoThroughputLimit",
    "KmsDataKeyReusePeriodSeconds",
    "KmsMasterKeyId",
    "MaximumMessageSize",
    "MessageRetentionPeriod",
    "ReceiveMessageWaitTimeSeconds",
    "RedriveAllowPolicy",
    "RedrivePolicy",
    "SqsManagedSseEnabled",
    "VisibilityTimeout",
)


# --------------------------------------------------------------------------- template


# libyaml's parser when PyYAML was built with it: several times faster on template.yaml.
_SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _TemplateLoader(_SafeLoader):
    """SafeLoader that reads CloudFormation short-form tags as their long form."""


def _construct_intrinsic(loader: yaml.SafeLoader, tag_suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    if tag_suffix == "Ref":
        return {"Ref": value}
    if tag_suffix == "Condition":
        return {"Condition": value}
    if tag_suffix == "GetAtt" and isinstance(value, str):
        value = value.split(".", 1)
    return {f"Fn::{tag_suffix}": value}


_TemplateLoader.add_multi_constructor("!", _construct_intrinsic)


def load_template(template_path: Path | str = DEFAULT_TEMPLATE) -> dict[str, Any]:
    """Parse a CloudFormation/SAM template, short-form tags included.

    Intrinsics come back in their long form (``!Ref X`` -> ``{"Ref": "X"}``,
    ``!GetAtt A.B`` -> ``{"Fn::GetAtt": ["A", "B"]}``, ``!Sub s`` -> ``{"Fn::Sub": s}``)
    and are otherwise left unevaluated.
    """
    text = Path(template_path).read_text(encoding="utf-8")
    template = _PARSED.get(text)
    if template is None:
        template = yaml.load(text, Loader=_TemplateLoader)
        if not isinstance(template, dict):
            raise ValueError(f"{template_path} is not a CloudFormation template")
        _PARSED[text] = template
    # A copy: callers may change what they get, and the cached parse must stay as read.
    return copy.deepcopy(template)


# Parses by the file's text: the local runtime and the tests read the same template many
# times per process (parsing is the slow part, reading is not); an edited file is parsed
# again.
_PARSED: dict[str, dict[str, Any]] = {}


def parameter_defaults(template: Mapping[str, Any]) -> dict[str, str]:
    """Each template parameter that has a ``Default``, as the string CloudFormation passes."""
    return {
        name: _scalar(spec["Default"])
        for name, spec in (template.get("Parameters") or {}).items()
        if "Default" in spec
    }


def _resources_of_type(template: Mapping[str, Any], resource_type: str) -> dict[str, Any]:
    return {
        logical_id: resource
        for logical_id, resource in (template.get("Resources") or {}).items()
        if resource.get("Type") == resource_type
    }


def _scalar(value: Any) -> str:
    # CloudFormation hands every parameter and attribute over as a string.
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# ------------------------------------------------------------------------- functions


@dataclass(frozen=True)
class FunctionSpec:
    """How template.yaml wires one ``AWS::Serverless::Function``.

    ``code_uri`` is absolute (resolved against the template's directory); ``handler`` is
    ``module.function`` relative to it. ``http_routes`` are the HttpApi ``(METHOD, path)``
    pairs with API Gateway path templates (``/v1/sessions/{sessionId}``).
    ``sqs_queue_logical_id`` names the queue of the function's SQS event source, if any;
    ``sqs_batch_size`` and ``report_batch_item_failures`` are that event source's settings.
    ``timeout`` (seconds) and ``memory_size`` (MB) include the ``Globals`` fallback.
    """

    logical_id: str
    code_uri: Path
    handler: str
    http_routes: list[tuple[str, str]]
    sqs_queue_logical_id: str | None
    timeout: int
    sqs_batch_size: int | None = None
    report_batch_item_failures: bool = False
    memory_size: int = _LAMBDA_DEFAULT_MEMORY_MB


def function_specs(template_path: Path | str = DEFAULT_TEMPLATE) -> dict[str, FunctionSpec]:
    """Every function of the template keyed by logical id (the Lambda ``FunctionName``).

    Function properties fall back to ``Globals.Function`` as SAM does.
    """
    template_path = Path(template_path).resolve()
    template = load_template(template_path)
    global_props = (template.get("Globals") or {}).get("Function") or {}
    specs: dict[str, FunctionSpec] = {}
    for logical_id, resource in _resources_of_type(template, _FUNCTION).items():
        props = {**global_props, **(resource.get("Properties") or {})}
        routes: list[tuple[str, str]] = []
        queues: list[tuple[str, dict[str, Any]]] = []
        for event in (props.get("Events") or {}).values():
            event_props = event.get("Properties") or {}
            if event.get("Type") == "HttpApi":
                routes.append((str(event_props["Method"]).upper(), str(event_props["Path"])))
            elif event.get("Type") == "SQS":
                queues.append((_logical_id_of(event_props["Queue"]), event_props))
        if len(queues) > 1:
            raise ValueError(f"{logical_id}: more than one SQS event source")
        queue_id, queue_props = queues[0] if queues else (None, {})
        specs[logical_id] = FunctionSpec(
            logical_id=logical_id,
            code_uri=(template_path.parent / str(props["CodeUri"])).resolve(),
            handler=str(props["Handler"]),
            http_routes=routes,
            sqs_queue_logical_id=queue_id,
            timeout=int(props.get("Timeout", _LAMBDA_DEFAULT_TIMEOUT)),
            memory_size=int(props.get("MemorySize", _LAMBDA_DEFAULT_MEMORY_MB)),
            # Lambda's default batch size for SQS is 10.
            sqs_batch_size=int(queue_props.get("BatchSize", 10)) if queue_id else None,
            report_batch_item_failures="ReportBatchItemFailures"
            in (queue_props.get("FunctionResponseTypes") or []),
        )
    return specs


def _logical_id_of(reference: Any) -> str:
    """The logical id behind ``!GetAtt X.Arn`` or ``!Ref X``."""
    if isinstance(reference, dict):
        if "Fn::GetAtt" in reference:
            return str(reference["Fn::GetAtt"][0])
        if "Ref" in reference:
            return str(reference["Ref"])
    raise ValueError(f"not a reference to a template resource: {reference!r}")


# ------------------------------------------------------------------------- resources


@dataclass(frozen=True)
class LocalResources:
    """The tables and queues of template.yaml as created locally.

    ``tables`` maps logical id -> table name, ``queue_urls`` logical id -> queue URL.
    """

    tables: dict[str, str]
    queue_urls: dict[str, str]
    parameters: dict[str, str] = field(default_factory=dict)
    global_variables: dict[str, Any] = field(default_factory=dict)
    kms_keys: dict[str, str] = field(default_factory=dict)
    """logical id -> key ARN"""
    key_variables: dict[str, str] = field(default_factory=dict)
    """function variables that name a KMS key (``!GetAtt Key.Arn``) -> the key's logical id"""
    missing_kms_keys: tuple[str, ...] = ()
    """keys the endpoint could not create (it has no KMS)"""
    buckets: dict[str, str] = field(default_factory=dict)
    """logical id -> bucket name (S3 names are lower case: ``<prefix><logicalid>``)"""

    def env(self) -> dict[str, str]:
        """The environment the functions run with, plus the DLQ URLs.

        ``Globals.Function.Environment.Variables`` of the template with ``!Ref`` resolved:
        tables to their names, queues to their URLs, parameters to their defaults; and
        the functions' own variables that name a KMS key, as its local ARN (locally every
        function shares one environment).
        """
        env = {name: self._resolve(name, value) for name, value in self.global_variables.items()}
        for name, logical_id in _EXTRA_QUEUE_ENV.items():
            if logical_id in self.queue_urls:
                env[name] = self.queue_urls[logical_id]
        for name, logical_id in self.key_variables.items():
            if logical_id in self.kms_keys:
                env[name] = self.kms_keys[logical_id]
        return env

    def _resolve(self, name: str, value: Any) -> str:
        if not isinstance(value, dict):
            return _scalar(value)
        join = value.get("Fn::Join")
        if isinstance(join, list) and len(join) == 2 and isinstance(join[0], str):
            # ``!Join [",", !Ref SomeList]``: a CommaDelimitedList's default is already
            # comma-separated text.
            delimiter, parts = join
            if isinstance(parts, dict):
                return delimiter.join(self._resolve(name, parts).split(","))
            return delimiter.join(self._resolve(name, part) for part in parts)
        target = value.get("Ref")
        if isinstance(target, str):
            for known in (self.tables, self.queue_urls, self.parameters, self.buckets):
                if target in known:
                    return known[target]
        raise ValueError(f"cannot resolve environment variable {name}={value!r} locally")


def ensure_resources(
    clients: boto3.session.Session | AwsClients | None = None,
    *,
    endpoint_url: str | None = None,
    template_path: Path | str = DEFAULT_TEMPLATE,
    prefix: str = DEFAULT_PREFIX,
) -> LocalResources:
    """Create the template's DynamoDB tables and SQS queues that do not exist yet.

    Idempotent: a table or queue whose physical name (``<prefix><LogicalId>``) already
    exists is left as it is. Tables get their key schema, attribute definitions, GSIs,
    LSIs, billing mode, stream and TTL; queues get their attributes, with a
    ``RedrivePolicy`` pointing at the local DLQ's ARN and ``maxReceiveCount`` taken from
    the parameter default. ``clients`` is a process's ``AwsClients`` (the local
    runtime's, whose functions use the same clients), or a boto3 session whose clients
    go to ``endpoint_url`` (or ``AWS_ENDPOINT_URL``, which boto3 honours itself);
    default: a fresh boto3 session.
    """
    client = _client_source(clients, endpoint_url)
    template = load_template(template_path)
    parameters = parameter_defaults(template)

    dynamodb: DynamoDBClient = client("dynamodb")
    tables = {
        logical_id: _ensure_table(dynamodb, f"{prefix}{logical_id}", resource.get("Properties"))
        for logical_id, resource in _resources_of_type(template, _TABLE).items()
    }

    sqs: SQSClient = client("sqs")
    queues = _QueueBuilder(sqs, _resources_of_type(template, _QUEUE), parameters, prefix)
    queue_urls = {logical_id: queues.ensure(logical_id) for logical_id in queues.resources}

    kms = client("kms")
    kms_keys: dict[str, str] = {}
    missing_keys: list[str] = []
    for logical_id, resource in _resources_of_type(template, _KMS_KEY).items():
        try:
            kms_keys[logical_id] = _ensure_kms_key(
                kms, f"alias/{prefix}{logical_id}", resource.get("Properties")
            )
        except (BotoCoreError, ClientError):
            # An emulator without KMS (e.g. DynamoDB Local): what needs the key says so.
            missing_keys.append(logical_id)

    s3 = client("s3")
    buckets = {
        logical_id: _ensure_bucket(s3, f"{prefix}{logical_id}".lower())
        for logical_id in _resources_of_type(template, _BUCKET)
    }
    global_env = ((template.get("Globals") or {}).get("Function") or {}).get("Environment") or {}
    return LocalResources(
        tables=tables,
        queue_urls=queue_urls,
        parameters=parameters,
        global_variables=dict(global_env.get("Variables") or {}),
        kms_keys=kms_keys,
        key_variables=_key_variables(template, set(kms_keys)),
        missing_kms_keys=tuple(missing_keys),
        buckets=buckets,
    )


def _ensure_bucket(client: Any, name: str) -> str:
    """The bucket ``name``, created when missing (its encryption, public access block and
    lifecycle are AWS's to apply: the emulation stores objects as they are)."""
    try:
        client.head_bucket(Bucket=name)
    except ClientError:
        client.create_bucket(Bucket=name)
    return name


def _client_source(
    clients: boto3.session.Session | AwsClients | None, endpoint_url: str | None
) -> Callable[[str], Any]:
    """``service -> client``: the given clients', or a session's at ``endpoint_url``."""
    if clients is not None and not isinstance(clients, boto3.session.Session):
        return clients.client
    session = clients or boto3.session.Session()
    region = session.region_name or DEFAULT_REGION
    return partial(session.client, region_name=region, endpoint_url=endpoint_url)


def _ensure_kms_key(client: Any, alias: str, props: Mapping[str, Any] | None) -> str:
    """The ARN of the key behind ``alias``, creating both when missing."""
    paginator = client.get_paginator("list_aliases")
    for page in paginator.paginate():
        for entry in page.get("Aliases", []):
            if entry.get("AliasName") == alias and entry.get("TargetKeyId"):
                return str(client.describe_key(KeyId=entry["TargetKeyId"])["KeyMetadata"]["Arn"])
    description = str((props or {}).get("Description", alias))
    metadata = client.create_key(Description=description)["KeyMetadata"]
    client.create_alias(AliasName=alias, TargetKeyId=metadata["KeyId"])
    return str(metadata["Arn"])


def _key_variables(template: Mapping[str, Any], keys: set[str]) -> dict[str, str]:
    """Function environment variables set to ``!GetAtt <KmsKey>.Arn``."""
    found: dict[str, str] = {}
    for resource in _resources_of_type(template, _FUNCTION).values():
        variables = ((resource.get("Properties") or {}).get("Environment") or {}).get(
            "Variables"
        ) or {}
        for name, value in variables.items():
            if isinstance(value, dict) and "Fn::GetAtt" in value:
                logical_id, attribute = value["Fn::GetAtt"]
                if logical_id in keys and attribute == "Arn":
                    found[name] = logical_id
    return found


def _ensure_table(client: DynamoDBClient, name: str, props: Mapping[str, Any] | None) -> str:
    props = props or {}
    try:
        client.describe_table(TableName=name)
        return name
    except client.exceptions.ResourceNotFoundException:
        pass

    request: dict[str, Any] = {
        "TableName": name,
        "KeySchema": props["KeySchema"],
        "AttributeDefinitions": props["AttributeDefinitions"],
        "BillingMode": props.get("BillingMode", "PROVISIONED"),
    }
    for key in ("GlobalSecondaryIndexes", "LocalSecondaryIndexes", "ProvisionedThroughput"):
        if props.get(key):
            request[key] = props[key]
    stream = props.get("StreamSpecification")
    if stream:
        request["StreamSpecification"] = {
            "StreamEnabled": True,
            "StreamViewType": stream["StreamViewType"],
        }
    client.create_table(**request)
    client.get_waiter("table_exists").wait(
        TableName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 60}
    )

    ttl = props.get("TimeToLiveSpecification")
    if ttl and ttl.get("Enabled"):
        client.update_time_to_live(
            TableName=name,
            TimeToLiveSpecification={"AttributeName": ttl["AttributeName"], "Enabled": True},
        )
    return name


class _QueueBuilder:
    """Creates queues on demand so a dead-letter queue exists before its source."""

    def __init__(
        self,
        client: SQSClient,
        resources: dict[str, Any],
        parameters: Mapping[str, str],
        prefix: str,
    ) -> None:
        self.client = client
        self.resources = resources
        self.parameters = parameters
        self.prefix = prefix
        self._urls: dict[str, str] = {}

    def ensure(self, logical_id: str) -> str:
        if logical_id in self._urls:
            return self._urls[logical_id]
        props = self.resources[logical_id].get("Properties") or {}
        name = f"{self.prefix}{logical_id}"
        if props.get("FifoQueue"):
            name += ".fifo"
        try:
            url = self.client.get_queue_url(QueueName=name)["QueueUrl"]
        except self.client.exceptions.QueueDoesNotExist:
            attributes: dict[QueueAttributeNameType, str] = {
                key: self._attribute(props[key]) for key in _QUEUE_ATTRIBUTES if key in props
            }
            url = self.client.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
        self._urls[logical_id] = url
        return url

    def arn(self, logical_id: str) -> str:
        url = self.ensure(logical_id)
        attributes = self.client.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
        return attributes["Attributes"]["QueueArn"]

    def _attribute(self, value: Any) -> str:
        resolved = self._resolve(value)
        # Policies (RedrivePolicy, RedriveAllowPolicy) are JSON documents.
        return resolved if isinstance(resolved, str) else json.dumps(resolved)

    def _resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self._resolve(item) for item in value]
        if not isinstance(value, dict):
            return value if isinstance(value, str) else _scalar(value)
        if "Ref" in value and value["Ref"] in self.parameters:
            return self.parameters[value["Ref"]]
        if "Fn::GetAtt" in value:
            logical_id, attribute = value["Fn::GetAtt"]
            if attribute == "Arn" and logical_id in self.resources:
                return self.arn(logical_id)
        if "Ref" in value or any(key.startswith("Fn::") for key in value):
            raise ValueError(f"cannot resolve {value!r} for a local queue")
        return {key: self._resolve(item) for key, item in value.items()}
