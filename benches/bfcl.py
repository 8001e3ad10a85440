"""The Berkeley Function Calling Leaderboard (BFCL) through toolgate.

Run by benches/bfcl.sh, which starts llama-server and toolgate (one
provider per arm, each arm's model name `ARM/MODEL`). This file sends each
chosen case's first turn through toolgate's chat door, the case's functions
given as OpenAI tools the way BFCL's own OpenAI handler converts them, reads
the native `tool_calls` that come back, and judges them with BFCL's
`ast_checker` (or, for the irrelevance categories, BFCL's rule: no call is
right). The `harness` arm is BFCL's own prompt mode instead, sent straight
to llama-server (`--llama`), not through toolgate: the case's functions
with BFCL's language hint, its system prompt
(`system_prompt_pre_processing_chat_model`), no tools, and the answer's text
decoded by `default_decode_ast_prompting` (a Python list of calls), judged
by the same checker. The data, the type conversion and the checker are the `bfcl-eval`
package's, used as a library (installed without its model SDKs: the
checker's one need from them, the model config table, is given here).

    python benches/bfcl.py --base URL --model MODEL --arms native,tag,... \
        --categories simple_python,... --n 25 --out DIR

    python benches/bfcl.py --report DIR/cases.jsonl   # judge a run again
    python benches/bfcl.py --grounding DIR/cases.jsonl...   # which calls are grounded

Every k-th case of a category is taken (k = its size // n), so runs compare.
Prints two Markdown tables (arm x category: passes/cases; arm x failure
mode: how many failed that way) and writes one JSON line per case and arm
(request, answer, verdict, mode) to DIR/cases.jsonl.
"""

import argparse
import concurrent.futures
import copy
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import types
import urllib.error
import urllib.request
from collections import defaultdict

# The checker reads one field of BFCL's model table, which imports every
# model SDK: this model's entry is given instead.
MODEL = "toolgate"
model_config = types.ModuleType("bfcl_eval.constants.model_config")
HARNESS = "harness"
model_config.MODEL_CONFIG_MAPPING = {
    # OpenAI-style tool names: BFCL's `a.b` functions are called `a_b`.
    MODEL: types.SimpleNamespace(underscore_to_dot=True),
    # BFCL's prompt mode: the model writes `a.b(...)` as the docs name it.
    HARNESS: types.SimpleNamespace(underscore_to_dot=False),
}
sys.modules["bfcl_eval.constants.model_config"] = model_config

import bfcl_eval  # noqa: E402
from bfcl_eval.constants.enums import Language, ModelStyle, ReturnFormat  # noqa: E402
from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI  # noqa: E402
from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker  # noqa: E402
from bfcl_eval.model_handler.utils import (  # noqa: E402
    convert_to_tool,
    default_decode_ast_prompting,
    system_prompt_pre_processing_chat_model,
)
from bfcl_eval.utils import (  # noqa: E402
    add_language_specific_hint_to_function_doc,
    is_empty_output,
    is_function_calling_format_output,
)

DATA = os.path.join(os.path.dirname(bfcl_eval.__file__), "data")


# Every single-turn category: the ones whose cases declare their functions.
SINGLE_TURN = [
    "simple_python", "simple_java", "simple_javascript", "multiple", "parallel",
    "parallel_multiple", "irrelevance", "live_simple", "live_multiple", "live_parallel",
    "live_parallel_multiple", "live_irrelevance", "live_relevance",
]


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def sample(category, n):
    """Every k-th case of `category` (k = its size // n), at most n, with
    their possible answers (none for irrelevance)."""
    cases = load(os.path.join(DATA, f"BFCL_v4_{category}.json"))
    answers = {}
    answer_file = os.path.join(DATA, "possible_answer", f"BFCL_v4_{category}.json")
    if os.path.exists(answer_file):
        answers = {a["id"]: a["ground_truth"] for a in load(answer_file)}
    step = max(1, len(cases) // n)
    chosen = cases[::step][:n]
    return [(case, answers.get(case["id"])) for case in chosen]


def tools_of(case):
    """The case's functions as Chat Completions tools, converted by BFCL."""
    return convert_to_tool(
        copy.deepcopy(case["function"]), GORILLA_TO_OPENAPI, ModelStyle.OPENAI_COMPLETIONS
    )


def harness_messages(case):
    """The case's first turn as BFCL's prompt mode sends it: the functions
    with the language hint its generation step adds, described in its
    default system prompt (put before, or merged into, the case's own)."""
    hinted = add_language_specific_hint_to_function_doc([copy.deepcopy(case)])[0]
    return system_prompt_pre_processing_chat_model(
        copy.deepcopy(case["question"][0]), hinted["function"], case["id"]
    )


def ask(base, model, case, max_tokens, timeout, harness=False):
    """One chat request: through toolgate (`base`, tools as OpenAI tools),
    or with `harness`, BFCL's prompt straight to llama-server (`base`)."""
    body = {
        "model": model,
        "messages": case["question"][0],
        "tools": tools_of(case),
        "temperature": 0,
        "max_tokens": max_tokens,
    }
    if harness:
        body["messages"] = harness_messages(case)
        del body["tools"]
    request = urllib.request.Request(
        base + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            status, answer = r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        status, answer = e.code, json.loads(e.read() or b"{}")
    except Exception as e:  # a timeout, a reset: the case fails, the run goes on
        status, answer = 0, {"error": {"message": str(e)}}
    return body, status, answer, time.monotonic() - started


def calls_of(answer, arm=None):
    """The answer's calls as BFCL decodes an OpenAI answer:
    `[{name: arguments}]`; `None` when an argument string is not JSON. For
    the harness arm, the text decoded as BFCL's prompt mode decodes it;
    `None` when it does not decode (BFCL's evaluator: no call)."""
    message = ((answer.get("choices") or [{}])[0]).get("message") or {}
    if arm == HARNESS:
        try:
            return default_decode_ast_prompting(message.get("content") or "", ReturnFormat.PYTHON)
        except Exception:
            return None
    out = []
    for call in message.get("tool_calls") or []:
        try:
            out.append({call["function"]["name"]: json.loads(call["function"]["arguments"])})
        except (KeyError, TypeError, json.JSONDecodeError):
            return None
    return out


def judge(category, case, truth, status, answer, arm=None):
    """(passed, why, mode) for one answer; `mode` (see `MODES`) names how a
    failure failed, `None` for a pass."""
    if status != 200:
        return False, f"http {status}: {(answer.get('error') or {}).get('code')}", "request failed"
    calls = calls_of(answer, arm)
    if "irrelevance" in category:
        if calls is None or is_empty_output(calls):
            return True, "no call", None
        if not is_function_calling_format_output(calls):  # BFCL counts it as a call
            return False, "called (not a list of calls)", "called, a value not in the question"
        names = ", ".join(next(iter(c)) for c in calls)
        question = question_of(case)
        mode = "called, every value in the question" if all(
            grounded(value, question) for c in calls for value in leaves(next(iter(c.values())))
        ) else "called, a value not in the question"
        return False, "called " + names, mode
    if arm == HARNESS and (calls is None or not is_function_calling_format_output(calls)):
        return False, "not a list of calls", "answered in text"
    if calls is None:
        return False, "arguments not JSON", "wrong or missing value"
    if not calls:
        return False, "no call", "call outside the syntax" if call_like(answer) else "answered in text"
    verdict = ast_checker(
        case["function"], calls, truth, Language.PYTHON, category,
        HARNESS if arm == HARNESS else MODEL,
    )
    why = "; ".join(map(str, verdict.get("error", []))) or "ok"
    if verdict["valid"]:
        return True, why, None
    kind = verdict.get("error_type", "")
    if kind.endswith("wrong_count"):
        if len(calls) > len(truth):
            mode = "too many calls"
        else:
            mode = "call outside the syntax" if call_like(answer) else "too few calls"
    elif kind.endswith("wrong_func_name") or (
        kind.endswith("cannot_find_match")
        and sorted(next(iter(c)) for c in calls) != sorted(next(iter(t)) for t in truth)
    ):
        mode = "wrong tool"
    else:
        mode = "wrong or missing value"
    return False, why, mode


# How a failing case failed, in the order the report lists them.
MODES = [
    "request failed", "answered in text", "call outside the syntax", "too few calls",
    "too many calls", "wrong tool", "wrong or missing value",
    "called, every value in the question", "called, a value not in the question",
]


def question_of(case):
    """The user's words in the case's first turn."""
    return " ".join(
        m.get("content") or "" for m in case["question"][0] if m.get("role") == "user"
    ).lower()


def leaves(value):
    """The scalar values inside an argument object."""
    if isinstance(value, dict):
        for v in value.values():
            yield from leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from leaves(v)
    else:
        yield value


def grounded(value, question):
    """Whether an argument value can be read in the question: strings and
    numbers must appear in it; booleans and nulls carry no invented fact."""
    if value is None or isinstance(value, bool):
        return True
    if isinstance(value, (int, float)):
        text = f"{value:g}" if isinstance(value, float) else str(value)
        return text in question.replace(",", "")
    return str(value).lower() in question


def normalised(text):
    """Text as the grounding check compares it: lower-cased, every run of
    whitespace one space, no space at either end."""
    return " ".join(str(text).lower().split())


def conversation_of(case):
    """What the client (and its tools) wrote in the case's first turn,
    normalised: the content of its system, developer, user and tool
    messages (text parts of a list content), joined by a line break."""
    texts = []
    for m in case["question"][0]:
        if m.get("role") not in ("system", "developer", "user", "tool"):
            continue
        content = m.get("content") or ""
        if isinstance(content, list):
            content = " ".join(p.get("text") or "" for p in content if isinstance(p, dict))
        texts.append(normalised(content))
    return "\n".join(texts)


# The fewest characters a word needs to ground a value (toolgate's
# `grounding::MIN_WORD`).
MIN_WORD = 4


def long_words(text):
    """Runs of letters and digits of at least MIN_WORD characters."""
    return [w for w in re.split(r"[\W_]+", text) if len(w) >= MIN_WORD]


def holds(conversation, text):
    """Whether normalised `text` could come from the conversation, as
    toolgate's `grounding` decides: it is in it, one of its long words is a
    word of it, or it has no long word to judge by (or is empty)."""
    if not text or text in conversation:
        return True
    words = long_words(text)
    return not words or bool(set(words) & set(long_words(conversation)))


NUMBER_WORDS = {"half": 0.5, "dozen": 12, "hundred": 100, "thousand": 1e3, "million": 1e6, "billion": 1e9}


def numbers_in(text):
    """The numbers written in `text` as digits (no sign; `1,000` one
    number), and those its number words name (`grounding::numbers_in`)."""
    found = [float(m.replace(",", "")) for m in re.findall(r"\d+(?:,\d{3}(?!\d))*(?:\.\d+)?", text)]
    words = set(long_words(text))
    return found + [n for w, n in NUMBER_WORDS.items() if w in words]


def same(a, b):
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b), 1.0)


def holds_number(conversation, n):
    """Whether the number could come from the conversation: one of its
    numbers (either sign), a hundred times or a hundredth of one, or an
    integer from -10 to 10 (too small to judge)."""
    n = abs(n)
    if float(n).is_integer() and n <= 10:
        return True
    return any(same(n, m) or same(n, m * 100) or same(n * 100, m) for m in numbers_in(conversation))


def ungrounded_strings(value, schema, conversation):
    """The string and number values inside `value` (an argument object,
    walked with its schema) that are ungrounded: not held by the normalised
    conversation (`holds`, `holds_number`), and neither one of the schema's
    `enum` values nor its `default` at that place."""
    schema = schema if isinstance(schema, dict) else {}
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        for key, v in value.items():
            yield from ungrounded_strings(v, properties.get(key), conversation)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from ungrounded_strings(v, schema.get("items"), conversation)
    elif isinstance(value, str):
        text = normalised(value)
        allowed = [normalised(e) for e in schema.get("enum") or [] if isinstance(e, str)]
        if isinstance(schema.get("default"), str):
            allowed.append(normalised(schema["default"]))
        if not holds(conversation, text) and text not in allowed:
            yield value
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        named = [v for v in (schema.get("enum") or []) + [schema.get("default")]
                 if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if not holds_number(conversation, value) and not any(same(value, v) for v in named):
            yield value


def ungrounded_calls(case, calls):
    """For each call (`{name: arguments}`), its ungrounded string values
    (see `ungrounded_strings`), against the case's own function docs (a
    call's `a_b` found as `a.b`)."""
    conversation = conversation_of(case)
    docs = {}
    for f in case["function"]:
        docs[f["name"]] = f
        docs[f["name"].replace(".", "_")] = f
    out = []
    for call in calls:
        name, arguments = next(iter(call.items()))
        schema = (docs.get(name) or {}).get("parameters") or {}
        out.append(list(ungrounded_strings(arguments, schema, conversation)))
    return out


ALL = "all arms without -ask"


def grounding(paths):
    """The grounding check on recorded answers: per arm, calls on
    irrelevance cases, calls of passing cases and calls of failing
    (relevant) cases, each as flagged/all (a call is flagged when one of
    its string values is ungrounded), then the same per case (a case is
    flagged when one of its calls is)."""
    calls_by = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    cases_by = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    examples = defaultdict(list)
    for path in paths:
        records, _, _ = rejudge(path)
        known = {}
        for category in {r["category"] for r in records}:
            for case, _ in sample(category, 10**9):
                known[case["id"]] = case
        for r in records:
            if r["status"] != 200:
                continue
            calls = calls_of(r["answer"], r["arm"])
            if not calls or not is_function_calling_format_output(calls):
                continue
            group = ("irrelevance" if "irrelevance" in r["category"]
                     else "correct" if r["passed"] else "wrong")
            flags = ungrounded_calls(known[r["id"]], calls)
            # The sum is of the arms the check would act on (not those
            # that already ask: their calls are the second answers).
            for arm in (r["arm"],) + (() if r["arm"].endswith("-ask") else (ALL,)):
                calls_by[arm][group][0] += sum(1 for f in flags if f)
                calls_by[arm][group][1] += len(flags)
                cases_by[arm][group][0] += any(flags)
                cases_by[arm][group][1] += 1
            if any(flags) and group != "irrelevance":
                examples[group].append((r["arm"], r["id"], [v for f in flags for v in f][:3]))
    groups = [("irrelevance", "calls on irrelevance cases"), ("correct", "calls of passing cases"),
              ("wrong", "calls of failing relevant cases")]
    for title, table in (("calls", calls_by), ("cases (one flagged call flags the case)", cases_by)):
        print(f"| {title}: flagged/all | " + " | ".join(g[1] for g in groups) + " |")
        print("|" + "---|" * (len(groups) + 1))
        for arm in [a for a in table if a != ALL] + [ALL]:
            print(f"| {arm} | " + " | ".join(
                f"{table[arm][g][0]}/{table[arm][g][1]}" for g, _ in groups) + " |")
        print()
    for group in ("correct", "wrong"):
        print(f"flagged {group} cases (arm, id, ungrounded values):")
        for arm, case_id, values in examples[group]:
            print(f"  {arm} {case_id} {values!r}")


def call_like(answer):
    """Whether an answer's text holds a JSON object, as a call written
    outside the syntax does (a fenced block, a bare object)."""
    message = ((answer.get("choices") or [{}])[0]).get("message") or {}
    return re.search(r'\{\s*"', message.get("content") or "") is not None


def check_grammars(toolgate, llama, categories, syntaxes, parallel):
    """Every case of `categories` (all of them, not the sample), its tools
    rendered by `toolgate render` in each of `syntaxes` with constrain =
    "gbnf", and its grammar sent to llama-server on a one-token request:
    the server must read every one (it answers 400 to a grammar it cannot
    parse). Returns the refusals."""
    configs = {}
    for syntax in syntaxes:
        path = os.path.join(tempfile.mkdtemp(), "toolgate.toml")
        with open(path, "w") as f:
            f.write(
                f'[[providers]]\nname = "x"\nbase_url = "{llama}/v1"\n'
                f'[providers.tools]\nmode = "natural"\nsyntax = "{syntax}"\nconstrain = "gbnf"\n'
            )
        configs[syntax] = path
    work = [
        (category, case, syntax)
        for category in categories
        for case in load(os.path.join(DATA, f"BFCL_v4_{category}.json"))
        if case["function"]  # a case without tools has no grammar to send
        for syntax in syntaxes
    ]

    def one(item):
        category, case, syntax = item
        request = {"model": "x/m", "messages": case["question"][0], "tools": tools_of(case)}
        rendered = subprocess.run(
            [toolgate, "render", "--config", configs[syntax], "--provider", "x", "--raw"],
            input=json.dumps(request).encode(), capture_output=True,
        )
        if rendered.returncode != 0:
            return case["id"], syntax, "render: " + rendered.stderr.decode()[:300]
        body = json.loads(rendered.stdout)
        if "grammar" not in body:
            return case["id"], syntax, "no grammar in the rendered request"
        probe = {
            "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
            **{k: body[k] for k in ("grammar", "grammar_lazy", "grammar_triggers") if k in body},
        }
        request = urllib.request.Request(
            llama + "/v1/chat/completions", data=json.dumps(probe).encode(),
            headers={"content-type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=120) as r:
                r.read()
            return None
        except urllib.error.HTTPError as e:
            return case["id"], syntax, f"{e.code}: {e.read()[:300]!r}"

    refused = []
    with concurrent.futures.ThreadPoolExecutor(parallel) as pool:
        for done, verdict in enumerate(pool.map(one, work), 1):
            if verdict:
                refused.append(verdict)
            progress(f"grammars {done}/{len(work)}")
    progress(None)
    return len(work), refused


def progress(line):
    """A progress line rewritten in place on a terminal; nothing in a log."""
    if sys.stderr.isatty():
        print("\r" + line if line else "", end="" if line else "\n", file=sys.stderr, flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--report", metavar="CASES_JSONL",
                   help="judge an earlier run's cases.jsonl again and print its tables; nothing is sent")
    p.add_argument("--grounding", metavar="CASES_JSONL", nargs="+",
                   help="the grounding check on earlier runs' calls, as tables; nothing is sent")
    p.add_argument("--base")
    p.add_argument("--model", help="the upstream model's name (after ARM/)")
    p.add_argument("--arms")
    p.add_argument("--categories")
    p.add_argument("--n", type=int, default=25)
    p.add_argument("--out")
    p.add_argument("--parallel", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=512)
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--toolgate", help="the binary whose grammars --check-grammars renders")
    p.add_argument("--llama", help="llama-server's URL, for the harness arm and --check-grammars")
    p.add_argument("--check-grammars", action="store_true",
                   help="first send every case's grammar (each constrained arm's syntax) to llama-server")
    p.add_argument("--resume", action="store_true",
                   help="keep the answers (of --arms) already in --out's cases.jsonl and ask only the rest")
    p.add_argument("--ask-flagged", metavar="CASES_JSONL",
                   help="the -ask arms only where the grounding check flags a call in this earlier run's "
                        "answer of the same arm without -ask; every other case is that answer, copied "
                        "(the first request is the same; temperature 0)")
    p.add_argument("--grammar-categories", default="",
                   help="the categories --check-grammars reads (default --categories; `all`: every single-turn one)")
    args = p.parse_args()
    if args.report:
        report(*rejudge(args.report))
        return
    if args.grounding:
        grounding(args.grounding)
        return
    if not (args.base and args.model and args.arms and args.categories and args.out):
        p.error("--base, --model, --arms, --categories and --out are needed to run (or --report)")
    arms = args.arms.split(",")
    categories = args.categories.split(",")
    if HARNESS in arms and not args.llama:
        p.error("the harness arm needs --llama (it is sent straight to llama-server)")
    if args.check_grammars:
        syntaxes = list(dict.fromkeys(
            arm.removesuffix("-ask").removesuffix("-gbnf") for arm in arms if arm.removesuffix("-ask").endswith("-gbnf")
        ))
        checked = args.grammar_categories.split(",") if args.grammar_categories else categories
        if checked == ["all"]:
            checked = SINGLE_TURN
        total, refused = check_grammars(args.toolgate, args.llama, checked, syntaxes, args.parallel)
        print(f"grammars: {total - len(refused)}/{total} read by llama-server "
              f"(every case of {', '.join(checked)}; syntaxes {', '.join(syntaxes)})")
        for case_id, syntax, why in refused[:20]:
            print(f"  refused: {case_id} ({syntax}): {why}")
        if refused:
            sys.exit(1)
    if args.n == 0:
        return
    os.makedirs(args.out, exist_ok=True)
    work = [
        (arm, category, case, truth)
        for category in categories
        for case, truth in sample(category, args.n)
        for arm in arms
    ]
    copied = []
    path = os.path.join(args.out, "cases.jsonl")
    if args.resume and os.path.exists(path):
        copied = [r for r in load(path) if r["arm"] in arms]
        have = {(r["arm"], r["id"]) for r in copied}
        work = [item for item in work if (item[0], item[2]["id"]) not in have]
        print(f"--resume: {len(copied)} answers kept, {len(work)} to ask")
    if args.ask_flagged:
        work, flagged_copies = flagged_only(work, args.ask_flagged)
        copied += flagged_copies
        print(f"--ask-flagged: {len(work)} flagged answers asked again, {len(copied)} copied")
    done = 0

    def one(item):
        arm, category, case, truth = item
        if arm == HARNESS:
            body, status, answer, seconds = ask(
                args.llama, args.model, case, args.max_tokens, args.timeout, harness=True
            )
        else:
            body, status, answer, seconds = ask(
                args.base, f"{arm}/{args.model}", case, args.max_tokens, args.timeout
            )
        passed, why, mode = judge(category, case, truth, status, answer, arm)
        return {
            "arm": arm, "category": category, "id": case["id"], "passed": passed,
            "why": why, "mode": mode, "status": status, "seconds": round(seconds, 2),
            "request": body, "answer": answer,
        }

    records = []
    with open(path, "w") as log, \
            concurrent.futures.ThreadPoolExecutor(args.parallel) as pool:
        for record in copied:
            records.append(record)
            log.write(json.dumps(record) + "\n")
        for record in pool.map(one, work):
            done += 1
            records.append(record)
            log.write(json.dumps(record) + "\n")
            log.flush()
            progress(f"{done}/{len(work)}")
    progress(None)
    report(records, arms, categories)


def flagged_only(work, path):
    """`work` cut to the -ask arms' items whose arm without -ask answered
    with a call the grounding check flags in `path`'s records; the other
    -ask items become that answer's record (`copied_from` the arm), since
    toolgate asks only about a flagged call. Items of other arms go."""
    records, _, _ = rejudge(path)
    earlier = {(r["arm"], r["id"]): r for r in records}
    asked, copied = [], []
    for item in work:
        arm, _, case, _ = item
        if not arm.endswith("-ask"):
            continue
        base = earlier.get((arm.removesuffix("-ask"), case["id"]))
        if base is None:
            sys.exit(f"--ask-flagged: {path} has no answer of {arm.removesuffix('-ask')} to {case['id']}")
        calls = calls_of(base["answer"], base["arm"]) if base["status"] == 200 else None
        flagged = (bool(calls) and is_function_calling_format_output(calls)
                   and any(ungrounded_calls(case, calls)))
        if flagged:
            asked.append(item)
        else:
            copied.append(dict(base, arm=arm, copied_from=base["arm"]))
    return asked, copied


def rejudge(path):
    """The records of an earlier run's cases.jsonl, judged again (modes
    included) against the package's data."""
    cases = {}
    records = load(path)
    for category in {r["category"] for r in records}:
        for case, truth in sample(category, 10**9):
            cases[case["id"]] = (case, truth)
    for r in records:
        case, truth = cases[r["id"]]
        r["passed"], r["why"], r["mode"] = judge(
            r["category"], case, truth, r["status"], r["answer"], r["arm"]
        )
    arms = list(dict.fromkeys(r["arm"] for r in records))
    categories = list(dict.fromkeys(r["category"] for r in records))
    return records, arms, categories


def report(records, arms, categories):
    """Two Markdown tables: passes per arm and category, then how the
    failures failed, per arm (modes that occurred only)."""
    results = defaultdict(lambda: [0, 0])
    modes = defaultdict(lambda: defaultdict(int))
    for r in records:
        results[(r["arm"], r["category"])][0] += r["passed"]
        results[(r["arm"], r["category"])][1] += 1
        if not r["passed"]:
            modes[r["arm"]][r["mode"]] += 1
    print("| arm | " + " | ".join(categories) + " |")
    print("|" + "---|" * (len(categories) + 1))
    for arm in arms:
        cells = [f"{results[(arm, c)][0]}/{results[(arm, c)][1]}" for c in categories]
        print(f"| {arm} | " + " | ".join(cells) + " |")
    seen = [m for m in MODES if any(modes[arm][m] for arm in arms)]
    if seen:
        print()
        print("| failures | " + " | ".join(seen) + " |")
        print("|" + "---|" * (len(seen) + 1))
        for arm in arms:
            print(f"| {arm} | " + " | ".join(str(modes[arm][m]) for m in seen) + " |")


if __name__ == "__main__":
    main()
