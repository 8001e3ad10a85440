"""The official `openai` Python package driven against a running toolgate.

Run by tests/it/clients.rs as `python clients.py SCENARIO` with:
  CLIENT_TESTS_BASE_URL  the gateway's `/v1` URL (loopback only)
  CLIENT_TESTS_MODEL     the model to ask for

Each scenario checks what a user of the SDK relies on, then prints one line
`RESULT <json>` that the Rust test asserts on. Any failure (an SDK exception
or a failed assert) ends the process with a traceback and a non-zero status.
"""

import json
import os
import sys

import openai
from openai import OpenAI

GET_WEATHER = {
    "type": "function",
    "function": {
        "name": "GetWeather",
        "description": "Get the current weather for a location",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "The city and state"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["location"],
        },
    },
}

BOOK_RESTAURANT = {
    "type": "function",
    "function": {
        "name": "BookRestaurant",
        "description": "Book a table at a restaurant",
        "parameters": {
            "type": "object",
            "properties": {
                "restaurantName": {"type": "string"},
                "numberOfPeople": {"type": "integer"},
            },
            "required": ["restaurantName", "numberOfPeople"],
        },
    },
}

TOOLS = [GET_WEATHER, BOOK_RESTAURANT]
QUESTION = [{"role": "user", "content": "What's the weather like in San Francisco today?"}]


def client() -> OpenAI:
    # No retries: a failure must show at once, not after backoff.
    return OpenAI(
        base_url=os.environ["CLIENT_TESTS_BASE_URL"],
        api_key="unused-by-toolgate-tests",
        max_retries=0,
        timeout=20.0,
    )


def model() -> str:
    return os.environ.get("CLIENT_TESTS_MODEL", "demo")


def check_calls(calls: list) -> None:
    ids = [c["id"] for c in calls]
    assert all(isinstance(i, str) and i for i in ids), f"empty call id: {calls}"
    assert len(set(ids)) == len(ids), f"repeated call id: {ids}"
    for c in calls:
        try:
            args = json.loads(c["arguments"])
        except json.JSONDecodeError:
            raise AssertionError(f"arguments of {c['name']} are not JSON: {c['arguments']!r}") from None
        assert isinstance(args, dict), f"arguments of {c['name']} are not a JSON object: {args!r}"


def create_stream() -> dict:
    """`chat.completions.create(stream=True)`, accumulating tool-call deltas by
    index as the SDK's documentation shows."""
    stream = client().chat.completions.create(
        model=model(), messages=QUESTION, tools=TOOLS, stream=True
    )
    content, calls, finish, chunks = "", {}, None, 0
    for chunk in stream:
        chunks += 1
        for choice in chunk.choices:
            assert choice.index == 0, f"unexpected choice {choice.index}"
            delta = choice.delta
            if delta.content:
                assert not calls, f"content {delta.content!r} after a tool call"
                content += delta.content
            for tc in delta.tool_calls or []:
                assert isinstance(tc.index, int), f"tool call delta without index: {tc}"
                if tc.index not in calls:
                    assert tc.id and tc.function and tc.function.name, f"call starts without id/name: {tc}"
                    calls[tc.index] = {"id": tc.id, "name": tc.function.name, "arguments": ""}
                else:
                    assert tc.id is None, f"id repeated in a later delta: {tc}"
                if tc.function and tc.function.arguments:
                    calls[tc.index]["arguments"] += tc.function.arguments
            if choice.finish_reason is not None:
                finish = choice.finish_reason
    assert sorted(calls) == list(range(len(calls))), f"call indexes {sorted(calls)}"
    calls = [calls[i] for i in sorted(calls)]
    check_calls(calls)
    return {"content": content, "calls": calls, "finish_reason": finish, "chunks": chunks}


def stream_helper() -> dict:
    """`client.chat.completions.stream()`: the SDK accumulates the deltas
    itself (and raises on malformed ones); `get_final_completion()`."""
    events = []
    with client().chat.completions.stream(model=model(), messages=QUESTION, tools=TOOLS) as stream:
        for event in stream:
            events.append(event.type)
        final = stream.get_final_completion()
    choice = final.choices[0]
    calls = [
        {"id": tc.id, "name": tc.function.name, "arguments": tc.function.arguments}
        for tc in choice.message.tool_calls or []
    ]
    check_calls(calls)
    done = events.count("tool_calls.function.arguments.done")
    assert done == len(calls), f"{done} arguments.done events for {len(calls)} calls: {events}"
    return {
        "content": choice.message.content,
        "calls": calls,
        "finish_reason": choice.finish_reason,
        "events": sorted(set(events)),
    }


def get_weather(location: str, unit: str = "celsius") -> str:
    return f"21 C and sunny in {location}"


def tool_loop() -> dict:
    """A whole tool loop: the model calls GetWeather, the result goes back as a
    `tool` message, and the model answers with text."""
    c = client()
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = c.chat.completions.create(model=model(), messages=messages, tools=[GET_WEATHER])
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls", f"finish_reason {choice.finish_reason}"
    calls = choice.message.tool_calls
    assert calls and len(calls) == 1, f"tool_calls {calls}"
    call = calls[0]
    assert call.function.name == "GetWeather", call
    args = json.loads(call.function.arguments)
    result = get_weather(**args)
    # The SDK's own message object goes back into the history, as users do.
    messages.append(choice.message)
    messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    second = c.chat.completions.create(model=model(), messages=messages, tools=[GET_WEATHER])
    answer = second.choices[0]
    assert answer.finish_reason == "stop", f"finish_reason {answer.finish_reason}"
    assert not answer.message.tool_calls, f"another call: {answer.message.tool_calls}"
    return {
        "call": {"name": call.function.name, "arguments": args},
        "result": result,
        "answer": answer.message.content,
    }


def gateway_tools() -> dict:
    """A model that uses the gateway's own tools: the SDK's stream helper reads
    the whole answer (both rounds) as one message, and the extra
    `gateway_tool_calls` delta field comes through as an extra field."""
    question = [{"role": "user", "content": "Ask the calculator: what is `(2 + 3) * 7`?"}]
    reported = []
    with client().chat.completions.stream(model=model(), messages=question) as stream:
        for event in stream:
            if event.type == "chunk":
                for choice in event.chunk.choices:
                    extra = (choice.delta.model_extra or {}).get("gateway_tool_calls")
                    reported.extend(extra or [])
        final = stream.get_final_completion()
    choice = final.choices[0]
    assert not choice.message.tool_calls, f"a gateway call reached the client: {choice.message}"
    ids = {c["id"] for c in reported}
    assert len(ids) == 1, f"one gateway call expected: {reported}"
    return {
        "content": choice.message.content,
        "finish_reason": choice.finish_reason,
        "gateway_tool_calls": reported,
    }


WEATHER_FLAT = {"type": "function", **GET_WEATHER["function"]}


def responses_stream() -> dict:
    """`client.responses.stream()`: the SDK checks the event order and builds
    the final response itself."""
    kinds = []
    with client().responses.stream(model=model(), input=QUESTION[0]["content"], tools=[WEATHER_FLAT]) as stream:
        for event in stream:
            kinds.append(event.type)
        final = stream.get_final_response()
    calls = [
        {"id": item.call_id, "name": item.name, "arguments": item.arguments}
        for item in final.output
        if item.type == "function_call"
    ]
    check_calls(calls)
    return {"status": final.status, "calls": calls, "text": final.output_text, "events": sorted(set(kinds))}


def responses_gateway() -> dict:
    """`client.responses.create()` against a model that used the gateway's
    tools: the hosted-MCP item types parse into the SDK's own models."""
    final = client().responses.create(model=model(), input="Ask the calculator: what is `(2 + 3) * 7`?")
    items = [item.type for item in final.output]
    mcp = [item for item in final.output if item.type == "mcp_call"]
    assert len(mcp) == 1, f"one mcp_call expected: {items}"
    return {
        "status": final.status,
        "items": items,
        "mcp_call": {"name": mcp[0].name, "server_label": mcp[0].server_label, "output": mcp[0].output},
        "text": final.output_text,
    }


def agents_loop() -> dict:
    """The OpenAI Agents SDK runs an agent with a function tool to the end of
    its loop, over the Responses API, streamed and not."""
    import asyncio

    from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)  # tracing would export to the network
    invocations = []

    @function_tool
    def get_weather(location: str) -> str:
        """Get the current weather for a location."""
        invocations.append(location)
        return f"21 C and sunny in {location}"

    async def run() -> dict:
        api = AsyncOpenAI(base_url=os.environ["CLIENT_TESTS_BASE_URL"], api_key="unused", max_retries=0)
        agent = Agent(
            name="weather",
            instructions="Answer weather questions with the tool.",
            tools=[get_weather],
            model=OpenAIResponsesModel(model=model(), openai_client=api),
        )
        result = await Runner.run(agent, "What is the weather in Paris?")
        streamed = Runner.run_streamed(agent, "What is the weather in Rome?")
        kinds = set()
        async for event in streamed.stream_events():
            kinds.add(event.type)
        return {
            "final_output": result.final_output,
            "streamed_output": streamed.final_output,
            "items": [item.type for item in result.new_items],
            "stream_events": sorted(kinds),
        }

    out = asyncio.run(run())
    out["invocations"] = invocations
    return out


def three_turns() -> dict:
    """Three turns of a tool conversation, the SDK's own message objects sent
    back each time and no chat header: the gateway's transcript links them."""
    c = client()
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    chats = []
    for turn in range(3):
        raw = c.chat.completions.with_raw_response.create(model=model(), messages=messages, tools=[GET_WEATHER])
        chats.append(raw.headers.get("x-toolgate-chat-id"))
        choice = raw.parse().choices[0]
        messages.append(choice.message)
        if choice.message.tool_calls:
            call = choice.message.tool_calls[0]
            messages.append({"role": "tool", "tool_call_id": call.id, "content": get_weather(**json.loads(call.function.arguments))})
        else:
            messages.append({"role": "user", "content": f"Thanks. And turn {turn}?"})
    return {"chats": chats, "turns": len(messages)}


ANTHROPIC_WEATHER = {
    "name": "GetWeather",
    "description": "Current weather at a location",
    "input_schema": GET_WEATHER["function"]["parameters"],
}


def anthropic_client():
    """The official `anthropic` SDK: its base URL has no `/v1`."""
    import anthropic

    base = os.environ["CLIENT_TESTS_BASE_URL"].removesuffix("/").removesuffix("/v1")
    return anthropic.Anthropic(base_url=base, api_key="unused-by-toolgate-tests", max_retries=0, timeout=20.0)


def anthropic_create() -> dict:
    """`messages.create` with tools: the model's call is a `tool_use` block."""
    m = anthropic_client().messages.create(
        model=model(), max_tokens=256, tools=[ANTHROPIC_WEATHER],
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
    )
    calls = [b for b in m.content if b.type == "tool_use"]
    assert m.stop_reason == "tool_use", f"stop_reason {m.stop_reason}"
    assert len(calls) == 1 and calls[0].id.startswith("toolu_"), m
    return {"stop_reason": m.stop_reason, "calls": [{"id": c.id, "name": c.name, "input": c.input} for c in calls],
            "usage": {"input_tokens": m.usage.input_tokens, "output_tokens": m.usage.output_tokens}}


def anthropic_stream() -> dict:
    """`messages.stream`: the SDK accumulates the events (and raises on
    malformed ones) into `get_final_message()`."""
    events = []
    with anthropic_client().messages.stream(
        model=model(), max_tokens=256, tools=[ANTHROPIC_WEATHER],
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
    ) as stream:
        for event in stream:
            events.append(event.type)
        final = stream.get_final_message()
    calls = [{"id": b.id, "name": b.name, "input": b.input} for b in final.content if b.type == "tool_use"]
    text = "".join(b.text for b in final.content if b.type == "text")
    return {"stop_reason": final.stop_reason, "calls": calls, "text": text, "events": events,
            "usage": {"input_tokens": final.usage.input_tokens, "output_tokens": final.usage.output_tokens}}


def anthropic_tool_loop() -> dict:
    """A whole tool loop: `tool_use`, the SDK's content back in the history, a
    `tool_result`, then the model's text answer."""
    c = anthropic_client()
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = c.messages.create(model=model(), max_tokens=256, tools=[ANTHROPIC_WEATHER], messages=messages)
    assert first.stop_reason == "tool_use", f"stop_reason {first.stop_reason}"
    call = next(b for b in first.content if b.type == "tool_use")
    result = get_weather(**call.input)
    messages.append({"role": "assistant", "content": first.content})
    messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": result}]})
    second = c.messages.create(model=model(), max_tokens=256, tools=[ANTHROPIC_WEATHER], messages=messages)
    assert second.stop_reason == "end_turn", f"stop_reason {second.stop_reason}"
    assert not [b for b in second.content if b.type == "tool_use"], second
    return {"call": {"name": call.name, "arguments": call.input}, "result": result,
            "answer": "".join(b.text for b in second.content if b.type == "text")}


def rate_limited() -> dict:
    """A key over its requests per minute through the SDKs: the OpenAI SDK
    reads the 429, and with one retry waits what `Retry-After` says (its
    own first backoff is under a second, which would be refused again);
    the Anthropic SDK reads the Messages door's shape."""
    import time

    import anthropic

    key = os.environ["LIMITS_TEST_SDK"]
    base = os.environ["CLIENT_TESTS_BASE_URL"]
    quick = OpenAI(base_url=base, api_key=key, max_retries=0, timeout=20.0)
    admitted = 0
    while True:
        try:
            quick.chat.completions.create(model=model(), messages=QUESTION)
            admitted += 1
        except openai.RateLimitError as e:
            refused = e
            break
        assert admitted < 1000, "never refused"
    error = refused.body.get("error", refused.body) if isinstance(refused.body, dict) else {}
    headers = refused.response.headers
    retrying = OpenAI(base_url=base, api_key=key, max_retries=1, timeout=20.0)
    started = time.monotonic()
    retrying.chat.completions.create(model=model(), messages=QUESTION)
    waited = time.monotonic() - started
    messages = anthropic.Anthropic(base_url=base.removesuffix("/").removesuffix("/v1"), api_key=key,
                                   max_retries=0, timeout=20.0)
    try:
        messages.messages.create(model=model(), max_tokens=16, messages=[{"role": "user", "content": "hi"}])
        anthropic_refused = None
    except anthropic.RateLimitError as e:
        anthropic_refused = e.body
    return {"admitted": admitted, "status": refused.status_code, "code": error.get("code"),
            "type": error.get("type"), "retry_after": headers.get("retry-after"),
            "limit": headers.get("x-ratelimit-limit-requests"),
            "remaining": headers.get("x-ratelimit-remaining-requests"), "waited": waited,
            "anthropic": anthropic_refused}


SCENARIOS = {
    f.__name__: f
    for f in (
        rate_limited,
        three_turns,
        create_stream,
        stream_helper,
        tool_loop,
        gateway_tools,
        responses_stream,
        responses_gateway,
        agents_loop,
        anthropic_create,
        anthropic_stream,
        anthropic_tool_loop,
    )
}


def main() -> None:
    if len(sys.argv) != 2 or sys.argv[1] not in SCENARIOS:
        sys.exit(f"usage: clients.py {{{'|'.join(SCENARIOS)}}}")
    result = SCENARIOS[sys.argv[1]]()
    result["sdk"] = f"openai-python {openai.__version__}"
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
