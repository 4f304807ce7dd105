"use strict";
// The Studio Chat page. Plain JS, no build step: it talks to the API of the origin that
// served it and streams turns from the streaming door (same origin locally, the Function
// URL on AWS). The API token lives in this tab's sessionStorage at most, never in a URL.
(() => {
  const TOKEN_KEY = "convo-studio-token";
  const EXTERNAL_REF = "studio";
  const CONVERSATIONAL = new Set(["generative", "agent"]);
  const MAX_MESSAGE_PAGES = 20;
  const PREVIEW_CHARS = 600;

  const $ = (id) => document.getElementById(id);
  const ui = {
    token: $("token"),
    capability: $("capability"),
    newConversation: $("new-conversation"),
    sessions: $("sessions"),
    sessionsEmpty: $("sessions-empty"),
    sessionLabel: $("session-label"),
    transcript: $("transcript"),
    composer: $("composer"),
    message: $("message"),
    send: $("send"),
    status: $("status"),
    error: $("error"),
    context: $("context"),
    trace: $("trace"),
  };

  // The API is the page's own origin (and path prefix, if the page is mounted under one).
  const apiBase = location.origin + location.pathname.replace(/\/studio\/?$/, "");
  const injected = document.querySelector('meta[name="convo-stream-base"]');
  const streamBase = ((injected && injected.content.trim()) || apiBase).replace(/\/+$/, "");

  const state = { capabilities: [], sessionId: null, busy: false, generation: 0, loadedToken: null };

  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  // ------------------------------------------------------------------ token storage

  function storedToken() {
    try {
      return sessionStorage.getItem(TOKEN_KEY) || "";
    } catch {
      return "";
    }
  }

  function storeToken(token) {
    try {
      if (token) sessionStorage.setItem(TOKEN_KEY, token);
      else sessionStorage.removeItem(TOKEN_KEY);
    } catch {
      // Storage refused (privacy mode): the token simply stays in the field.
    }
  }

  const token = () => ui.token.value.trim();

  // ------------------------------------------------------------------ feedback

  function showError(err) {
    let text;
    if (err instanceof ApiError) text = `${err.code} (${err.status}): ${err.message}`;
    else if (err instanceof TypeError) text = `network_error: ${err.message || "the request failed"}`;
    else text = String((err && err.message) || err);
    ui.error.textContent = text;
    ui.error.hidden = false;
  }

  function clearError() {
    ui.error.hidden = true;
    ui.error.textContent = "";
  }

  function setStatus(text) {
    ui.status.textContent = text;
  }

  function setBusy(busy) {
    state.busy = busy;
    ui.transcript.setAttribute("aria-busy", busy ? "true" : "false");
    // aria-disabled keeps the button focusable, so keyboard focus is never lost.
    ui.send.setAttribute("aria-disabled", busy ? "true" : "false");
  }

  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (key === "text") node.textContent = value;
      else if (key === "class") node.className = value;
      else node.setAttribute(key, value);
    }
    for (const child of children) {
      if (child !== null && child !== undefined) node.append(child);
    }
    return node;
  }

  function clip(text, limit = PREVIEW_CHARS) {
    const value = String(text);
    return value.length > limit ? `${value.slice(0, limit)}\u2026` : value;
  }

  function pretty(value) {
    if (typeof value === "string") {
      try {
        return JSON.stringify(JSON.parse(value), null, 2);
      } catch {
        return value;
      }
    }
    return JSON.stringify(value, null, 2);
  }

  function when(iso) {
    const date = new Date(iso);
    return Number.isNaN(date.getTime()) ? String(iso) : date.toLocaleString();
  }

  // ------------------------------------------------------------------ HTTP

  async function errorFrom(response) {
    let body = null;
    try {
      body = await response.json();
    } catch {
      // Not JSON: fall through to a generic error.
    }
    const error = body && body.error;
    if (error && error.code) return new ApiError(response.status, error.code, error.message || "");
    return new ApiError(response.status, "http_error", `HTTP ${response.status}`);
  }

  async function api(method, path, body) {
    if (!token()) throw new ApiError(401, "unauthorized", "enter an API token first");
    const headers = { authorization: `Bearer ${token()}`, accept: "application/json" };
    const init = { method, headers, cache: "no-store", credentials: "omit" };
    if (body !== undefined) {
      headers["content-type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const response = await fetch(apiBase + path, init);
    if (!response.ok) throw await errorFrom(response);
    return response.status === 204 ? null : response.json();
  }

  // ------------------------------------------------------------------ transcript

  function scrollTranscript() {
    ui.transcript.scrollTop = ui.transcript.scrollHeight;
  }

  function appendMessage(role, content, extra) {
    const text = el("span", { class: "text", text: content });
    const node = el(
      "div",
      { class: `msg ${role}`, "data-role": role },
      el("span", { class: "who", text: role === "user" ? "You" : "Assistant" }),
      text,
    );
    if (extra && extra.state) node.dataset.state = extra.state;
    if (extra && extra.withheld) addNote(node, "Withheld by the content filter.");
    ui.transcript.append(node);
    scrollTranscript();
    return node;
  }

  function addNote(bubble, text) {
    bubble.append(el("span", { class: "note", text }));
  }

  function bubbleText(bubble) {
    return bubble.querySelector(".text");
  }

  function addToolLine(bubble, data) {
    const name = (data && (data.name || data.tool)) || "tool";
    const status = (data && data.status) || "called";
    const line = el("span", { class: "tool-line", text: `\u2699 ${name} \u00b7 ${status}` });
    bubble.insertBefore(line, bubbleText(bubble));
  }

  function clearTranscript() {
    ui.transcript.replaceChildren();
  }

  // ------------------------------------------------------------------ streaming

  function parseEvent(raw) {
    let name = "message";
    const data = [];
    for (const line of raw.split("\n")) {
      if (!line || line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "event") name = value;
      else if (field === "data") data.push(value);
    }
    if (!data.length) return null;
    try {
      return { name, data: JSON.parse(data.join("\n")) };
    } catch {
      return null;
    }
  }

  // Sends one turn through the streaming door; resolves with the Prediction of `done`.
  async function streamTurn(capabilityId, input, sessionId, bubble) {
    const url = `${streamBase}/v1/capabilities/${encodeURIComponent(capabilityId)}/predict/stream`;
    const response = await fetch(url, {
      method: "POST",
      headers: {
        authorization: `Bearer ${token()}`,
        "content-type": "application/json",
        accept: "text/event-stream",
      },
      body: JSON.stringify({ input, sessionId }),
      cache: "no-store",
      credentials: "omit",
    });
    if (!response.ok) throw await errorFrom(response);
    if (!response.body) throw new ApiError(0, "stream_unsupported", "this browser cannot read streams");

    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    let outcome = null;
    for (;;) {
      const { value, done } = await reader.read();
      buffer += decoder.decode(value || new Uint8Array(0), { stream: !done });
      // Normalise line ends, keeping a trailing "\r" whose "\n" may be in the next chunk.
      const tail = !done && buffer.endsWith("\r") ? "\r" : "";
      buffer = (tail ? buffer.slice(0, -1) : buffer).replace(/\r\n?/g, "\n") + tail;
      let end;
      while (outcome === null && (end = buffer.indexOf("\n\n")) >= 0) {
        const event = parseEvent(buffer.slice(0, end));
        buffer = buffer.slice(end + 2);
        if (!event) continue;
        if (event.name === "delta") {
          bubbleText(bubble).textContent += (event.data && event.data.text) || "";
          scrollTranscript();
        } else if (event.name === "tool") {
          addToolLine(bubble, event.data);
        } else if (event.name === "done") {
          outcome = { prediction: event.data };
        } else if (event.name === "error") {
          const error = (event.data && event.data.error) || event.data || {};
          outcome = { error: new ApiError(200, error.code || "stream_error", error.message || "") };
        }
      }
      if (outcome !== null || done) break;
    }
    if (outcome !== null) reader.cancel().catch(() => {});
    if (outcome === null) throw new ApiError(0, "stream_interrupted", "the stream ended before its answer was done");
    if (outcome.error) throw outcome.error;
    return outcome.prediction;
  }

  // ------------------------------------------------------------------ panels

  function placeholder(container, text) {
    container.replaceChildren(el("p", { class: "muted", text }));
  }

  function pairs(rows) {
    const list = el("dl");
    for (const [term, value] of rows) list.append(el("dt", { text: term }), el("dd", { text: value }));
    return list;
  }

  function renderContext(context) {
    const messages = context.messages || [];
    const digests = context.toolDigests || [];
    const parts = [
      pairs([
        ["Replayed", `${messages.length} messages, ${context.replayedChars} characters`],
        ["Omitted", `${context.omittedMessages} older messages`],
        ["Summary", context.summary ? `through message ${context.summary.throughSeq}` : "none yet"],
        ["Tool digests", String(digests.length)],
      ]),
    ];
    if (context.summary) {
      parts.push(el("h3", { text: "Summary" }), el("pre", { text: context.summary.text }));
    }
    parts.push(el("h3", { text: "Replayed window" }));
    if (messages.length) {
      const list = el("ol", { class: "window" });
      for (const message of messages) {
        list.append(el("li", { value: String(message.seq), text: `${message.role}: ${clip(message.content)}` }));
      }
      parts.push(list);
    } else {
      parts.push(el("p", { class: "muted", text: "Nothing is replayed yet." }));
    }
    if (digests.length) {
      parts.push(el("h3", { text: "Tool digests" }));
      const list = el("ol", { class: "digests" });
      for (const digest of digests) {
        list.append(
          el("li", { value: String(digest.seq) }, `${(digest.tools || []).join(", ")}`, el("pre", { text: clip(digest.text) })),
        );
      }
      parts.push(list);
    }
    ui.context.replaceChildren(...parts);
  }

  async function refreshContext(sessionId) {
    if (!sessionId) {
      placeholder(ui.context, "What the next turn will see appears here.");
      return;
    }
    renderContext(await api("GET", `/v1/sessions/${encodeURIComponent(sessionId)}/context`));
  }

  function renderTrace(run) {
    const steps = run.steps || [];
    const parts = [
      pairs([
        ["Run", run.runId || ""],
        ["Principal", run.principal ? JSON.stringify(run.principal) : "none (Studio sessions carry none)"],
        ["Tool calls", String(steps.length)],
      ]),
    ];
    if (steps.length) {
      const list = el("ol", { class: "steps" });
      for (const step of steps) {
        const status = step.status || (step.error ? "error" : "ok");
        list.append(
          el(
            "li",
            { class: "step" },
            el("strong", { class: "tool-name", text: step.tool || step.name || "tool" }),
            pairs([
              ["Status", status],
              ["Duration", step.durationMs === undefined ? "?" : `${step.durationMs} ms`],
            ]),
            el("h3", { text: "Input" }),
            el("pre", { text: clip(pretty(step.input), 2000) }),
            el("h3", { text: "Output" }),
            el("pre", { text: clip(pretty(step.output), 2000) }),
          ),
        );
      }
      parts.push(list);
    } else {
      parts.push(el("p", { class: "muted", text: "The agent called no tool in this turn." }));
    }
    ui.trace.replaceChildren(...parts);
  }

  async function refreshTrace(runId) {
    renderTrace(await api("GET", `/v1/runs/${encodeURIComponent(runId)}`));
  }

  // ------------------------------------------------------------------ capabilities

  function selectedCapability() {
    return state.capabilities.find((cap) => cap.id === ui.capability.value) || null;
  }

  async function loadCapabilities() {
    clearError();
    storeToken(token());
    state.loadedToken = token();
    if (!token()) {
      state.capabilities = [];
      ui.capability.replaceChildren(el("option", { value: "", text: "Enter a token first" }));
      ui.capability.disabled = true;
      return;
    }
    setStatus("Loading capabilities\u2026");
    const previous = ui.capability.value;
    try {
      const body = await api("GET", "/v1/capabilities");
      state.capabilities = (body.capabilities || []).filter((cap) => CONVERSATIONAL.has(cap.kind));
    } catch (err) {
      state.capabilities = [];
      ui.capability.replaceChildren(el("option", { value: "", text: "No capabilities loaded" }));
      ui.capability.disabled = true;
      setStatus("");
      showError(err);
      return;
    }
    if (!state.capabilities.length) {
      ui.capability.replaceChildren(el("option", { value: "", text: "No generative or agent capability" }));
      ui.capability.disabled = true;
      setStatus("This workspace has no generative or agent capability.");
      return;
    }
    ui.capability.replaceChildren(
      ...state.capabilities.map((cap) =>
        el("option", { value: cap.id, "data-kind": cap.kind, text: `${cap.name || cap.id} (${cap.kind})` }),
      ),
    );
    ui.capability.disabled = false;
    if (state.capabilities.some((cap) => cap.id === previous)) ui.capability.value = previous;
    setStatus(`${state.capabilities.length} capabilities loaded.`);
    await capabilityChanged();
  }

  async function capabilityChanged() {
    startNewConversation();
    await loadSessions();
  }

  // ------------------------------------------------------------------ sessions

  function startNewConversation() {
    state.generation += 1;
    state.sessionId = null;
    ui.sessionLabel.textContent = "(new)";
    clearTranscript();
    setBusy(false);
    placeholder(ui.context, "What the next turn will see appears here.");
    const cap = selectedCapability();
    placeholder(
      ui.trace,
      cap && cap.kind === "agent" ? "Agent turns show their tool calls here." : "Generative turns have no run trace.",
    );
    markCurrentSession();
  }

  function markCurrentSession() {
    for (const button of ui.sessions.querySelectorAll("button")) {
      button.setAttribute("aria-current", button.dataset.sessionId === state.sessionId ? "true" : "false");
    }
    ui.sessionLabel.textContent = state.sessionId ? state.sessionId : "(new)";
  }

  async function loadSessions() {
    const cap = selectedCapability();
    if (!cap) {
      ui.sessions.replaceChildren();
      ui.sessionsEmpty.hidden = false;
      return;
    }
    let sessions = [];
    try {
      const body = await api("GET", `/v1/sessions?externalRef=${encodeURIComponent(EXTERNAL_REF)}&limit=20`);
      sessions = (body.sessions || []).filter((session) => session.capabilityId === cap.id);
    } catch (err) {
      showError(err);
    }
    ui.sessions.replaceChildren(
      ...sessions.map((session) => {
        const label = `${when(session.createdAt)} \u00b7 ${session.messageCount} messages${
          session.status === "archived" ? " \u00b7 archived" : ""
        }`;
        const button = el("button", { type: "button", "data-session-id": session.id, text: label });
        button.addEventListener("click", () => openSession(session).catch(showError));
        return el("li", {}, button);
      }),
    );
    ui.sessionsEmpty.hidden = sessions.length > 0;
    markCurrentSession();
  }

  async function openSession(session) {
    if (state.busy) {
      setStatus("Wait for the answer to finish.");
      return;
    }
    clearError();
    startNewConversation();
    const generation = state.generation;
    state.sessionId = session.id;
    markCurrentSession();
    setStatus("Loading the conversation\u2026");
    let nextToken = null;
    for (let page = 0; page < MAX_MESSAGE_PAGES; page += 1) {
      const query = `limit=100${nextToken ? `&nextToken=${encodeURIComponent(nextToken)}` : ""}`;
      const body = await api("GET", `/v1/sessions/${encodeURIComponent(session.id)}/messages?${query}`);
      if (generation !== state.generation) return;
      for (const message of body.messages || []) {
        appendMessage(message.role, message.content, { state: "done", withheld: message.withheld });
      }
      nextToken = body.nextToken;
      if (!nextToken) break;
    }
    placeholder(ui.trace, "The next agent turn shows its tool calls here.");
    await refreshContext(session.id);
    setStatus(`Reopened the conversation of ${when(session.createdAt)}.`);
  }

  // ------------------------------------------------------------------ sending

  async function sendMessage() {
    if (state.busy) {
      setStatus("Wait for the answer to finish.");
      return;
    }
    const input = ui.message.value;
    if (!input.trim()) {
      setStatus("Type a message first.");
      ui.message.focus();
      return;
    }
    const cap = selectedCapability();
    if (!token() || !cap) {
      showError(new ApiError(400, "not_ready", "enter an API token and pick a capability first"));
      return;
    }
    clearError();
    setBusy(true);
    const generation = state.generation;
    let bubble = null;
    let prediction = null;
    try {
      if (!state.sessionId) {
        const session = await api("POST", "/v1/sessions", {
          capabilityId: cap.id,
          externalRef: EXTERNAL_REF,
          principal: null,
        });
        if (generation !== state.generation) return;
        state.sessionId = session.id;
        markCurrentSession();
      }
      const sessionId = state.sessionId;
      ui.message.value = "";
      appendMessage("user", input);
      bubble = appendMessage("assistant", "", { state: "streaming" });
      setStatus("Streaming the answer\u2026");
      prediction = await streamTurn(cap.id, input, sessionId, bubble);
      const text = bubbleText(bubble);
      // The final output wins: e.g. an idempotent replay or a filter that withheld it.
      if (text.textContent !== prediction.output) text.textContent = prediction.output;
      if (prediction.withheld) addNote(bubble, "Withheld by the content filter.");
      if (prediction.recorded === false) addNote(bubble, "Not recorded yet: the service retries the write.");
      bubble.dataset.state = "done";
      setStatus("Answer complete.");
    } catch (err) {
      if (bubble) {
        bubble.dataset.state = "error";
        addNote(bubble, err instanceof ApiError ? `${err.code}: ${err.message}` : String(err));
      }
      if (!ui.message.value) ui.message.value = input;
      setStatus("The turn failed.");
      showError(err);
    } finally {
      if (generation === state.generation) setBusy(false);
    }
    if (generation !== state.generation || !state.sessionId) return;
    const followUps = [refreshContext(state.sessionId), loadSessions()];
    if (prediction && prediction.runId) followUps.push(refreshTrace(prediction.runId));
    else if (prediction && cap.kind === "agent") placeholder(ui.trace, "This turn left no run trace.");
    for (const result of await Promise.allSettled(followUps)) {
      if (result.status === "rejected") showError(result.reason);
    }
  }

  // ------------------------------------------------------------------ wiring

  // Enter (re)loads; leaving the field loads only a token not loaded yet.
  ui.token.addEventListener("change", () => {
    if (token() !== state.loadedToken) loadCapabilities();
  });
  ui.token.addEventListener("keydown", (event) => {
    if (event.key === "Enter") {
      event.preventDefault();
      loadCapabilities();
    }
  });
  ui.capability.addEventListener("change", () => capabilityChanged());
  ui.newConversation.addEventListener("click", () => {
    if (state.busy) {
      setStatus("Wait for the answer to finish.");
      return;
    }
    clearError();
    startNewConversation();
    setStatus("New conversation.");
    ui.message.focus();
  });
  ui.composer.addEventListener("submit", (event) => {
    event.preventDefault();
    sendMessage();
  });
  ui.message.addEventListener("keydown", (event) => {
    const plainEnter = event.key === "Enter" && !event.shiftKey && !event.altKey && !event.ctrlKey && !event.metaKey;
    if (plainEnter && !event.isComposing) {
      event.preventDefault();
      ui.composer.requestSubmit();
    }
  });

  const saved = storedToken();
  if (saved) {
    ui.token.value = saved;
    loadCapabilities();
  }
})();
