"""Provider connections through the HTTP routes (in-process API, moto): a workspace names
an operator's connection and a model it allows, and can never make the service call an
endpoint or send a credential of its choosing."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest

from tests.fakes.openai_server import FakeOpenAIServer
from tests.support.fake_aws import fake_aws
from tests.support.inprocess_api import REGION, InProcessApi, inprocess_stack, new_workspace
from tests.support.tenants import Tenant

PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
ENV_KEY = "sk-env-0123456789abcdef"
SECRET_KEY = "sk-secret-0123456789abcdef"
PARAMETER_KEY = "sk-parameter-0123456789abcdef"
SEEDED = {"cap-generative", "cap-agent", "cap-classic"}


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    # urllib honours proxy variables; the fake server must be reached directly.
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


@dataclass
class Deployment:
    api: InProcessApi
    fake: FakeOpenAIServer
    secret_arn: str
    parameter_name: str


@pytest.fixture(scope="module")
def deployment() -> Iterator[Deployment]:
    """One stack whose operator declared three connections to the fake model server, one
    per kind of key, plus a Bedrock one; the secret and the parameter live in moto."""
    session = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION
    )
    with FakeOpenAIServer() as fake, fake_aws():
        secret = session.client("secretsmanager").create_secret(
            Name="llm/key", SecretString=SECRET_KEY
        )
        secret_arn = secret["ARN"]
        parameter_name = "/convo/llm-key"
        session.client("ssm").put_parameter(
            Name=parameter_name, Value=PARAMETER_KEY, Type="SecureString"
        )
        local = {"type": "openai", "baseUrl": fake.base_url, "models": ["llama3.*"]}
        connections = {
            "local-env": {**local, "apiKey": {"env": "LOCAL_LLM_KEY"}},
            "local-secret": {**local, "apiKey": {"secretArn": secret_arn}},
            "local-parameter": {**local, "apiKey": {"parameterName": parameter_name}},
            "bedrock": {"type": "bedrock", "region": "us-west-2", "models": ["anthropic.*"]},
        }
        env = {
            "PROVIDER_CONNECTIONS": json.dumps(connections),
            "PROVIDER_SECRET_ARNS": secret_arn,
            "PROVIDER_PARAMETER_NAMES": parameter_name,
            "LOCAL_LLM_KEY": ENV_KEY,
        }
        with inprocess_stack(env) as api:
            yield Deployment(api, fake, secret_arn, parameter_name)


@pytest.fixture
def api(deployment: Deployment) -> InProcessApi:
    fake = deployment.fake
    fake.requests.clear()
    fake.error_status, fake.error_body, fake.error_headers, fake.delay = None, None, {}, 0.0
    fake.reply = "Hello from the fake model."
    return deployment.api


@pytest.fixture
def tenant(api: InProcessApi) -> Tenant:
    return Tenant(*new_workspace(api, "alpha"))


def create(api: InProcessApi, tenant: Tenant, body: dict[str, Any]) -> Any:
    return api.call(
        "POST",
        "/v1/capabilities",
        token=tenant.token,
        json_body={"name": "assistant", "kind": "generative", **body},
    )


def capability_ids(api: InProcessApi, tenant: Tenant) -> set[str]:
    listed = api.call("GET", "/v1/capabilities", token=tenant.token).body["capabilities"]
    return {capability["id"] for capability in listed}


# ---------------------------------------------------------------- what a workspace may say


@pytest.mark.parametrize(
    "provider",
    [
        {
            "type": "openai",
            "baseUrl": "{url}",
            "modelId": "llama3.1",
            "apiKeyEnv": "CONVO_DEV_TOKEN",
        },
        {"type": "openai", "baseUrl": "{url}", "modelId": "llama3.1"},
        {"connection": "local-env", "modelId": "llama3.1", "baseUrl": "{url}"},
        {"connection": "local-env", "modelId": "llama3.1", "apiKeyEnv": "AWS_SECRET_ACCESS_KEY"},
        {"connection": "local-env", "modelId": "llama3.1", "apiKey": {"env": "LOCAL_LLM_KEY"}},
        {"connection": "local-env", "modelId": "llama3.1", "headers": {"X-Forward": "{url}"}},
        {"type": "embedded", "baseUrl": "{url}"},
    ],
)
@pytest.mark.parametrize("where", ["provider", "summary"])
def test_a_capability_naming_an_endpoint_or_credential_is_refused_and_nothing_is_called(
    deployment: Deployment, api: InProcessApi, tenant: Tenant, provider: dict[str, Any], where: str
) -> None:
    provider = json.loads(json.dumps(provider).replace("{url}", deployment.fake.base_url))
    body = {"provider": provider} if where == "provider" else {"summary": {"provider": provider}}

    response = create(api, tenant, body)

    assert response.status == 422, response.body
    assert response.body["error"]["code"] == "validation_error"
    assert capability_ids(api, tenant) == SEEDED
    # The seeded capabilities still answer, and the listener never heard from anyone.
    predicted = api.call(
        "POST",
        "/v1/capabilities/cap-generative/predict",
        token=tenant.token,
        json_body={"input": "hi"},
    )
    assert predicted.status == 200
    assert deployment.fake.requests == []


@pytest.mark.parametrize(
    ("provider", "fragment"),
    [
        ({"connection": "ollama", "modelId": "llama3.1"}, "unknown connection 'ollama'"),
        ({"connection": "local-env", "modelId": "gpt-4o"}, "does not allow the model 'gpt-4o'"),
        ({"connection": "bedrock", "modelId": "amazon.nova-pro-v1:0"}, "does not allow"),
        ({"connection": "bedrock"}, "needs a modelId"),
        ({"connection": "embedded", "modelId": "anything"}, "takes no modelId"),
    ],
)
def test_a_provider_this_deployment_cannot_serve_is_a_validation_error(
    deployment: Deployment,
    api: InProcessApi,
    tenant: Tenant,
    provider: dict[str, Any],
    fragment: str,
) -> None:
    response = create(api, tenant, {"provider": provider})

    assert response.status == 422
    assert response.body["error"]["code"] == "validation_error"
    assert fragment in response.body["error"]["message"]
    assert capability_ids(api, tenant) == SEEDED
    assert deployment.fake.requests == []


def test_the_embedded_shorthand_still_works_and_reads_back_as_the_connection(
    api: InProcessApi, tenant: Tenant
) -> None:
    created = create(api, tenant, {"provider": {"type": "embedded"}})
    assert created.status == 201, created.body
    capability = api.call("GET", f"/v1/capabilities/{created.body['id']}", token=tenant.token)

    assert capability.body["provider"] == {"connection": "embedded", "modelId": None}
    answer = api.call(
        "POST",
        f"/v1/capabilities/{created.body['id']}/predict",
        token=tenant.token,
        json_body={"input": "the shorthand works"},
    )
    assert answer.status == 200 and "the shorthand works" in answer.body["output"]


def test_the_provider_listing_names_connections_types_and_models_only(
    deployment: Deployment, api: InProcessApi, tenant: Tenant
) -> None:
    response = api.call("GET", "/v1/providers", token=tenant.token)

    assert response.status == 200
    local = ["llama3.*"]
    assert response.body == {
        "providers": [
            {"connection": "embedded", "type": "embedded", "models": []},
            {"connection": "local-env", "type": "openai", "models": local},
            {"connection": "local-secret", "type": "openai", "models": local},
            {"connection": "local-parameter", "type": "openai", "models": local},
            {"connection": "bedrock", "type": "bedrock", "models": ["anthropic.*"]},
        ]
    }
    text = json.dumps(response.body)
    for hidden in (
        "127.0.0.1",
        deployment.secret_arn,
        deployment.parameter_name,
        "LOCAL_LLM_KEY",
        "us-west-2",
    ):
        assert hidden not in text
    assert api.call("GET", "/v1/providers").status == 401


# ---------------------------------------------------------------- keys resolved server-side


@pytest.mark.parametrize(
    ("connection", "key"),
    [("local-env", ENV_KEY), ("local-secret", SECRET_KEY), ("local-parameter", PARAMETER_KEY)],
)
def test_the_operators_key_reaches_the_model_and_nothing_else(
    deployment: Deployment,
    api: InProcessApi,
    tenant: Tenant,
    connection: str,
    key: str,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG, logger="convo_memory")
    caplog.set_level(logging.INFO)
    created = create(api, tenant, {"provider": {"connection": connection, "modelId": "llama3.1"}})
    assert created.status == 201, created.body

    answer = api.call(
        "POST",
        f"/v1/capabilities/{created.body['id']}/predict",
        token=tenant.token,
        json_body={"input": "hello"},
    )

    assert answer.status == 200, answer.body
    assert answer.body["output"] == "Hello from the fake model."
    [request] = deployment.fake.requests
    assert request.headers["Authorization"] == f"Bearer {key}"
    assert request.body["model"] == "llama3.1"
    # The key is nowhere a workspace or an operator's log could see it.
    seen = [
        json.dumps(answer.body),
        json.dumps(created.body),
        json.dumps(
            api.call("GET", f"/v1/capabilities/{created.body['id']}", token=tenant.token).body
        ),
        json.dumps(api.call("GET", "/v1/capabilities", token=tenant.token).body),
        json.dumps(api.call("GET", "/v1/providers", token=tenant.token).body),
        json.dumps(table_items(api)),
        caplog.text,
        "".join(capsys.readouterr()),
    ]
    assert all(key not in text for text in seen)
    assert f"Bearer {key}" not in json.dumps(seen)


def test_a_key_in_an_upstream_error_is_redacted(
    deployment: Deployment, api: InProcessApi, tenant: Tenant
) -> None:
    deployment.fake.error_status = 401
    deployment.fake.error_body = {"error": {"message": f"Incorrect API key provided: {SECRET_KEY}"}}
    created = create(
        api, tenant, {"provider": {"connection": "local-secret", "modelId": "llama3.1"}}
    )

    answer = api.call(
        "POST",
        f"/v1/capabilities/{created.body['id']}/predict",
        token=tenant.token,
        json_body={"input": "hello"},
    )

    assert answer.status == 502
    assert answer.body["error"]["code"] == "provider_error"
    assert "HTTP 401" in answer.body["error"]["message"]
    assert SECRET_KEY not in json.dumps(answer.body)


def table_items(api: InProcessApi) -> list[Any]:
    client = api.container.infrastructure.clients["dynamodb"]
    return list(client.scan(TableName=api.container.settings.table_name)["Items"])


# ---------------------------------------------------------------- what an endpoint may do


def predict_on(api: InProcessApi, tenant: Tenant, connection: str) -> Any:
    created = create(api, tenant, {"provider": {"connection": connection, "modelId": "llama3.1"}})
    assert created.status == 201, created.body
    return api.call(
        "POST",
        f"/v1/capabilities/{created.body['id']}/predict",
        token=tenant.token,
        json_body={"input": "hello"},
    )


def test_a_redirect_is_not_followed(
    deployment: Deployment, api: InProcessApi, tenant: Tenant
) -> None:
    with FakeOpenAIServer() as elsewhere:
        deployment.fake.error_status = 307
        deployment.fake.error_headers = {"Location": f"{elsewhere.base_url}/chat/completions"}

        answer = predict_on(api, tenant, "local-secret")

        assert answer.status == 502 and answer.body["error"]["code"] == "provider_error"
        assert len(deployment.fake.requests) == 1
        assert elsewhere.requests == []  # the key never went to the redirect's target


def test_an_oversize_answer_is_refused(
    deployment: Deployment, api: InProcessApi, tenant: Tenant
) -> None:
    deployment.fake.reply = "x" * (4 * 1024 * 1024 + 1)

    answer = predict_on(api, tenant, "local-env")

    assert answer.status == 502
    assert "larger than 4194304 bytes" in answer.body["error"]["message"]


@pytest.mark.parametrize(
    ("connection_timeout", "cap"),
    [(0.3, None), (60, "0.3")],  # the connection's own timeout, then the deployment's cap
)
def test_a_slow_model_is_cut_off_at_the_timeout(connection_timeout: float, cap: str | None) -> None:
    with FakeOpenAIServer(delay=3.0) as slow:
        connections = {
            "slow": {
                "type": "openai",
                "baseUrl": slow.base_url,
                "models": ["*"],
                "timeoutSeconds": connection_timeout,
            }
        }
        env = {"PROVIDER_CONNECTIONS": json.dumps(connections)}
        if cap is not None:
            env["PROVIDER_TIMEOUT_CAP_SECONDS"] = cap
        with inprocess_stack(env) as api:
            tenant = Tenant(*new_workspace(api, "alpha"))
            answer = predict_on(api, tenant, "slow")
        requests = len(slow.requests)

    assert answer.status == 502
    assert answer.body["error"]["message"] == (
        "Model provider error: connection 'slow': could not reach the provider."
    )
    assert requests == 1
