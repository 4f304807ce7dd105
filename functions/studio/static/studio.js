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
  // The recent list. GET /v1/sessions lists one end user's sessions ("studio") across
  // every capability, newest first, so the page reads pages of them until it has found
  // RECENT_PER_CAPABILITY of the chosen capability, at most SESSION_PAGES_PER_LOAD pages
  // of SESSION_PAGE_SIZE per load; "Show older" continues from where it stopped.
  const RECENT_PER_CAPABILITY = 20;
  const SESSION_PAGE_SIZE = 100;
  const SESSION_PAGES_PER_LOAD = 5;
  // A conversation the page opens keeps its first words (metadata.title) for the list.
  const TITLE_CHARS = 60;

  const $ = (id) => document.getElementById(id);
  const ui = {
    token: $("token"),
    capability: $("capability"),
    newConversation: $("new-conversation"),
    sessions: $("sessions"),
    sessionsEmpty: $("sessions-empty"),
    sessionsMore: $("sessions-more"),
    sessionLabel: $("session-label"),
    transcript: $("transcript"),
    composer: $("composer"),
    message: $("message"),
    attach: $("attach"),
    send: $("send"),
    readiness: $("readiness"),
    status: $("status"),
    error: $("error"),
    context: $("context"),
    trace: $("trace"),
    sent: $("sent"),
    lineage: $("lineage"),
    forks: $("forks"),
    forksEmpty: $("forks-empty"),
    siblingsSection: $("siblings-section"),
    siblings: $("siblings"),
    siblingsEmpty: $("siblings-empty"),
    editing: $("editing"),
    editingText: $("editing-text"),
    cancelEdit: $("cancel-edit"),
    openSession: $("open-session"),
    sessionId: $("session-id"),
  };

  // The API is the page's own origin (and path prefix, if the page is mounted under one).
  const apiBase = location.origin + location.pathname.replace(/\/studio\/?$/, "");
  const injected = document.querySelector('meta[name="convo-stream-base"]');
  const streamBase = ((injected && injected.content.trim()) || apiBase).replace(/\/+$/, "");

  const state = {
    capabilities: [],
    sessionId: null,
    busy: false,
    generation: 0,
    loadedToken: null,
    // "idle" (no token loaded), "loading", "loaded" or "failed": what Send waits for.
    capabilitiesState: "idle",
    // The recent list of the chosen capability: where the next page starts, how many
    // were found, and a counter that drops the answers of an older load.
    listing: { capabilityId: null, nextToken: null, found: 0, load: 0 },
    // The user message being edited (its seq): the next Send forks before it.
    editing: null,
  };

  // An error answer of the service. `status` is null for an `event: error` of a stream
  // (its HTTP status was 200 and says nothing about the error).
  class ApiError extends Error {
    constructor(status, code, message, requestId) {
      super(message);
      this.status = status;
      this.code = code;
      this.requestId = requestId || null;
    }
  }

  // No answer arrived at all: the network, DNS, CORS or the service being down.
  class NetworkError extends Error {
    constructor(url) {
      super(`cannot reach ${new URL(url).host}`);
      this.code = "network_error";
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

  // One line for an error: its code, the HTTP status when there was one, the message and
  // the requestId that support can find the logs by.
  function describe(err) {
    if (err instanceof NetworkError) {
      return `Network error: ${err.message}. Check the connection (or that the service is running), then try again.`;
    }
    if (err instanceof ApiError) {
      const status = err.status ? ` (${err.status})` : "";
      const message = err.message ? `: ${err.message}` : "";
      const requestId = err.requestId ? ` \u00b7 requestId ${err.requestId}` : "";
      return `${err.code}${status}${message}${requestId}`;
    }
    return String((err && err.message) || err);
  }

  function showError(err) {
    ui.error.textContent = describe(err);
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

  // What is missing before a turn can be sent, in words; "" when Send can be used.
  function missingStep() {
    if (!token()) return "Enter your API token above, then press Enter to load its capabilities.";
    if (token() !== state.loadedToken) return "Press Enter in the API token field to load its capabilities.";
    if (state.capabilitiesState === "loading") return "Loading the capabilities\u2026";
    if (state.capabilitiesState === "failed") return "The capabilities could not be loaded: see the message above, then press Enter in the API token field to try again.";
    if (!state.capabilities.length) return "This workspace has no generative or agent capability: create one first.";
    if (!selectedCapability()) return "Pick a capability above.";
    return "";
  }

  // Send is disabled (and says why) until a token is loaded and a capability chosen.
  function updateReadiness() {
    const missing = missingStep();
    ui.send.disabled = Boolean(missing);
    ui.readiness.textContent = missing;
    ui.readiness.hidden = !missing;
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

  // The first words of a message, on one line, cut to TITLE_CHARS (an ellipsis marks it).
  function firstWords(text) {
    const flat = text.replace(/\s+/g, " ").trim();
    return flat.length <= TITLE_CHARS ? flat : `${flat.slice(0, TITLE_CHARS - 1)}\u2026`;
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
    // API Gateway's own id when the body has none (readable only if CORS exposes it).
    const headerId = response.headers.get("apigw-requestid") || response.headers.get("x-amzn-requestid");
    if (error && error.code) {
      return new ApiError(response.status, error.code, error.message || "", error.requestId || headerId);
    }
    return new ApiError(response.status, "http_error", `HTTP ${response.status}`, headerId);
  }

  // fetch, with "no answer at all" told apart from an error answer.
  async function request(url, init) {
    try {
      return await fetch(url, init);
    } catch (err) {
      if (err && err.name === "AbortError") throw err;
      throw new NetworkError(url);
    }
  }

  async function api(method, path, body) {
    if (!token()) throw new ApiError(401, "unauthorized", "enter an API token first");
    const headers = { authorization: `Bearer ${token()}`, accept: "application/json" };
    const init = { method, headers, cache: "no-store", credentials: "omit" };
    if (body !== undefined) {
      headers["content-type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const response = await request(apiBase + path, init);
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
    if (extra && extra.seq) setSeq(node, extra.seq);
    ui.transcript.append(node);
    scrollTranscript();
    return node;
  }

  // (v5) A message's attachments: an image read with the token (its bytes as a blob the
  // page shows), a document as its name and size.
  function showAttachments(bubble, refs) {
    if (refs && refs.length) bubble.dataset.files = refs.map((ref) => ref.fileId).join(" ");
    for (const ref of refs || []) {
      if (ref.type !== "image") {
        bubble.insertBefore(el("span", { class: "file-chip", text: `${ref.filename} (${ref.bytes} bytes)` }), bubble.querySelector(".actions"));
        continue;
      }
      const image = el("img", { class: "attachment", alt: ref.filename });
      bubble.insertBefore(image, bubble.querySelector(".actions"));
      fileBlob(ref.fileId).then((blob) => {
        image.src = URL.createObjectURL(blob);
      }, () => {
        image.replaceWith(el("span", { class: "file-chip", text: `${ref.filename} (no longer kept)` }));
      });
    }
  }

  async function fileBlob(fileId) {
    const response = await request(`${apiBase}/v1/files/${encodeURIComponent(fileId)}/content`, {
      headers: { authorization: `Bearer ${token()}` },
      cache: "no-store",
      credentials: "omit",
    });
    if (!response.ok) throw await errorFrom(response);
    return response.blob();
  }

  // An image chosen for the next message: uploaded (POST /v1/files), its id attached.
  async function upload(file) {
    const form = new FormData();
    form.append("purpose", "vision");
    form.append("file", file, file.name);
    const response = await request(`${apiBase}/v1/files`, {
      method: "POST",
      headers: { authorization: `Bearer ${token()}`, accept: "application/json" },
      body: form,
      cache: "no-store",
      credentials: "omit",
    });
    if (!response.ok) throw await errorFrom(response);
    return response.json();
  }

  // A recorded message: its seq, and what can be done with it. A user message can be
  // edited and an answer regenerated (both open a fork), and an answer's turn shows what
  // it sent the model.
  function setSeq(bubble, seq) {
    bubble.dataset.seq = String(seq);
    const user = bubble.dataset.role === "user";
    const actions = el("span", { class: "actions" });
    if (user) {
      actions.append(actionButton("Edit", `Edit seq ${seq}`, () => startEditing(bubble)));
    } else {
      actions.append(
        actionButton("Regenerate", `Regenerate seq ${seq}`, () => regenerate(bubble)),
        actionButton("What was sent", `What was sent for seq ${seq}`, () => showSent(seq)),
      );
    }
    bubble.append(actions);
  }

  function actionButton(text, label, action) {
    const button = el("button", { type: "button", "aria-label": label, text });
    button.addEventListener("click", () => {
      if (state.busy) {
        setStatus("Wait for the answer to finish.");
        return;
      }
      Promise.resolve(action()).catch(showError);
    });
    return button;
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
  async function streamTurn(capabilityId, input, sessionId, bubble, fileIds) {
    const url = `${streamBase}/v1/capabilities/${encodeURIComponent(capabilityId)}/predict/stream`;
    const response = await request(url, {
      method: "POST",
      headers: {
        authorization: `Bearer ${token()}`,
        "content-type": "application/json",
        accept: "text/event-stream",
      },
      body: JSON.stringify({ input, sessionId, attachments: (fileIds || []).map((fileId) => ({ fileId })) }),
      cache: "no-store",
      credentials: "omit",
    });
    if (!response.ok) throw await errorFrom(response);
    if (!response.body) throw new ApiError(null, "stream_unsupported", "this browser cannot read streams");

    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    let outcome = null;
    for (;;) {
      let chunk;
      try {
        chunk = await reader.read();
      } catch {
        throw new NetworkError(url); // the connection dropped mid-stream
      }
      const { value, done } = chunk;
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
          outcome = {
            error: new ApiError(null, error.code || "stream_error", error.message || "", error.requestId),
          };
        }
      }
      if (outcome !== null || done) break;
    }
    if (outcome !== null) reader.cancel().catch(() => {});
    if (outcome === null) throw new ApiError(null, "stream_interrupted", "the stream ended before its answer was done");
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

  function recallSize(recall) {
    const n = recall.fromSessions.length;
    return `${n} earlier conversation${n === 1 ? "" : "s"}, ${recall.text.length} characters`;
  }

  function renderContext(context) {
    const messages = context.messages || [];
    const digests = context.toolDigests || [];
    const recall = context.recall;
    const parts = [
      pairs([
        ["Replayed", `${messages.length} messages, ${context.replayedChars} characters`],
        ["Omitted", `${context.omittedMessages} older messages`],
        ["Summary", context.summary ? `through message ${context.summary.throughSeq}` : "none yet"],
        ["Tool digests", String(digests.length)],
        ["Recall", recall ? recallSize(recall) : "none"],
      ]),
    ];
    // In the prompt's order: the recall of earlier conversations, then the summary.
    if (recall) {
      parts.push(el("h3", { text: "Recalled from earlier conversations" }), el("pre", { class: "recall", text: recall.text }));
    }
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
    const pending = context.pendingTurn;
    if (pending) {
      parts.push(el("h3", { text: "Waiting for the app's tools" }));
      const list = el("ul", { class: "pending" });
      for (const call of pending.toolCalls || []) {
        list.append(el("li", { text: `${call.id}: ${call.name}(${clip(call.arguments)})` }));
      }
      parts.push(el("p", { text: `Turn ${pending.userSeq}, since ${when(pending.since)}` }), list);
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
      return null;
    }
    const context = await api("GET", `/v1/sessions/${encodeURIComponent(sessionId)}/context`);
    renderContext(context);
    return context;
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

  // What a turn sent the model (GET .../messages/{seq}/prompt), in the prompt's order.
  function renderSent(sent) {
    const digests = sent.toolDigests || [];
    const expired = digests.filter((digest) => digest.expired);
    const summary = sent.summary;
    const parts = [
      pairs([
        ["Answer", `message ${sent.seq}`],
        ["Recall", sent.recall ? recallSize(sent.recall) : "none"],
        ["Summary", !summary ? "none" : summary.expired ? "no longer kept" : `through message ${summary.throughSeq}`],
        ["Replayed", `${(sent.messages || []).length} messages`],
        ["Tool digests", `${digests.length}${expired.length ? ` (${expired.length} expired since)` : ""}`],
        ["App tools", (sent.appTools || []).join(", ") || "none"],
      ]),
      el("h3", { text: "Instructions" }),
      el("pre", { text: clip(sent.instructions, 2000) }),
    ];
    if (sent.recall) parts.push(el("h3", { text: "Recall" }), el("pre", { class: "recall", text: sent.recall.text }));
    if (summary && !summary.expired) parts.push(el("h3", { text: "Summary" }), el("pre", { text: summary.text }));
    if ((sent.messages || []).length) {
      const list = el("ol", { class: "window" });
      for (const message of sent.messages) {
        list.append(el("li", { value: String(message.seq), text: `${message.role}: ${clip(message.content)}` }));
      }
      parts.push(el("h3", { text: "Replayed messages" }), list);
    }
    for (const digest of digests) {
      parts.push(
        el("h3", { text: `Tool digest of message ${digest.seq}` }),
        el("pre", { text: digest.expired ? "Past its retention window: no longer kept." : clip(digest.text) }),
      );
    }
    parts.push(el("h3", { text: "Input" }), el("pre", { class: "input", text: clip(sent.input, 2000) }));
    ui.sent.replaceChildren(...parts);
  }

  async function showSent(seq) {
    const sessionId = state.sessionId;
    const path = `/v1/sessions/${encodeURIComponent(sessionId)}/messages/${seq}/prompt`;
    const sent = await api("GET", path);
    if (sessionId === state.sessionId) renderSent(sent);
  }

  // ------------------------------------------------------------------ capabilities

  function selectedCapability() {
    return state.capabilities.find((cap) => cap.id === ui.capability.value) || null;
  }

  async function loadCapabilities() {
    clearError();
    storeToken(token());
    state.loadedToken = token();
    state.capabilities = [];
    if (!token()) {
      state.capabilitiesState = "idle";
      ui.capability.replaceChildren(el("option", { value: "", text: "Enter a token first" }));
      ui.capability.disabled = true;
      await capabilityChanged();
      return;
    }
    state.capabilitiesState = "loading";
    updateReadiness();
    setStatus("Loading capabilities\u2026");
    const previous = ui.capability.value;
    try {
      const body = await api("GET", "/v1/capabilities");
      state.capabilities = (body.capabilities || []).filter((cap) => CONVERSATIONAL.has(cap.kind));
      state.capabilitiesState = "loaded";
    } catch (err) {
      state.capabilitiesState = "failed";
      ui.capability.replaceChildren(el("option", { value: "", text: "No capabilities loaded" }));
      ui.capability.disabled = true;
      setStatus("");
      showError(err);
      await capabilityChanged();
      return;
    }
    if (!state.capabilities.length) {
      ui.capability.replaceChildren(el("option", { value: "", text: "No generative or agent capability" }));
      ui.capability.disabled = true;
      setStatus("This workspace has no generative or agent capability.");
      await capabilityChanged();
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
    updateReadiness();
    await loadSessions().catch(showError);
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
    placeholder(ui.sent, 'Press "What was sent" under an answer to see what its turn sent the model.');
    stopEditing();
    ui.lineage.hidden = true;
    ui.lineage.replaceChildren();
    showForks([]);
    showSiblings(null, []);
    markCurrentSession();
  }

  function markCurrentSession() {
    for (const button of ui.sessions.querySelectorAll("button")) {
      button.setAttribute("aria-current", button.dataset.sessionId === state.sessionId ? "true" : "false");
    }
    ui.sessionLabel.textContent = state.sessionId ? state.sessionId : "(new)";
  }

  function titleOf(session) {
    return session.metadata && typeof session.metadata.title === "string" ? session.metadata.title : "";
  }

  function sessionButton(session) {
    const title = titleOf(session);
    const label = `${title ? `${title} \u00b7 ` : ""}${when(session.createdAt)} \u00b7 ${
      session.messageCount
    } messages${session.forkOf ? " \u00b7 fork" : ""}${session.status === "archived" ? " \u00b7 archived" : ""}`;
    const button = el("button", { type: "button", "data-session-id": session.id, text: label });
    button.addEventListener("click", () => openSession(session).catch(showError));
    return el("li", {}, button);
  }

  function sessionsNote(text) {
    ui.sessionsEmpty.textContent = text;
    ui.sessionsEmpty.hidden = !text;
  }

  // (Re)loads the recent list of the chosen capability; `more` continues it with older
  // sessions. Empty sessions (no turn recorded) are left out: there is nothing to reopen.
  async function loadSessions(more = false) {
    const cap = selectedCapability();
    const listing = state.listing;
    listing.load += 1;
    const load = listing.load;
    ui.sessionsMore.hidden = true;
    if (!more || !cap || listing.capabilityId !== cap.id) {
      more = false;
      ui.sessions.replaceChildren();
      listing.capabilityId = cap ? cap.id : null;
      listing.nextToken = null;
      listing.found = 0;
    }
    if (!cap) {
      sessionsNote(
        state.capabilitiesState === "failed"
          ? "Not loaded: the capabilities could not be loaded."
          : "Enter a token and pick a capability to see its conversations.",
      );
      return;
    }
    sessionsNote(more ? "" : "Loading\u2026");
    const wanted = listing.found + RECENT_PER_CAPABILITY;
    const found = [];
    let nextToken = listing.nextToken;
    try {
      for (let page = 0; page < SESSION_PAGES_PER_LOAD && listing.found + found.length < wanted; page += 1) {
        const query = `externalRef=${encodeURIComponent(EXTERNAL_REF)}&limit=${SESSION_PAGE_SIZE}${
          nextToken ? `&nextToken=${encodeURIComponent(nextToken)}` : ""
        }`;
        const body = await api("GET", `/v1/sessions?${query}`);
        if (load !== listing.load) return;
        for (const session of body.sessions || []) {
          if (session.capabilityId === cap.id && session.messageCount > 0) found.push(session);
        }
        nextToken = body.nextToken || null;
        if (!nextToken) break;
      }
    } catch (err) {
      if (load !== listing.load) return;
      sessionsNote(`Could not load the conversations (${err.code || "error"}).`);
      ui.sessionsMore.textContent = "Try again";
      ui.sessionsMore.dataset.action = more ? "more" : "reload";
      ui.sessionsMore.hidden = false;
      throw err;
    }
    ui.sessions.append(...found.map(sessionButton));
    listing.found += found.length;
    listing.nextToken = nextToken;
    if (!listing.found) {
      sessionsNote(
        nextToken ? "None among the newest Studio conversations." : "None yet for this capability.",
      );
    } else {
      sessionsNote("");
    }
    if (nextToken) {
      ui.sessionsMore.textContent = "Show older conversations";
      ui.sessionsMore.dataset.action = "more";
      ui.sessionsMore.hidden = false;
    }
    markCurrentSession();
  }

  async function openSession(session) {
    if (state.busy) {
      setStatus("Wait for the answer to finish.");
      return;
    }
    await showSession(session);
    setStatus(`Reopened the conversation of ${when(session.createdAt)}.`);
  }

  // Shows a session: its transcript, context, where it was forked from and its forks.
  async function showSession(session) {
    clearError();
    startNewConversation();
    const generation = state.generation;
    state.sessionId = session.id;
    markCurrentSession();
    showLineage(session);
    setStatus("Loading the conversation\u2026");
    let nextToken = null;
    for (let page = 0; page < MAX_MESSAGE_PAGES; page += 1) {
      const query = `limit=100${nextToken ? `&nextToken=${encodeURIComponent(nextToken)}` : ""}`;
      const body = await api("GET", `/v1/sessions/${encodeURIComponent(session.id)}/messages?${query}`);
      if (generation !== state.generation) return;
      for (const message of body.messages || []) {
        const bubble = appendMessage(message.role, message.content, {
          state: "done",
          withheld: message.withheld,
          seq: message.seq,
        });
        if (message.abandoned) addNote(bubble, "Abandoned: the app never sent its tools' results.");
        showAttachments(bubble, message.attachments);
      }
      nextToken = body.nextToken;
      if (!nextToken) break;
    }
    placeholder(ui.trace, "The next agent turn shows its tool calls here.");
    const context = await refreshContext(session.id);
    if (context && context.pendingTurn) appendPendingTurn(context.pendingTurn);
    await loadForks(session, generation);
  }

  // A turn that waits for the app's own tools (OpenAI-compatible doors): it is recorded
  // once the app sends their results; until then the transcript shows the calls.
  function appendPendingTurn(pending) {
    const node = appendMessage("assistant", `Turn ${pending.userSeq} waits for the app's tools (since ${when(pending.since)}).`, {
      state: "waiting",
    });
    for (const call of pending.toolCalls || []) {
      addToolLine(node, { name: `${call.name}(${clip(call.arguments)})`, status: "waiting for the app" });
    }
  }

  // A session by its id; the capability and the recent list follow it.
  async function openSessionById(id) {
    if (!id) return setStatus("Enter a session id.");
    const session = await api("GET", `/v1/sessions/${encodeURIComponent(id)}`);
    const known = state.capabilities.some((cap) => cap.id === session.capabilityId);
    const moved = known && ui.capability.value !== session.capabilityId;
    if (known) ui.capability.value = session.capabilityId;
    await openSession(session);
    if (moved) await loadSessions();
  }

  // ------------------------------------------------------------------ forks

  function showLineage(session) {
    const fork = session.forkOf;
    ui.lineage.hidden = !fork;
    if (!fork) return;
    const open = el("button", { type: "button", text: "Open the original conversation" });
    open.addEventListener("click", () => {
      if (state.busy) return setStatus("Wait for the answer to finish.");
      api("GET", `/v1/sessions/${encodeURIComponent(fork.sessionId)}`)
        .then(openSession)
        .catch(showError);
    });
    const title = titleOf(session);
    ui.lineage.replaceChildren(
      `${title ? `${title}${/[.\u2026]$/.test(title) ? "" : "."} ` : ""}Fork of ${fork.sessionId} after message ${fork.atSeq}. `,
      open,
    );
  }

  // A fork as the lists show it: where it branches (its title: "Edit of message 3: ...",
  // "Regenerated answer 4: ..."), then its size and age.
  function forkButton(fork) {
    const title = titleOf(fork);
    const label = `${title ? `${title} \u00b7 ` : ""}after message ${fork.forkOf.atSeq} \u00b7 ${
      fork.messageCount
    } messages \u00b7 ${when(fork.createdAt)}`;
    const button = el("button", { type: "button", "data-session-id": fork.id, text: label });
    button.addEventListener("click", () => openSession(fork).catch(showError));
    return el("li", {}, button);
  }

  function showForks(forks) {
    ui.forks.replaceChildren(...forks.map(forkButton));
    ui.forksEmpty.hidden = forks.length > 0;
  }

  // A fork's siblings: the other forks of the conversation it branches from (hidden for
  // a conversation that is no fork).
  function showSiblings(session, siblings) {
    ui.siblingsSection.hidden = !(session && session.forkOf);
    ui.siblings.replaceChildren(...siblings.map(forkButton));
    ui.siblingsEmpty.hidden = siblings.length > 0;
  }

  // The forks of the open conversation and, for a fork, its siblings, newest first,
  // among the newest Studio sessions (one pass over the same pages).
  async function loadForks(session, generation) {
    const forks = [];
    const siblings = [];
    const parent = session.forkOf ? session.forkOf.sessionId : null;
    let nextToken = null;
    for (let page = 0; page < SESSION_PAGES_PER_LOAD; page += 1) {
      const query = `externalRef=${encodeURIComponent(EXTERNAL_REF)}&limit=${SESSION_PAGE_SIZE}${
        nextToken ? `&nextToken=${encodeURIComponent(nextToken)}` : ""
      }`;
      const body = await api("GET", `/v1/sessions?${query}`);
      if (generation !== state.generation) return;
      for (const other of body.sessions || []) {
        if (!other.forkOf) continue;
        if (other.forkOf.sessionId === session.id) forks.push(other);
        else if (parent && other.forkOf.sessionId === parent && other.id !== session.id) siblings.push(other);
      }
      nextToken = body.nextToken || null;
      if (!nextToken) break;
    }
    showForks(forks);
    showSiblings(session, siblings);
  }

  // A fork of the open conversation after its answer `atSeq`, titled by where it
  // branches, which the page then shows.
  async function branch(atSeq, title) {
    const parent = state.sessionId;
    setStatus("Opening a fork\u2026");
    const fork = await api("POST", `/v1/sessions/${encodeURIComponent(parent)}/forks`, {
      atSeq,
      metadata: { title },
    });
    await showSession(fork);
    setStatus(`A fork of the conversation after message ${atSeq}: it goes on from here.`);
  }

  function startEditing(bubble) {
    const seq = Number(bubble.dataset.seq);
    state.editing = { seq };
    ui.message.value = bubbleText(bubble).textContent;
    ui.editingText.textContent = `Editing message ${seq}: Send opens a fork with your new text; this conversation stays as it is.`;
    ui.editing.hidden = false;
    ui.message.focus();
  }

  function stopEditing() {
    state.editing = null;
    ui.editing.hidden = true;
  }

  // Another answer to the message before `bubble`: a fork before that message, which
  // is sent again.
  async function regenerate(bubble) {
    const seq = Number(bubble.dataset.seq);
    const question = ui.transcript.querySelector(`.msg[data-seq="${seq - 1}"] .text`);
    if (!question) return;
    const input = question.textContent;
    const asked = question.closest(".msg");
    const fileIds = asked && asked.dataset.files ? asked.dataset.files.split(" ") : [];
    clearError();
    await branch(seq - 2, `Regenerated answer ${seq}`);
    const prediction = await sendText(input, fileIds);
    const sessionId = state.sessionId;
    if (!prediction || !prediction.turn || !sessionId) return;
    // Titled by the new answer's first words, so that siblings tell themselves apart.
    const title = `Regenerated answer ${seq}: ${firstWords(prediction.output)}`;
    const fork = await api("PATCH", `/v1/sessions/${encodeURIComponent(sessionId)}`, { metadata: { title } });
    if (sessionId !== state.sessionId) return;
    showLineage(fork);
    await Promise.all([loadSessions(), loadForks(fork, state.generation)]);
  }

  // ------------------------------------------------------------------ sending

  async function sendMessage() {
    if (state.busy) {
      setStatus("Wait for the answer to finish.");
      return;
    }
    const input = ui.message.value;
    if (!input.trim() && !(ui.attach.files && ui.attach.files.length)) {
      setStatus("Type a message first.");
      ui.message.focus();
      return;
    }
    const cap = selectedCapability();
    const missing = missingStep();
    if (missing || !cap) {
      updateReadiness();
      setStatus(missing);
      return;
    }
    clearError();
    if (state.editing) {
      const { seq } = state.editing;
      try {
        await branch(seq - 1, `Edit of message ${seq}: ${firstWords(input)}`);
      } catch (err) {
        showError(err);
        return;
      }
    }
    await sendText(input);
  }

  // One turn of `input` on the open conversation (a new one when none is open); its
  // prediction, or null when the turn failed.
  async function sendText(input, again) {
    const cap = selectedCapability();
    const chosen = again ? null : ui.attach.files && ui.attach.files[0];
    setBusy(true);
    const generation = state.generation;
    let bubble = null;
    let prediction = null;
    let opened = null; // the session this send opened, if it did
    try {
      if (!state.sessionId) {
        const session = await api("POST", "/v1/sessions", {
          capabilityId: cap.id,
          externalRef: EXTERNAL_REF,
          principal: null,
          metadata: { title: firstWords(input) },
        });
        if (generation !== state.generation) return;
        state.sessionId = session.id;
        opened = session.id;
        markCurrentSession();
      }
      const sessionId = state.sessionId;
      let fileIds = again || [];
      if (chosen) {
        setStatus("Uploading the image\u2026");
        fileIds = [(await upload(chosen)).id];
      }
      ui.message.value = "";
      ui.attach.value = "";
      const question = appendMessage("user", input);
      if (fileIds.length) {
        question.dataset.files = fileIds.join(" ");
        const image = el("img", { class: "attachment", alt: chosen ? chosen.name : "attached image" });
        question.append(image);
        if (chosen) image.src = URL.createObjectURL(chosen);
        else fileBlob(fileIds[0]).then((blob) => { image.src = URL.createObjectURL(blob); }, () => image.remove());
      }
      bubble = appendMessage("assistant", "", { state: "streaming" });
      setStatus("Streaming the answer\u2026");
      prediction = await streamTurn(cap.id, input, sessionId, bubble, fileIds);
      const text = bubbleText(bubble);
      // The final output wins: e.g. an idempotent replay or a filter that withheld it.
      if (text.textContent !== prediction.output) text.textContent = prediction.output;
      if (prediction.withheld) addNote(bubble, "Withheld by the content filter.");
      if (prediction.recorded === false) addNote(bubble, "Not recorded yet: the service retries the write.");
      if (prediction.turn) {
        setSeq(question, prediction.turn.userSeq);
        setSeq(bubble, prediction.turn.assistantSeq);
      }
      bubble.dataset.state = "done";
      setStatus("Answer complete.");
    } catch (err) {
      if (bubble) {
        bubble.dataset.state = "error";
        addNote(bubble, describe(err));
      }
      if (!ui.message.value) ui.message.value = input;
      setStatus("The turn failed.");
      showError(err);
      if (opened && generation === state.generation) await discardIfEmpty(opened);
      prediction = null;
    } finally {
      if (generation === state.generation) setBusy(false);
    }
    if (generation !== state.generation || !state.sessionId) return prediction;
    const followUps = [refreshContext(state.sessionId), loadSessions()];
    if (prediction && prediction.runId) followUps.push(refreshTrace(prediction.runId));
    else if (prediction && cap.kind === "agent") placeholder(ui.trace, "This turn left no run trace.");
    for (const result of await Promise.allSettled(followUps)) {
      if (result.status === "rejected") showError(result.reason);
    }
    return prediction;
  }

  // A first turn that failed leaves its new session empty: delete it, so that no empty
  // conversation is left behind, unless the turn was recorded after all (the connection
  // dropped after the service had answered). When the service cannot be reached, the
  // session is kept for the next try (and empty sessions are not listed anyway).
  async function discardIfEmpty(sessionId) {
    try {
      const session = await api("GET", `/v1/sessions/${encodeURIComponent(sessionId)}`);
      if (session.messageCount > 0) return;
      await api("DELETE", `/v1/sessions/${encodeURIComponent(sessionId)}`);
    } catch (err) {
      if (!(err instanceof ApiError && err.status === 404)) return;
    }
    if (state.sessionId === sessionId) {
      state.sessionId = null;
      markCurrentSession();
    }
  }

  // ------------------------------------------------------------------ wiring

  // Enter (re)loads; leaving the field loads only a token not loaded yet.
  ui.token.addEventListener("change", () => {
    if (token() !== state.loadedToken) loadCapabilities();
  });
  ui.token.addEventListener("input", () => updateReadiness());
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
  ui.sessionsMore.addEventListener("click", () => {
    clearError();
    loadSessions(ui.sessionsMore.dataset.action === "more").catch(showError);
  });
  ui.cancelEdit.addEventListener("click", () => {
    stopEditing();
    ui.message.value = "";
    setStatus("Edit cancelled.");
    ui.message.focus();
  });
  ui.composer.addEventListener("submit", (event) => {
    event.preventDefault();
    sendMessage();
  });
  ui.openSession.addEventListener("submit", (event) => {
    event.preventDefault();
    clearError();
    openSessionById(ui.sessionId.value.trim()).catch(showError);
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
  } else {
    updateReadiness();
    loadSessions().catch(showError);
  }
})();
