"use strict";
// The page's keys and usage views, over /toolgate/api/keys and
// /toolgate/api/usage. Like the chats, everything shown is set as text.
(() => {
  const el = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = text;
    return e;
  };
  const key = () => sessionStorage.getItem("toolgate-key") || document.querySelector("#key input").value;
  async function call(method, path, body) {
    const headers = { authorization: "Bearer " + key() };
    if (body) headers["content-type"] = "application/json";
    const r = await fetch(path, { method, headers, body: body ? JSON.stringify(body) : undefined });
    const answer = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error(answer.error?.message || r.statusText);
    return answer;
  }
  const view = document.querySelector("#view");
  const field = (form, name, label, attrs = {}) => {
    const input = el("input");
    input.name = name;
    input.placeholder = label;
    input.setAttribute("aria-label", label);
    Object.assign(input, attrs);
    form.append(input);
    return input;
  };
  const table = (columns, rows) => {
    const t = el("table", "grid");
    const head = el("tr");
    for (const c of columns) head.append(el("th", null, c.title));
    t.append(head);
    for (const row of rows) {
      const tr = el("tr");
      for (const c of columns) {
        const td = el("td", c.numeric ? "n" : null);
        const value = c.value(row);
        if (value instanceof Node) td.append(value); else td.textContent = value ?? "";
        tr.append(td);
      }
      t.append(tr);
    }
    return t;
  };
  const failed = (e) => view.append(el("p", "error", e.message));

  // Keys: make one (its secret shown once), list them, revoke one.
  async function keys(made) {
    view.replaceChildren();
    const form = el("form", "panel");
    form.id = "make-key";
    field(form, "tenant", "tenant");
    field(form, "name", "name");
    field(form, "models", "models (comma-separated globs)");
    field(form, "rpm", "requests per minute", { type: "number", min: 1 });
    field(form, "usd", "budget, USD per 30 days", { type: "number", min: 0, step: "any" });
    form.append(el("button", null, "Make a key"));
    form.onsubmit = async (e) => {
      e.preventDefault();
      const f = form.elements;
      const body = { tenant: f.tenant.value.trim(), name: f.name.value.trim() };
      const models = f.models.value.split(",").map((m) => m.trim()).filter(Boolean);
      if (models.length) body.models = models;
      if (f.rpm.value) body.limits = { requests_per_minute: Number(f.rpm.value) };
      if (f.usd.value) body.budget = { usd: Number(f.usd.value), period: "30d" };
      try { keys(await call("POST", "/toolgate/api/keys", body)); } catch (err) { failed(err); }
    };
    view.append(form);
    if (made) {
      const box = el("div", "secret");
      box.append(el("div", null, `The key for ${made.name} (${made.tenant}), shown this once: copy it now.`), el("code", null, made.key));
      view.append(box);
    }
    try {
      const list = await call("GET", "/toolgate/api/keys");
      const revoke = (k) => {
        const b = el("button", "revoke", "Revoke");
        b.onclick = async () => {
          try { await call("DELETE", `/toolgate/api/keys/${encodeURIComponent(k.id)}`); keys(); } catch (err) { failed(err); }
        };
        return b;
      };
      const when = (t) => (t ? new Date(t).toLocaleString() : "–");
      view.append(table([
        { title: "name", value: (k) => k.name },
        { title: "tenant", value: (k) => k.tenant },
        { title: "key", value: (k) => `${k.prefix}…` },
        { title: "created", value: (k) => when(k.created_at) },
        { title: "last used", value: (k) => when(k.last_used_at) },
        { title: "expires", value: (k) => when(k.expires_at) },
        { title: "limits", value: (k) => (k.limits ? JSON.stringify(k.limits) : "") },
        { title: "spent this period", value: (k) => (k.spent_this_period ? `$${k.spent_this_period.usd.toFixed(4)}` : "") },
        { title: "", value: revoke },
      ], list.data));
      if (!list.data.length) view.append(el("p", "empty", "No keys made yet."));
    } catch (err) { failed(err); }
  }

  // Usage: totals over a range, grouped as asked.
  async function usage() {
    view.replaceChildren();
    const form = el("form", "panel");
    form.id = "usage-range";
    const day = (ms) => new Date(ms).toISOString().slice(0, 10);
    form.append(el("label", null, "from"));
    field(form, "from", "from", { type: "date", value: day(Date.now() - 30 * 86400000) });
    form.append(el("label", null, "to"));
    field(form, "to", "to", { type: "date", value: day(Date.now() + 86400000) });
    for (const g of ["tenant", "key", "provider", "model"]) {
      const label = el("label", null, ` ${g}`);
      const box = el("input");
      box.type = "checkbox";
      box.name = "group";
      box.value = g;
      box.checked = g !== "key";
      label.prepend(box);
      form.append(label);
    }
    form.append(el("button", null, "Show"));
    const out = el("div");
    out.id = "usage-rows";
    form.onsubmit = async (e) => {
      e.preventDefault();
      const f = form.elements;
      const q = new URLSearchParams({ from: f.from.value, to: f.to.value });
      q.set("group_by", [...form.querySelectorAll("input[name=group]:checked")].map((b) => b.value).join(","));
      try {
        const rows = (await call("GET", `/toolgate/api/usage?${q}`)).data;
        const columns = [...form.querySelectorAll("input[name=group]:checked")].map((b) => ({ title: b.value, value: (r) => r[b.value] }));
        columns.push(
          { title: "requests", value: (r) => r.requests, numeric: true },
          { title: "input tokens", value: (r) => r.input_tokens, numeric: true },
          { title: "output tokens", value: (r) => r.output_tokens, numeric: true },
          { title: "cost (USD)", value: (r) => r.cost_usd.toFixed(4), numeric: true },
        );
        out.replaceChildren(table(columns, rows));
        if (!rows.length) out.append(el("p", "empty", "Nothing used in this range."));
      } catch (err) { out.replaceChildren(); failed(err); }
    };
    view.append(form, out);
    form.requestSubmit();
  }

  for (const b of document.querySelectorAll("#views button")) {
    b.onclick = () => (b.dataset.view === "keys" ? keys() : usage());
  }
})();
