"""What the local runtime hands the handlers: routes, API Gateway v2 events, SQS events.

Pure functions, no servers."""

from __future__ import annotations

import base64
import json
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from local_runtime.aws_resources import load_template, parameter_defaults
from local_runtime.handlers import (
    FunctionRegistry,
    HandlerLoadError,
    LambdaContext,
    LambdaFunction,
    UnknownFunctionError,
)
from local_runtime.http_gateway import (
    AuthDecision,
    AuthorizerCache,
    AuthorizerConfig,
    HttpRequest,
    InvalidLambdaResponseError,
    Route,
    build_authorizer_event,
    build_http_event,
    match_route,
    parse_authorizer_result,
    query_parameters,
    translate_result,
)
from local_runtime.lambda_api import function_name_of
from local_runtime.queue_pollers import sqs_event, succeeded_records
from local_runtime.runtime import (
    TEMPLATE,
    ConfigError,
    RuntimeConfig,
    parse_dev_tokens,
    read_topology,
)

SUMMARY_MAX_CONCURRENCY = 5  # the template's SummaryMaxConcurrency default

ROUTES = [
    Route("POST", "/v1/capabilities", "CapabilitiesFunction", "TokenAuthorizer"),
    Route("GET", "/v1/capabilities/{capabilityId}", "CapabilitiesFunction", "TokenAuthorizer"),
    Route("POST", "/v1/capabilities/{capabilityId}/predict", "PredictFunction", "T"),
    Route("POST", "/v1/capabilities/{capabilityId}/predict/stream", "PredictFunction", "T"),
    Route("GET", "/v1/sessions/{sessionId}", "SessionsFunction", "T"),
    Route("GET", "/v1/sessions/{sessionId}/messages", "SessionsFunction", "T"),
    Route("POST", "/v1/sessions/{sessionId}/messages", "PredictFunction", "T"),
    Route("GET", "/v1/sessions/archived", "ArchiveFunction", "T"),
    Route("ANY", "/v1/files/{path+}", "FilesFunction", None),
    Route("GET", "/v1/files/{path+}", "FilesGetFunction", None),
]


def request(
    method: str = "GET",
    path: str = "/v1/sessions/s1",
    query: str = "",
    headers: list[tuple[str, str]] | None = None,
    body: bytes = b"",
) -> HttpRequest:
    return HttpRequest(
        method=method,
        raw_path=path,
        raw_query=query,
        headers=headers if headers is not None else [("Host", "127.0.0.1:3000")],
        body=body,
        request_id="req-1",
        received_at=1_700_000_000.5,
    )


# --------------------------------------------------------------------------- routes


class TestRouteMatching:
    def test_a_path_template_captures_its_parameters(self) -> None:
        match = match_route(ROUTES, "GET", "/v1/capabilities/cap-1")

        assert match is not None
        assert match.route.route_key == "GET /v1/capabilities/{capabilityId}"
        assert match.path_parameters == {"capabilityId": "cap-1"}

    def test_the_method_selects_between_routes_of_one_path(self) -> None:
        get = match_route(ROUTES, "get", "/v1/sessions/s1/messages")
        post = match_route(ROUTES, "POST", "/v1/sessions/s1/messages")

        assert get is not None and get.route.function == "SessionsFunction"
        assert post is not None and post.route.function == "PredictFunction"

    def test_a_literal_segment_beats_a_parameter(self) -> None:
        match = match_route(ROUTES, "GET", "/v1/sessions/archived")

        assert match is not None
        assert match.route.function == "ArchiveFunction"
        assert match.path_parameters == {}

    def test_a_longer_template_does_not_match_a_shorter_path(self) -> None:
        match = match_route(ROUTES, "POST", "/v1/capabilities/c1/predict/stream")

        assert match is not None
        assert match.route.path.endswith("/predict/stream")
        assert match_route(ROUTES, "POST", "/v1/capabilities/c1/predict/stream/x") is None

    def test_no_route_for_an_unknown_path_or_method(self) -> None:
        assert match_route(ROUTES, "GET", "/v1/nothing") is None
        assert match_route(ROUTES, "DELETE", "/v1/capabilities") is None
        assert match_route(ROUTES, "GET", "/v1/capabilities/") is None
        assert match_route(ROUTES, "GET", "/") is None

    def test_a_greedy_parameter_takes_the_rest_and_an_exact_method_beats_any(self) -> None:
        get = match_route(ROUTES, "GET", "/v1/files/a/b.txt")
        put = match_route(ROUTES, "PUT", "/v1/files/a/b.txt")

        assert get is not None and get.route.function == "FilesGetFunction"
        assert put is not None and put.route.function == "FilesFunction"
        assert put.path_parameters == {"path": "a/b.txt"}
        assert match_route(ROUTES, "PUT", "/v1/files") is None

    def test_parameters_are_decoded_but_an_encoded_slash_stays_in_its_segment(self) -> None:
        match = match_route(ROUTES, "GET", "/v1/sessions/a%2Fb%20c")

        assert match is not None
        assert match.path_parameters == {"sessionId": "a/b c"}

    def test_default_route_catches_the_rest(self) -> None:
        routes = [*ROUTES, Route("ANY", "$default", "DefaultFunction")]

        match = match_route(routes, "GET", "/anything/else")
        specific = match_route(routes, "GET", "/v1/sessions/s1")

        assert match is not None
        assert match.route.route_key == "$default"
        assert specific is not None and specific.route.function == "SessionsFunction"


# --------------------------------------------------------------------------- events


class TestHttpEvent:
    def test_the_event_has_the_payload_2_0_shape(self) -> None:
        event = build_http_event(
            request(
                "POST",
                "/v1/sessions/s1/messages",
                "a=1",
                [("Host", "127.0.0.1:3000"), ("User-Agent", "curl/8"), ("X-Req", "1")],
                b'{"input": "hi"}',
            ),
            "POST /v1/sessions/{sessionId}/messages",
            {"sessionId": "s1"},
            {"workspaceId": "ws-1"},
        )

        assert event["version"] == "2.0"
        assert event["routeKey"] == "POST /v1/sessions/{sessionId}/messages"
        assert event["rawPath"] == "/v1/sessions/s1/messages"
        assert event["rawQueryString"] == "a=1"
        assert event["headers"] == {"host": "127.0.0.1:3000", "user-agent": "curl/8", "x-req": "1"}
        assert event["queryStringParameters"] == {"a": "1"}
        assert event["pathParameters"] == {"sessionId": "s1"}
        assert event["body"] == '{"input": "hi"}'
        assert event["isBase64Encoded"] is False
        assert event["requestContext"] == {
            "accountId": "123456789012",
            "apiId": "local",
            "domainName": "127.0.0.1:3000",
            "domainPrefix": "127",
            "http": {
                "method": "POST",
                "path": "/v1/sessions/s1/messages",
                "protocol": "HTTP/1.1",
                "sourceIp": "127.0.0.1",
                "userAgent": "curl/8",
            },
            "requestId": "req-1",
            "routeKey": "POST /v1/sessions/{sessionId}/messages",
            "stage": "$default",
            "time": "14/Nov/2023:22:13:20 +0000",
            "timeEpoch": 1_700_000_000_500,
            "authorizer": {"lambda": {"workspaceId": "ws-1"}},
        }

    def test_optional_parts_are_left_out_when_absent(self) -> None:
        event = build_http_event(request(), "GET /v1/sessions/{sessionId}")

        for absent in ("queryStringParameters", "pathParameters", "cookies", "body"):
            assert absent not in event
        assert "authorizer" not in event["requestContext"]
        assert event["isBase64Encoded"] is False

    def test_repeated_headers_and_query_parameters_are_comma_joined(self) -> None:
        event = build_http_event(
            request(query="x=1&x=2&y=&z=a%20b", headers=[("X-A", "1"), ("x-a", "2")]),
            "GET /v1/sessions/{sessionId}",
        )

        assert event["headers"] == {"x-a": "1,2"}
        assert event["queryStringParameters"] == {"x": "1,2", "y": "", "z": "a b"}
        assert query_parameters("") == {}

    def test_cookies_move_from_the_header_to_their_own_list(self) -> None:
        event = build_http_event(
            request(headers=[("Cookie", "a=1; b=2"), ("Cookie", "c=3")]), "GET /x"
        )

        assert event["cookies"] == ["a=1", "b=2", "c=3"]
        assert "cookie" not in event["headers"]

    def test_a_body_that_is_not_utf8_is_base64_encoded(self) -> None:
        event = build_http_event(request(body=b"\xff\x00"), "POST /x")

        assert event["isBase64Encoded"] is True
        assert base64.b64decode(event["body"]) == b"\xff\x00"


class TestAuthorizerEvent:
    def test_the_request_authorizer_event_names_route_and_identity(self) -> None:
        match = match_route(ROUTES, "GET", "/v1/sessions/s1")
        assert match is not None

        event = build_authorizer_event(
            request(headers=[("Authorization", "Bearer t0k")]), match, ["Bearer t0k"]
        )

        assert event["version"] == "2.0"
        assert event["type"] == "REQUEST"
        assert event["identitySource"] == ["Bearer t0k"]
        assert event["routeKey"] == "GET /v1/sessions/{sessionId}"
        assert event["routeArn"] == (
            "arn:aws:execute-api:us-east-1:123456789012:local/$default/GET/v1/sessions/s1"
        )
        assert event["headers"] == {"authorization": "Bearer t0k"}
        assert event["pathParameters"] == {"sessionId": "s1"}
        assert event["requestContext"]["requestId"] == "req-1"
        assert "authorizer" not in event["requestContext"]

    def test_a_simple_response_is_read(self) -> None:
        decision = parse_authorizer_result(
            {"isAuthorized": True, "context": {"workspaceId": ""}}, simple_responses=True
        )

        assert decision == AuthDecision(True, {"workspaceId": ""})
        assert not parse_authorizer_result({"isAuthorized": False}, True).authorized

    def test_an_iam_policy_response_is_read(self) -> None:
        allow = {"policyDocument": {"Statement": [{"Effect": "Allow"}]}, "context": {"a": 1}}
        deny = {"policyDocument": {"Statement": [{"Effect": "Deny"}]}}

        assert parse_authorizer_result(allow, simple_responses=False) == AuthDecision(
            True, {"a": 1}
        )
        assert not parse_authorizer_result(deny, simple_responses=False).authorized

    @pytest.mark.parametrize(
        "result",
        [
            None,
            "yes",
            {"isAuthorized": "true"},
            {"context": {}},
            {"isAuthorized": True, "context": []},
        ],
    )
    def test_a_malformed_result_is_refused(self, result: Any) -> None:
        with pytest.raises(InvalidLambdaResponseError):
            parse_authorizer_result(result, simple_responses=True)

    def test_the_cache_keeps_a_decision_for_its_ttl(self) -> None:
        now = [100.0]
        cache = AuthorizerCache(300, clock=lambda: now[0])
        decision = AuthDecision(True, {"workspaceId": "ws"})

        cache.put(("Bearer a",), decision)
        now[0] += 299
        kept = cache.get(("Bearer a",))
        now[0] += 2
        expired = cache.get(("Bearer a",))

        assert kept == decision
        assert expired is None
        assert cache.get(("Bearer b",)) is None

    def test_a_zero_ttl_caches_nothing(self) -> None:
        cache = AuthorizerCache(0)

        cache.put(("Bearer a",), AuthDecision(True, {}))

        assert cache.get(("Bearer a",)) is None


# --------------------------------------------------------------------------- responses


class TestResultTranslation:
    def test_a_structured_result(self) -> None:
        response = translate_result(
            {
                "statusCode": 201,
                "headers": {"Content-Type": "application/json", "X-Flag": True},
                "multiValueHeaders": {"X-Multi": ["a", "b"]},
                "cookies": ["s=1; HttpOnly", "t=2"],
                "body": '{"ok": true}',
            }
        )

        assert response.status == 201
        assert response.headers == [
            ("Content-Type", "application/json"),
            ("X-Flag", "true"),
            ("X-Multi", "a,b"),
            ("set-cookie", "s=1; HttpOnly"),
            ("set-cookie", "t=2"),
        ]
        assert response.body == b'{"ok": true}'

    def test_a_base64_body_is_decoded_and_no_body_is_empty(self) -> None:
        binary = translate_result(
            {
                "statusCode": 200,
                "isBase64Encoded": True,
                "body": base64.b64encode(b"\x00\x01").decode(),
            }
        )
        empty = translate_result({"statusCode": 204})

        assert binary.body == b"\x00\x01"
        assert (empty.status, empty.body) == (204, b"")

    @pytest.mark.parametrize(
        ("result", "body"),
        [
            ({"hello": "world"}, b'{"hello": "world"}'),
            ("plain text", b"plain text"),
            ([1, 2], b"[1, 2]"),
        ],
    )
    def test_a_result_without_status_code_is_a_200_json_response(
        self, result: Any, body: bytes
    ) -> None:
        response = translate_result(result)

        assert response.status == 200
        assert response.headers == [("content-type", "application/json")]
        assert response.body == body

    @pytest.mark.parametrize(
        "result",
        [
            {"statusCode": "abc"},
            {"statusCode": 99},
            {"statusCode": 200, "body": {"not": "a string"}},
            {"statusCode": 200, "isBase64Encoded": True, "body": "***"},
            {"x": object()},
        ],
    )
    def test_an_invalid_result_is_refused(self, result: Any) -> None:
        with pytest.raises(InvalidLambdaResponseError):
            translate_result(result)


# --------------------------------------------------------------------------- SQS


def received(message_id: str, body: str, count: int = 1) -> dict[str, Any]:
    return {
        "MessageId": message_id,
        "ReceiptHandle": f"rh-{message_id}",
        "MD5OfBody": "md5",
        "Body": body,
        "Attributes": {"ApproximateReceiveCount": str(count), "SentTimestamp": "1700000000000"},
        "MessageAttributes": {
            "kind": {"DataType": "String", "StringValue": "summary"},
            "blob": {"DataType": "Binary", "BinaryValue": b"\x01"},
        },
    }


ARN = "arn:aws:sqs:us-east-1:123456789012:convo-local-SummaryQueue"


class TestSqsEvents:
    def test_records_have_the_lambda_sqs_shape(self) -> None:
        event = sqs_event([received("m1", '{"sessionId": "s1"}')], ARN)

        assert event == {
            "Records": [
                {
                    "messageId": "m1",
                    "receiptHandle": "rh-m1",
                    "body": '{"sessionId": "s1"}',
                    "attributes": {
                        "ApproximateReceiveCount": "1",
                        "SentTimestamp": "1700000000000",
                    },
                    "messageAttributes": {
                        "kind": {
                            "stringValue": "summary",
                            "stringListValues": [],
                            "binaryListValues": [],
                            "dataType": "String",
                        },
                        "blob": {
                            "binaryValue": "AQ==",
                            "stringListValues": [],
                            "binaryListValues": [],
                            "dataType": "Binary",
                        },
                    },
                    "md5OfBody": "md5",
                    "eventSource": "aws:sqs",
                    "eventSourceARN": ARN,
                    "awsRegion": "us-east-1",
                }
            ]
        }
        json.dumps(event)  # what a handler receives is plain JSON

    def test_only_records_not_reported_as_failures_are_deleted(self) -> None:
        records = sqs_event([received("m1", "a"), received("m2", "b")], ARN)["Records"]

        done = succeeded_records(records, {"batchItemFailures": [{"itemIdentifier": "m2"}]}, True)

        assert [r["messageId"] for r in done] == ["m1"]
        assert succeeded_records(records, {"batchItemFailures": []}, True) == records
        assert succeeded_records(records, None, True) == records

    @pytest.mark.parametrize(
        "result",
        [
            {"batchItemFailures": [{"itemIdentifier": "unknown"}]},
            {"batchItemFailures": [{"itemIdentifier": ""}]},
            {"batchItemFailures": "m1"},
            "not an object",
        ],
    )
    def test_a_malformed_batch_response_fails_the_whole_batch(self, result: Any) -> None:
        records = sqs_event([received("m1", "a")], ARN)["Records"]

        assert succeeded_records(records, result, True) == []

    def test_without_report_batch_item_failures_a_return_means_success(self) -> None:
        records = sqs_event([received("m1", "a")], ARN)["Records"]

        done = succeeded_records(records, {"batchItemFailures": [{"itemIdentifier": "m1"}]}, False)

        assert done == records


# --------------------------------------------------------------------------- the rest


class TestLambdaPieces:
    def test_a_handler_lives_in_a_module_of_its_own(self) -> None:
        function = LambdaFunction("PredictFunction", Path("/x/functions/predict"), "app.handler")

        assert function.handler_file == Path("/x/functions/predict/app.py")
        assert function.module_name == "lambda_PredictFunction_app"
        assert function.attribute == "handler"

    def test_each_concurrent_invocation_gets_an_environment_of_its_own(
        self, tmp_path: Path
    ) -> None:
        (tmp_path / "app.py").write_text(
            "STATE = {'busy': False}\n"
            "def handler(event, context):\n"
            "    assert not STATE['busy'], 'two invocations in one environment'\n"
            "    STATE['busy'] = True\n"
            "    try:\n"
            "        if 'gate' in event:\n"
            "            event['entered'].set()\n"
            "            event['gate'].wait(5)\n"
            "        return id(STATE)\n"
            "    finally:\n"
            "        STATE['busy'] = False\n",
            encoding="utf-8",
        )
        registry = FunctionRegistry([LambdaFunction("UnitFunction", tmp_path, "app.handler")])
        entered, gate = threading.Event(), threading.Event()
        busy: list[int] = []
        first = threading.Thread(
            target=lambda: busy.append(
                registry.invoke("UnitFunction", {"entered": entered, "gate": gate})
            )
        )
        first.start()
        assert entered.wait(5)

        second = registry.invoke("UnitFunction", {})  # the first environment is busy
        gate.set()
        first.join(5)
        third = registry.invoke("UnitFunction", {})

        assert busy and busy[0] != second
        assert third in (busy[0], second)  # warm: no third environment
        assert {"lambda_UnitFunction_app", "lambda_UnitFunction_app_2"} <= set(sys.modules)
        assert "lambda_UnitFunction_app_3" not in sys.modules

    def test_a_missing_handler_file_is_an_import_error_and_an_unknown_name_unknown(
        self, tmp_path: Path
    ) -> None:
        registry = FunctionRegistry([LambdaFunction("Nothing", tmp_path, "app.handler")])

        with pytest.raises(HandlerLoadError, match="Unable to import module 'app'"):
            registry.invoke("Nothing", {})
        with pytest.raises(UnknownFunctionError):
            registry.invoke("Other", {})

    def test_the_context_counts_down_from_the_timeout(self) -> None:
        context = LambdaContext("F", 512, "arn:aws:lambda:us-east-1:1:function:F", "r", 3.0)

        assert 2_000 < context.get_remaining_time_in_millis() <= 3_000
        assert context.log_group_name == "/aws/lambda/F"

    @pytest.mark.parametrize(
        ("raw", "name"),
        [
            ("PredictFunction", "PredictFunction"),
            ("PredictFunction:live", "PredictFunction"),
            ("arn:aws:lambda:us-east-1:123456789012:function:PredictFunction", "PredictFunction"),
            ("arn%3Aaws%3Alambda%3Aus-east-1%3A1%3Afunction%3AF%3A%24LATEST", "F"),
        ],
    )
    def test_function_names_arns_and_qualifiers(self, raw: str, name: str) -> None:
        assert function_name_of(raw) == name


class TestDevTokens:
    def test_pairs_are_parsed(self) -> None:
        pairs = parse_dev_tokens(" acme=tok-acme-0123456789 , globex=tok-globex-0123456789,")

        assert pairs == [("acme", "tok-acme-0123456789"), ("globex", "tok-globex-0123456789")]
        assert parse_dev_tokens("") == []

    @pytest.mark.parametrize(
        ("raw", "says"),
        [
            ("acme", "is not name=token"),
            ("=tok-0123456789abcdef", "is not name=token"),
            ("acme=", "is not name=token"),
            ("ac me=tok-0123456789abcdef", "workspace name"),
            ("acme=short", "16-512"),
            ("acme=tok-0123456789abcdef,acme=tok-9876543210abcdef", "given twice"),
            ("dev=tok-0123456789abcdef", "reserved"),
            ("a=tok-0123456789abcdef,b=tok-0123456789abcdef", "already in use"),
        ],
    )
    def test_bad_input_is_a_clear_error(self, raw: str, says: str) -> None:
        with pytest.raises(ConfigError, match=says):
            parse_dev_tokens(raw)

    def test_the_dev_token_is_generated_when_not_given(self) -> None:
        generated = RuntimeConfig.from_env({})
        given = RuntimeConfig.from_env({"CONVO_DEV_TOKEN": "my-dev-token-0123456789"})

        assert generated.dev_token_generated and len(generated.dev_token) >= 16
        assert RuntimeConfig.from_env({}).dev_token != generated.dev_token
        assert (given.dev_token, given.dev_token_generated) == ("my-dev-token-0123456789", False)
        assert (generated.port, generated.lambda_port) == (3000, 3001)

    @pytest.mark.parametrize(
        "env",
        [
            {"PORT": "http"},
            {"LAMBDA_PORT": "70000"},
            {"LOCAL_AUTHORIZER_CACHE_SECONDS": "-1"},
            {"CONVO_DEV_TOKEN": "has space in it, 0123456789"},
            {"CONVO_WORKSPACE_TURNS_PER_SECOND": "-1"},
            {"CONVO_WORKSPACE_TURNS_PER_SECOND": "10001"},
            {"CONVO_WORKSPACE_TURNS_PER_SECOND": "fast"},
            {"CONVO_WORKSPACE_TURN_BURST": "0"},
            {"CONVO_WORKSPACE_TURN_BURST": "100001"},
            {"CONVO_WORKSPACE_TURN_BURST": "many"},
            {"CONVO_WORKSPACE_MAX_SLOW_TURNS": "10001"},
            {"CONVO_WORKSPACE_MAX_SLOW_TURNS": "-1"},
        ],
    )
    def test_bad_settings_are_refused(self, env: dict[str, str]) -> None:
        with pytest.raises(ConfigError):
            RuntimeConfig.from_env(env)

    def test_the_turn_limit_is_the_templates_unless_given(self) -> None:
        assert RuntimeConfig.from_env({}).workspace_turns_per_second == ""
        given = RuntimeConfig.from_env({"CONVO_WORKSPACE_TURNS_PER_SECOND": " 007 "})
        assert given.workspace_turns_per_second == "7"

    def test_the_slow_turn_cap_is_the_templates_unless_given(self) -> None:
        assert RuntimeConfig.from_env({}).workspace_max_slow_turns == ""
        given = RuntimeConfig.from_env({"CONVO_WORKSPACE_MAX_SLOW_TURNS": " 0 "})
        assert given.workspace_max_slow_turns == "0"

    def test_the_turn_burst_is_the_templates_unless_given(self) -> None:
        assert RuntimeConfig.from_env({}).workspace_turn_burst == ""
        given = RuntimeConfig.from_env({"CONVO_WORKSPACE_TURN_BURST": " 120 "})
        assert given.workspace_turn_burst == "120"


class TestTopology:
    def test_routes_authorizer_and_queues_come_from_the_template(self) -> None:
        topology = read_topology(TEMPLATE, authorizer_cache_seconds=None)

        # No identity source: invoked on every request, nothing cached.
        assert topology.authorizers == {
            "TokenAuthorizer": AuthorizerConfig("AuthorizerFunction", (), 0, True)
        }
        # Every route but the not-found catch-all, the Studio page, the OpenAPI document and
        # its Swagger UI (Authorizer: NONE) is authorized.
        public = {"$default", "/studio", "/v1/openapi.json", "/v1/docs"}
        assert all(
            route.authorizer == (None if route.path in public else "TokenAuthorizer")
            for route in topology.routes
        )
        assert {route.path for route in topology.routes if route.authorizer is None} == public
        keys = {route.route_key: route.function for route in topology.routes}
        assert keys["$default"] == "CapabilitiesFunction"
        assert keys["POST /v1/sessions/{sessionId}/messages"] == "PredictFunction"
        assert keys["GET /v1/sessions/{sessionId}/messages"] == "ReadSessionsFunction"
        summary_source = ("SummarizeFunction", "SummaryQueue", 10, True, SUMMARY_MAX_CONCURRENCY)
        assert summary_source in topology.queue_sources
        # The repair consumer's MaximumConcurrency (RepairMaxConcurrency's default).
        assert ("RepairFunction", "RepairQueue", 10, True, 5) in topology.queue_sources
        names = {function.name for function in topology.functions}
        assert {"AuthorizerFunction", "PredictFunction", "SummarizeFunction"} <= names

    def test_functions_run_as_many_copies_as_their_reserved_concurrency(self) -> None:
        reserved = {
            function.name: function.reserved_concurrency
            for function in read_topology(TEMPLATE, authorizer_cache_seconds=None).functions
        }

        # The parameters' defaults; none reserved (0, or no property): the pool's default.
        assert reserved["PredictFunction"] == 50 and reserved["CapabilitiesFunction"] == 10
        assert reserved["AuthorizerFunction"] is None and reserved["SummarizeFunction"] is None
        # One workspace at its cap of slow turns leaves most copies to the others.
        template = load_template(TEMPLATE)
        cap = int(parameter_defaults(template)["WorkspaceMaxSlowTurns"])
        assert reserved["PredictFunction"] >= 4 * cap

    def test_the_authorizer_cache_ttl_can_be_overridden(self) -> None:
        topology = read_topology(TEMPLATE, authorizer_cache_seconds=0)

        assert topology.authorizers["TokenAuthorizer"].ttl_seconds == 0
