"""Checks texts against structural tags with xgrammar, the engine vLLM and
SGLang compile `response_format: {"type": "structural_tag"}` with.

Reads a JSON array of cases on stdin, each {"tag": <the response_format
toolgate sent>, "text": <a model's answer>}, and writes a JSON array of
results in the same order: {"accepted": bool} (the matcher took the whole
text and may end there), or {"error": str} when the tag did not compile.

xgrammar's Python package imports torch at import time, for the token
masks a server applies to its logits; matching a string needs none of it.
So this loads the package's compiled bindings (the same C++ compiler and
matcher its Python classes wrap) without running the package's __init__,
and xgrammar is installed without its torch dependency (requirements.txt).
"""

import importlib.util
import json
import sys
import types


def bindings():
    spec = importlib.util.find_spec("xgrammar")
    if spec is None:
        sys.exit("xgrammar is not installed: run tests/run.sh")
    package = types.ModuleType("xgrammar")
    package.__path__ = list(spec.submodule_search_locations)
    package.__spec__ = spec
    sys.modules["xgrammar"] = package
    import xgrammar.load_binding  # noqa: F401  (loads libxgrammar_bindings)
    from xgrammar.tvm_ffi_binding import _ffi_api

    return _ffi_api


def main():
    core = bindings()
    # No tokenizer: strings are matched byte by byte, which is what a
    # server's token masks reduce to.
    tokenizer = core.TokenizerInfo([], 0, 0, None, False)
    compiler = core.GrammarCompiler(tokenizer, 1, True, -1)
    compiled = {}
    results = []
    for case in json.load(sys.stdin):
        key = json.dumps(case["tag"], sort_keys=True)
        if key not in compiled:
            try:
                # As vLLM and SGLang do: the field's JSON, as received.
                compiled[key] = compiler.compile_structural_tag(json.dumps(case["tag"]))
            except Exception as e:  # the engine's own message
                compiled[key] = str(e)
        grammar = compiled[key]
        if isinstance(grammar, str):
            results.append({"error": grammar})
            continue
        matcher = core.GrammarMatcher(grammar, None, True, -1)
        accepted = matcher.accept_string(case["text"], False) and matcher.is_terminated()
        results.append({"accepted": bool(accepted)})
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
