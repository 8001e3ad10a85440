// The official `openai` and `@anthropic-ai/sdk` npm packages driven against a running toolgate.
//
// Run by tests/clients.rs as `node clients.mjs SCENARIO` with:
//   CLIENT_TESTS_BASE_URL  the gateway's `/v1` URL (loopback only)
//   CLIENT_TESTS_MODEL     the model to ask for
//
// Each scenario checks what a user of the SDK relies on, then prints one line
// `RESULT <json>` that the Rust test asserts on. Any failure (an SDK error or
// a failed assert) ends the process with a stack trace and a non-zero status.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';

const SDK = JSON.parse(
  readFileSync(new URL('./node_modules/openai/package.json', import.meta.url), 'utf8'),
).version;

const WEATHER_PARAMS = {
  type: 'object',
  properties: {
    location: { type: 'string', description: 'The city and state' },
    unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
  },
  required: ['location'],
};

const TOOLS = [
  {
    type: 'function',
    function: {
      name: 'GetWeather',
      description: 'Get the current weather for a location',
      parameters: WEATHER_PARAMS,
    },
  },
  {
    type: 'function',
    function: {
      name: 'BookRestaurant',
      description: 'Book a table at a restaurant',
      parameters: {
        type: 'object',
        properties: {
          restaurantName: { type: 'string' },
          numberOfPeople: { type: 'integer' },
        },
        required: ['restaurantName', 'numberOfPeople'],
      },
    },
  },
];

const QUESTION = [{ role: 'user', content: "What's the weather like in San Francisco today?" }];

function client() {
  // No retries: a failure must show at once, not after backoff.
  return new OpenAI({
    baseURL: process.env.CLIENT_TESTS_BASE_URL,
    apiKey: 'unused-by-toolgate-tests',
    maxRetries: 0,
    timeout: 20_000,
  });
}

const model = () => process.env.CLIENT_TESTS_MODEL ?? 'demo';

function checkCalls(calls) {
  const ids = calls.map((c) => c.id);
  for (const id of ids) assert.ok(typeof id === 'string' && id.length > 0, `empty call id: ${ids}`);
  assert.equal(new Set(ids).size, ids.length, `repeated call id: ${ids}`);
  for (const c of calls) {
    let args;
    try {
      args = JSON.parse(c.arguments);
    } catch {
      assert.fail(`arguments of ${c.name} are not JSON: ${JSON.stringify(c.arguments)}`);
    }
    assert.ok(args && typeof args === 'object' && !Array.isArray(args), `arguments: ${c.arguments}`);
  }
}

// `client.chat.completions.stream()`: the SDK accumulates the deltas itself;
// `finalChatCompletion()` gives the assembled message.
async function streamHelper() {
  const stream = client().chat.completions.stream({ model: model(), messages: QUESTION, tools: TOOLS });
  const events = new Set();
  let chunks = 0;
  stream.on('tool_calls.function.arguments.done', () => events.add('tool_calls.function.arguments.done'));
  stream.on('content.done', () => events.add('content.done'));
  for await (const _chunk of stream) chunks += 1;
  const final = await stream.finalChatCompletion();
  assert.equal(final.choices.length, 1);
  const choice = final.choices[0];
  const calls = (choice.message.tool_calls ?? []).map((tc) => ({
    id: tc.id,
    name: tc.function.name,
    arguments: tc.function.arguments,
  }));
  checkCalls(calls);
  return {
    content: choice.message.content,
    calls,
    finish_reason: choice.finish_reason,
    events: [...events].sort(),
    chunks,
  };
}

// `runTools` with a local function: the SDK runs the whole tool loop.
async function runTools(stream) {
  const invocations = [];
  const getWeather = ({ location, unit }) => {
    invocations.push({ location, unit: unit ?? null });
    return `21 C and sunny in ${location}`;
  };
  const completions = client().chat.completions;
  // `runTools` moved from `beta.chat.completions` to `chat.completions`.
  const run = (completions.runTools ?? client().beta.chat.completions.runTools).bind(completions);
  const runner = run({
    model: model(),
    stream,
    messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
    tools: [
      {
        type: 'function',
        function: {
          name: 'GetWeather',
          description: 'Get the current weather for a location',
          parameters: WEATHER_PARAMS,
          function: getWeather,
          parse: JSON.parse,
        },
      },
    ],
  });
  const answer = await runner.finalContent();
  const messages = runner.messages;
  assert.equal(invocations.length, 1, `GetWeather ran ${invocations.length} times`);
  const toolMessages = messages.filter((m) => m.role === 'tool');
  assert.equal(toolMessages.length, 1);
  return {
    invocations,
    tool_result: toolMessages[0].content,
    answer,
    roles: messages.map((m) => m.role),
  };
}

// A model that uses the gateway's own tools: the stream helper assembles both
// rounds as one message; the extra `gateway_tool_calls` field stays on the raw chunks.
async function gatewayTools() {
  const stream = client().chat.completions.stream({
    model: model(),
    messages: [{ role: 'user', content: 'Ask the calculator: what is `(2 + 3) * 7`?' }],
  });
  const reported = [];
  for await (const chunk of stream) {
    for (const choice of chunk.choices) reported.push(...(choice.delta.gateway_tool_calls ?? []));
  }
  const final = await stream.finalChatCompletion();
  const choice = final.choices[0];
  assert.ok(!choice.message.tool_calls?.length, `a gateway call reached the client: ${JSON.stringify(choice.message)}`);
  assert.equal(new Set(reported.map((c) => c.id)).size, 1, `one gateway call expected: ${JSON.stringify(reported)}`);
  return { content: choice.message.content, finish_reason: choice.finish_reason, gateway_tool_calls: reported };
}

// `client.responses.stream()`: the SDK checks the event order and builds the
// final response; then `responses.create()` against the gateway's own tools.
async function responsesStream() {
  const stream = client().responses.stream({
    model: model(),
    input: QUESTION[0].content,
    tools: [{ type: 'function', name: 'GetWeather', parameters: WEATHER_PARAMS, strict: false }],
  });
  const kinds = new Set();
  for await (const event of stream) kinds.add(event.type);
  const final = await stream.finalResponse();
  const calls = final.output
    .filter((item) => item.type === 'function_call')
    .map((item) => ({ id: item.call_id, name: item.name, arguments: item.arguments }));
  checkCalls(calls);
  return { status: final.status, calls, text: final.output_text, events: [...kinds].sort() };
}

// `messages.stream` from the official Anthropic SDK: the model's call streams
// as a `tool_use` block, accumulated into `finalMessage()`.
async function anthropicStream() {
  const base = process.env.CLIENT_TESTS_BASE_URL.replace(/\/$/, '').replace(/\/v1$/, '');
  const anthropic = new Anthropic({ baseURL: base, apiKey: 'unused-by-toolgate-tests', maxRetries: 0, timeout: 20_000 });
  const stream = anthropic.messages.stream({
    model: model(),
    max_tokens: 256,
    tools: [{ name: 'GetWeather', description: 'Current weather at a location', input_schema: WEATHER_PARAMS }],
    messages: [{ role: 'user', content: "What's the weather like in San Francisco today?" }],
  });
  const events = [];
  for await (const event of stream) events.push(event.type);
  const final = await stream.finalMessage();
  const calls = final.content
    .filter((b) => b.type === 'tool_use')
    .map((b) => ({ id: b.id, name: b.name, input: b.input }));
  const text = final.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
  return { stop_reason: final.stop_reason, calls, text, events };
}

const SCENARIOS = {
  anthropic_stream: anthropicStream,
  gateway_tools: gatewayTools,
  responses_stream: responsesStream,
  stream_helper: streamHelper,
  run_tools: () => runTools(false),
  run_tools_stream: () => runTools(true),
};

const name = process.argv[2];
if (!(name in SCENARIOS)) {
  console.error(`usage: node clients.mjs {${Object.keys(SCENARIOS).join('|')}}`);
  process.exit(2);
}
const result = await SCENARIOS[name]();
result.sdk = `openai-node ${SDK}`;
console.log('RESULT ' + JSON.stringify(result));
