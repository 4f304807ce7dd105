"""Operable on day one, read from the stack CloudFormation would deploy (template.yaml
after the SAM transform, parameters at their defaults unless a test overrides them):
alarms to an SNS topic, log groups with a retention, JSON access logs, limits, the Web
Adapter layer per region, the layer's build, and parameter ranges equal to the settings
checks of config.py."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import annotated_types
import pytest

from convo_memory.config import Settings
from local_runtime.aws_resources import load_template
from tests.support.stack_template import (
    ACCOUNT,
    REGION,
    Stack,
    transformed_template,
)

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"
SERVING = (
    "AuthorizerFunction",
    "CapabilitiesFunction",
    "CreateSessionFunction",
    "ReadSessionsFunction",
    "ModifySessionFunction",
    "PredictFunction",
    "StreamFunction",
    "StudioFunction",
    "ForkSessionFunction",
)
# CloudFormation's allowed values of AWS::Logs::LogGroup RetentionInDays.
RETENTION_DAYS = [1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827]
RETENTION_DAYS += [2192, 2557, 2922, 3288, 3653]
ACCESS_LOG_FIELDS = {
    "requestId",
    "ip",
    "method",
    "routeKey",
    "status",
    "protocol",
    "responseLength",
    "integrationError",
    "authorizerError",
    "latency",
}


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return transformed_template(TEMPLATE)


@pytest.fixture(scope="module")
def stack(template: dict[str, Any]) -> Stack:
    return Stack(template)


def functions(stack: Stack) -> set[str]:
    return set(stack.of_type("AWS::Lambda::Function"))


def alarms(stack: Stack) -> dict[str, dict[str, Any]]:
    return {name: stack.properties(name) for name in stack.of_type("AWS::CloudWatch::Alarm")}


def topic_arn(stack: Stack) -> str:
    (topic,) = stack.of_type("AWS::SNS::Topic")
    return f"arn:aws:sns:{REGION}:{ACCOUNT}:{topic}"


# ---------------------------------------------------------------- logs


def test_every_function_logs_to_its_own_group_with_the_retention_parameter(
    template: dict[str, Any],
) -> None:
    for days, stack in ((30, Stack(template)), (365, Stack(template, {"LogRetentionDays": 365}))):
        groups = {
            props["LogGroupName"]: props["RetentionInDays"]
            for props in map(stack.properties, stack.of_type("AWS::Logs::LogGroup"))
            if "LogGroupName" in props
        }
        assert groups == {f"/aws/lambda/{function}": days for function in functions(stack)}


def test_the_retention_parameter_takes_exactly_cloudformations_values(stack: Stack) -> None:
    parameter = stack.template["Parameters"]["LogRetentionDays"]

    assert parameter["AllowedValues"] == RETENTION_DAYS
    assert parameter["Default"] in RETENTION_DAYS


def test_the_http_api_writes_json_access_logs_with_a_retention(stack: Stack) -> None:
    (stage,) = stack.of_type("AWS::ApiGatewayV2::Stage")
    settings = stack.properties(stage)["AccessLogSettings"]
    (group,) = (
        name
        for name in stack.of_type("AWS::Logs::LogGroup")
        if "LogGroupName" not in stack.properties(name)
    )

    assert settings["DestinationArn"] == stack.get_att(group, "Arn")
    assert stack.properties(group)["RetentionInDays"] == 30
    line = settings["Format"]
    assert "\n" not in line  # one request, one line
    fields = json.loads(re.sub(r"\$context\.[\w.]+", "x", line))
    assert set(fields) == ACCESS_LOG_FIELDS
    assert json.loads(line)["authorizerError"] == "$context.authorizer.error"


# ---------------------------------------------------------------- alarms


def test_every_alarm_notifies_the_topic_and_the_email_is_subscribed_only_when_given(
    template: dict[str, Any], stack: Stack
) -> None:
    found = alarms(stack)

    assert found
    for name, props in found.items():
        assert props["AlarmActions"] == [topic_arn(stack)], name
        assert props["OKActions"] == [topic_arn(stack)], name
        assert props["TreatMissingData"] == "notBreaching", name
    assert stack.of_type("AWS::SNS::Subscription") == {}
    subscribed = Stack(template, {"AlarmEmail": "oncall@example.com"})
    (subscription,) = subscribed.of_type("AWS::SNS::Subscription")
    assert subscribed.properties(subscription) == {
        "TopicArn": topic_arn(stack),
        "Protocol": "email",
        "Endpoint": "oncall@example.com",
    }


@pytest.mark.parametrize("dlq", ["SummaryDLQ", "RepairDLQ"])
def test_a_message_in_a_dead_letter_queue_raises_an_alarm(stack: Stack, dlq: str) -> None:
    (props,) = (
        props
        for props in alarms(stack).values()
        if props.get("Dimensions") == [{"Name": "QueueName", "Value": dlq}]
    )

    assert (props["Namespace"], props["MetricName"]) == (
        "AWS/SQS",
        "ApproximateNumberOfMessagesVisible",
    )
    assert (props["Threshold"], props["ComparisonOperator"]) == (0, "GreaterThanThreshold")


@pytest.mark.parametrize("metric", ["Errors", "Throttles"])
def test_every_function_is_watched_for_errors_and_throttles(stack: Stack, metric: str) -> None:
    watched: list[str] = []
    for props in alarms(stack).values():
        queries = props.get("Metrics") or []
        stats = [query["MetricStat"]["Metric"] for query in queries if "MetricStat" in query]
        if not stats or stats[0]["MetricName"] != metric:
            continue
        assert len(stats) <= 10  # CloudWatch's limit of metrics per alarm
        (expression,) = (query for query in queries if query.get("ReturnData"))
        assert expression["Expression"] == "SUM(METRICS())"
        assert (props["Threshold"], props["ComparisonOperator"]) == (0, "GreaterThanThreshold")
        for stat in stats:
            assert stat["Namespace"] == "AWS/Lambda"
            (dimension,) = stat["Dimensions"]
            watched.append(dimension["Value"])

    assert sorted(watched) == sorted(functions(stack))  # each exactly once


def test_summary_lag_alarms_on_the_emf_metric_above_the_threshold_parameter(
    template: dict[str, Any],
) -> None:
    for threshold, stack in (
        (200, Stack(template)),
        (50, Stack(template, {"SummaryLagAlarmThreshold": 50})),
    ):
        (props,) = (
            p for p in alarms(stack).values() if p.get("MetricName") == "SummaryLagMessages"
        )

        assert props["Namespace"] == "ConvoMemory"
        assert props["Dimensions"] == [{"Name": "service", "Value": "convo-memory"}]
        assert (props["Statistic"], props["Period"], props["EvaluationPeriods"]) == (
            "Maximum",
            900,
            1,
        )
        assert props["Threshold"] == threshold
        assert props["ComparisonOperator"] == "GreaterThanThreshold"


def test_a_turn_not_recorded_raises_an_alarm(stack: Stack) -> None:
    for props in alarms(stack).values():
        names = {
            query["MetricStat"]["Metric"]["MetricName"]: query["MetricStat"]
            for query in props.get("Metrics") or []
            if "MetricStat" in query
        }
        if "TranscriptWriteFailed" in names:
            break
    else:
        pytest.fail("no alarm on TranscriptWriteFailed")

    assert set(names) == {"TranscriptWriteFailed", "TranscriptRepairFailed"}
    for stat in names.values():
        assert stat["Metric"]["Namespace"] == "ConvoMemory"
        assert stat["Metric"]["Dimensions"] == [{"Name": "service", "Value": "convo-memory"}]
        assert stat["Stat"] == "Sum"
    assert (props["Threshold"], props["ComparisonOperator"]) == (0, "GreaterThanThreshold")


def test_throttled_writes_of_every_table_and_index_raise_an_alarm(stack: Stack) -> None:
    # No item is written by every turn of a workspace, so a throttled write is a flood
    # (the turn limiter refuses it) or the account's quota: either way an operator's call.
    (props,) = (
        p
        for p in alarms(stack).values()
        if any(
            query.get("MetricStat", {}).get("Metric", {}).get("MetricName") == "WriteThrottleEvents"
            for query in p.get("Metrics") or []
        )
    )
    watched = set()
    for query in props["Metrics"]:
        if "MetricStat" not in query:
            assert query["Expression"] == "SUM(METRICS())" and query["ReturnData"] is True
            continue
        metric = query["MetricStat"]["Metric"]
        assert (metric["Namespace"], metric["MetricName"]) == (
            "AWS/DynamoDB",
            "WriteThrottleEvents",
        )
        assert query["MetricStat"]["Stat"] == "Sum" and query["ReturnData"] is False
        dimensions = {d["Name"]: d["Value"] for d in metric["Dimensions"]}
        watched.add((dimensions["TableName"], dimensions.get("GlobalSecondaryIndexName")))

    expected = set()
    for table in stack.of_type("AWS::DynamoDB::Table"):
        expected.add((table, None))
        for index in stack.properties(table).get("GlobalSecondaryIndexes") or []:
            expected.add((table, index["IndexName"]))
    assert watched == expected and ("TurnLimitsTable", None) in watched
    assert (props["Threshold"], props["ComparisonOperator"]) == (0, "GreaterThanThreshold")


def test_the_api_answering_5xx_raises_an_alarm(stack: Stack) -> None:
    (props,) = (p for p in alarms(stack).values() if p.get("Namespace") == "AWS/ApiGateway")

    assert props["MetricName"] == "5xx"
    assert props["Dimensions"] == [
        {"Name": "ApiId", "Value": "HttpApi"},
        {"Name": "Stage", "Value": "$default"},
    ]


# ---------------------------------------------------------------- limits


def test_serving_functions_reserve_concurrency_from_parameters(template: dict[str, Any]) -> None:
    defaults = Stack(template)
    reserved = {
        name: defaults.properties(name).get("ReservedConcurrentExecutions") for name in SERVING
    }
    assert reserved == {
        "AuthorizerFunction": None,  # 0: nothing reserved (see the parameter)
        "CapabilitiesFunction": 10,
        "CreateSessionFunction": 10,
        "ReadSessionsFunction": 10,
        "ModifySessionFunction": 10,
        "PredictFunction": 50,
        "StreamFunction": 20,  # the public Function URL's cap
        "StudioFunction": 10,
        # Forks on copies of their own: a storm of them leaves CreateSession's alone.
        "ForkSessionFunction": 5,
    }
    chosen = Stack(
        template,
        {
            "AuthorizerReservedConcurrency": 7,
            "ApiReservedConcurrency": 0,
            "PredictReservedConcurrency": 0,
            "StreamReservedConcurrency": 3,
            "ForkReservedConcurrency": 0,
        },
    )
    assert chosen.properties("AuthorizerFunction")["ReservedConcurrentExecutions"] == 7
    assert chosen.properties("StreamFunction")["ReservedConcurrentExecutions"] == 3
    for name in (
        "CapabilitiesFunction",
        "PredictFunction",
        "StudioFunction",
        "ForkSessionFunction",
    ):
        assert "ReservedConcurrentExecutions" not in chosen.properties(name)


def test_the_function_url_belongs_to_the_capped_stream_function(stack: Stack) -> None:
    (url,) = stack.of_type("AWS::Lambda::Url")
    props = stack.properties(url)

    assert props["TargetFunctionArn"] == "StreamFunction"
    assert props["AuthType"] == "NONE"
    assert stack.properties("StreamFunction")["ReservedConcurrentExecutions"] > 0


def test_the_repair_consumer_has_a_maximum_concurrency(template: dict[str, Any]) -> None:
    for value, stack in ((5, Stack(template)), (40, Stack(template, {"RepairMaxConcurrency": 40}))):
        (mapping,) = (
            props
            for props in map(stack.properties, stack.of_type("AWS::Lambda::EventSourceMapping"))
            if props["FunctionName"] == "RepairFunction"
        )
        assert mapping["ScalingConfig"] == {"MaximumConcurrency": value}


def test_the_http_api_throttles_every_route_from_parameters(template: dict[str, Any]) -> None:
    stack = Stack(template, {"ApiThrottlingRateLimit": 25, "ApiThrottlingBurstLimit": 60})
    (stage,) = stack.of_type("AWS::ApiGatewayV2::Stage")

    assert stack.properties(stage)["DefaultRouteSettings"] == {
        "ThrottlingRateLimit": 25,
        "ThrottlingBurstLimit": 60,
    }


def test_the_turn_limit_reaches_every_function(stack: Stack) -> None:
    for name in functions(stack):
        variables = stack.properties(name)["Environment"]["Variables"]
        assert variables["WORKSPACE_TURNS_PER_SECOND"] == 10, name


# ---------------------------------------------------------------- the Web Adapter layer


def test_the_web_adapter_layer_comes_from_the_regions_mapping_and_a_rule_guards_it(
    stack: Stack,
) -> None:
    mapping = stack.template["Mappings"]["WebAdapterLayer"]
    (assertion,) = stack.template["Rules"]["WebAdapterLayerRegion"]["Assertions"]
    regions, region = assertion["Assert"]["Fn::Contains"]

    assert sorted(regions) == sorted(mapping)
    assert region == {"Ref": "AWS::Region"}
    assert "arm64" in assertion["AssertDescription"]
    for name, entry in mapping.items():
        assert entry["Arm64"] == (
            f"arn:aws:lambda:{name}:753240598075:layer:LambdaAdapterLayerArm64"
        )
    layers = stack.properties("StreamFunction")["Layers"]
    assert f"arn:aws:lambda:{REGION}:753240598075:layer:LambdaAdapterLayerArm64:25" in layers


# ---------------------------------------------------------------- the layer's build


def test_the_layer_is_built_by_its_makefile_for_arm64() -> None:
    layer = load_template(TEMPLATE)["Resources"]["CommonLayer"]
    makefile = (ROOT / "layers" / "common" / "Makefile").read_text()

    assert layer["Metadata"] == {"BuildMethod": "makefile", "BuildArchitecture": "arm64"}
    assert re.search(r"^build-CommonLayer:", makefile, re.M)
    assert "--invalidation-mode unchecked-hash" in makefile
    assert "manylinux2014_aarch64" in makefile


# ---------------------------------------------------------------- parameters vs settings


def _bounds(field: str) -> tuple[float | None, float | None]:
    low: float | None = None
    high: float | None = None
    for constraint in Settings.model_fields[field].metadata:
        if isinstance(constraint, annotated_types.Ge):
            low = float(constraint.ge)  # type: ignore[arg-type]
        elif isinstance(constraint, annotated_types.Le):
            high = float(constraint.le)  # type: ignore[arg-type]
        elif isinstance(constraint, annotated_types.Gt | annotated_types.Lt):
            pytest.fail(f"{field}: an exclusive bound has no CloudFormation equivalent; use ge/le")
    return low, high


def _settings_parameters() -> dict[str, str]:
    """Environment variable -> the Number parameter the template hands it (Globals and
    every function's own variables)."""
    template = load_template(TEMPLATE)
    numbers = {name for name, spec in template["Parameters"].items() if spec["Type"] == "Number"}
    found: dict[str, str] = {}
    blocks = [template["Globals"]["Function"]]
    blocks += [resource.get("Properties") or {} for resource in template["Resources"].values()]
    for block in blocks:
        variables = (block.get("Environment") or {}).get("Variables") or {}
        for variable, value in variables.items():
            if isinstance(value, dict) and value.get("Ref") in numbers:
                found[variable] = value["Ref"]
    return found


def test_numeric_parameters_read_by_the_functions_are_found() -> None:
    found = _settings_parameters()

    assert {"DIGEST_MAX_CHARS", "CACHE_TTL_SECONDS", "WORKSPACE_TURNS_PER_SECOND"} <= set(found)


@pytest.mark.parametrize(("variable", "parameter"), sorted(_settings_parameters().items()))
def test_each_parameter_range_equals_its_settings_check(variable: str, parameter: str) -> None:
    spec = load_template(TEMPLATE)["Parameters"][parameter]
    field = variable.lower()
    assert field in Settings.model_fields, f"{variable} is no setting of config.py"
    low, high = _bounds(field)

    assert spec.get("MinValue") == low, f"{parameter} MinValue vs {field} ge"
    assert spec.get("MaxValue") == high, f"{parameter} MaxValue vs {field} le"
    # The default passes the settings check too.
    Settings.model_validate({"table_name": "t", "runs_table_name": "r", field: spec["Default"]})


# ---------------------------------------------------------------- tracing


def test_tracing_is_off_unless_the_operator_turns_it_on(template: dict[str, Any]) -> None:
    for mode in ("PassThrough", "Active"):
        stack = Stack(template) if mode == "PassThrough" else Stack(template, {"Tracing": mode})
        modes = {name: stack.properties(name)["TracingConfig"]["Mode"] for name in functions(stack)}
        assert set(modes.values()) == {mode}, modes
