"""Tool search on a 200-tool catalog, measured through toolgate.

Run by benches/tool_search.sh, which starts llama-server and hands this
script the toolgate binary, the llama-server URL and the MCP servers'
commands. It writes a config whose catalog is two real MCP servers'
tools (mcp-server-time, server-everything) plus generated HTTP tools up to
200 (verbs x objects, served by a loopback echo server), with one provider
per arm, and measures per arm:

  * the prompt tokens of the first upstream request (llama-server's own
    count: a request with max_tokens = 1, which ends in the first round);
  * over PROMPTS tasks, each meant for one tool of the catalog: the share
    where the model's first call (other than search_tools) is the right
    tool, and with search on, the share where a search listed it.

Prints one table; every task's answer goes to OUT/cases.jsonl.
"""

import argparse
import http.server
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

VERBS = {
    "create": ("Creates a new {o} in the {s}.", "Create a new {o} called Alpha."),
    "get": ("Returns one {o} by its id from the {s}.", "Show me {o} 42."),
    "list": ("Lists every {o} in the {s}.", "List all of the {p}."),
    "update": ("Changes fields of an existing {o} in the {s}.", "Update {o} 42 and set its status to done."),
    "delete": ("Deletes a {o} from the {s} for good.", "Delete {o} 42 permanently."),
    "search": ("Finds {p} in the {s} matching a text query.", "Find the {p} that mention acme."),
    "archive": ("Moves a {o} to the archive of the {s}.", "Archive {o} 42, we are done with it."),
    "export": ("Exports a {o} from the {s} as a CSV file.", "Export {o} 42 to a CSV file."),
    "assign": ("Assigns a {o} in the {s} to a person.", "Assign {o} 42 to Maria."),
    "approve": ("Approves a pending {o} in the {s}.", "Approve {o} 42."),
}
OBJECTS = {
    "invoice": ("invoices", "billing system"),
    "customer": ("customers", "CRM"),
    "order": ("orders", "shop"),
    "shipment": ("shipments", "logistics system"),
    "ticket": ("tickets", "help desk"),
    "user": ("users", "identity directory"),
    "product": ("products", "catalog"),
    "payment": ("payments", "payment processor"),
    "refund": ("refunds", "payment processor"),
    "subscription": ("subscriptions", "billing system"),
    "meeting": ("meetings", "calendar"),
    "email": ("emails", "mailbox"),
    "document": ("documents", "document store"),
    "report": ("reports", "analytics suite"),
    "repository": ("repositories", "code host"),
    "issue": ("issues", "issue tracker"),
    "deployment": ("deployments", "deployment platform"),
    "alert": ("alerts", "monitoring system"),
    "contact": ("contacts", "address book"),
}
# Tasks for the real MCP servers' tools (their names as toolgate offers them).
MCP_TASKS = [
    ("time_get_current_time", "What time is it in Tokyo right now? Use the timezone Asia/Tokyo."),
    ("ev_get-sum", "Add the numbers 17 and 25 with the sum tool."),
    ("ev_echo", "Echo back the message 'hello there'."),
]


def generated_tools():
    tools = []
    for o, (plural, system) in OBJECTS.items():
        for v, (description, _) in VERBS.items():
            name = f"{v}_{o}" if v not in ("list", "search") else f"{v}_{plural}"
            tools.append((name, description.format(o=o, p=plural, s=system), v, o))
    return tools


def tasks(n):
    tools = generated_tools()
    out = [(name, VERBS[v][1].format(o=o, p=OBJECTS[o][0])) for name, _, v, o in tools]
    step = max(1, len(out) // max(1, n - len(MCP_TASKS)))
    picked = out[::step][: max(0, n - len(MCP_TASKS))]
    return MCP_TASKS[: min(n, len(MCP_TASKS))] + picked


class Echo(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        reply = b"done: " + body[:200]
        self.send_response(200)
        self.send_header("content-type", "text/plain")
        self.send_header("content-length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


ARMS = {
    # name: (mode lines, tool_search)
    "natural": ('mode = "natural"\nsyntax = "tag"\n', False),
    "natural+search": ('mode = "natural"\nsyntax = "tag"\n', True),
    "bracket": ('mode = "natural"\nsyntax = "bracket"\n', False),
    "bracket+search": ('mode = "natural"\nsyntax = "bracket"\n', True),
    "rescue": ('mode = "passthrough"\nrescue_text_calls = true\n', False),
    "rescue+search": ('mode = "passthrough"\nrescue_text_calls = true\n', True),
    # The built-in scripted demo model (no llama-server): it calls the tool
    # the prompt names, else the first one, and answers a result in text.
    "demo": ('mode = "natural"\n', False),
    "demo+search": ('mode = "natural"\n', True),
}


def config(port, llama, echo, generated, time_cmd, everything_cmd, arms, catalog_size):
    out = [
        f'[server]\nlisten = "127.0.0.1:{port}"\nfirst_byte_timeout_secs = 900\nstream_idle_timeout_secs = 900\n',
        f"[[mcp_servers]]\nname = \"time\"\ncommand = {json.dumps(time_cmd)}\nprefix = \"time_\"\ntimeout_secs = 30\n",
        f"[[mcp_servers]]\nname = \"everything\"\ncommand = {json.dumps(everything_cmd)}\nprefix = \"ev_\"\ntimeout_secs = 30\n",
    ]
    for name, description, _, _ in generated[:catalog_size]:
        out.append(
            f'[[http_tools]]\nname = "{name}"\ndescription = "{description}"\nurl = "{echo}"\n'
            'parameters = { type = "object", properties = { id = { type = "string", description = "The id, when there is one" }, '
            'text = { type = "string", description = "Anything else the request says" } } }\n'
        )
    gateway = ["time", "everything"] + [g[0] for g in generated[:catalog_size]]
    for arm in arms:
        lines, search = ARMS[arm]
        target = "[providers.demo]\nchunk_delay_ms = 0\n" if arm.startswith("demo") else f'base_url = "{llama}/v1"\n'
        out.append(
            f'[[providers]]\nname = "{arm}"\n{target}[providers.tools]\n{lines}'
            f"gateway_tools = {json.dumps(gateway)}\nmax_rounds = 4\n"
            + ("tool_search = true\ntool_search_threshold = 20\n" if search else "")
        )
    return "\n".join(out)


def post(base, body, timeout=900):
    request = urllib.request.Request(
        base + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--toolgate", required=True)
    ap.add_argument("--llama", required=True)
    ap.add_argument("--time", required=True, help="mcp-server-time command, JSON list")
    ap.add_argument("--everything", required=True, help="server-everything command, JSON list")
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--prompts", type=int, default=20)
    ap.add_argument("--out", default="target/tool_search")
    a = ap.parse_args()
    arms = [x for x in a.arms.split(",") if x]
    os.makedirs(a.out, exist_ok=True)

    echo = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=echo.serve_forever, daemon=True).start()
    echo_url = f"http://127.0.0.1:{echo.server_address[1]}/"
    generated = generated_tools()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    # The two MCP servers offer 2 + 13 tools; the generated ones fill to 200.
    text = config(port, a.llama, echo_url, generated, json.loads(a.time), json.loads(a.everything), arms, 185)
    path = tempfile.mktemp(suffix=".toml")
    with open(path, "w") as f:
        f.write(text)
    log = open(os.path.join(a.out, "toolgate.log"), "w")
    gw = subprocess.Popen([a.toolgate, "--config", path], stderr=log, env={**os.environ, "TOOLGATE_LOG": "warn"})
    try:
        for _ in range(600):
            try:
                with urllib.request.urlopen(base + "/readyz", timeout=1) as r:
                    if r.status == 200:
                        break
            except Exception:
                time.sleep(0.1)
        else:
            sys.exit("toolgate did not become ready (MCP servers?)")
        run(a, arms, base)
    finally:
        gw.kill()
        echo.shutdown()


def run(a, arms, base):
    cases = open(os.path.join(a.out, "cases.jsonl"), "w")
    rows = []
    for arm in arms:
        for _ in range(120):  # until the MCP servers are up
            status, first = post(base, {"model": f"{arm}/m", "max_tokens": 1, "temperature": 0,
                                        "messages": [{"role": "user", "content": "List all of the invoices."}]})
            if status != 503:
                break
            time.sleep(0.5)
        if status != 200:
            sys.exit(f"{arm}: HTTP {status}: {first}")
        prompt_tokens = first["usage"]["prompt_tokens"]
        listed = right = searched = 0
        start = time.time()
        work = tasks(a.prompts)
        for expected, prompt in work:
            status, answer = post(base, {"model": f"{arm}/m", "temperature": 0, "max_tokens": 256,
                                         "messages": [{"role": "user", "content": prompt}]})
            calls = []
            found = False
            if status == 200:
                message = answer["choices"][0]["message"]
                for g in message.get("gateway_tool_calls") or []:
                    if g["name"] == "search_tools":
                        try:
                            names = [t["name"] for t in json.loads(g.get("output") or "{}").get("tools", [])]
                        except ValueError:
                            names = []
                        found = found or expected in names
                    else:
                        calls.append(g["name"])
                calls += [c["function"]["name"] for c in message.get("tool_calls") or []]
            ok = bool(calls) and calls[0] == expected
            right += ok
            listed += found
            searched += any(g["name"] == "search_tools" for g in (answer["choices"][0]["message"].get("gateway_tool_calls") or [])) if status == 200 else 0
            cases.write(json.dumps({"arm": arm, "expected": expected, "prompt": prompt, "status": status,
                                    "calls": calls, "found": found, "ok": ok, "answer": answer}) + "\n")
            cases.flush()
        rows.append((arm, prompt_tokens, right, listed, searched, len(work), time.time() - start))
    print(f"\n| arm | first request's prompt tokens | right tool called | search listed it | searched | s |")
    print("|---|---|---|---|---|---|")
    for arm, tokens, right, listed, searched, n, seconds in rows:
        search = arm.endswith("+search")
        print(f"| {arm} | {tokens} | {right}/{n} | {f'{listed}/{n}' if search else '–'} | "
              f"{f'{searched}/{n}' if search else '–'} | {seconds:.0f} |")


if __name__ == "__main__":
    main()
