"use strict";
// Everything shown comes from prompts, models and tools: it is set as text,
// never parsed as HTML.
const $ = (tag, cls, text) => {
  const el = document.createElement(tag);
  if (cls) el.className = cls;
  if (text !== undefined) el.textContent = text;
  return el;
};
let key = sessionStorage.getItem("toolgate-key") || "";
const keyBox = document.querySelector("#key");
keyBox.querySelector("input").addEventListener("change", (e) => {
  key = e.target.value; sessionStorage.setItem("toolgate-key", key); loadChats();
});
const headers = () => (key ? { authorization: "Bearer " + key } : {});
async function api(path) {
  const r = await fetch(path, { headers: headers() });
  if (r.status === 401) { keyBox.style.display = "block"; throw new Error("an API key is needed"); }
  if (!r.ok) throw new Error((await r.json()).error?.message || r.statusText);
  return r.json();
}
const when = (ms) => new Date(ms).toLocaleString();
let current = null, stream = null, timers = [];

async function loadChats() {
  const list = document.querySelector("#list");
  try {
    const { data } = await api("/toolgate/api/chats?limit=100");
    list.replaceChildren(...data.map((c) => {
      const row = $("div", "chat");
      row.dataset.id = c.id;
      row.append($("div", "title", c.title || "(no user text)"),
        $("div", "meta", `${c.tenant} · ${c.provider} · ${c.model} · ${c.tool_calls} tool calls · ${when(c.updated_at)}`));
      row.onclick = () => openChat(c.id);
      if (c.id === current) row.classList.add("selected");
      return row;
    }));
    if (!data.length) list.replaceChildren($("p", "empty", "No chats recorded yet."));
  } catch (e) { list.replaceChildren($("p", "empty", e.message)); }
}

// One chat's view: turns, and each call's box by id so results land beneath it.
let view, calls, lastTurn;
function turn(role) {
  if (lastTurn && lastTurn.role === role) return lastTurn.el;
  const el = $("section", "turn");
  el.dataset.role = role;
  el.append($("div", "role", role));
  view.append(el);
  lastTurn = { role, el };
  return el;
}
function pretty(args) {
  try { return JSON.stringify(JSON.parse(args), null, 2); } catch { return String(args ?? ""); }
}
function addCall(call, role, at) {
  if (calls.has(call.id)) return calls.get(call.id);
  const box = $("div", "call");
  box.dataset.id = call.id;
  const head = $("div", "head", call.name);
  if (call.server) head.append($("span", "server", call.server));
  const result = $("pre", "result pending", "Executing…");
  const started = at || Date.now();
  const tick = () => { if (result.classList.contains("pending")) result.textContent = `Executing… ${Math.round((Date.now() - started) / 1000)} s`; };
  timers.push(setInterval(tick, 1000)); tick();
  box.append(head, $("pre", "args", pretty(call.arguments)), result);
  turn(role).append(box);
  calls.set(call.id, box);
  return box;
}
function setResult(r) {
  const box = calls.get(r.toolCallId) || addCall({ id: r.toolCallId, name: "(call)", arguments: "" }, "tool");
  const result = box.querySelector(".result");
  result.classList.remove("pending");
  result.textContent = r.result;
  box.classList.add(r.isError ? "failed" : "done");
}
function show(m) {
  switch (m.kind) {
    case "text": turn(m.role).append($("div", "text", m.text)); break;
    case "reasoning": {
      const d = $("details"); d.append($("summary", null, "Reasoning"), $("div", "text", m.text));
      turn("assistant").append(d); break;
    }
    case "tools_call": for (const c of m.toolCalls || []) addCall(c, "assistant", m.timestamp); break;
    case "tool_result": setResult(m); break;
    case "tools_aggregate":
      for (const c of m.toolCalls || []) addCall(c, "assistant", m.timestamp);
      for (const r of m.toolResults || []) setResult(r);
      break;
    case "error": turn("assistant").append($("div", "error", `The answer failed: ${m.text}`)); break;
    case "usage": {
      const u = m.usage || {};
      turn("assistant").append($("div", "usage", `tokens: ${u.prompt_tokens} in, ${u.completion_tokens} out, ${u.total_tokens} total`));
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
  view.replaceChildren(); calls = new Map(); lastTurn = null;
  // The events endpoint replays the stored messages, then streams live ones.
  stream = new AbortController();
  try {
    const r = await fetch(`/toolgate/api/chats/${encodeURIComponent(id)}/events`, { headers: headers(), signal: stream.signal });
    if (!r.ok) throw new Error(r.statusText);
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
        if (data) show(JSON.parse(data));
        if (frame.startsWith(": replayed")) document.body.dataset.replayed = id;
      }
    }
  } catch (e) {
    if (e.name !== "AbortError") view.append($("p", "empty", e.message));
  }
}

loadChats();
setInterval(loadChats, 5000);
const wanted = new URLSearchParams(location.search).get("chat");
if (wanted) openChat(wanted);
