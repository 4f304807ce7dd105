"""The Studio Chat page in headless Chromium against `python -m local_runtime`.

Debian's ``chromium`` (``/usr/bin/chromium``, installed by ``make browser``, a
prerequisite of ``make test``) driven by Playwright; no browser is ever downloaded.
The runtime's embedded model waits ``CONVO_EMBEDDED_CHUNK_DELAY_MS`` before each streamed
chunk, so the page can be seen showing an answer before the stream's ``done``.
Screenshots land in ``tests/e2e/artifacts/`` (not committed).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.support.runtime_process import REPO, RuntimeProcess, launch_runtime

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = REPO / "tests" / "e2e" / "artifacts"
CHUNK_DELAY_MS = "150"
UI_TIMEOUT_MS = 30_000

# Installed before the page's own script: every change of the transcript is recorded as
# (state of the newest answer, its text), so the test can tell what the page showed while
# the stream was still open without racing it.
RECORD_TRANSCRIPT = """
window.__frames = [];
document.addEventListener("DOMContentLoaded", () => {
  const log = document.querySelector('[role="log"]');
  const record = () => {
    const answers = log.querySelectorAll('.msg[data-role="assistant"]');
    const last = answers[answers.length - 1];
    if (!last) return;
    window.__frames.push({
      index: answers.length - 1,
      state: last.dataset.state || "",
      text: last.querySelector(".text").textContent,
    });
  };
  new MutationObserver(record).observe(log, {
    subtree: true, childList: true, characterData: true, attributes: true,
  });
});
"""


def ensure_chromium() -> None:
    """The test set-up installs Debian's chromium when it is missing (as ``make browser``)."""
    if CHROMIUM.exists():
        return
    if hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=False, env=env)
        subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], check=False, env=env)
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: run `make browser` (apt-get install chromium)")


@pytest.fixture(scope="module")
def studio_runtime() -> Iterator[RuntimeProcess]:
    runtime = launch_runtime({"CONVO_EMBEDDED_CHUNK_DELAY_MS": CHUNK_DELAY_MS})
    try:
        yield runtime
    finally:
        runtime.assert_stopped_cleanly()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    ensure_chromium()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    context.set_default_timeout(UI_TIMEOUT_MS)
    page = context.new_page()
    page.add_init_script(RECORD_TRANSCRIPT)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    in_flight: set[Any] = set()
    page.on("request", lambda request: in_flight.add(request))
    page.on("requestfinished", lambda request: in_flight.discard(request))
    page.on("requestfailed", lambda request: in_flight.discard(request))
    try:
        yield page
        # Let the page's follow-up calls finish: closing mid-response would cut them off.
        for _ in range(200):
            if not in_flight:
                break
            page.wait_for_timeout(50)
    finally:
        context.close()
    assert not errors, f"uncaught errors in the page: {errors}"


def shoot(page: Page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def open_studio(page: Page, runtime: RuntimeProcess, token: str) -> None:
    response = page.goto(f"{runtime.base_url}/studio")
    assert response is not None and response.status == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    assert "default-src 'none'" in response.headers["content-security-policy"]
    # Keyboard only: type the token, Enter loads the capabilities.
    page.get_by_label("API token").focus()
    page.keyboard.type(token)
    page.keyboard.press("Enter")


def pick(page: Page, capability_id: str) -> None:
    select = page.get_by_label("Capability")
    expect(select).to_be_enabled()
    expect(select.locator(f'option[value="{capability_id}"]')).to_have_count(1)
    select.select_option(capability_id)


def send_with_enter(page: Page, text: str) -> None:
    field = page.get_by_label("Message")
    field.fill(text)
    field.press("Enter")


def answers(page: Page) -> Any:
    return page.get_by_role("log").locator('.msg[data-role="assistant"]')


def wait_done(page: Page, index: int) -> str:
    answer = answers(page).nth(index)
    expect(answer).to_have_attribute("data-state", "done")
    return str(answer.locator(".text").text_content())


def frames(page: Page, index: int) -> list[dict[str, Any]]:
    return [f for f in page.evaluate("window.__frames") if f["index"] == index]


def studio_sessions(runtime: RuntimeProcess) -> list[dict[str, Any]]:
    status, _, body = runtime.call(
        "GET", "/v1/sessions?externalRef=studio&limit=100", token=runtime.tokens["dev"]
    )
    assert status == 200, body
    return list(body["sessions"])


def test_a_generative_conversation_streams_into_the_transcript_with_its_context(
    page: Page, studio_runtime: RuntimeProcess
) -> None:
    open_studio(page, studio_runtime, studio_runtime.tokens["dev"])
    select = page.get_by_label("Capability")
    expect(select).to_be_enabled()
    kinds = select.locator("option").evaluate_all("options => options.map(o => o.dataset.kind)")
    assert set(kinds) == {"generative", "agent"}  # never the classic capability
    pick(page, "cap-generative")

    send_with_enter(page, "Hello studio")
    first = wait_done(page, 0)
    shoot(page, "studio-generative-first-turn")

    assert first.startswith('You said: "Hello studio".')
    # While the stream was still open (before its `done`), the page already showed a
    # strict, non-empty beginning of the answer.
    shown = [f["text"] for f in frames(page, 0) if f["state"] == "streaming" and f["text"]]
    assert all(first.startswith(text) for text in shown), shown
    assert any(text != first for text in shown), frames(page, 0)

    send_with_enter(page, "And the second one?")
    second = wait_done(page, 1)
    assert second.startswith('You said: "And the second one?".')
    assert "I remember 2 earlier messages." in second

    log = page.get_by_role("log")
    expect(log.locator(".msg")).to_have_count(4)
    roles = log.locator(".msg").evaluate_all("nodes => nodes.map(n => n.dataset.role)")
    assert roles == ["user", "assistant", "user", "assistant"]
    expect(log).to_have_attribute("aria-busy", "false")

    context = page.get_by_role("region", name="Context preview")
    expect(context).to_contain_text("4 messages")
    expect(context).to_contain_text("user: Hello studio")
    expect(context).to_contain_text("0 older messages")
    shoot(page, "studio-generative-context")

    # The session the page opened carries no principal, and the token stayed in the tab.
    mine = [s for s in studio_sessions(studio_runtime) if s["capabilityId"] == "cap-generative"]
    assert any(s["messageCount"] == 4 and s["principal"] is None for s in mine), mine
    storage = page.evaluate("[sessionStorage.length, localStorage.length, location.href]")
    assert storage[0] == 1 and storage[1] == 0
    assert studio_runtime.tokens["dev"] not in storage[2]

    # New conversation empties the page; the recent list reopens the conversation.
    page.get_by_role("button", name="New conversation").click()
    expect(log.locator(".msg")).to_have_count(0)
    recent = page.get_by_role("navigation", name="Recent conversations")
    recent.get_by_role("button", name="4 messages").first.click()
    expect(log.locator(".msg")).to_have_count(4)
    expect(log.locator(".msg").first).to_contain_text("Hello studio")
    expect(context).to_contain_text("user: Hello studio")


def test_an_agent_turn_shows_its_run_trace(page: Page, studio_runtime: RuntimeProcess) -> None:
    open_studio(page, studio_runtime, studio_runtime.tokens["dev"])
    pick(page, "cap-agent")

    send_with_enter(page, "Where is order 12345?")
    answer = wait_done(page, 0)
    assert "lookup_order" in answer and "12345" in answer

    trace = page.get_by_role("region", name="Run trace")
    expect(trace.locator(".tool-name")).to_have_text(["lookup_order"])
    expect(trace).to_contain_text('"orderId": "12345"')  # the tool's input
    expect(trace).to_contain_text('"status":')  # its output
    expect(trace).to_contain_text(" ms")
    expect(trace).to_contain_text("none (Studio sessions carry none)")

    context = page.get_by_role("region", name="Context preview")
    expect(context).to_contain_text("Where is order 12345?")
    expect(context).to_contain_text("lookup_order")  # the turn's tool digest
    shoot(page, "studio-agent-run-trace")


def test_keyboard_focus_order_and_api_errors_in_the_page(
    page: Page, studio_runtime: RuntimeProcess
) -> None:
    open_studio(page, studio_runtime, "not-a-token-of-any-workspace")
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("unauthorized (401)")
    expect(page.get_by_label("Capability")).to_be_disabled()
    shoot(page, "studio-unauthorized")

    token = page.get_by_label("API token")
    token.fill(studio_runtime.tokens["dev"])
    token.press("Enter")
    expect(alert).to_be_hidden()
    expect(page.get_by_label("Capability")).to_be_enabled()
    order = []
    for _ in range(2):
        page.keyboard.press("Tab")
        order.append(page.evaluate("document.activeElement.id"))
    assert order == ["capability", "new-conversation"]

    # An error of the streaming door (an input over the limit) shows in the page.
    pick(page, "cap-generative")
    send_with_enter(page, "x" * 32_001)
    expect(alert).to_contain_text("payload_too_large (413)")
    expect(answers(page).first).to_have_attribute("data-state", "error")


def test_the_local_runtime_answers_cors_preflights_like_the_deployed_doors(
    studio_runtime: RuntimeProcess,
) -> None:
    stream = "/v1/capabilities/cap-generative/predict/stream"
    asks = {"Origin": "http://localhost:8000", "Access-Control-Request-Headers": "authorization"}
    for path, method in ((stream, "POST"), ("/v1/sessions", "GET")):
        status, headers, body = studio_runtime.call(
            "OPTIONS", path, headers={**asks, "Access-Control-Request-Method": method}
        )
        assert (status, body) == (204, None)
        assert headers["access-control-allow-origin"] == "*"  # the template's default
        assert method in headers["access-control-allow-methods"]

    # The Function URL allows POST only.
    status, headers, _ = studio_runtime.call(
        "OPTIONS", stream, headers={**asks, "Access-Control-Request-Method": "DELETE"}
    )
    assert status == 204 and "access-control-allow-origin" not in headers
