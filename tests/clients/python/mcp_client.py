"""The official MCP Python SDK as a client of toolgate's MCP door
(`[mcp_gateway]`), over streamable HTTP with a bearer key.

Run by tests/it/mcp_door.rs as
    python mcp_client.py URL KEY
It lists every tool (page by page), calls the calculator and, when listed,
the HTTP tool `Echo0`, calls a tool it was not given and one with bad
arguments, and prints one line `RESULT <json>`.
"""

import asyncio
import json
import sys

import httpx2
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client


async def main(url: str, key: str) -> dict:
    client = httpx2.AsyncClient(headers={"authorization": f"Bearer {key}"}, timeout=20.0)
    async with streamable_http_client(url, http_client=client) as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            names, pages, cursor = [], 0, None
            while True:
                page = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
                pages += 1
                names += [t.name for t in page.tools]
                cursor = page.next_cursor
                if not cursor:
                    break
            calc = await session.call_tool("calculator", {"expression": "(2 + 3) * 7"})
            echo = None
            if "Echo0" in names:
                r = await session.call_tool("Echo0", {"text": "hello"})
                echo = {"is_error": r.is_error, "text": r.content[0].text}
            try:
                await session.call_tool("Echo1" if "Echo1" not in names else "nope", {"text": "x"})
                unknown = None
            except Exception as e:  # the SDK raises the JSON-RPC error
                unknown = str(e)
            bad = await session.call_tool("calculator", {"expression": 42})
            return {
                "server": init.server_info.name,
                "protocol": init.protocol_version,
                "tools": names,
                "pages": pages,
                "calculator": {"is_error": calc.is_error, "text": calc.content[0].text},
                "echo": echo,
                "unknown": unknown,
                "bad": {"is_error": bad.is_error, "text": bad.content[0].text},
            }


if __name__ == "__main__":
    result = asyncio.run(main(sys.argv[1], sys.argv[2]))
    print("RESULT " + json.dumps(result), flush=True)
