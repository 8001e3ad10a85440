"""The official SDKs read every cell of tests/it/fidelity.rs's matrix.

Run as `python fidelity.py CELLS.json` with CLIENT_TESTS_BASE_URL set to the
gateway's `/v1` URL (loopback only). CELLS.json lists the requests; for each,
the door's official SDK sends it and assembles the answer the way an agent
does: `openai` for chat completions (chunks read as the SDK types them,
deltas joined by call index as agent loops do) and responses (the stream helper's final response), `anthropic` for messages
(the stream helper's final message). One JSON array is printed: per cell,
the text, the calls `[name, arguments]`, the finish in Chat Completions
terms, and `failed` when the SDK raised or the stream never finished.
"""

import json
import os
import sys

import anthropic
import openai
from openai import OpenAI


def chat(client, body):
    body = dict(body)
    stream = body.pop("stream")
    if stream:
        text, calls, finish = "", {}, None
        for chunk in client.chat.completions.create(stream=True, **body):
            for choice in chunk.choices:
                delta = choice.delta
                text += delta.content or ""
                for call in delta.tool_calls or []:
                    slot = calls.setdefault(call.index, ["", ""])
                    if call.function and call.function.name:
                        slot[0] += call.function.name
                    if call.function and call.function.arguments:
                        slot[1] += call.function.arguments
                finish = choice.finish_reason or finish
        # A stream that never said how it finished was cut.
        return text, [calls[i] for i in sorted(calls)], finish, finish is None
    completion = client.chat.completions.create(**body)
    message = completion.choices[0].message
    calls = [[c.function.name, c.function.arguments] for c in message.tool_calls or []]
    return message.content or "", calls, completion.choices[0].finish_reason, False


def responses(client, body):
    body = dict(body)
    stream = body.pop("stream")
    if stream:
        # The helper's final response exists only for `response.completed`;
        # an incomplete or failed answer ends with its own terminal event,
        # which carries the response as far as it got.
        response = None
        with client.responses.stream(**body) as events:
            for event in events:
                if event.type in ("response.completed", "response.incomplete", "response.failed"):
                    response = event.response
        if response is None:
            return "", [], None, True
    else:
        response = client.responses.create(**body)
    if response.status == "failed":
        return "", [], None, True
    text = "".join(
        part.text
        for item in response.output
        if item.type == "message"
        for part in item.content
        if part.type == "output_text"
    )
    calls = [[item.name, item.arguments] for item in response.output if item.type == "function_call"]
    if response.status == "incomplete":
        finish = "length"
    else:
        finish = "tool_calls" if calls else "stop"
    return text, calls, finish, False


STOP = {"tool_use": "tool_calls", "max_tokens": "length", "end_turn": "stop", "stop_sequence": "stop"}


def messages(client, body):
    body = dict(body)
    stream = body.pop("stream")
    if stream:
        with client.messages.stream(**body) as events:
            for _ in events:
                pass
            message = events.get_final_message()
    else:
        message = client.messages.create(**body)
    text = "".join(b.text for b in message.content if b.type == "text")
    calls = [[b.name, json.dumps(b.input)] for b in message.content if b.type == "tool_use"]
    return text, calls, STOP.get(message.stop_reason), False


def main():
    base = os.environ["CLIENT_TESTS_BASE_URL"]
    openai_client = OpenAI(base_url=base, api_key="unused", max_retries=0)
    anthropic_client = anthropic.Anthropic(base_url=base.removesuffix("/v1"), api_key="unused", max_retries=0)
    results = []
    for cell in json.load(open(sys.argv[1])):
        door, body = cell["door"], dict(cell["body"], stream=cell["stream"])
        try:
            if door == "Chat":
                text, calls, finish, failed = chat(openai_client, body)
            elif door == "Responses":
                text, calls, finish, failed = responses(openai_client, body)
            else:
                text, calls, finish, failed = messages(anthropic_client, body)
            results.append({"text": text, "calls": calls, "finish": finish, "failed": failed})
        except (openai.APIError, anthropic.APIError) as e:
            results.append({"text": f"{type(e).__name__}: {e}", "calls": [], "finish": None, "failed": True})
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
