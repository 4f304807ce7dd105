"""The Studio Chat page in headless Chromium against `python -m local_runtime`.

Debian's build of Chromium's headless shell (``/usr/bin/chromium-headless-shell``, the
``chromium-headless-shell`` package, installed by ``make browser``, a prerequisite of
``make test``) driven by Playwright; no browser is ever downloaded.
The runtime's embedded model waits ``CONVO_EMBEDDED_CHUNK_DELAY_MS`` before each streamed
chunk, so the page can be seen showing an answer before the stream's ``done``.
With ``STUDIO_SCREENSHOTS=1``, screenshots land in ``tests/e2e/artifacts/`` (not committed).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.support.runtime_process import REPO, RuntimeProcess, launch_runtime
from tests.support.sample_files import png

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

CHROMIUM = Path("/usr/bin/chromium-headless-shell")
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
SCREENSHOTS = os.environ.get("STUDIO_SCREENSHOTS") == "1"
CHUNK_DELAY_MS = "50"
UI_TIMEOUT_MS = 30_000
PLAYWRIGHT_EXPECT_TIMEOUT_MS = 5_000  # Playwright's own default for expect()

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
    """The test set-up installs Debian's headless shell when it is missing (as ``make
    browser``)."""
    if CHROMIUM.exists():
        return
    if hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=False, env=env)
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "chromium-headless-shell"], check=False, env=env
        )
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing: run `make browser` (apt-get install chromium-headless-shell)"
        )


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
    # An assertion waits as long as an action (not Playwright's 5 s): a streamed answer
    # on a loaded machine can take longer than that to reach its `done`.
    expect.set_options(timeout=UI_TIMEOUT_MS)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield chromium
        finally:
            chromium.close()
            expect.set_options(timeout=PLAYWRIGHT_EXPECT_TIMEOUT_MS)


@contextmanager
def browser_page(browser: Browser, width: int, height: int) -> Iterator[Page]:
    """A fresh page (its own context: no storage shared) that fails the test on any
    uncaught error of the page's script."""
    context = browser.new_context(viewport={"width": width, "height": height})
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


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    with browser_page(browser, 1360, 900) as page:
        yield page


# The two sizes every Studio item is checked at: a laptop and a phone.
SIZES = {"desktop": (1366, 900), "phone": (390, 844)}


@dataclass
class Sized:
    page: Page
    size: str

    def shoot(self, name: str, *, full_page: bool = True) -> None:
        shoot(self.page, f"{name}-{self.size}", full_page=full_page)


@pytest.fixture(params=list(SIZES))
def sized(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Sized]:
    width, height = SIZES[request.param]
    with browser_page(browser, width, height) as page:
        yield Sized(page, request.param)


def shoot(page: Page, name: str, *, full_page: bool = True) -> None:
    """A screenshot for a person to look at, when STUDIO_SCREENSHOTS=1 (nothing asserts
    on it: the 38 of a run cost about 2 s of CPU)."""
    if SCREENSHOTS:
        page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=full_page)


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
    # Each entry starts with the conversation's first words: two look different.
    reopen = recent.get_by_role("button", name="4 messages").first
    expect(reopen).to_have_text(re.compile(r"^Hello studio \u00b7 .* \u00b7 4 messages$"))
    reopen.click()
    expect(log.locator(".msg")).to_have_count(4)
    expect(log.locator(".msg").first).to_contain_text("Hello studio")
    expect(context).to_contain_text("user: Hello studio")


def test_the_context_preview_shows_what_a_new_conversation_recalls(
    page: Page, studio_runtime: RuntimeProcess
) -> None:
    body = {"name": "Remembers", "kind": "generative", "recall": {"sessions": 2}}
    status, _, created = studio_runtime.call(
        "POST", "/v1/capabilities", token=studio_runtime.tokens["dev"], json=body
    )
    assert status == 201, created
    open_studio(page, studio_runtime, studio_runtime.tokens["dev"])
    pick(page, created["id"])
    send_with_enter(page, "My cat is called Pixel")
    wait_done(page, 0)
    context = page.get_by_role("region", name="Context preview")
    expect(context).to_contain_text("Recall")
    expect(context.locator("pre.recall")).to_have_count(0)

    page.get_by_role("button", name="New conversation").click()
    send_with_enter(page, "What is my cat called?")
    answer = wait_done(page, 0)

    assert "I also recall what you told me in earlier conversations." in answer
    expect(context).to_contain_text("1 earlier conversation,")
    expect(context.locator("pre.recall")).to_contain_text("user: My cat is called Pixel")
    shoot(page, "studio-recall-context")


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


def test_an_app_opened_session_shows_its_abandoned_turn_and_the_calls_it_waits_for(
    page: Page, studio_runtime: RuntimeProcess
) -> None:
    tools = [{"type": "function", "function": {"name": "get_weather"}}]
    headers = {"X-Convo-Session-Key": "studio-browser-app"}
    session_id = ""
    for text in ("Ask get_weather about Paris.", "Now get_weather for Oslo."):
        body = {"model": "cap-generative", "messages": [{"role": "user", "content": text}]}
        status, answer_headers, answer = studio_runtime.call(
            "POST",
            "/v1/chat/completions",
            token=studio_runtime.tokens["dev"],
            json={**body, "user": "browser-app-user", "tools": tools},
            headers=headers,
        )
        assert status == 200 and answer["choices"][0]["finish_reason"] == "tool_calls", answer
        session_id = answer_headers["x-convo-session-id"]

    open_studio(page, studio_runtime, studio_runtime.tokens["dev"])
    pick(page, "cap-generative")
    page.get_by_label("Session id").fill(session_id)
    page.get_by_role("button", name="Open session").click()

    log = page.get_by_role("log")
    expect(log.locator(".msg")).to_have_count(3)
    expect(log.locator(".msg").nth(1)).to_contain_text("Abandoned")
    waiting = log.locator(".msg").nth(2)
    expect(waiting).to_contain_text("Turn 3 waits for the app's tools")
    expect(waiting.locator(".tool-line")).to_contain_text(["get_weather("])
    expect(waiting.locator(".tool-line")).to_contain_text(["waiting for the app"])
    context = page.get_by_role("region", name="Context preview")
    expect(context).to_contain_text("Waiting for the app's tools")
    shoot(page, "studio-app-session-pending-turn")


def test_regenerating_an_answer_and_editing_a_message_open_forks_the_conversation_lists(
    page: Page, studio_runtime: RuntimeProcess
) -> None:
    open_studio(page, studio_runtime, studio_runtime.tokens["dev"])
    pick(page, "cap-generative")
    send_with_enter(page, "Tell me about order 12345")
    wait_done(page, 0)
    send_with_enter(page, "Can I still cancel it?")
    wait_done(page, 1)
    label = page.locator("#session-label")
    original = str(label.text_content())
    log = page.get_by_role("log")
    before = wait_done(page, 1)

    log.get_by_role("button", name="Regenerate seq 4").click()

    expect(label).not_to_have_text(original)
    again = wait_done(page, 1)
    regenerated = str(label.text_content())
    # Another answer, not the same one again: the embedded model's fork answers differ.
    assert 'You said: "Can I still cancel it?".' in again and again != before
    expect(log.locator(".msg")).to_have_count(4)
    expect(page.locator("#lineage")).to_contain_text(f"Fork of {original} after message 2")
    status, _, fork = studio_runtime.call(
        "GET", f"/v1/sessions/{regenerated}", token=studio_runtime.tokens["dev"]
    )
    assert status == 200 and fork["forkOf"] == {"sessionId": original, "atSeq": 2}, fork
    assert fork["messageCount"] == 4
    shoot(page, "studio-regenerated-fork")

    # What the regenerated answer's turn sent the model.
    log.get_by_role("button", name="What was sent for seq 4").click()
    sent = page.get_by_role("region", name="What was sent")
    expect(sent).to_contain_text("user: Tell me about order 12345")
    expect(sent.locator("pre.input")).to_have_text("Can I still cancel it?")

    # The original is unchanged and lists its fork; editing its message 3 opens another.
    page.get_by_role("button", name="Open the original conversation").click()
    expect(label).to_have_text(original)
    forks = page.get_by_role("region", name="Forks of this conversation")
    expect(forks.locator(f'button[data-session-id="{regenerated}"]')).to_have_count(1)
    expect(forks).to_contain_text("after message 2 \u00b7 4 messages")
    log.get_by_role("button", name="Edit seq 3").click()
    expect(page.get_by_label("Message")).to_have_value("Can I still cancel it?")
    send_with_enter(page, "Can I change the address instead?")
    expect(label).not_to_have_text(original)
    assert 'You said: "Can I change the address instead?".' in wait_done(page, 1)
    page.get_by_role("button", name="Open the original conversation").click()
    expect(forks.locator("button[data-session-id]")).to_have_count(2)
    expect(log.locator(".msg").nth(2)).to_contain_text("Can I still cancel it?")
    shoot(page, "studio-forks-listed")


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


# ---------------------------------------------------------------- each item at both sizes

STREAM_ROUTE = "**/v1/capabilities/*/predict/stream"


def load_token(page: Page, runtime: RuntimeProcess, token: str) -> None:
    open_studio(page, runtime, token)
    expect(page.get_by_label("Capability")).to_be_enabled()
    expect(page.get_by_role("button", name="Send")).to_be_enabled()


def recent(page: Page) -> Any:
    return page.get_by_role("navigation", name="Recent conversations")


def session_ids_opened_by(page: Page) -> list[str]:
    """Ids of the sessions the page creates from now on (filled as their answers come)."""
    opened: list[str] = []

    def record(response: Any) -> None:
        if response.request.method == "POST" and response.url.endswith("/v1/sessions"):
            opened.append(json.loads(response.text())["id"])

    page.on("response", record)
    return opened


def box(page: Page, selector: str) -> dict[str, float]:
    """Where an element is, with the viewport's size and the page's scroll offset."""
    return dict(
        page.eval_on_selector(
            selector,
            """el => { const r = el.getBoundingClientRect();
              return {top: r.top, bottom: r.bottom, left: r.left, right: r.right,
                      height: innerHeight, width: innerWidth, scrollY: scrollY}; }""",
        )
    )


def assert_in_view(page: Page, *selectors: str) -> None:
    for selector in selectors:
        where = box(page, selector)
        assert where["top"] >= 0 and where["bottom"] <= where["height"], (selector, where)
        assert where["left"] >= 0 and where["right"] <= where["width"], (selector, where)


@pytest.fixture(scope="module")
def buried_sessions(studio_runtime: RuntimeProcess) -> dict[str, Any]:
    """In workspace "other": two older Studio conversations on cap-generative, then 22
    newer ones on cap-agent (more than one listing page of 20), then an empty one."""

    def conversation(capability: str, text: str) -> str:
        token = studio_runtime.tokens["other"]
        status, _, session = studio_runtime.call(
            "POST",
            "/v1/sessions",
            token=token,
            json={"capabilityId": capability, "externalRef": "studio", "principal": None},
        )
        assert status == 201, session
        if text:
            status, _, body = studio_runtime.call(
                "POST", f"/v1/sessions/{session['id']}/messages", token=token, json={"input": text}
            )
            assert status == 200, body
        return str(session["id"])

    older = [conversation("cap-generative", f"older conversation {n}") for n in range(2)]
    newer = [conversation("cap-agent", f"newer conversation {n}") for n in range(22)]
    empty = conversation("cap-generative", "")
    return {"older": older, "newer": newer, "empty": empty}


def test_the_recent_list_is_per_capability_even_under_newer_sessions_of_another(
    sized: Sized, studio_runtime: RuntimeProcess, buried_sessions: dict[str, Any]
) -> None:
    page = sized.page
    load_token(page, studio_runtime, studio_runtime.tokens["other"])
    pick(page, "cap-generative")

    listed = recent(page).locator("button[data-session-id]")
    expect(listed).to_have_count(2)
    ids = listed.evaluate_all("nodes => nodes.map(n => n.dataset.sessionId)")
    assert ids == buried_sessions["older"][::-1]  # newest first; the empty one left out
    expect(recent(page)).not_to_contain_text("None yet")
    expect(recent(page).get_by_role("button", name="2 messages")).to_have_count(2)
    sized.shoot("studio-recent-per-capability")

    pick(page, "cap-agent")
    expect(listed).to_have_count(22)
    assert set(listed.evaluate_all("nodes => nodes.map(n => n.dataset.sessionId)")) == set(
        buried_sessions["newer"]
    )

    # And an older conversation reopens from the list.
    pick(page, "cap-generative")
    listed.first.click()
    expect(page.get_by_role("log").locator(".msg")).to_have_count(2)
    expect(page.get_by_role("log")).to_contain_text("older conversation 1")

    # A session opened by its id brings its capability, and the list follows it.
    page.get_by_label("Session id").fill(buried_sessions["newer"][0])
    page.get_by_role("button", name="Open session").click()
    expect(page.get_by_role("log")).to_contain_text("newer conversation 0")
    expect(page.get_by_label("Capability")).to_have_value("cap-agent")
    expect(listed).to_have_count(22)


def test_the_recent_list_reads_a_bounded_number_of_pages_then_offers_older_ones(
    sized: Sized, studio_runtime: RuntimeProcess
) -> None:
    page = sized.page
    asked: list[str] = []

    def listing(route: Any) -> None:
        # 100 agent conversations a page; the generative one is on page 7.
        query = route.request.url.split("?", 1)[1]
        asked.append(query)
        page_number = int(query.split("nextToken=p", 1)[1]) if "nextToken=p" in query else 1
        sessions: list[dict[str, Any]] = [
            {
                "id": f"ses_p{page_number}_{n}",
                "capabilityId": "cap-generative" if page_number == 7 and n == 0 else "cap-agent",
                "externalRef": "studio",
                "principal": None,
                "metadata": {},
                "status": "active",
                "createdAt": "2025-01-01T00:00:00.000Z",
                "lastActiveAt": "2025-01-01T00:00:00.000Z",
                "messageCount": 2,
            }
            for n in range(100)
        ]
        next_token = f"p{page_number + 1}" if page_number < 20 else None
        route.fulfill(json={"sessions": sessions, "nextToken": next_token})

    page.route("**/v1/sessions?*", listing)
    load_token(page, studio_runtime, studio_runtime.tokens["dev"])
    assert page.get_by_label("Capability").input_value() == "cap-generative"

    more = recent(page).get_by_role("button", name="Show older conversations")
    expect(more).to_be_visible()
    expect(recent(page)).to_contain_text("None among the newest Studio conversations.")
    assert len(asked) == 5 and all("limit=100" in q for q in asked), asked
    sized.shoot("studio-recent-bounded")

    more.click()
    expect(recent(page).locator("button[data-session-id]")).to_have_count(1)
    expect(recent(page).locator('button[data-session-id="ses_p7_0"]')).to_be_visible()
    # Pages 6 to 10: each load reads at most five, and offers to go on.
    assert len(asked) == 10, asked
    assert asked[-1].endswith("nextToken=p10")
    expect(more).to_be_visible()
    expect(recent(page)).not_to_contain_text("None")


def shown_width(page: Page, width: int) -> None:
    """Wait until the transcript's first image is loaded and ``width`` pixels wide."""
    read = "() => document.querySelector('.msg img.attachment')?.naturalWidth ?? 0"
    for _ in range(100):
        if page.evaluate(read) == width:
            return
        page.wait_for_timeout(100)
    raise AssertionError(f"no image of {width} pixels in the transcript")


def test_the_message_box_starts_and_stays_in_view(
    sized: Sized, studio_runtime: RuntimeProcess
) -> None:
    page = sized.page
    load_token(page, studio_runtime, studio_runtime.tokens["dev"])
    pick(page, "cap-generative")

    assert box(page, "#message")["scrollY"] == 0  # nothing scrolled: where the page opens
    assert_in_view(page, "#message", "#send")
    sized.shoot("studio-message-in-view-start", full_page=False)

    send_with_enter(page, "Keep me in view")
    wait_done(page, 0)

    # (v5) An image attached to a message: uploaded, shown in the transcript, seen by the
    # model (the embedded one describes it), and shown again when the session is reopened.
    red: Any = {"name": "red.png", "mimeType": "image/png", "buffer": png(40, 30)}
    page.set_input_files("#attach", files=[red])
    send_with_enter(page, "What is this?")
    assert "I see image red.png (PNG, 40x30 pixels" in wait_done(page, 1)
    shown = page.get_by_role("log").locator('.msg[data-role="user"] img.attachment')
    expect(shown).to_have_count(1)
    shown_width(page, 40)
    assert_in_view(page, "#message", "#send")
    assert page.evaluate("document.documentElement.scrollWidth <= innerWidth")
    session = str(page.locator("#session-label").text_content())
    recent(page).locator(f'button[data-session-id="{session}"]').click()
    shown_width(page, 40)
    sized.shoot("studio-image-attached", full_page=False)

    send_with_enter(page, "x" * 32_001)  # an error banner above the layout
    expect(page.get_by_role("alert")).to_contain_text("payload_too_large (413)")
    assert_in_view(page, "#message", "#send")
    # Nothing is wider than the screen (no sideways scrolling on a phone).
    assert page.evaluate("document.documentElement.scrollWidth <= innerWidth")
    sized.shoot("studio-message-in-view-after-error", full_page=False)


# A first message of 300 characters with no space: the width of four phone screens.
UNBROKEN = ("Pneumonoultramicroscopicsilicovolcanoconiosis" * 7)[:300]


def assert_nothing_wider_than_its_box(page: Page) -> None:
    """No sideways scrolling, and no bubble or listed conversation clipped."""
    assert page.evaluate("document.documentElement.scrollWidth <= innerWidth")
    clipped = page.evaluate(
        """() => [...document.querySelectorAll('.msg, .session-list button, #lineage')]
          .filter(n => n.offsetParent !== null && n.scrollWidth > n.clientWidth + 1)
          .map(n => n.textContent.slice(0, 40))"""
    )
    assert clipped == []


def test_long_unbroken_text_wraps_and_forks_are_told_apart(
    sized: Sized, studio_runtime: RuntimeProcess
) -> None:
    page = sized.page
    load_token(page, studio_runtime, studio_runtime.tokens["dev"])
    pick(page, "cap-generative")
    log = page.get_by_role("log")
    label = page.locator("#session-label")

    send_with_enter(page, UNBROKEN)
    first = wait_done(page, 0)
    original = str(label.text_content())
    assert UNBROKEN in first
    expect(recent(page).locator(f'button[data-session-id="{original}"]')).to_have_count(1)
    assert_nothing_wider_than_its_box(page)

    # Regenerate: a fork titled by the new answer's first words, with another answer.
    log.get_by_role("button", name="Regenerate seq 2").click()
    expect(label).not_to_have_text(original)
    regenerated = str(label.text_content())
    assert wait_done(page, 0) != first
    lineage = page.locator("#lineage")
    expect(lineage).to_contain_text("Regenerated answer 2: Another take")

    # Edit of message 1 from the original: another fork, titled by the new text.
    page.get_by_role("button", name="Open the original conversation").click()
    expect(label).to_have_text(original)
    log.get_by_role("button", name="Edit seq 1").click()
    send_with_enter(page, UNBROKEN[::-1])
    expect(label).not_to_have_text(original)
    wait_done(page, 0)
    edited = str(label.text_content())
    expect(lineage).to_contain_text(f"Edit of message 1: {UNBROKEN[::-1][:20]}")

    # The edited fork lists its sibling, the regenerated one, by its own title.
    siblings = page.get_by_role("region", name="Other forks of the original")
    sibling = siblings.locator(f'button[data-session-id="{regenerated}"]')
    expect(sibling).to_contain_text("Regenerated answer 2: Another take")
    expect(siblings.locator("button[data-session-id]")).to_have_count(1)
    assert_nothing_wider_than_its_box(page)
    sized.shoot("studio-fork-siblings")

    # The original lists both forks, with titles that tell them apart.
    sibling.click()
    expect(label).to_have_text(regenerated)
    expect(siblings.locator(f'button[data-session-id="{edited}"]')).to_have_count(1)
    page.get_by_role("button", name="Open the original conversation").click()
    forks = page.get_by_role("region", name="Forks of this conversation")
    titles = forks.locator("button[data-session-id]")
    expect(titles).to_have_count(2)
    texts = titles.all_text_contents()
    assert len({t.split(" \u00b7 ")[0] for t in texts}) == 2, texts
    expect(siblings).to_be_hidden()  # the original is no fork
    assert_nothing_wider_than_its_box(page)
    sized.shoot("studio-long-text-wraps")


def test_network_down_says_so(sized: Sized, studio_runtime: RuntimeProcess) -> None:
    page = sized.page
    page.route("**/v1/**", lambda route: route.abort("internetdisconnected"))
    open_studio(page, studio_runtime, studio_runtime.tokens["dev"])

    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("Network error: cannot reach 127.0.0.1:")
    expect(alert).to_contain_text("Check the connection")
    assert "TypeError" not in alert.inner_text() and "Failed to fetch" not in alert.inner_text()
    expect(recent(page)).not_to_contain_text("None yet")
    expect(recent(page)).to_contain_text("Not loaded")
    expect(page.get_by_role("button", name="Send")).to_be_disabled()
    expect(page.locator("#readiness")).to_contain_text("could not be loaded")
    sized.shoot("studio-network-down")

    # Back online: Enter in the token field loads again.
    page.unroute("**/v1/**")
    page.get_by_label("API token").press("Enter")
    expect(alert).to_be_hidden()
    expect(page.get_by_role("button", name="Send")).to_be_enabled()

    # The connection drops during a turn: said the same way, and the message is kept.
    opened = session_ids_opened_by(page)
    page.route(STREAM_ROUTE, lambda route: route.abort("internetdisconnected"))
    pick(page, "cap-generative")
    send_with_enter(page, "Are you there?")
    expect(alert).to_contain_text("Network error: cannot reach 127.0.0.1:")
    expect(answers(page).first).to_have_attribute("data-state", "error")
    expect(page.get_by_label("Message")).to_have_value("Are you there?")
    expect(page.locator("#session-label")).to_have_text("(new)")
    assert len(opened) == 1
    status, _, _ = studio_runtime.call(
        "GET", f"/v1/sessions/{opened[0]}", token=studio_runtime.tokens["dev"]
    )
    assert status == 404  # the empty session the turn opened was removed
    sized.shoot("studio-network-down-mid-turn")


def test_a_stream_error_shows_its_code_and_request_id(
    sized: Sized, studio_runtime: RuntimeProcess
) -> None:
    page = sized.page
    error = {
        "code": "provider_error",
        "message": "The model provider failed.",
        "requestId": "req-7f3a9c",
    }
    body = (
        f'event: delta\ndata: {{"text":"Partial "}}\n\nevent: error\ndata: {json.dumps(error)}\n\n'
    )
    page.route(
        STREAM_ROUTE,
        lambda route: route.fulfill(status=200, content_type="text/event-stream", body=body),
    )
    load_token(page, studio_runtime, studio_runtime.tokens["dev"])
    pick(page, "cap-generative")
    opened = session_ids_opened_by(page)

    send_with_enter(page, "Please fail")

    alert = page.get_by_role("alert")
    expect(alert).to_have_text(
        "provider_error: The model provider failed. \u00b7 requestId req-7f3a9c"
    )
    assert "(200)" not in alert.inner_text()
    answer = answers(page).first
    expect(answer).to_have_attribute("data-state", "error")
    expect(answer.locator(".note")).to_contain_text("requestId req-7f3a9c")
    expect(answer.locator(".text")).to_have_text("Partial ")

    # The failed first turn left no empty session behind, on the server or in the list.
    expect(page.locator("#session-label")).to_have_text("(new)")
    sized.shoot("studio-stream-error")
    status, _, _ = studio_runtime.call(
        "GET", f"/v1/sessions/{opened[0]}", token=studio_runtime.tokens["dev"]
    )
    assert status == 404
    expect(recent(page).locator(f'button[data-session-id="{opened[0]}"]')).to_have_count(0)


def test_a_failed_first_turn_leaves_no_empty_session(
    sized: Sized, studio_runtime: RuntimeProcess
) -> None:
    page = sized.page
    load_token(page, studio_runtime, studio_runtime.tokens["dev"])
    pick(page, "cap-agent")
    opened = session_ids_opened_by(page)

    send_with_enter(page, "y" * 32_001)  # refused by the streaming door: 413
    expect(page.get_by_role("alert")).to_contain_text("payload_too_large (413)")
    expect(page.locator("#session-label")).to_have_text("(new)")
    status, _, _ = studio_runtime.call(
        "GET", f"/v1/sessions/{opened[0]}", token=studio_runtime.tokens["dev"]
    )
    assert status == 404
    assert all(s["messageCount"] > 0 for s in studio_sessions(studio_runtime))

    # The next try opens a session of its own and keeps it.
    field = page.get_by_label("Message")
    field.fill("Now a short one")
    field.press("Enter")
    wait_done(page, 1)
    assert len(opened) == 2
    expect(recent(page).locator(f'button[data-session-id="{opened[1]}"]')).to_have_count(1)
    expect(page.locator("#session-label")).to_have_text(opened[1])
    sized.shoot("studio-failed-first-turn")


def test_send_says_what_to_do_until_a_token_and_a_capability_are_chosen(
    sized: Sized, studio_runtime: RuntimeProcess
) -> None:
    page = sized.page
    opened = session_ids_opened_by(page)
    page.goto(f"{studio_runtime.base_url}/studio")
    send = page.get_by_role("button", name="Send")
    readiness = page.locator("#readiness")

    expect(send).to_be_disabled()
    expect(readiness).to_have_text(
        "Enter your API token above, then press Enter to load its capabilities."
    )
    expect(page.get_by_label("Message")).to_have_attribute(
        "aria-describedby", "readiness message-hint"
    )
    expect(recent(page)).to_contain_text("Enter a token and pick a capability")
    assert_in_view(page, "#readiness")
    send_with_enter(page, "Hello?")  # Enter in the field does not send either
    expect(page.get_by_role("log").locator(".msg")).to_have_count(0)
    sized.shoot("studio-not-ready-no-token")

    page.get_by_label("API token").fill(studio_runtime.tokens["dev"])
    expect(readiness).to_have_text("Press Enter in the API token field to load its capabilities.")
    expect(send).to_be_disabled()

    # A workspace without a generative or agent capability.
    page.route(
        "**/v1/capabilities",
        lambda route: route.fulfill(
            json={"capabilities": [{"id": "cap-classic", "name": "Scores", "kind": "classic"}]}
        ),
    )
    page.get_by_label("API token").press("Enter")
    expect(readiness).to_have_text(
        "This workspace has no generative or agent capability: create one first."
    )
    expect(send).to_be_disabled()
    sized.shoot("studio-not-ready-no-capability")

    page.unroute("**/v1/capabilities")
    page.get_by_label("API token").press("Enter")
    expect(send).to_be_enabled()
    expect(readiness).to_be_hidden()
    assert opened == []  # nothing was sent while Send was disabled


# WCAG relative luminance and contrast ratio of computed `rgb(...)` colours.
STYLE_OF = """el => {
  const behind = node => {
    for (let n = node.parentElement; n; n = n.parentElement) {
      const c = getComputedStyle(n).backgroundColor;
      if (c !== "transparent" && !/^rgba\\(.*,\\s*0\\)$/.test(c)) return c;
    }
    return "rgb(255, 255, 255)";
  };
  const s = getComputedStyle(el);
  return {id: el.id, focusVisible: el.matches(":focus-visible"),
          outline: s.outlineColor, outlineStyle: s.outlineStyle, outlineWidth: s.outlineWidth,
          border: s.borderTopColor, borderStyle: s.borderTopStyle,
          own: s.backgroundColor, behind: behind(el)};
}"""


def luminance(css: str) -> float:
    parts = css[css.index("(") + 1 : css.index(")")].replace("/", ",").split(",")
    red, green, blue = (float(p) / 255 for p in parts[:3])
    assert len(parts) == 3 or float(parts[3]) == 1, f"not opaque: {css}"

    def linear(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    return 0.2126 * linear(red) + 0.7152 * linear(green) + 0.0722 * linear(blue)


def contrast(a: str, b: str) -> float:
    light, dark = sorted((luminance(a), luminance(b)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def test_the_focus_ring_and_field_borders_reach_3_to_1(
    sized: Sized, studio_runtime: RuntimeProcess
) -> None:
    page = sized.page
    load_token(page, studio_runtime, studio_runtime.tokens["dev"])
    pick(page, "cap-generative")

    # Field borders against the field and against what is around it.
    for field in ("#token", "#capability", "#message"):
        style = page.eval_on_selector(field, STYLE_OF)
        assert style["borderStyle"] == "solid"
        for background in (style["own"], style["behind"]):
            assert contrast(style["border"], background) >= 3, (field, style)

    # The focus ring of every control reached by Tab, against what is behind it.
    page.get_by_label("API token").focus()
    seen: dict[str, float] = {}
    # As many Tabs as it takes to pass the recent list (its length varies) and reach Send.
    for _ in range(60):
        if "send" in seen:
            break
        page.keyboard.press("Tab")
        style = page.evaluate(f"({STYLE_OF})(document.activeElement)")
        if not style["id"] or style["id"] in seen:
            continue
        assert style["focusVisible"] and style["outlineStyle"] == "solid", style
        assert float(style["outlineWidth"].removesuffix("px")) >= 2, style
        seen[style["id"]] = contrast(style["outline"], style["behind"])
        if style["id"] == "message":
            sized.shoot("studio-focus-ring", full_page=False)
    assert {"capability", "new-conversation", "transcript", "message", "send"} <= set(seen)
    assert min(seen.values()) >= 3, seen
