"""Property: whatever a client sends to any route or door of ``make run``, the answer is
never a 5xx, every error is in the contract's shape, and a refused request stores nothing.

Routes come from template.yaml, so a route added later is covered without touching this
test. The streaming route is sent both to the streaming door (over HTTP, as its Function
URL) and to its buffered HttpApi twin (through the Lambda Invoke port, with the event API
Gateway would send). "Nothing stored" is the conversations table's item count, read
through the runtime's moto endpoint before and after each refused request (moto's live
ItemCount, read once per example where it can be: the reads were most of this test's
time).
"""

from __future__ import annotations

import http.client
import json
import re
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import boto3
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from local_runtime.aws_resources import DEFAULT_PREFIX, function_specs
from local_runtime.http_gateway import STREAM_PATH, HttpRequest, build_http_event
from tests.support.fake_aws import item_count
from tests.support.runtime_process import DEV_TOKEN, OTHER_TOKEN, RuntimeProcess, StartRuntime

pytestmark = pytest.mark.e2e

CONTRACT_CODES = {
    "invalid_json",
    "unauthorized",
    "capability_not_found",
    "session_not_found",
    "run_not_found",
    "not_found",
    "principal_immutable",
    "external_ref_immutable",
    "capability_not_conversational",
    "session_capability_mismatch",
    "session_archived",
    "idempotency_in_progress",
    "tool_calls_mismatch",
    "response_not_found",
    "item_not_found",
    "file_not_found",  # (v5)
    "idempotency_key_reused",
    "payload_too_large",
    "validation_error",
    "rate_limited",
    "internal",
    "unavailable",
}
# 43 doors: about a thousand requests a run, each run's examples new (no example
# database), so runs add up to more than any one of them; 40 a door cost twice the time.
EXAMPLES_PER_DOOR = 24
PARAM = re.compile(r"\{([A-Za-z0-9_]+)\+?\}")


@dataclass(frozen=True)
class Door:
    method: str
    path: str  # an API Gateway path template: /v1/sessions/{sessionId}
    function: str
    via: str  # "http": the local gateway (or the Function URL door); "invoke": Lambda API


def doors_from_template() -> list[Door]:
    doors: list[Door] = []
    for spec in function_specs().values():
        for method, path in spec.http_routes:
            if path == "$default":
                doors.append(Door("GET", "/v1/{anything}", spec.logical_id, "http"))
                continue
            doors.append(Door(method, path, spec.logical_id, "http"))
            if STREAM_PATH.match(PARAM.sub("x", path)):
                # Over HTTP this path reaches the Function URL door; its HttpApi twin is
                # reached with the event API Gateway would send it.
                doors.append(Door(method, path, spec.logical_id, "invoke"))
    # Deleting the session last keeps it there for the other doors' examples.
    return sorted(doors, key=lambda door: door.method == "DELETE")


DOORS = doors_from_template()


# --------------------------------------------------------------------------- strategies

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=30),
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)
FIELDS = [
    "input",
    "sessionId",
    "capabilityId",
    "externalRef",
    "principal",
    "metadata",
    "name",
    "kind",
    "provider",
    "contentFilter",
    "replay",
]


def field_values(ids: list[str]) -> st.SearchStrategy[Any]:
    return st.one_of(
        json_values,
        st.sampled_from(ids),
        st.just("x" * 300),
        st.dictionaries(st.text(max_size=70), st.text(max_size=20), max_size=3),
    )


def valid_bodies(session_id: str) -> list[dict[str, Any]]:
    """Bodies some route accepts, for mutants that get past the first checks."""
    return [
        {"input": "Where is order 12345?"},
        {"input": "hello", "sessionId": session_id},
        {"capabilityId": "cap-generative", "externalRef": "prop-user"},
        {"capabilityId": "cap-agent", "externalRef": "prop-user", "principal": {"u": "1"}},
        {"metadata": {"plan": "gold"}},
        {"name": "prop", "kind": "generative"},
        {
            "name": "prop",
            "kind": "generative",
            "contentFilter": {"type": "embedded", "blockedPatterns": ["(a+)+$"]},
        },
    ]


def bodies(ids: list[str], session_id: str) -> st.SearchStrategy[bytes]:
    mutants = st.builds(
        lambda base, changes: {**base, **changes},
        st.sampled_from(valid_bodies(session_id)),
        st.dictionaries(st.sampled_from(FIELDS), field_values(ids), max_size=2),
    )
    objects = st.one_of(
        mutants, st.dictionaries(st.sampled_from(FIELDS), field_values(ids), max_size=5)
    )
    poisons = st.sampled_from(
        [
            b'{"input": "hi", "x": NaN}',
            b'{"input": "hi", "x": Infinity}',
            b'{"input": "hi", "x": 1e400}',
            b'{"input": "\\ud800"}',
            b'{"externalRef": "a", "capabilityId": "cap-generative", "principal": {"u": "\\udc00"}}',
            b'{"capabilityId": "cap-generative", "externalRef": "r", "metadata": '
            + b'{"a":' * 40
            + b"{}"
            + b"}" * 40
            + b"}",
            b'{"input": ' + b"[" * 5000 + b"]" * 5000 + b"}",
            b"\xef\xbb\xbf{}",
            '{"input": "hi"}'.encode("utf-16"),
        ]
    )
    return st.one_of(
        objects.map(lambda o: json.dumps(o).encode()),
        objects.map(lambda o: json.dumps(o, ensure_ascii=False).encode()),
        poisons,
        st.binary(max_size=64),
        st.just(b""),
    )


def path_values(known: list[str]) -> st.SearchStrategy[str]:
    real = st.sampled_from(known)
    return st.one_of(
        real,
        real,
        st.text(min_size=1, max_size=20),
        st.just("x" * 3000),
        st.sampled_from(["..", "%2F", "ses_%00", "a b", "é", "cap-generative/../x"]),
    )


def queries(ids: list[str], cursors: list[str]) -> st.SearchStrategy[dict[str, str]]:
    values = st.one_of(
        st.text(max_size=30),
        st.sampled_from(["0", "1", "100", "101", "-1", "prop-user"]),
        st.sampled_from(ids),
        st.sampled_from(cursors),
    )
    names = st.one_of(st.sampled_from(["externalRef", "limit", "nextToken"]), st.text(max_size=8))
    listing = st.fixed_dictionaries(
        {"externalRef": st.sampled_from(["prop-user", "nobody"])},
        optional={"limit": st.sampled_from(["1", "2", "0"]), "nextToken": values},
    )
    return st.one_of(listing, st.dictionaries(names, values, max_size=3))


latin1_printable = st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f")
headers_strategy = st.fixed_dictionaries(
    {},
    optional={
        "Idempotency-Key": st.one_of(st.just(""), st.text(latin1_printable, max_size=300)),
        "Content-Type": st.sampled_from(["application/json", "text/plain", "application/x-www"]),
    },
)
tokens = st.sampled_from([DEV_TOKEN, DEV_TOKEN, DEV_TOKEN, OTHER_TOKEN, None, "not-a-token-x"])


# --------------------------------------------------------------------------- the runtime


class Probe:
    """Sends requests to one runtime and counts what its conversations table holds."""

    def __init__(self, runtime: RuntimeProcess) -> None:
        self.runtime = runtime
        endpoint = runtime.aws_endpoint
        self.dynamodb = boto3.client(
            "dynamodb",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        self.table = f"{DEFAULT_PREFIX}ConversationsTable"
        self.workspace = self._workspace_of(DEV_TOKEN)

    def items(self) -> int:
        return item_count(self.dynamodb, self.table)

    def _workspace_of(self, token: str) -> str:
        event = {
            "version": "2.0",
            "type": "REQUEST",
            "headers": {"authorization": f"Bearer {token}"},
        }
        result = self._invoke("AuthorizerFunction", event)
        return str(result["context"]["workspaceId"])

    def _invoke(self, function: str, event: Any) -> Any:
        url = f"{self.runtime.lambda_url}/2015-03-31/functions/{function}/invocations"
        request = urllib.request.Request(url, data=json.dumps(event).encode(), method="POST")
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())

    def send(
        self,
        door: Door,
        params: dict[str, str],
        query: dict[str, str],
        headers: dict[str, str],
        body: bytes,
        token: str | None,
    ) -> tuple[int, str, bytes]:
        """(status, content type, body) of one request through ``door``."""
        path = PARAM.sub(lambda found: quote(params[found.group(1)], safe=""), door.path)
        raw_query = urlencode(query)
        all_headers = dict(headers)
        if token is not None:
            all_headers["Authorization"] = f"Bearer {token}"
        if door.via == "invoke":
            return self._through_invoke(door, path, params, raw_query, all_headers, body, token)
        target = urlsplit(self.runtime.base_url)
        connection = http.client.HTTPConnection(str(target.hostname), target.port, timeout=60)
        try:
            url = path + (f"?{raw_query}" if raw_query else "")
            connection.request(door.method, url, body=body or None, headers=all_headers)
            response = connection.getresponse()
            return response.status, response.getheader("content-type") or "", response.read()
        finally:
            connection.close()

    def _through_invoke(
        self,
        door: Door,
        path: str,
        params: dict[str, str],
        raw_query: str,
        headers: dict[str, str],
        body: bytes,
        token: str | None,
    ) -> tuple[int, str, bytes]:
        # What API Gateway sends once its authorizer has run (an unknown token: "").
        workspace = self.workspace if token == DEV_TOKEN else ""
        request = HttpRequest(door.method, path, raw_query, list(headers.items()), body)
        event = build_http_event(
            request, f"{door.method} {door.path}", params, {"workspaceId": workspace}
        )
        result = self._invoke(door.function, event)
        payload = result.get("body") or ""
        content_type = {k.lower(): v for k, v in (result.get("headers") or {}).items()}.get(
            "content-type", ""
        )
        return int(result["statusCode"]), content_type, payload.encode()


def assert_contract_error(status: int, content_type: str, body: bytes, what: str) -> None:
    assert content_type.startswith("application/json"), what
    parsed = json.loads(body)
    assert isinstance(parsed, dict) and set(parsed) == {"error"}, what
    error = parsed["error"]
    assert isinstance(error.get("message"), str) and error["message"], what
    assert error.get("code") in CONTRACT_CODES, what


def test_no_input_reaches_a_5xx_or_stores_anything_when_refused(
    start_runtime: StartRuntime,
) -> None:
    # The summarizer off: no background writes, so item counts move only with requests.
    runtime = start_runtime({"CONVO_SUMMARIZER_FAIL": "1"})
    probe = Probe(runtime)
    status, _, session = runtime.call(
        "POST",
        "/v1/sessions",
        token=DEV_TOKEN,
        json={"capabilityId": "cap-generative", "externalRef": "prop-user"},
    )
    assert status == 201
    for text in ("one", "two", "three"):
        turn = {"input": text, "sessionId": session["id"]}
        runtime.call("POST", "/v1/capabilities/cap-generative/predict", token=DEV_TOKEN, json=turn)
    cursors = [
        runtime.call("GET", f"/v1/sessions/{session['id']}/messages?limit=1", token=DEV_TOKEN)[2][
            "nextToken"
        ],
        "v1.e30.AAAA",
    ]
    run = runtime.call(
        "POST", "/v1/capabilities/cap-agent/predict", token=DEV_TOKEN, json={"input": "order 7"}
    )[2]["runId"]
    erasure = runtime.call(
        "POST", "/v1/erasures", token=DEV_TOKEN, json={"externalRef": "prop-nobody"}
    )[2]["id"]
    response = runtime.call(
        "POST", "/v1/responses", token=DEV_TOKEN, json={"model": "cap-generative", "input": "hi"}
    )[2]["id"]
    known = {
        "capabilityId": ["cap-generative", "cap-agent", "cap-classic", "cap-missing"],
        "sessionId": [session["id"], "ses_missing"],
        "conversationId": [session["id"], "ses_missing"],
        "responseId": [response, "resp_missing"],
        "itemId": [f"msg_{session['id']}_1", "msg_missing"],
        "runId": [run, "run_missing"],
        "erasureId": [erasure, "era_missing"],
        "fileId": ["file-" + "0" * 24, "file-missing"],  # (v5) the Files API
        "seq": ["1", "2", "0", "99"],
        "anything": ["capabilities", "nothing-here"],
    }
    ids = [value for values in known.values() for value in values]
    exercised: list[Door] = []
    counted: list[int] = []  # the item count, while no request since may have changed it

    @settings(
        max_examples=EXAMPLES_PER_DOOR,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(
        params=st.fixed_dictionaries({name: path_values(pool) for name, pool in known.items()}),
        query=queries(ids, cursors),
        headers=headers_strategy,
        body=bodies(ids, session["id"]),
        token=tokens,
    )
    def check(
        door: Door,
        params: dict[str, str],
        query: dict[str, str],
        headers: dict[str, str],
        body: bytes,
        token: str | None,
    ) -> None:
        named = {name: params[name] for name in PARAM.findall(door.path)}
        # Counts move only with requests (the summarizer is off): after a refused
        # request, the count read after it is this request's count before.
        before = counted.pop() if counted else probe.items()

        status, content_type, answer = probe.send(door, named, query, headers, body, token)

        what = f"{door} {named!r:.120} {query!r:.80} -> {status} {answer[:300]!r}"
        exercised.append(door)
        assert status < 500, what
        if status >= 400:
            assert_contract_error(status, content_type, answer, what)
            after = probe.items()
            assert after == before, f"a refused request stored something: {what}"
            counted.append(after)

    for door in DOORS:
        check(door)

    assert set(exercised) == set(DOORS)
