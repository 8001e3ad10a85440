"""The official MCP Python SDK against toolgate's MCP door with
`[mcp_gateway] tool_search = true`, keeping every warning the SDK logs.

Run by tests/it/tool_search.rs and tests/it/mcp_door.rs as
    python mcp_search_client.py URL KEY QUERY ARGUMENTS_JSON [DIRECT_TOOL DIRECT_ARGUMENTS_JSON]
It lists the tools, calls `search_tools` with QUERY, calls the first tool
found twice with ARGUMENTS_JSON, optionally calls DIRECT_TOOL by name
without searching for it, lists the tools again, and prints one line
`RESULT <json>` (with `warnings`: every record of level WARNING or above).
"""

import asyncio
import json
import logging
import sys

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

warnings: list[str] = []


class Keep(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        warnings.append(f"{record.name}: {record.getMessage()}")


def text(result) -> dict:
    return {"is_error": result.is_error, "text": result.content[0].text if result.content else ""}


async def main(url: str, key: str, query: str, arguments: dict, direct: tuple | None) -> dict:
    client = httpx2.AsyncClient(headers={"authorization": f"Bearer {key}"}, timeout=20.0)
    async with streamable_http_client(url, http_client=client) as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write) as session:
            await session.initialize()
            listed = [t.name for t in (await session.list_tools()).tools]
            searched = await session.call_tool("search_tools", {"query": query, "limit": 3})
            found = [t["name"] for t in json.loads(searched.content[0].text)["tools"]]
            calls = []
            if found:
                for _ in range(2):
                    calls.append(text(await session.call_tool(found[0], arguments)))
            direct_call = None
            if direct:
                direct_call = text(await session.call_tool(direct[0], direct[1]))
            relisted = [t.name for t in (await session.list_tools()).tools]
            return {
                "listed": listed,
                "found": found,
                "calls": calls,
                "direct": direct_call,
                "relisted": relisted,
                "warnings": warnings,
            }


if __name__ == "__main__":
    root = logging.getLogger()
    root.addHandler(Keep(level=logging.WARNING))
    root.setLevel(logging.WARNING)
    direct = (sys.argv[5], json.loads(sys.argv[6])) if len(sys.argv) > 6 else None
    result = asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), direct))
    print("RESULT " + json.dumps(result), flush=True)
