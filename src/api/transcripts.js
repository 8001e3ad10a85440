"use strict";
// Everything shown comes from prompts, models and tools: it is set as text,
// never parsed as HTML.
const $ = (tag, cls, text) => {
  const el = document.createElement(tag);
  if (cls) el.className = cls;
  if (text !== undefined) el.textContent = text;
  return el;
};
const params = new URLSearchParams(location.search);
let key = sessionStorage.getItem("toolgate-key") || "";
const keyInput = document.querySelector("#key input");
keyInput.value = key;
keyInput.addEventListener("change", async (e) => {
  key = e.target.value; sessionStorage.setItem("toolgate-key", key);
  await whoami(); loadChats();
});
const headers = () => (key ? { authorization: "Bearer " + key } : {});
async function api(path) {
  const r = await fetch(path, { headers: headers() });
  if (r.status === 401) {
    document.querySelector("#key").classList.add("needed");
    throw new Error("This needs an API key: a client key shows its own chats, an admin key every tenant's.");
  }
  document.querySelector("#key").classList.remove("needed");
  if (!r.ok) throw new Error((await r.json()).error?.message || r.statusText);
  return r.json();
}
// What the key may do: admin-only controls (key management, backup, every
// tenant's filter) stay hidden until the gateway says the key is an admin's.
async function whoami() {
  let me = null;
  try { me = await api("/toolgate/api/whoami"); } catch { me = null; }
  const admin = Boolean(me && me.admin);
  document.body.dataset.role = me ? (admin ? "admin" : me.auth ? "client" : "open") : "";
  for (const el of document.querySelectorAll(".admin-only")) el.hidden = !admin;
  // Without keys (`auth` off) the one tenant's backup is anyone's.
  for (const el of document.querySelectorAll(".backup-only")) el.hidden = !(admin || (me && !me.auth));
  if (!admin) form.elements.tenant.value = "";
  document.dispatchEvent(new CustomEvent("toolgate:role"));
}
const when = (ms) => new Date(ms).toLocaleString();
const clock = (ms) => new Date(ms).toLocaleTimeString();
const plural = (n, one) => `${n} ${one}${n === 1 ? "" : "s"}`;
const seconds = (ms) => (ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(1)} s`);
let current = null, stream = null, timers = [];

// The list's filters: the form's fields, first taken from the page's URL.
const form = document.querySelector("#filters");
for (const name of ["q", "tenant", "provider", "model"]) form.elements[name].value = params.get(name) || "";
form.elements.errors.checked = params.get("errors") === "1";
function query() {
  const q = new URLSearchParams();
  for (const name of ["q", "tenant", "provider", "model"]) {
    const v = form.elements[name].value.trim();
    if (v) q.set(name, v);
  }
  if (form.elements.errors.checked) q.set("errors", "1");
  return q;
}
form.addEventListener("submit", (e) => { e.preventDefault(); loadChats(); });
form.elements.errors.addEventListener("change", () => loadChats());

// The chat list, a page at a time; `next` asks for the page after it.
let next = null, pages = 1;
function chatRow(c) {
  const row = $("div", "chat");
  row.dataset.id = c.id;
  const title = $("div", "title", c.title || "(no user text)");
  title.title = c.title || "(no user text)";
  if (c.errors > 0) {
    const mark = c.last_error === "cut" ? "cut" : "failed";
    title.prepend($("span", `mark ${mark}`, mark));
  }
  const meta = $("div", "meta", `${c.tenant} · ${c.provider} · ${c.model} · ${plural(c.tool_calls, "tool call")} · ${when(c.updated_at)}`);
  meta.title = meta.textContent;
  // When, short: the time today, else the date.
  const at = new Date(c.updated_at);
  const today = at.toDateString() === new Date().toDateString();
  const short = $("time", "when", today ? at.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }) : at.toLocaleDateString([], { month: "short", day: "numeric" }));
  short.title = when(c.updated_at);
  row.append(title, meta, short);
  row.onclick = () => openChat(c.id);
  if (c.id === current) row.classList.add("selected");
  return row;
}
async function loadChats(more) {
  const list = document.querySelector("#list");
  const q = query();
  q.set("limit", "50");
  if (more && next) { q.set("before", next.before); q.set("before_id", next.before_id); }
  try {
    const page = await api(`/toolgate/api/chats?${q}`);
    const rows = page.data.map(chatRow);
    document.querySelectorAll("#list .more").forEach((b) => b.remove());
    if (more) { list.append(...rows); pages += 1; } else { list.replaceChildren(...rows); pages = 1; }
    next = page.has_more ? page.next : null;
    if (next) {
      const button = $("button", "more", "Older chats");
      button.onclick = () => loadChats(true);
      list.append(button);
    }
    if (!list.querySelector(".chat")) list.replaceChildren($("p", "empty", query().toString() ? "No chat matches." : "No chats recorded yet."));
  } catch (e) { list.replaceChildren($("p", "empty", e.message)); }
}

// One chat's view: its header, turns, and each call's box by id so results
// land beneath it.
let view, calls, lastTurn, head;
// The header: what the chat is (from the events' `chat` frame), and every
// request and trace id its rows carry, as they come.
function chatHead(id) {
  const el = $("dl");
  el.id = "chat-head";
  const field = (name, label) => {
    const dd = $("dd");
    dd.dataset.field = name;
    el.append($("dt", null, label), dd);
    return dd;
  };
  head = {
    el, requests: new Set(), traces: new Set(),
    fields: {
      id: field("id", "chat"), tenant: field("tenant", "tenant"), provider: field("provider", "provider"),
      model: field("model", "model"), requests: field("requests", "request ids"), traces: field("traces", "trace ids"),
    },
  };
  head.fields.id.textContent = id;
  return el;
}
function describe(c) {
  for (const name of ["tenant", "provider", "model"]) head.fields[name].textContent = c[name] || "";
}
function noteIds(m) {
  for (const [value, set, name] of [[m.requestId, head.requests, "requests"], [m.traceId, head.traces, "traces"]]) {
    if (!value || set.has(value)) continue;
    set.add(value);
    head.fields[name].append($("code", null, value));
  }
}
function turn(role, m) {
  if (!lastTurn || lastTurn.role !== role) {
    const el = $("section", "turn");
    el.dataset.role = role;
    const head = $("div", "role", role);
    el.append(head);
    view.append(el);
    lastTurn = { role, el, head, traces: new Set() };
  }
  if (m && m.traceId && !lastTurn.traces.has(m.traceId)) {
    lastTurn.traces.add(m.traceId);
    const trace = $("span", "trace", `trace ${m.traceId.slice(0, 8)}…`);
    trace.title = m.traceId;
    lastTurn.head.append(trace);
  }
  return lastTurn.el;
}
function stamped(el, m) {
  if (m && m.timestamp) el.prepend($("time", "at", clock(m.timestamp)));
  return el;
}
function pretty(args) {
  try { return JSON.stringify(JSON.parse(args), null, 2); } catch { return String(args ?? ""); }
}
function addCall(call, role, m) {
  if (calls.has(call.id)) return calls.get(call.id);
  const box = $("div", "call");
  box.dataset.id = call.id;
  const started = (m && m.timestamp) || Date.now();
  box.dataset.started = started;
  const head = $("div", "head", call.name);
  if (call.server) head.append($("span", "server", call.server));
  stamped(head, m);
  const result = $("pre", "result pending", "Executing…");
  const tick = () => { if (result.classList.contains("pending")) result.textContent = `Executing… ${Math.round((Date.now() - started) / 1000)} s`; };
  timers.push(setInterval(tick, 1000)); tick();
  box.append(head, $("pre", "args", pretty(call.arguments)), result);
  turn(role, m).append(box);
  calls.set(call.id, box);
  return box;
}
function setResult(r) {
  const box = calls.get(r.toolCallId) || addCall({ id: r.toolCallId, name: "(call)", arguments: "" }, "tool", r);
  const result = box.querySelector(".result");
  if (!result.classList.contains("pending")) return;
  result.classList.remove("pending");
  result.textContent = r.result;
  box.classList.add(r.isError ? "failed" : "done");
  if (r.timestamp) {
    const took = Math.max(0, r.timestamp - Number(box.dataset.started));
    box.querySelector(".head").append($("span", "took", `${r.isError ? "failed" : "done"} in ${seconds(took)}`));
  }
}
function show(m) {
  noteIds(m);
  switch (m.kind) {
    case "text": turn(m.role, m).append(stamped($("div", "text", m.text), m)); break;
    case "reasoning": {
      const d = $("details"); d.append(stamped($("summary", null, "Reasoning"), m), $("div", "text", m.text));
      turn("assistant", m).append(d); break;
    }
    case "tools_call": for (const c of m.toolCalls || []) addCall(c, "assistant", m); break;
    case "tool_result": setResult(m); break;
    case "tools_aggregate":
      for (const c of m.toolCalls || []) addCall(c, "assistant", m);
      for (const r of m.toolResults || []) setResult({ ...r, timestamp: r.timestamp || m.timestamp });
      break;
    case "error": {
      const box = stamped($("div", "error", `The answer failed (${m.code || "error"}): ${m.text}`), m);
      if (m.raw) {
        box.append($("div", "raw-label", "The model wrote:"), $("pre", "raw", m.raw));
      }
      turn("assistant", m).append(box);
      break;
    }
    case "usage": {
      const u = m.usage || {};
      turn("assistant", m).append($("div", "usage", `tokens: ${u.prompt_tokens} in, ${u.completion_tokens} out, ${u.total_tokens} total`));
      break;
    }
  }
  view.scrollTop = view.scrollHeight;
}

async function openChat(id) {
  current = id;
  if (stream) stream.abort();
  timers.forEach(clearInterval); timers = [];
  document.querySelectorAll(".chat").forEach((el) => el.classList.toggle("selected", el.dataset.id === id));
  view = document.querySelector("#view");
  view.replaceChildren(chatHead(id)); calls = new Map(); lastTurn = null;
  // The events endpoint replays the stored messages, then streams live ones.
  stream = new AbortController();
  try {
    const r = await fetch(`/toolgate/api/chats/${encodeURIComponent(id)}/events`, { headers: headers(), signal: stream.signal });
    if (!r.ok) throw new Error((await r.json().catch(() => ({}))).error?.message || r.statusText);
    const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const frame = buffer.slice(0, cut); buffer = buffer.slice(cut + 2);
        const data = frame.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
        if (frame.startsWith("event: reload")) { openChat(id); return; }
        if (frame.startsWith("event: chat\n")) { describe(JSON.parse(data)); continue; }
        if (data) show(JSON.parse(data));
        if (frame.startsWith(": replayed")) document.body.dataset.replayed = id;
      }
    }
  } catch (e) {
    if (e.name !== "AbortError") view.append($("p", "empty", e.message));
  }
}

whoami().then(() => loadChats());
// The first page is kept fresh; pages loaded after it stay as they are.
setInterval(() => { if (pages === 1) loadChats(); }, 5000);
const wanted = params.get("chat");
if (wanted) openChat(wanted);
