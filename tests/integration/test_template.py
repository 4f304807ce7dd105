"""template.yaml is the one description of the stack: the resources the local runtime and
the tests build from it must be the ones docs/architecture.md and the contract describe."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from local_runtime.aws_resources import (
    LocalResources,
    ensure_resources,
    function_specs,
    load_template,
)
from tests.support.contract_routes import EXPECTED_ROUTES, PUBLIC_PATHS
from tests.support.fake_aws import aws_session, fake_aws

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"
EVENTS = ROOT / "events"

DOCUMENTED_DEFAULTS = {
    "MAX_INPUT_CHARS": "32000",
    "DIGEST_MAX_CHARS": "2000",
    "DIGEST_RETENTION_HOURS": "24",
    "IDLE_ARCHIVE_DAYS": "7",
    "PURGE_AFTER_DAYS": "30",
    "CACHE_TTL_SECONDS": "30",
    "PROVIDER_CONNECTIONS": "{}",
    "PROVIDER_SECRET_ARNS": "",
    "PROVIDER_PARAMETER_NAMES": "",
    "PROVIDER_TIMEOUT_CAP_SECONDS": "25",
    "POWERTOOLS_SERVICE_NAME": "convo-memory",
    "POWERTOOLS_METRICS_NAMESPACE": "ConvoMemory",
}


@pytest.fixture
def session() -> Iterator[boto3.session.Session]:
    with fake_aws():
        yield aws_session("us-east-1")  # the process's one botocore session: no file read again


@pytest.fixture
def resources(session: boto3.session.Session) -> LocalResources:
    return ensure_resources(session, template_path=TEMPLATE)


def _keys(key_schema: list[Any]) -> list[tuple[str, str]]:
    return [(k["AttributeName"], k["KeyType"]) for k in key_schema]


def _describe(session: boto3.session.Session, name: str) -> Any:
    return session.client("dynamodb").describe_table(TableName=name)["Table"]


def _ttl(session: boto3.session.Session, name: str) -> Any:
    return session.client("dynamodb").describe_time_to_live(TableName=name)["TimeToLiveDescription"]


def _queue_attributes(session: boto3.session.Session, url: str) -> Any:
    return session.client("sqs").get_queue_attributes(QueueUrl=url, AttributeNames=["All"])[
        "Attributes"
    ]


# ---------------------------------------------------------------- tables


def test_conversations_table_has_the_documented_keys_indexes_and_ttl(
    session: boto3.session.Session, resources: LocalResources
) -> None:
    name = resources.tables["ConversationsTable"]
    assert name == "convo-local-ConversationsTable"
    table = _describe(session, name)

    assert _keys(table["KeySchema"]) == [("pk", "HASH"), ("sk", "RANGE")]
    assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    types = {a["AttributeName"]: a["AttributeType"] for a in table["AttributeDefinitions"]}
    assert types == {a: "S" for a in ("pk", "sk", "gsi1pk", "gsi1sk", "gsi2pk", "gsi2sk")}

    indexes = {
        gsi["IndexName"]: (_keys(gsi["KeySchema"]), gsi["Projection"]["ProjectionType"])
        for gsi in table["GlobalSecondaryIndexes"]
    }
    assert indexes == {
        "byExternalRef": ([("gsi1pk", "HASH"), ("gsi1sk", "RANGE")], "INCLUDE"),
        "byActivity": ([("gsi2pk", "HASH"), ("gsi2sk", "RANGE")], "KEYS_ONLY"),
    }
    # A listing needs the session's fields, but not the coarse activity mark, so that
    # moving the mark never rewrites this index.
    included = {
        gsi["IndexName"]: set(gsi["Projection"].get("NonKeyAttributes", []))
        for gsi in table["GlobalSecondaryIndexes"]
    }
    assert "lastActiveAt" not in included["byExternalRef"]
    assert {"principal", "metadata", "status", "createdAt"} <= included["byExternalRef"]
    assert _ttl(session, name) == {"TimeToLiveStatus": "ENABLED", "AttributeName": "ttl"}


def test_runs_table_is_keyed_by_run_id_and_never_expires(
    session: boto3.session.Session, resources: LocalResources
) -> None:
    name = resources.tables["RunsTable"]
    table = _describe(session, name)

    assert _keys(table["KeySchema"]) == [("runId", "HASH")]
    assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    # One sparse, keys-only index: the runs of failed turns by session (an erasure's).
    (index,) = table.get("GlobalSecondaryIndexes", [])
    assert index["IndexName"] == "failedRunsBySession"
    assert _keys(index["KeySchema"]) == [("failedSessionId", "HASH")]
    assert index["Projection"]["ProjectionType"] == "KEYS_ONLY"
    # Traces outlive conversations: retention must never expire them.
    assert _ttl(session, name)["TimeToLiveStatus"] == "DISABLED"


def test_idempotency_table_follows_the_powertools_schema(
    session: boto3.session.Session, resources: LocalResources
) -> None:
    name = resources.tables["IdempotencyTable"]
    table = _describe(session, name)

    assert _keys(table["KeySchema"]) == [("id", "HASH")]
    assert _ttl(session, name) == {"TimeToLiveStatus": "ENABLED", "AttributeName": "expiration"}


def test_stateful_tables_survive_stack_deletion_and_replacement() -> None:
    resources = load_template(TEMPLATE)["Resources"]
    for logical_id in ("ConversationsTable", "RunsTable"):
        assert resources[logical_id]["DeletionPolicy"] == "Retain", logical_id
        assert resources[logical_id]["UpdateReplacePolicy"] == "Retain", logical_id
        props = resources[logical_id]["Properties"]
        assert props["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True


# ---------------------------------------------------------------- queues


@pytest.mark.parametrize(
    ("queue", "dlq", "receives"),
    # A repair retries within seconds (2..60 s): 20 receives ride out a longer outage.
    [
        ("SummaryQueue", "SummaryDLQ", 5),
        ("RepairQueue", "RepairDLQ", 20),
        ("ErasureQueue", "ErasureDLQ", 5),
        ("ForkCopyQueue", "ForkCopyDLQ", 10),
    ],
)
def test_work_queues_redrive_to_their_dead_letter_queue_after_their_receives(
    session: boto3.session.Session, resources: LocalResources, queue: str, dlq: str, receives: int
) -> None:
    dlq_arn = _queue_attributes(session, resources.queue_urls[dlq])["QueueArn"]
    redrive = json.loads(_queue_attributes(session, resources.queue_urls[queue])["RedrivePolicy"])

    assert redrive["deadLetterTargetArn"] == dlq_arn
    assert int(redrive["maxReceiveCount"]) == receives
    assert "RedrivePolicy" not in _queue_attributes(session, resources.queue_urls[dlq])


@pytest.mark.parametrize(
    ("function", "queue", "batch"),
    [
        ("SummarizeFunction", "SummaryQueue", 10),
        ("RepairFunction", "RepairQueue", 10),
        # One erasure job per invocation: its time check covers the whole invocation.
        ("EraseEndUserFunction", "ErasureQueue", 1),
        # Forks' copies: a queue and a worker of their own, apart from erasures.
        ("ForkCopyFunction", "ForkCopyQueue", 1),
    ],
)
def test_each_worker_consumes_its_queue_with_partial_batch_failures(
    session: boto3.session.Session,
    resources: LocalResources,
    function: str,
    queue: str,
    batch: int,
) -> None:
    spec = function_specs(TEMPLATE)[function]

    assert spec.sqs_queue_logical_id == queue
    assert spec.sqs_batch_size == batch
    assert spec.report_batch_item_failures is True
    assert spec.http_routes == []
    # AWS's rule of thumb: visibility >= 6x the consumer's timeout, or in-flight work
    # is redelivered (and counted towards the DLQ) while it is still running.
    visibility = int(_queue_attributes(session, resources.queue_urls[queue])["VisibilityTimeout"])
    assert visibility >= 6 * spec.timeout


# ---------------------------------------------------------------- local resources


def test_creating_the_resources_twice_changes_nothing(
    session: boto3.session.Session, resources: LocalResources
) -> None:
    again = ensure_resources(session, template_path=TEMPLATE)

    assert again.tables == resources.tables
    assert again.queue_urls == resources.queue_urls
    assert sorted(session.client("dynamodb").list_tables()["TableNames"]) == sorted(
        resources.tables.values()
    )
    assert len(session.client("sqs").list_queues()["QueueUrls"]) == 8


def test_physical_names_carry_the_configured_prefix(session: boto3.session.Session) -> None:
    created = ensure_resources(session, template_path=TEMPLATE, prefix="e2e-7-")

    assert set(created.tables) == {
        "ConversationsTable",
        "RunsTable",
        "IdempotencyTable",
        "TurnLimitsTable",
    }
    assert set(created.queue_urls) == {
        "SummaryQueue",
        "SummaryDLQ",
        "RepairQueue",
        "RepairDLQ",
        "ErasureQueue",
        "ErasureDLQ",
        "ForkCopyQueue",
        "ForkCopyDLQ",
    }
    assert all(name.startswith("e2e-7-") for name in created.tables.values())
    assert all(url.rsplit("/", 1)[1].startswith("e2e-7-") for url in created.queue_urls.values())


def test_function_environment_points_at_the_local_resources_with_documented_defaults(
    resources: LocalResources,
) -> None:
    env = resources.env()

    assert env["TABLE_NAME"] == resources.tables["ConversationsTable"]
    assert env["RUNS_TABLE_NAME"] == resources.tables["RunsTable"]
    assert env["IDEMPOTENCY_TABLE_NAME"] == resources.tables["IdempotencyTable"]
    assert env["SUMMARY_QUEUE_URL"] == resources.queue_urls["SummaryQueue"]
    assert env["REPAIR_QUEUE_URL"] == resources.queue_urls["RepairQueue"]
    assert env["SUMMARY_DLQ_URL"] == resources.queue_urls["SummaryDLQ"]
    assert env["REPAIR_DLQ_URL"] == resources.queue_urls["RepairDLQ"]
    assert env["ERASURE_QUEUE_URL"] == resources.queue_urls["ErasureQueue"]
    assert env["ERASURE_DLQ_URL"] == resources.queue_urls["ErasureDLQ"]
    assert env["FORK_COPY_QUEUE_URL"] == resources.queue_urls["ForkCopyQueue"]
    assert {name: env[name] for name in DOCUMENTED_DEFAULTS} == DOCUMENTED_DEFAULTS
    assert all(isinstance(value, str) for value in env.values())


# ---------------------------------------------------------------- functions and routes


def test_every_contract_route_is_served_by_the_documented_function() -> None:
    specs = function_specs(TEMPLATE)
    served: dict[tuple[str, str], str] = {}
    for logical_id, spec in specs.items():
        for route in spec.http_routes:
            assert route not in served, f"{route} declared by {served.get(route)} and {logical_id}"
            served[route] = logical_id

    assert served == EXPECTED_ROUTES


def test_functions_point_at_their_code_and_share_one_handler_name() -> None:
    specs = function_specs(TEMPLATE)

    assert set(specs) == {
        "AuthorizerFunction",
        "CapabilitiesFunction",
        "CreateSessionFunction",
        "ReadSessionsFunction",
        "ModifySessionFunction",
        "PredictFunction",
        "SummarizeFunction",
        "RepairFunction",
        "RetentionFunction",
        "StreamFunction",
        "StudioFunction",
        "OpenApiFunction",
        "ErasuresFunction",
        "EraseEndUserFunction",
        "ForkSessionFunction",
        "ForkCopyFunction",
        "FilesFunction",
    }
    assert specs["CreateSessionFunction"].code_uri == ROOT / "functions" / "create_session"
    assert specs["ReadSessionsFunction"].code_uri == ROOT / "functions" / "read_sessions"
    assert specs["ModifySessionFunction"].code_uri == ROOT / "functions" / "modify_session"
    assert specs["RepairFunction"].code_uri == ROOT / "functions" / "repair_transcript"
    assert specs["ErasuresFunction"].code_uri == ROOT / "functions" / "erasures"
    assert specs["EraseEndUserFunction"].code_uri == ROOT / "functions" / "erase_end_user"
    assert specs["ForkSessionFunction"].code_uri == ROOT / "functions" / "fork_session"
    assert specs["ForkCopyFunction"].code_uri == ROOT / "functions" / "copy_forks"
    # The streaming door runs behind the Lambda Web Adapter: run.sh starts app.py's server.
    stream = specs.pop("StreamFunction")
    assert stream.handler == "run.sh" and (stream.code_uri / "app.py").is_file()
    assert stream.http_routes == []
    # The OpenAPI document is made from every handler's routes: its code is all of them.
    openapi = specs.pop("OpenApiFunction")
    assert openapi.handler == "openapi.app.handler" and openapi.code_uri == ROOT / "functions"
    for spec in specs.values():
        assert spec.handler == "app.handler"
        assert spec.code_uri.parent == ROOT / "functions"
        assert spec.code_uri.is_dir(), spec.code_uri
    assert specs["PredictFunction"].timeout == 30  # the HttpApi waits 30 s; turns end sooner
    assert {spec.memory_size for spec in specs.values()} == {512}
    assert specs["AuthorizerFunction"].http_routes == []
    assert specs["AuthorizerFunction"].sqs_queue_logical_id is None


def test_every_route_sits_behind_the_token_authorizer_on_the_one_http_api() -> None:
    template = load_template(TEMPLATE)
    auth = template["Resources"]["HttpApi"]["Properties"]["Auth"]
    authorizer = auth["Authorizers"][auth["DefaultAuthorizer"]]

    assert authorizer["FunctionArn"] == {"Fn::GetAtt": ["AuthorizerFunction", "Arn"]}
    assert authorizer["AuthorizerPayloadFormatVersion"] == "2.0"
    assert authorizer["EnableSimpleResponses"] is True
    # No identity source, no cache: it runs on every request, a missing header included,
    # so that every 401 is the contract's body (docs/operating.md has the cost).
    assert authorizer["Identity"] == {"ReauthorizeEvery": 0}
    for logical_id, resource in template["Resources"].items():
        for event in (resource.get("Properties") or {}).get("Events", {}).values():
            if event["Type"] == "HttpApi":
                assert event["Properties"]["ApiId"] == {"Ref": "HttpApi"}, logical_id
                if event["Properties"]["Path"] in PUBLIC_PATHS:
                    assert event["Properties"]["Auth"] == {"Authorizer": "NONE"}
                else:
                    assert "Auth" not in event["Properties"], logical_id


def test_the_authorizer_can_only_read_token_items_of_the_conversations_table() -> None:
    policies = load_template(TEMPLATE)["Resources"]["AuthorizerFunction"]["Properties"]["Policies"]

    assert policies == [
        {
            "Statement": [
                {
                    "Sid": "ReadTokens",
                    "Effect": "Allow",
                    "Action": ["dynamodb:GetItem"],
                    "Resource": {"Fn::GetAtt": ["ConversationsTable", "Arn"]},
                    "Condition": {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["TOKEN#*"]}},
                }
            ]
        }
    ]


@pytest.mark.parametrize(
    ("function", "queues"),
    [
        ("PredictFunction", {"SummaryQueue", "RepairQueue"}),
        ("StreamFunction", {"SummaryQueue", "RepairQueue"}),
        ("ErasuresFunction", {"ErasureQueue"}),
        ("EraseEndUserFunction", {"ErasureQueue"}),
        ("ModifySessionFunction", {"ErasureQueue"}),
        ("ForkSessionFunction", {"ForkCopyQueue", "SummaryQueue"}),
        ("PredictFunction", {"ForkCopyQueue"}),
    ],
)
def test_functions_that_enqueue_may_send_to_their_queues(function: str, queues: set[str]) -> None:
    assert queues <= queues_sent_to(function)


def queues_sent_to(function: str) -> set[str]:
    policies = load_template(TEMPLATE)["Resources"][function]["Properties"].get("Policies", [])
    return {
        p["SQSSendMessagePolicy"]["QueueName"]["Fn::GetAtt"][0]
        for p in policies
        if isinstance(p, dict) and "SQSSendMessagePolicy" in p
    }


def test_the_summary_worker_cannot_requeue_itself_and_runs_with_bounded_concurrency() -> None:
    template = load_template(TEMPLATE)
    worker = template["Resources"]["SummarizeFunction"]["Properties"]

    # No self-requeue chain for Lambda's recursive-loop detection to cut: it may only
    # shorten the visibility of a message it received, so SQS redelivers that message.
    assert queues_sent_to("SummarizeFunction") == set()
    statements = [
        statement
        for policy in worker["Policies"]
        if isinstance(policy, dict) and "Statement" in policy
        for statement in policy["Statement"]
    ]
    (redeliver,) = [s for s in statements if "sqs:ChangeMessageVisibility" in s["Action"]]
    assert redeliver["Action"] == ["sqs:ChangeMessageVisibility"]
    assert redeliver["Resource"] == {"Fn::GetAtt": ["SummaryQueue", "Arn"]}
    assert not any(a.startswith("sqs:Send") for s in statements for a in s["Action"])

    scaling = worker["Events"]["SummaryJobs"]["Properties"]["ScalingConfig"]
    assert scaling == {"MaximumConcurrency": {"Ref": "SummaryMaxConcurrency"}}
    parameter = template["Parameters"]["SummaryMaxConcurrency"]
    assert parameter["MinValue"] == 2 and parameter["Default"] >= 2


def test_the_summary_settings_are_parameters_every_function_reads() -> None:
    template = load_template(TEMPLATE)
    variables = template["Globals"]["Function"]["Environment"]["Variables"]

    assert variables["SUMMARY_BATCH_TURNS"] == {"Ref": "SummaryBatchTurns"}
    assert variables["SUMMARY_CONNECTION"] == {"Ref": "SummaryConnection"}
    assert variables["SUMMARY_MODEL_ID"] == {"Ref": "SummaryModelId"}
    assert template["Parameters"]["SummaryBatchTurns"]["Default"] == 5
    assert template["Parameters"]["SummaryConnection"]["Default"] == ""


MODEL_CALLERS = ("PredictFunction", "StreamFunction", "SummarizeFunction")


def _evaluate(value: Any, parameters: dict[str, Any]) -> Any:
    """Fn::Join, Fn::Split and Ref of list parameters, as CloudFormation evaluates them."""
    if isinstance(value, dict) and "Ref" in value:
        return parameters[value["Ref"]]
    if isinstance(value, dict) and "Fn::Join" in value:
        delimiter, parts = value["Fn::Join"]
        items = _evaluate(parts, parameters)
        return delimiter.join(str(_evaluate(item, parameters)) for item in items)
    if isinstance(value, dict) and "Fn::Split" in value:
        delimiter, text = value["Fn::Split"]
        return str(_evaluate(text, parameters)).split(delimiter)
    if isinstance(value, list):
        return [_evaluate(item, parameters) for item in value]
    return value


def _key_statements(function: str) -> dict[str, Any]:
    """Sid -> (condition, statement) of the provider-key grants of ``function``."""
    found: dict[str, Any] = {}
    policies = load_template(TEMPLATE)["Resources"][function]["Properties"].get("Policies", [])
    for policy in policies:
        if isinstance(policy, dict) and "Fn::If" in policy:
            condition, then, otherwise = policy["Fn::If"]
            assert otherwise == {"Ref": "AWS::NoValue"}  # an empty list grants nothing
            for statement in then["Statement"]:
                found[statement["Sid"]] = (condition, statement)
    return found


@pytest.mark.parametrize("function", MODEL_CALLERS)
def test_model_callers_may_read_exactly_the_operators_provider_keys(function: str) -> None:
    statements = _key_statements(function)

    secrets_condition, secrets = statements["ReadProviderSecrets"]
    assert secrets_condition == "HasProviderSecrets"
    assert secrets["Action"] == ["secretsmanager:GetSecretValue"]
    assert secrets["Resource"] == {"Ref": "ProviderSecretArns"}
    parameters_condition, parameters = statements["ReadProviderParameters"]
    assert parameters_condition == "HasProviderParameters"
    assert parameters["Action"] == ["ssm:GetParameter"]
    names = ["/convo/llm-key", "/team/other"]
    assert _evaluate(parameters["Resource"], {"ProviderParameterNames": names}) == [
        "arn:*:ssm:*:*:parameter/convo/llm-key",
        "arn:*:ssm:*:*:parameter/team/other",
    ]
    assert parameters["Condition"] == {
        "StringEquals": {"aws:RequestedRegion": {"Ref": "AWS::Region"}}
    }
    for sid, service in [
        ("DecryptProviderParametersViaSsm", "ssm"),
        ("DecryptProviderSecretsViaSecretsManager", "secretsmanager"),
    ]:
        _, decrypt = statements[sid]
        assert decrypt["Action"] == ["kms:Decrypt"]
        via = decrypt["Condition"]["StringEquals"]["kms:ViaService"]
        assert via == {"Fn::Sub": f"{service}.${{AWS::Region}}.amazonaws.com"}


def test_functions_that_call_no_model_read_no_provider_key() -> None:
    specs = function_specs(TEMPLATE)
    for function in set(specs) - set(MODEL_CALLERS):
        assert _key_statements(function) == {}, function


def test_an_empty_key_list_makes_no_statement() -> None:
    conditions = load_template(TEMPLATE)["Conditions"]
    for condition, parameter in [
        ("HasProviderSecrets", "ProviderSecretArns"),
        ("HasProviderParameters", "ProviderParameterNames"),
    ]:
        assert conditions[condition] == {
            "Fn::Not": [{"Fn::Equals": [{"Fn::Join": ["", {"Ref": parameter}]}, ""]}]
        }


# ---------------------------------------------------------------- sample events


def _event_table() -> dict[str, str]:
    """events/README.md: event file -> function logical id."""
    rows = re.findall(r"^\| `([\w.]+\.json)` \| (\w+) \|", (EVENTS / "README.md").read_text(), re.M)
    return dict(rows)


def test_every_sample_event_is_listed_with_an_existing_function() -> None:
    table = _event_table()
    specs = function_specs(TEMPLATE)

    assert set(table) == {path.name for path in EVENTS.glob("*.json")}
    # StreamFunction is reached through its Function URL (HTTP via the Web Adapter),
    # not by an event of its own.
    assert set(table.values()) == set(specs) - {"StreamFunction"}


def test_http_sample_events_match_a_route_of_their_function() -> None:
    specs = function_specs(TEMPLATE)
    for name, function in _event_table().items():
        event = json.loads((EVENTS / name).read_text())
        if event.get("version") != "2.0" or event.get("type") == "REQUEST":
            continue
        method, path = event["routeKey"].split(" ", 1)
        assert (method, path) in specs[function].http_routes, name
        assert event["requestContext"]["http"]["method"] == method, name
        if path in PUBLIC_PATHS:
            assert "authorizer" not in event["requestContext"], name
        else:
            assert event["requestContext"]["authorizer"]["lambda"]["workspaceId"] == "ws-dev"
            assert event["headers"]["authorization"] == "Bearer dev-token", name
        raw_path = path
        for key, value in (event.get("pathParameters") or {}).items():
            raw_path = raw_path.replace("{" + key + "}", value)
        assert event["rawPath"] == raw_path == event["requestContext"]["http"]["path"], name
        if "body" in event:
            assert isinstance(json.loads(event["body"]), dict), name


def test_authorizer_event_is_a_v2_request_with_the_bearer_token() -> None:
    event = json.loads((EVENTS / "authorizer.json").read_text())

    assert (event["version"], event["type"]) == ("2.0", "REQUEST")
    assert event["identitySource"] == [event["headers"]["authorization"]]
    assert event["headers"]["authorization"] == "Bearer dev-token"


@pytest.mark.parametrize("name", ["summarize_sqs.json", "repair_sqs.json"])
def test_worker_sample_events_carry_session_jobs(name: str) -> None:
    records = json.loads((EVENTS / name).read_text())["Records"]

    assert len(records) == 2
    for record in records:
        assert record["eventSource"] == "aws:sqs"
        body = json.loads(record["body"])
        expected = {"sessionId", "workspaceId"} | ({"turn"} if name == "repair_sqs.json" else set())
        assert set(body) == expected
