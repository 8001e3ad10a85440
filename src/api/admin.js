"use strict";
// The page's keys, usage and backup views, over /toolgate/api/keys,
// /toolgate/api/usage and /toolgate/api/backup. Like the chats, everything
// shown is set as text. What only an admin key may do is offered only when
// /toolgate/api/whoami says the key is one (`body[data-role=admin]`).
(() => {
  const el = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = text;
    return e;
  };
  const key = () => sessionStorage.getItem("toolgate-key") || document.querySelector("#key input").value;
  const isAdmin = () => document.body.dataset.role === "admin";
  const authorization = () => (key() ? { authorization: "Bearer " + key() } : {});
  async function call(method, path, body) {
    const headers = authorization();
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
    input.title = label;
    input.setAttribute("aria-label", label);
    Object.assign(input, attrs);
    form.append(input);
    return input;
  };
  const choice = (form, name, label, options) => {
    const select = el("select");
    select.name = name;
    select.setAttribute("aria-label", label);
    for (const [value, text] of options) {
      const o = el("option", null, text);
      o.value = value;
      select.append(o);
    }
    form.append(select);
    return select;
  };
  const table = (columns, rows) => {
    const t = el("table", "grid");
    const head = el("tr");
    for (const c of columns) head.append(el("th", null, c.title));
    t.append(head);
    for (const row of rows) {
      const tr = el("tr");
      for (const c of columns) {
        const td = el("td", c.cls || (c.numeric ? "n" : null));
        const value = c.value(row);
        if (value instanceof Node) td.append(value); else td.textContent = value ?? "";
        tr.append(td);
      }
      t.append(tr);
    }
    return t;
  };
  const failed = (e) => view.append(el("p", "error", e.message));
  const list = (v) => (Array.isArray(v) ? v.join(", ") : "");
  const words = (text) => text.split(",").map((m) => m.trim()).filter(Boolean);
  const when = (t) => (t ? new Date(t).toLocaleString() : "–");
  const money = (usd) => `$${Number(usd).toFixed(4)}`;
  const limitsText = (l) => {
    if (!l) return "";
    const parts = [];
    if (l.requests_per_minute) parts.push(`${l.requests_per_minute} req/min`);
    if (l.tokens_per_minute) parts.push(`${l.tokens_per_minute} tok/min`);
    if (l.max_concurrent_requests) parts.push(`${l.max_concurrent_requests} at once`);
    return parts.join(", ");
  };
  const budgetText = (b) => {
    if (!b) return "";
    const parts = [];
    if (b.usd !== undefined && b.usd !== null) parts.push(money(b.usd));
    if (b.tokens !== undefined && b.tokens !== null) parts.push(`${b.tokens} tokens`);
    return `${parts.join(" + ")} per ${b.period}`;
  };
  // A number field's value, or undefined when empty.
  const number = (input) => (input.value === "" ? undefined : Number(input.value));
  // An object of the defined members, or null when none is.
  const members = (o) => {
    const kept = Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined));
    return Object.keys(kept).length ? kept : null;
  };
  // `datetime-local` reads and writes local time without a zone.
  const localInput = (iso) => {
    if (!iso) return "";
    const t = new Date(iso);
    return new Date(t.getTime() - t.getTimezoneOffset() * 60000).toISOString().slice(0, 16);
  };

  // A key's policy as the edit form reads it: what PATCH would send.
  function policyOf(f) {
    const models = words(f.models.value), tools = words(f.tools.value);
    return {
      name: f.name.value.trim(),
      models: models.length ? models : null,
      gateway_tools: tools.length ? tools : null,
      limits: members({
        requests_per_minute: number(f.rpm), tokens_per_minute: number(f.tpm), max_concurrent_requests: number(f.concurrent),
      }),
      budget: (() => {
        const b = members({ usd: number(f.usd), tokens: number(f.budget_tokens) });
        return b && { ...b, period: f.period.value };
      })(),
      expires_at: f.expires.value ? new Date(f.expires.value).toISOString() : null,
    };
  }

  // Edit one key: the form starts from the key as listed, and PATCH gets
  // only the members the operator changed.
  function editForm(k) {
    const form = el("form", "panel edit");
    form.id = "edit-key";
    form.append(el("h2", null, `Edit ${k.name} (${k.tenant})`));
    field(form, "name", "name", { value: k.name });
    field(form, "models", "models (comma-separated globs)", { value: list(k.models) });
    field(form, "tools", "gateway tools (comma-separated)", { value: list(k.gateway_tools) });
    const l = k.limits || {}, b = k.budget || {};
    field(form, "rpm", "requests per minute", { type: "number", min: 1, value: l.requests_per_minute ?? "" });
    field(form, "tpm", "tokens per minute", { type: "number", min: 1, value: l.tokens_per_minute ?? "" });
    field(form, "concurrent", "requests at once", { type: "number", min: 1, value: l.max_concurrent_requests ?? "" });
    field(form, "usd", "budget, USD", { type: "number", min: 0, step: "any", value: b.usd ?? "" });
    field(form, "budget_tokens", "budget, tokens", { type: "number", min: 1, value: b.tokens ?? "" });
    const period = choice(form, "period", "budget period", [["1d", "per day"], ["7d", "per 7 days"], ["30d", "per 30 days"]]);
    period.value = b.period || "30d";
    form.append(el("label", null, "expires"));
    field(form, "expires", "expires", { type: "datetime-local", value: localInput(k.expires_at) });
    const save = el("button", null, "Save");
    const cancel = el("button", null, "Cancel");
    cancel.type = "button";
    cancel.onclick = () => keys();
    form.append(save, cancel);
    const before = policyOf(form.elements);
    form.onsubmit = async (e) => {
      e.preventDefault();
      const after = policyOf(form.elements);
      const change = {};
      for (const name of Object.keys(after)) {
        if (JSON.stringify(after[name]) !== JSON.stringify(before[name])) change[name] = after[name];
      }
      if (!Object.keys(change).length) { keys(); return; }
      try {
        await call("PATCH", `/toolgate/api/keys/${encodeURIComponent(k.id)}`, change);
        keys();
      } catch (err) { failed(err); }
    };
    return form;
  }

  // Keys: an admin makes one (its secret shown once), edits and revokes
  // them; a client key reads its tenant's, and nothing more.
  // The view shown, and a count of renders: an older render that ends
  // after a newer one began adds nothing.
  let shown = null, renders = 0;
  async function keys(made) {
    shown = "keys";
    const render = ++renders;
    view.replaceChildren();
    const admin = isAdmin();
    if (admin) {
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
        const models = words(f.models.value);
        if (models.length) body.models = models;
        if (f.rpm.value) body.limits = { requests_per_minute: Number(f.rpm.value) };
        if (f.usd.value) body.budget = { usd: Number(f.usd.value), period: "30d" };
        try { keys(await call("POST", "/toolgate/api/keys", body)); } catch (err) { failed(err); }
      };
      view.append(form);
    }
    if (made) {
      const box = el("div", "secret");
      box.append(el("div", null, `The key for ${made.name} (${made.tenant}), shown this once: copy it now.`), el("code", null, made.key));
      view.append(box);
    }
    try {
      const found = await call("GET", "/toolgate/api/keys");
      if (render !== renders) return;
      const actions = (k) => {
        const cell = el("span");
        const edit = el("button", "edit", "Edit");
        edit.onclick = () => {
          document.querySelector("#edit-key")?.remove();
          view.prepend(editForm(k));
        };
        const revoke = el("button", "revoke", "Revoke");
        revoke.onclick = async () => {
          try { await call("DELETE", `/toolgate/api/keys/${encodeURIComponent(k.id)}`); keys(); } catch (err) { failed(err); }
        };
        cell.append(edit, revoke);
        return cell;
      };
      const columns = [
        { title: "name", value: (k) => k.name },
        { title: "tenant", value: (k) => k.tenant },
        { title: "key", value: (k) => `${k.prefix}…` },
        { title: "models", value: (k) => list(k.models) || "as its tenant" },
        { title: "tools", value: (k) => list(k.gateway_tools) || "as its tenant" },
        { title: "limits", value: (k) => limitsText(k.limits) },
        { title: "budget", value: (k) => budgetText(k.budget) },
        { title: "spent this period", value: (k) => (k.spent_this_period ? money(k.spent_this_period.usd) : "") },
        { title: "expires", value: (k) => when(k.expires_at) },
        { title: "last used", value: (k) => when(k.last_used_at) },
        { title: "created", value: (k) => when(k.created_at) },
      ];
      if (admin) columns.push({ title: "", value: actions, cls: "actions" });
      view.append(table(columns, found.data));
      if (!found.data.length) view.append(el("p", "empty", "No keys made yet."));
    } catch (err) { failed(err); }
  }

  // Usage: a chart of one measure per day (or hour), a line per tenant,
  // provider, model or key; and the totals over the range, grouped as asked.
  const measures = {
    requests: { label: "requests", value: (r) => r.requests },
    tokens: { label: "tokens", value: (r) => r.input_tokens + r.output_tokens },
    cost: { label: "cost (USD)", value: (r) => r.cost_usd },
  };
  const palette = ["#2f5bd3", "#1f7a4d", "#b3261e", "#b26a00", "#7b3fb5", "#00838f", "#6b7385", "#c2185b"];
  let plot = null;
  function seriesName(r, by) {
    if (by === "key") return r.key_name ? `${r.key_name} (${r.key})` : r.key;
    return r[by];
  }
  // Every bucket in the range, empty ones as 0: a day without use is a
  // point on the floor, not a line drawn across it.
  function buckets(from, to, step) {
    const start = Date.parse(`${from}T00:00:00Z`) / 1000;
    const end = Date.parse(`${to}T00:00:00Z`) / 1000 + 86400;
    const out = [];
    for (let t = start; t < end; t += step) out.push(t);
    return out;
  }
  function drawChart(box, rows, f) {
    if (plot) { plot.destroy(); plot = null; }
    box.replaceChildren();
    const step = f.bucket.value === "hour" ? 3600 : 86400;
    const by = f.series.value, measure = measures[f.measure.value];
    const xs = buckets(f.from.value, f.to.value, step);
    const at = new Map(xs.map((x, i) => [x, i]));
    const names = [...new Set(rows.map((r) => seriesName(r, by)))].sort();
    const ys = names.map(() => xs.map(() => 0));
    for (const r of rows) {
      const stamp = f.bucket.value === "hour" ? r.hour : `${r.day}T00:00:00Z`;
      const i = at.get(Date.parse(stamp) / 1000);
      if (i !== undefined) ys[names.indexOf(seriesName(r, by))][i] += measure.value(r);
    }
    box.dataset.series = JSON.stringify(names);
    if (!names.length) { box.append(el("p", "empty", "Nothing used in this range.")); return; }
    const width = Math.max(320, box.clientWidth - 16);
    plot = new uPlot({
      width, height: 260,
      tzDate: (ts) => uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"),
      scales: { x: { time: true } },
      axes: [{}, { label: measure.label, size: 70 }],
      series: [
        step === 3600
          ? { label: "hour (UTC)", value: "{YYYY}-{MM}-{DD} {HH}:00" }
          : { label: "day (UTC)", value: "{YYYY}-{MM}-{DD}" },
        ...names.map((name, i) => ({
          label: name, stroke: palette[i % palette.length], width: 2, points: { show: true, size: 5 },
          value: (u, v) => (v === null || v === undefined ? "–" : f.measure.value === "cost" ? money(v) : String(v)),
        })),
      ],
    }, [xs, ...ys], box);
  }

  async function usage() {
    shown = "usage";
    ++renders;
    view.replaceChildren();
    const form = el("form", "panel");
    form.id = "usage-range";
    const day = (ms) => new Date(ms).toISOString().slice(0, 10);
    form.append(el("label", null, "from"));
    field(form, "from", "from", { type: "date", value: day(Date.now() - 29 * 86400000) });
    form.append(el("label", null, "to"));
    field(form, "to", "to", { type: "date", value: day(Date.now()) });
    form.append(el("label", null, "chart"));
    choice(form, "measure", "chart measure", [["cost", "cost"], ["tokens", "tokens"], ["requests", "requests"]]);
    choice(form, "bucket", "chart bucket", [["day", "per day"], ["hour", "per hour"]]);
    choice(form, "series", "chart lines", [["tenant", "by tenant"], ["provider", "by provider"], ["model", "by model"], ["key", "by key"]]);
    form.append(el("label", null, " table by"));
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
    const chart = el("div");
    chart.id = "usage-chart";
    const out = el("div");
    out.id = "usage-rows";
    const show = async () => {
      const render = renders;
      const f = form.elements;
      const range = { from: f.from.value, to: f.to.value };
      const grouped = [...form.querySelectorAll("input[name=group]:checked")].map((b) => b.value);
      const totals = new URLSearchParams({ ...range, group_by: grouped.join(",") });
      const series = new URLSearchParams({ ...range, group_by: `${f.bucket.value},${f.series.value}` });
      try {
        const [rows, points] = await Promise.all([
          call("GET", `/toolgate/api/usage?${totals}`),
          call("GET", `/toolgate/api/usage?${series}`),
        ]);
        if (render !== renders) return;
        drawChart(chart, points.data, f);
        const columns = grouped.map((g) => ({ title: g, value: (r) => (g === "key" && r.key_name ? `${r.key_name} (${r.key})` : r[g]) }));
        columns.push(
          { title: "requests", value: (r) => r.requests, numeric: true },
          { title: "input tokens", value: (r) => r.input_tokens, numeric: true },
          { title: "output tokens", value: (r) => r.output_tokens, numeric: true },
          { title: "cost (USD)", value: (r) => r.cost_usd.toFixed(4), numeric: true },
        );
        out.replaceChildren(table(columns, rows.data));
        if (!rows.data.length) out.append(el("p", "empty", "Nothing used in this range."));
        document.body.dataset.usageShown = String(Date.now());
      } catch (err) { chart.replaceChildren(); out.replaceChildren(); failed(err); }
    };
    form.onsubmit = (e) => { e.preventDefault(); show(); };
    for (const name of ["measure", "bucket", "series"]) form.elements[name].onchange = show;
    view.append(form, chart, out);
    show();
  }

  // Backup: the SQLite store's copy, downloaded with the key.
  async function backup() {
    try {
      const r = await fetch("/toolgate/api/backup", { headers: authorization() });
      if (!r.ok) throw new Error((await r.json().catch(() => ({}))).error?.message || r.statusText);
      const link = el("a");
      link.href = URL.createObjectURL(await r.blob());
      link.download = "toolgate-transcripts.db";
      link.click();
      setTimeout(() => URL.revokeObjectURL(link.href), 10000);
    } catch (err) { view.replaceChildren(); failed(err); }
  }

  const views = { keys: () => keys(), usage, backup };
  for (const b of document.querySelectorAll("#views button")) {
    b.onclick = () => views[b.dataset.view]();
  }
  // The key changed: the view shown is drawn again for what it may do (an
  // admin's controls appear, or go).
  document.addEventListener("toolgate:role", () => {
    if (shown === "keys") keys();
    if (shown === "usage") usage();
  });
  // A chat opened from the list replaces the view.
  document.querySelector("#list").addEventListener("click", () => { shown = null; ++renders; });
})();
