"""The Berkeley Function Calling Leaderboard (BFCL) through toolgate.

Run by benches/bfcl.sh, which starts llama-server and toolgate (one
provider per arm, each arm's model name `ARM/MODEL`). This file sends each
chosen case's first turn through toolgate's chat door, the case's functions
given as OpenAI tools the way BFCL's own OpenAI handler converts them, reads
the native `tool_calls` that come back, and judges them with BFCL's
`ast_checker` (or, for the irrelevance categories, BFCL's rule: no call is
right). The data, the type conversion and the checker are the `bfcl-eval`
package's, used as a library (installed without its model SDKs: the
checker's one need from them, the model config table, is given here).

    python benches/bfcl.py --base URL --model MODEL --arms native,tag,... \
        --categories simple_python,... --n 25 --out DIR

    python benches/bfcl.py --report DIR/cases.jsonl   # judge a run again

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
model_config.MODEL_CONFIG_MAPPING = {
    # OpenAI-style tool names: BFCL's `a.b` functions are called `a_b`.
    MODEL: types.SimpleNamespace(underscore_to_dot=True),
}
sys.modules["bfcl_eval.constants.model_config"] = model_config

import bfcl_eval  # noqa: E402
from bfcl_eval.constants.enums import Language, ModelStyle  # noqa: E402
from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI  # noqa: E402
from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker  # noqa: E402
from bfcl_eval.model_handler.utils import convert_to_tool  # noqa: E402
from bfcl_eval.utils import is_empty_output  # noqa: E402

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


def ask(base, model, case, max_tokens, timeout):
    body = {
        "model": model,
        "messages": case["question"][0],
        "tools": tools_of(case),
        "temperature": 0,
        "max_tokens": max_tokens,
    }
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


def calls_of(answer):
    """The answer's calls as BFCL decodes an OpenAI answer:
    `[{name: arguments}]`; `None` when an argument string is not JSON."""
    message = ((answer.get("choices") or [{}])[0]).get("message") or {}
    out = []
    for call in message.get("tool_calls") or []:
        try:
            out.append({call["function"]["name"]: json.loads(call["function"]["arguments"])})
        except (KeyError, TypeError, json.JSONDecodeError):
            return None
    return out


def judge(category, case, truth, status, answer):
    """(passed, why, mode) for one answer; `mode` (see `MODES`) names how a
    failure failed, `None` for a pass."""
    if status != 200:
        return False, f"http {status}: {(answer.get('error') or {}).get('code')}", "request failed"
    calls = calls_of(answer)
    if "irrelevance" in category:
        if calls is None or is_empty_output(calls):
            return True, "no call", None
        names = ", ".join(next(iter(c)) for c in calls)
        question = question_of(case)
        mode = "called, every value in the question" if all(
            grounded(value, question) for c in calls for value in leaves(next(iter(c.values())))
        ) else "called, a value not in the question"
        return False, "called " + names, mode
    if calls is None:
        return False, "arguments not JSON", "wrong or missing value"
    if not calls:
        return False, "no call", "call outside the syntax" if call_like(answer) else "answered in text"
    verdict = ast_checker(
        case["function"], calls, truth, Language.PYTHON, category, MODEL
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
    p.add_argument("--llama", help="llama-server's URL, for --check-grammars")
    p.add_argument("--check-grammars", action="store_true",
                   help="first send every case's grammar (each constrained arm's syntax) to llama-server")
    p.add_argument("--grammar-categories", default="",
                   help="the categories --check-grammars reads (default --categories; `all`: every single-turn one)")
    args = p.parse_args()
    if args.report:
        report(*rejudge(args.report))
        return
    if not (args.base and args.model and args.arms and args.categories and args.out):
        p.error("--base, --model, --arms, --categories and --out are needed to run (or --report)")
    arms = args.arms.split(",")
    categories = args.categories.split(",")
    if args.check_grammars:
        syntaxes = [arm.removesuffix("-gbnf") for arm in arms if arm.endswith("-gbnf")]
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
    done = 0

    def one(item):
        arm, category, case, truth = item
        body, status, answer, seconds = ask(
            args.base, f"{arm}/{args.model}", case, args.max_tokens, args.timeout
        )
        passed, why, mode = judge(category, case, truth, status, answer)
        return {
            "arm": arm, "category": category, "id": case["id"], "passed": passed,
            "why": why, "mode": mode, "status": status, "seconds": round(seconds, 2),
            "request": body, "answer": answer,
        }

    records = []
    with open(os.path.join(args.out, "cases.jsonl"), "w") as log, \
            concurrent.futures.ThreadPoolExecutor(args.parallel) as pool:
        for record in pool.map(one, work):
            done += 1
            records.append(record)
            log.write(json.dumps(record) + "\n")
            log.flush()
            progress(f"{done}/{len(work)}")
    progress(None)
    report(records, arms, categories)


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
        r["passed"], r["why"], r["mode"] = judge(r["category"], case, truth, r["status"], r["answer"])
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
