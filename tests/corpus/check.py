#!/usr/bin/env python3
"""Self-check for the recorded-stream corpus.

Checks that every .sse file parses as a server-sent event stream, that every
data payload except [DONE] is JSON, that every .json file is JSON, that
manifest.json and the folder list the same files, and that a small reference
reader, run over each file, ends with exactly what manifest.json expects.

Run: python3 tests/corpus/check.py
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_sse(raw):
    """Split an event stream into (events, ended_on_boundary).

    Follows the WHATWG event-stream rules: lines end in LF, CR or CRLF; a
    blank line dispatches; "field: value" with one optional space removed;
    lines starting with ':' are comments. An event still being built when
    the bytes end is not dispatched (it is reported as unterminated).
    """
    text = raw.decode("utf-8")  # strict: invalid UTF-8 fails here
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    trailing_partial = lines[-1] != ""
    if not trailing_partial:
        lines = lines[:-1]
    events, name, data = [], None, []
    for line in lines:
        if line == "":
            if data:
                events.append((name, "\n".join(data)))
            name, data = None, []
            continue
        if line.startswith(":"):
            continue
        field, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if field == "event":
            name = value
        elif field == "data":
            data.append(value)
        elif field in ("id", "retry"):
            pass
        else:
            raise ValueError("unknown SSE field %r" % field)
    unterminated = bool(data) or trailing_partial
    return events, unterminated


def args_of(raw):
    if raw == "":
        return {}
    try:
        v = json.loads(raw)
    except ValueError:
        return None
    return v if isinstance(v, dict) else None


def finish_calls(calls):
    out = []
    for c in calls:
        d = {"name": c["name"], "arguments": args_of(c["raw"])}
        if c.get("id") is not None:
            d["id"] = c["id"]
        d["arguments_raw"] = c["raw"]
        out.append(d)
    return out


def read_chat_stream(events):
    text, reasoning, calls, by_index = [], [], [], {}
    finish, usage, failure, done = None, None, None, False
    for name, data in events:
        if data == "[DONE]":
            done = True
            continue
        obj = json.loads(data)
        if "error" in obj:
            failure = "error_event"
            continue
        if obj.get("usage"):
            u = obj["usage"]
            usage = {"prompt_tokens": u["prompt_tokens"], "completion_tokens": u["completion_tokens"]}
        for ch in obj.get("choices") or []:
            if ch.get("index", 0) != 0:
                continue
            delta = ch.get("delta") or {}
            if isinstance(delta.get("content"), str):
                text.append(delta["content"])
            for key in ("reasoning_content", "reasoning"):
                if isinstance(delta.get(key), str):
                    reasoning.append(delta[key])
            for tc in delta.get("tool_calls") or []:
                i = tc["index"]
                if i not in by_index:
                    by_index[i] = {"name": None, "id": None, "raw": ""}
                    calls.append(by_index[i])
                c = by_index[i]
                if tc.get("id"):
                    c["id"] = tc["id"]
                fn = tc.get("function") or {}
                if fn.get("name"):
                    c["name"] = fn["name"]
                if isinstance(fn.get("arguments"), str):
                    c["raw"] += fn["arguments"]
            if ch.get("finish_reason") is not None:
                finish = ch["finish_reason"]
    if failure is None and not done:
        failure = "cut"
    r = {"text": "".join(text)}
    if reasoning:
        r["reasoning"] = "".join(reasoning)
    r.update({"calls": finish_calls(calls), "finish_reason": finish, "usage": usage, "failure": failure})
    return r


STOP_MAP = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls", "max_tokens": "length"}


def read_anthropic_stream(events):
    text, reasoning, blocks = [], [], {}
    order, finish, prompt, completion, failure, stopped = [], None, None, None, None, False
    for name, data in events:
        obj = json.loads(data)
        if name is not None and name != obj.get("type"):
            raise ValueError("event name %r does not match type %r" % (name, obj.get("type")))
        t = obj["type"]
        if t == "message_start":
            u = obj["message"].get("usage") or {}
            prompt = u.get("input_tokens")
            completion = u.get("output_tokens")
        elif t == "content_block_start":
            b = obj["content_block"]
            blocks[obj["index"]] = {"type": b["type"], "name": b.get("name"), "id": b.get("id"), "raw": ""}
            order.append(obj["index"])
        elif t == "content_block_delta":
            d = obj["delta"]
            if d["type"] == "text_delta":
                text.append(d["text"])
            elif d["type"] == "thinking_delta":
                reasoning.append(d["thinking"])
            elif d["type"] == "input_json_delta":
                blocks[obj["index"]]["raw"] += d["partial_json"]
        elif t == "message_delta":
            sr = obj["delta"].get("stop_reason")
            if sr is not None:
                finish = STOP_MAP.get(sr, sr)
            if "usage" in obj and "output_tokens" in obj["usage"]:
                completion = obj["usage"]["output_tokens"]
        elif t == "message_stop":
            stopped = True
        elif t == "error":
            failure = "error_event"
    if failure is None and not stopped:
        failure = "cut"
    calls = [blocks[i] for i in order if blocks[i]["type"] == "tool_use"]
    r = {"text": "".join(text)}
    if reasoning:
        r["reasoning"] = "".join(reasoning)
    usage = None
    if prompt is not None and completion is not None:
        usage = {"prompt_tokens": prompt, "completion_tokens": completion}
    r.update({"calls": finish_calls(calls), "finish_reason": finish, "usage": usage, "failure": failure})
    return r


def read_chat_whole(obj):
    ch = obj["choices"][0]
    msg = ch["message"]
    calls = [{"name": tc["function"]["name"], "id": tc.get("id"), "raw": tc["function"]["arguments"]}
             for tc in msg.get("tool_calls") or []]
    r = {"text": msg.get("content") or ""}
    for key in ("reasoning_content", "reasoning"):
        if msg.get(key):
            r["reasoning"] = msg[key]
    u = obj.get("usage")
    r.update({"calls": finish_calls(calls), "finish_reason": ch.get("finish_reason"),
              "usage": {"prompt_tokens": u["prompt_tokens"], "completion_tokens": u["completion_tokens"]} if u else None,
              "failure": None})
    return r


def main():
    problems = []
    with open(os.path.join(HERE, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    listed = [m["file"] for m in manifest]
    present = sorted(n for n in os.listdir(HERE) if n.endswith((".sse", ".json")) and n != "manifest.json")
    if len(set(listed)) != len(listed):
        problems.append("manifest lists a file twice")
    for n in sorted(set(present) - set(listed)):
        problems.append("%s: in the folder but not in manifest.json" % n)
    for n in sorted(set(listed) - set(present)):
        problems.append("%s: in manifest.json but missing" % n)

    total = 0
    for m in manifest:
        path = os.path.join(HERE, m["file"])
        if not os.path.exists(path):
            continue
        raw = open(path, "rb").read()
        total += len(raw)
        try:
            if m["file"].endswith(".sse"):
                if not m["stream"]:
                    raise ValueError(".sse file marked stream=false")
                events, unterminated = parse_sse(raw)
                if unterminated:
                    raise ValueError("stream ends inside an event")
                if not events:
                    raise ValueError("no events")
                for _, data in events:
                    if data != "[DONE]":
                        json.loads(data)
                got = read_anthropic_stream(events) if m["api"] == "anthropic" else read_chat_stream(events)
            else:
                if m["stream"]:
                    raise ValueError(".json file marked stream=true")
                got = read_chat_whole(json.loads(raw.decode("utf-8")))
        except Exception as e:  # noqa: BLE001 - report and continue
            problems.append("%s: %s" % (m["file"], e))
            continue
        if got != m["expect"]:
            problems.append("%s: reference reader disagrees with manifest\n  got:    %s\n  expect: %s"
                            % (m["file"], json.dumps(got, ensure_ascii=False), json.dumps(m["expect"], ensure_ascii=False)))

    for extra in ("README.md", "manifest.json", "check.py"):
        p = os.path.join(HERE, extra)
        if os.path.exists(p):
            total += os.path.getsize(p)
    if total >= 100 * 1024:
        problems.append("corpus is %d bytes, over the 100 KB budget" % total)

    if problems:
        print("\n".join(problems))
        print("FAIL: %d problem(s)" % len(problems))
        return 1
    print("OK: %d files, %d bytes" % (len(manifest), total))
    return 0


if __name__ == "__main__":
    sys.exit(main())
