"""A streamable-HTTP MCP server whose one tool answers with the W3C trace
context its call arrived with: the `traceparent` header and `_meta`.

Usage: mcp_traced.py PORT   (serves http://127.0.0.1:PORT/mcp)
"""

import json
import sys

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("traced")


@server.tool()
async def trace_context(ctx: Context) -> str:
    """Says which trace this call belongs to."""
    headers = ctx.headers or {}
    meta = getattr(ctx.request_context, "meta", None)
    if meta is not None and not isinstance(meta, dict):
        meta = meta.model_dump() if hasattr(meta, "model_dump") else dict(meta)
    return json.dumps(
        {
            "header": headers.get("traceparent"),
            "meta": (meta or {}).get("traceparent"),
        }
    )


server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
