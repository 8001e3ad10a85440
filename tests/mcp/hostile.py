"""A stdio MCP server that misbehaves on purpose, for tests/it/mcp_servers.rs.

    python hostile.py MODE STARTS_FILE

Each start appends a line to STARTS_FILE. MODE:
  paginate  - tools/list never ends: every page has one tool and a next cursor
  too-many  - tools/list answers 600 tools in one page
  changing  - tools/list answers the names in STARTS_FILE.tools (one a line,
              `t0` while it is missing), and the server sends
              notifications/tools/list_changed when that file changes; when
              the file's first line is `down`, it writes a path to stderr and
              exits, and so does every later start
Plain JSON-RPC over stdin/stdout (one message per line), no SDK: what it
sends is exactly what is written here.
"""
import json
import os
import sys
import threading
import time

mode, starts = sys.argv[1], sys.argv[2]
with open(starts, "a") as f:
    f.write("start\n")


def tool(name):
    return {
        "name": name,
        "description": "A tool of a server that misbehaves.",
        "inputSchema": {"type": "object", "properties": {}},
    }


names_file = starts + ".tools"
out = threading.Lock()


def send(message):
    with out:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def names():
    try:
        with open(names_file) as f:
            return [n.strip() for n in f if n.strip()]
    except FileNotFoundError:
        return ["t0"]


def go_down():
    sys.stderr.write("python: can't open file '/srv/secret/internal/missing_mcp.py': [Errno 2]\n")
    sys.stderr.flush()
    os._exit(1)


def watch():
    seen = names()
    while True:
        time.sleep(0.05)
        now = names()
        if now[:1] == ["down"]:
            go_down()
        if now != seen:
            seen = now
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})


def answer(request):
    method = request.get("method")
    params = request.get("params") or {}
    if method == "initialize":
        return {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {"listChanged": mode == "changing"}},
            "serverInfo": {"name": "hostile", "version": "0"},
        }
    if method == "ping":
        return {}
    if method == "tools/list":
        if mode == "paginate":
            page = int(params.get("cursor") or 0)
            return {"tools": [tool(f"t{page}")], "nextCursor": str(page + 1)}
        if mode == "changing":
            return {"tools": [tool(n) for n in names()]}
        return {"tools": [tool(f"t{i}") for i in range(600)]}
    return None


if mode == "changing":
    if names()[:1] == ["down"]:
        go_down()
    threading.Thread(target=watch, daemon=True).start()

for line in sys.stdin:
    request = json.loads(line)
    if "id" not in request:
        continue
    result = answer(request)
    if result is None:
        reply = {"jsonrpc": "2.0", "id": request["id"],
                 "error": {"code": -32601, "message": "method not found"}}
    else:
        reply = {"jsonrpc": "2.0", "id": request["id"], "result": result}
    send(reply)
