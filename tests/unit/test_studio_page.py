"""The Studio function (functions/studio): the page, its labels and its security headers."""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from typing import Any

import pytest

from functions.studio import app as studio

FUNCTION_URL = "https://abc123def.lambda-url.us-east-1.on.aws/"


class Elements(HTMLParser):
    """Every start tag with its attributes, the text of each <label>, <button>, <script>
    and <style>, in document order."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.texts: dict[str, list[str]] = {"label": [], "button": [], "script": [], "style": []}
        self._open: list[tuple[str, dict[str, str], list[str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {name: value or "" for name, value in attrs}
        self.tags.append((tag, attributes))
        if tag in self.texts:
            self._open.append((tag, attributes, []))

    def handle_data(self, data: str) -> None:
        for _, _, parts in self._open:
            parts.append(data)

    def handle_endtag(self, tag: str) -> None:
        if self._open and self._open[-1][0] == tag:
            name, attributes, parts = self._open.pop()
            self.texts[name].append("".join(parts).strip())
            self.tags.append((f"/{name}", {**attributes, "_text": "".join(parts).strip()}))

    def find(self, tag: str, **attrs: str) -> dict[str, str]:
        found = [
            a for t, a in self.tags if t == tag and all(a.get(k) == v for k, v in attrs.items())
        ]
        assert len(found) == 1, (tag, attrs, found)
        return found[0]

    def label_for(self, text: str) -> str:
        labels = [a for t, a in self.tags if t == "/label" and a["_text"] == text]
        assert len(labels) == 1, text
        return labels[0]["for"]


@pytest.fixture(autouse=True)
def fresh_page(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(studio.STREAM_URL_ENV, raising=False)
    studio.render.cache_clear()
    yield
    studio.render.cache_clear()


def get_studio() -> dict[str, Any]:
    return studio.handler({"rawPath": "/studio", "routeKey": "GET /studio"}, None)


def parse(body: str) -> Elements:
    parser = Elements()
    parser.feed(body)
    return parser


def csp(response: dict[str, Any]) -> dict[str, str]:
    policy = response["headers"]["content-security-policy"]
    return {d.split(" ", 1)[0]: d.split(" ", 1)[1] for d in policy.split("; ")}


def digest(source: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(source.encode()).digest()).decode() + "'"


def test_the_page_is_html_with_the_labels_and_roles_of_the_contract() -> None:
    response = get_studio()

    assert response["statusCode"] == 200
    assert response["headers"]["content-type"] == "text/html; charset=utf-8"
    page = parse(response["body"])
    token = page.find("input", id=page.label_for("API token"))
    assert token["type"] == "password"
    assert page.find("select", id=page.label_for("Capability"))
    assert page.find("textarea", id=page.label_for("Message"))
    assert page.find("button", id="send")["type"] == "submit"
    assert "Send" in page.texts["button"] and "New conversation" in page.texts["button"]
    log = page.find("div", role="log")
    assert log["aria-live"] == "polite"


def test_the_token_field_sits_in_no_form_so_it_can_never_be_submitted_into_a_url() -> None:
    body = get_studio()["body"]
    forms = re.findall(r"<form\b.*?</form>", body, re.S)

    assert forms and all('id="token"' not in form for form in forms)
    # The page keeps the token in sessionStorage only.
    script = parse(body).texts["script"][0]
    assert "sessionStorage" in script and "localStorage" not in script


def test_the_csp_allows_only_the_pages_own_inline_assets_and_the_api() -> None:
    response = get_studio()
    page = parse(response["body"])
    policy = csp(response)

    # The exact inline sources, as the browser hashes them.
    (script,) = re.findall(r"<script>(.*?)</script>", response["body"], re.S)
    (style,) = re.findall(r"<style>(.*?)</style>", response["body"], re.S)
    assert policy["default-src"] == "'none'"
    assert policy["script-src"] == digest(script)
    assert policy["style-src"] == digest(style)
    assert policy["connect-src"] == "'self'"
    assert policy["form-action"] == "'none'" and policy["frame-ancestors"] == "'none'"
    assert "unsafe" not in response["headers"]["content-security-policy"]
    assert response["headers"]["x-content-type-options"] == "nosniff"
    # Nothing is loaded from another origin (no CDN): no external src or href at all.
    assert "://" not in response["body"]
    assert all(not a.get("src") for _, a in page.tags)


def test_locally_the_page_streams_from_its_own_origin() -> None:
    page = parse(get_studio()["body"])

    assert page.find("meta", name="convo-stream-base")["content"] == ""


def test_on_aws_the_function_url_is_injected_and_allowed_to_connect(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(studio.STREAM_URL_ENV, FUNCTION_URL)

    response = get_studio()

    meta = parse(response["body"]).find("meta", name="convo-stream-base")
    assert meta["content"] == FUNCTION_URL.rstrip("/")
    assert csp(response)["connect-src"] == "'self' https://abc123def.lambda-url.us-east-1.on.aws"


@pytest.mark.parametrize(
    "value",
    ['javascript:alert(1)//"><script>alert(1)</script>', "not a url", "ftp://files.example/"],
)
def test_a_stream_url_that_is_not_an_http_url_is_ignored(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(studio.STREAM_URL_ENV, value)

    response = get_studio()

    page = parse(response["body"])
    assert page.find("meta", name="convo-stream-base")["content"] == ""
    assert len(page.texts["script"]) == 1
    assert csp(response)["connect-src"] == "'self'"


def test_markup_in_the_stream_url_is_escaped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(studio.STREAM_URL_ENV, 'https://x.example/a"><script>alert(1)</script>')

    response = get_studio()

    page = parse(response["body"])
    assert len(page.texts["script"]) == 1  # still only the page's own script
    assert page.find("meta", name="convo-stream-base")["content"].endswith("</script>")
    assert csp(response)["connect-src"] == "'self' https://x.example"
