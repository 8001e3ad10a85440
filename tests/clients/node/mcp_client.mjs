// The official MCP TypeScript SDK's client against toolgate's MCP door
// (`[mcp_gateway]`), over streamable HTTP with a bearer key.
//
// Run by tests/it/mcp_door.rs as
//     node mcp_client.mjs URL KEY
// It does what python/mcp_client.py does (lists every tool page by page,
// calls the calculator and, when listed, `Echo0`, a tool it was not given
// and the calculator with bad arguments) and prints one line `RESULT <json>`.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, key] = process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { authorization: `Bearer ${key}` } },
});
const client = new Client({ name: "toolgate-test", version: "1.0.0" });
await client.connect(transport);

const names = [];
let pages = 0;
let cursor;
do {
  const page = await client.listTools(cursor ? { cursor } : undefined);
  pages += 1;
  names.push(...page.tools.map((t) => t.name));
  cursor = page.nextCursor;
} while (cursor);

const text = (r) => ({ is_error: Boolean(r.isError), text: r.content[0].text });
const calculator = text(await client.callTool({ name: "calculator", arguments: { expression: "(2 + 3) * 7" } }));
const echo = names.includes("Echo0")
  ? text(await client.callTool({ name: "Echo0", arguments: { text: "hello" } }))
  : null;
let unknown = null;
try {
  await client.callTool({ name: names.includes("Echo1") ? "nope" : "Echo1", arguments: { text: "x" } });
} catch (e) {
  unknown = String(e.message ?? e);
}
const bad = text(await client.callTool({ name: "calculator", arguments: { expression: 42 } }));
await client.close();
console.log(
  "RESULT " +
    JSON.stringify({
      server: client.getServerVersion()?.name,
      protocol: transport.protocolVersion,
      tools: names,
      pages,
      calculator,
      echo,
      unknown,
      bad,
    }),
);
