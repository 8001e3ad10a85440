"""Checks deploy/ for consistency; run through deploy/check.sh.

Each check prints one line: `ok`, `FAIL` (with the reason) or `skip`. The
process exits 1 if any check failed.

The toolgate binary is always run with a clean environment (`env -i`), the
container's or unit's variables only: toolgate reads every TOOLGATE_* variable
as a config override, including this script's own TOOLGATE_BIN and friends.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import yaml

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

ROOT = os.getcwd()
DEPLOY = os.path.join(ROOT, "deploy")
DOCKERFILE = os.path.join(DEPLOY, "Dockerfile")
CARGO_CMD = "cargo build --release --locked --bin toolgate"
# The profile the final build runs in here. Which files the build needs does
# not depend on it; TOOLGATE_DOCKER_BUILD_PROFILE=dev (tests/run.sh) builds
# in the dev profile's directory, whose dependencies the suite's own build
# then reuses, instead of compiling every dependency a second time.
BUILD_PROFILE = os.environ.get("TOOLGATE_DOCKER_BUILD_PROFILE", "release")
BASE_PATH = "/usr/local/bin:/usr/bin:/bin"

failures = 0


def report(status: str, name: str, detail: str = "") -> None:
    global failures
    if status == "FAIL":
        failures += 1
    line = f"{status:<4} {name}"
    if detail:
        line += f" - {detail}"
    print(line, flush=True)


def check(name: str, ok: bool, detail: str = "") -> bool:
    report("ok" if ok else "FAIL", name, detail)
    return ok


def rel(path: str) -> str:
    return os.path.relpath(path, ROOT)


def port_of(addr: str) -> int:
    return int(addr.rsplit(":", 1)[1])


def host_of(addr: str) -> str:
    return addr.rsplit(":", 1)[0].strip("[]")


# ---------------------------------------------------------------- toolgate


def toolgate_check(bin_path: str, toml_text: str, env: dict[str, str]):
    """Runs `toolgate check` on the text; returns (ok, effective config or error)."""
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(toml_text)
        path = f.name
    try:
        proc = subprocess.run(
            [bin_path, "check", "--config", path],
            env={"PATH": BASE_PATH, **env},
            capture_output=True,
            text=True,
            timeout=30,
        )
    finally:
        os.unlink(path)
    if proc.returncode != 0:
        return False, (proc.stderr.strip() or proc.stdout.strip())
    try:
        return True, tomllib.loads(proc.stdout)
    except tomllib.TOMLDecodeError as e:
        return False, f"`toolgate check` printed no TOML: {e}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url: str):
    try:
        with urllib.request.urlopen(url, timeout=3) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, ""
    except OSError as e:
        return None, str(e)


def live_run(bin_path: str, name: str, toml_text: str, env: dict[str, str], grace: float,
             probe_paths: list[str], metrics_path: str) -> None:
    """Serves the config on a loopback port, probes it, then SIGTERMs it."""
    port = free_port()
    raw = tomllib.loads(toml_text)
    raw.setdefault("server", {})
    text = re.sub(r'(?m)^(\s*listen\s*=\s*).*$', rf'\g<1>"127.0.0.1:{port}"', toml_text)
    if "listen" not in raw["server"]:
        text = text.replace("[server]", f'[server]\nlisten = "127.0.0.1:{port}"', 1)
    # The listen override in the env would win over the file: drop it here.
    env = {k: v for k, v in env.items() if k != "TOOLGATE_SERVER__LISTEN"}
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(text)
        path = f.name
    proc = subprocess.Popen([bin_path, "--config", path], env={"PATH": BASE_PATH, **env},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and http_get(base + "/healthz")[0] is None:
            if proc.poll() is not None:
                break
            time.sleep(0.1)
        for p in probe_paths:
            status, _ = http_get(base + p)
            check(f"{name}: live GET {p}", status == 200, f"status {status}")
        # Series appear once recorded: one /v1 request first.
        http_get(base + "/v1/models")
        status, body = http_get(base + metrics_path)
        check(f"{name}: live GET {metrics_path}", status == 200 and "toolgate_" in body,
              f"status {status}, {'has' if 'toolgate_' in body else 'no'} toolgate_ metrics")
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=grace + 5)
            check(f"{name}: live SIGTERM exits 0 within shutdown_grace_secs", rc == 0, f"exit {rc}")
        except subprocess.TimeoutExpired:
            check(f"{name}: live SIGTERM exits 0 within shutdown_grace_secs", False, "still running")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.unlink(path)


# ---------------------------------------------------------------- parsing


def parse_files() -> tuple[dict[str, list], dict[str, object]]:
    yamls, jsons = {}, {}
    for path in sorted(glob.glob(os.path.join(DEPLOY, "**", "*"), recursive=True)):
        if path.endswith((".yml", ".yaml")):
            try:
                with open(path) as f:
                    docs = [d for d in yaml.safe_load_all(f) if d is not None]
                yamls[path] = docs
                check(f"yaml parses: {rel(path)}", True, f"{len(docs)} document(s)")
            except yaml.YAMLError as e:
                check(f"yaml parses: {rel(path)}", False, str(e).replace("\n", " "))
        elif path.endswith(".json"):
            try:
                with open(path) as f:
                    jsons[path] = json.load(f)
                check(f"json parses: {rel(path)}", True)
            except json.JSONDecodeError as e:
                check(f"json parses: {rel(path)}", False, str(e))
    return yamls, jsons


def parse_dockerfile() -> list[dict]:
    """Instructions with continuation lines joined, split into stages."""
    with open(DOCKERFILE) as f:
        lines = f.read().splitlines()
    instrs, buf = [], ""
    for line in lines:
        s = line.strip()
        if not buf and (not s or s.startswith("#")):
            continue
        if buf and s.startswith("#"):
            continue
        if s.endswith("\\"):
            buf += s[:-1] + " "
            continue
        buf += s
        word, _, rest = buf.partition(" ")
        instrs.append({"op": word.upper(), "args": rest.strip()})
        buf = ""
    stages, args = [], {}
    for ins in instrs:
        if ins["op"] == "ARG" and not stages:
            k, _, v = ins["args"].partition("=")
            args[k] = v
        if ins["op"] == "FROM":
            parts = ins["args"].split()
            image = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), parts[0])
            alias = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else None
            stages.append({"image": image, "alias": alias, "instrs": []})
        elif stages:
            stages[-1]["instrs"].append(ins)
    return stages


def copy_args(args: str):
    """(flags, sources, dest) of a COPY instruction."""
    if args.lstrip().startswith("["):
        words = json.loads(args)
    else:
        words = shlex.split(args)
    flags = [w for w in words if w.startswith("--")]
    rest = [w for w in words if not w.startswith("--")]
    return flags, rest[:-1], rest[-1]


def dockerfile_env(stage: dict) -> dict[str, str]:
    env = {}
    for ins in stage["instrs"]:
        if ins["op"] == "ENV":
            for word in shlex.split(ins["args"]):
                k, _, v = word.partition("=")
                env[k] = v
    return env


# ---------------------------------------------------------------- checks


def check_dockerfile(bin_path: str, skip_release: bool) -> dict:
    """Returns what the other checks need: runtime ENV, exposed port, default config path."""
    with open(DOCKERFILE) as f:
        text = f.read()
    check("Dockerfile: runs `" + CARGO_CMD + "`", CARGO_CMD in text)
    stages = parse_dockerfile()
    check("Dockerfile: multi-stage", len(stages) >= 2, f"{len(stages)} stage(s)")
    builder = stages[0]
    # The runtime stage is the one named `runtime` (the default target
    # re-uses it after the `tools` variant), else the last.
    runtime = next((st for st in stages if st["alias"] == "runtime"), stages[-1])
    check("Dockerfile: the default (last) target is the runtime",
          stages[-1] is runtime or stages[-1]["image"] == "runtime",
          f"last stage FROM {stages[-1]['image']}")
    tools = next((st for st in stages if st["alias"] == "tools"), None)
    if check("Dockerfile: a `tools` target FROM runtime", tools is not None
             and tools["image"] == "runtime"):
        tools_run = " ".join(i["args"] for i in tools["instrs"] if i["op"] == "RUN")
        tools_user = [i["args"] for i in tools["instrs"] if i["op"] == "USER"]
        check("Dockerfile: tools installs python3, nodejs, npm and a pinned uv, and runs as "
              "the runtime's user",
              all(w in tools_run for w in ("python3", "nodejs", "npm", "uv=="))
              and bool(tools_user) and tools_user[-1] != "0:0",
              f"USER {tools_user}")

    # Every COPY source from the context exists.
    missing, builder_phases, copied = [], [], []
    for stage in stages:
        for ins in stage["instrs"]:
            if ins["op"] != "COPY":
                continue
            flags, srcs, _ = copy_args(ins["args"])
            if any(fl.startswith("--from") for fl in flags):
                continue
            for s in srcs:
                if not glob.glob(os.path.join(ROOT, s)):
                    missing.append(s)
    check("Dockerfile: every COPY source exists in the context (repo root)", not missing,
          f"missing: {', '.join(missing)}" if missing else "")

    # What the builder has on disk at each `cargo build`.
    for ins in builder["instrs"]:
        if ins["op"] == "COPY":
            flags, srcs, dest = copy_args(ins["args"])
            copied.append((srcs, dest))
        if ins["op"] == "RUN" and CARGO_CMD in ins["args"]:
            builder_phases.append((list(copied), "touch src/lib.rs" in ins["args"]
                                   and "echo" in ins["args"]))
    check("Dockerfile: builder runs the cargo command after copying the manifest",
          bool(builder_phases), f"{len(builder_phases)} build step(s)")

    def stage_context(copies, stub: bool) -> str:
        """A copy of what the builder's WORKDIR holds (Docker COPY semantics)."""
        tmp = tempfile.mkdtemp(prefix="toolgate-docker-ctx-")
        for srcs, dest in copies:
            into = os.path.normpath(os.path.join(tmp, dest))
            for s in srcs:
                src = os.path.join(ROOT, s)
                if os.path.isdir(src):  # a directory's contents go into dest
                    shutil.copytree(src, into, dirs_exist_ok=True)
                elif dest.endswith("/") or dest in (".", "./") or len(srcs) > 1:
                    os.makedirs(into, exist_ok=True)
                    shutil.copy2(src, os.path.join(into, os.path.basename(s)))
                else:
                    os.makedirs(os.path.dirname(into), exist_ok=True)
                    shutil.copy2(src, into)
        if stub:
            os.makedirs(os.path.join(tmp, "src"), exist_ok=True)
            with open(os.path.join(tmp, "src", "main.rs"), "w") as f:
                f.write("fn main() {}\n")
            open(os.path.join(tmp, "src", "lib.rs"), "w").close()
        return tmp

    def cargo(args: list[str], cwd: str, **kw):
        return subprocess.run(["cargo", *args], cwd=cwd, capture_output=True, text=True, **kw)

    for i, (copies, stub) in enumerate(builder_phases):
        is_last = i == len(builder_phases) - 1
        label = "final build" if is_last else "dependency layer"
        ctx = stage_context(copies, stub)
        try:
            if is_last and not skip_release:
                target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")
                args = CARGO_CMD.split()[1:]
                if BUILD_PROFILE != "release":
                    args[args.index("--release")] = f"--profile={BUILD_PROFILE}"
                proc = cargo(args, ctx, env={**os.environ, "CARGO_TARGET_DIR": target})
                ok = proc.returncode == 0
                out_dir = "debug" if BUILD_PROFILE in ("dev", "test") else BUILD_PROFILE
                built = os.path.join(target, out_dir, "toolgate")
                if ok:
                    run = subprocess.run([built, "check"], env={"PATH": BASE_PATH},
                                         capture_output=True, text=True)
                    ok = run.returncode == 0
                    detail = f"built {out_dir}/toolgate ({BUILD_PROFILE} profile); embedded config passes `check`" \
                        if ok else run.stderr.strip()
                else:
                    detail = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
                check(f"Dockerfile: {label}: `{CARGO_CMD}` succeeds with only the COPYed files",
                      ok, detail)
            else:
                # `cargo fetch` reads the manifest like `cargo build` does: a
                # [[bench]] whose file was not copied fails here.
                proc = cargo(["fetch", "--locked", "--offline"], ctx)
                if proc.returncode != 0 and "offline" in proc.stderr:
                    proc = cargo(["fetch", "--locked"], ctx)
                what = "release build skipped (TOOLGATE_SKIP_RELEASE_BUILD=1)" if is_last else ""
                err = proc.stderr.strip().splitlines()
                check(f"Dockerfile: {label}: cargo reads the manifest from the COPYed files",
                      proc.returncode == 0,
                      " ".join([what] + ([] if proc.returncode == 0 else err[-2:])).strip())
        finally:
            shutil.rmtree(ctx, ignore_errors=True)

    # Runtime stage.
    user = next((i["args"] for i in runtime["instrs"] if i["op"] == "USER"), "")
    uid = user.split(":")[0]
    check("Dockerfile: runtime runs as a numeric non-root USER", uid.isdigit() and int(uid) != 0,
          f"USER {user or '(none)'}")
    run_text = " ".join(i["args"] for i in runtime["instrs"] if i["op"] == "RUN")
    check("Dockerfile: runtime installs ca-certificates (https upstreams)",
          "ca-certificates" in run_text or "distroless" in runtime["image"])
    env = dockerfile_env(runtime)
    exposed = [int(p.split("/")[0]) for i in runtime["instrs"] if i["op"] == "EXPOSE"
               for p in i["args"].split()]
    listen = env.get("TOOLGATE_SERVER__LISTEN", "")
    check("Dockerfile: ENV TOOLGATE_SERVER__LISTEN binds all interfaces on the EXPOSEd port",
          bool(listen) and host_of(listen) in ("0.0.0.0", "::") and port_of(listen) in exposed,
          f"listen {listen or '(unset)'}, EXPOSE {exposed}")
    # The config the image serves: the file copied to TOOLGATE_CONFIG.
    config_dest = env.get("TOOLGATE_CONFIG")
    config_src = None
    for ins in runtime["instrs"]:
        if ins["op"] == "COPY":
            flags, srcs, dest = copy_args(ins["args"])
            if not any(f.startswith("--from") for f in flags) and dest == config_dest:
                config_src = srcs[0]
    check("Dockerfile: TOOLGATE_CONFIG names the config file COPYed into the image",
          config_src is not None, f"{config_dest} <- {config_src}")
    grace = 30.0
    if config_src:
        with open(os.path.join(ROOT, config_src)) as f:
            ok, eff = toolgate_check(bin_path, f.read(), env)
        if check(f"Dockerfile: image config ({config_src} + image ENV) passes `toolgate check`",
                 ok, "" if ok else eff):
            eff_listen = eff["server"]["listen"]
            grace = float(eff["server"]["shutdown_grace_secs"])
            check("Dockerfile: effective listen address (file + ENV) is the EXPOSEd port on all "
                  "interfaces", host_of(eff_listen) in ("0.0.0.0", "::")
                  and port_of(eff_listen) in exposed,
                  f"toolgate check says listen = {eff_listen}; EXPOSE {exposed}")
    return {"env": env, "exposed": exposed, "config_src": config_src, "grace": grace}


def container_env(c: dict, base: dict[str, str], secrets: dict[str, dict]):
    """Literal env over the image's ENV; secret refs get their placeholder or a dummy."""
    env, from_secret, problems = dict(base), [], []
    for e in c.get("env", []) or []:
        if "value" in e:
            env[e["name"]] = str(e["value"])
        elif "valueFrom" in e and "secretKeyRef" in e["valueFrom"]:
            ref = e["valueFrom"]["secretKeyRef"]
            sec = secrets.get(ref["name"])
            if sec is not None and ref["key"] not in sec:
                problems.append(f"Secret {ref['name']} has no key {ref['key']}")
            # One dummy per variable: two key lists may not share a key.
            env[e["name"]] = f"dummy-key-for-check-{e['name'].lower()}"
            from_secret.append(e["name"])
        else:
            env[e["name"]] = "dummy"
    return env, from_secret, problems


def config_for(c: dict, pod: dict, configmaps: dict[str, dict], env: dict[str, str]):
    """(path, toml text) of the config the container serves, from its ConfigMap."""
    args = list(c.get("command", []) or []) + list(c.get("args", []) or [])
    path = None
    for i, a in enumerate(args):
        if a == "--config" and i + 1 < len(args):
            path = args[i + 1]
        elif a.startswith("--config="):
            path = a.split("=", 1)[1]
    path = path or env.get("TOOLGATE_CONFIG")
    if not path:
        return None, None, "no --config argument and no TOOLGATE_CONFIG"
    volumes = {v["name"]: v for v in pod.get("volumes", []) or []}
    for m in c.get("volumeMounts", []) or []:
        mount = m["mountPath"].rstrip("/")
        if path.startswith(mount + "/") or path == mount:
            vol = volumes.get(m["name"], {})
            cm = vol.get("configMap")
            if not cm:
                return path, None, f"volume {m['name']} is not a ConfigMap"
            inner = m.get("subPath") or path[len(mount) + 1:]
            key = inner
            for item in cm.get("items", []) or []:
                if item["path"] == inner:
                    key = item["key"]
            data = (configmaps.get(cm["name"]) or {}).get("data", {})
            if key not in data:
                return path, None, f"ConfigMap {cm['name']} has no key {key}"
            return path, data[key], f"ConfigMap {cm['name']} key {key}"
    return path, None, f"{path} is on no mounted volume"


def resolve_port(port, c: dict):
    if isinstance(port, int):
        return port
    if isinstance(port, str) and port.isdigit():
        return int(port)
    for p in c.get("ports", []) or []:
        if p.get("name") == port:
            return p["containerPort"]
    return None


def prestop_seconds(c: dict) -> float:
    pre = ((c.get("lifecycle") or {}).get("preStop")) or {}
    if "sleep" in pre:
        return float(pre["sleep"]["seconds"])
    cmd = (pre.get("exec") or {}).get("command") or []
    text = " ".join(cmd)
    m = re.search(r"\bsleep\s+(\d+(?:\.\d+)?)", text)
    return float(m.group(1)) if m else 0.0


def expand_env(c: dict, name: str, configmaps: dict[str, dict]):
    """A container variable's value with `$(VAR)` references expanded, ConfigMap refs read."""
    values = {}
    for e in c.get("env", []) or []:
        ref = (e.get("valueFrom") or {}).get("configMapKeyRef")
        if "value" in e:
            values[e["name"]] = re.sub(r"\$\((\w+)\)", lambda m: values.get(m.group(1), m.group(0)),
                                       str(e["value"]))
        elif ref:
            values[e["name"]] = str(((configmaps.get(ref["name"]) or {}).get("data") or {})
                                    .get(ref["key"], ""))
    return values.get(name)


def listed_as_several(entry: str) -> list[str]:
    """Where the deploy files tell to put several keys (comma-separated) in a Secret entry."""
    found = []
    for path in sorted(glob.glob(os.path.join(DEPLOY, "kubernetes", "**", "*.yaml"), recursive=True)):
        with open(path) as fh:
            lines = fh.read().splitlines()
        for i, line in enumerate(lines):
            if not re.match(rf"\s*{re.escape(entry)}\s*:", line):
                continue
            said = [line.partition("#")[2]]
            j = i - 1
            while j >= 0 and lines[j].strip().startswith("#"):
                said.append(lines[j])
                j -= 1
            if any(re.search(r"comma|several", t, re.I) for t in said):
                found.append(f"{rel(path)}:{i + 1}")
    with open(os.path.join(DEPLOY, "README.md")) as fh:
        text = fh.read()
    for para in re.split(r"\n\s*\n", text):
        for sentence in re.split(r"(?<=[.;:])\s", " ".join(para.split())):
            if entry in sentence and re.search(r"comma", sentence, re.I):
                found.append("deploy/README.md: " + sentence[:80])
    return found


def check_sidecar(n: str, f: str, dname: str, tpl: dict, tg: dict, listen_port: int, raw: dict,
                  env: dict, by_kind: dict, source_dep: dict, auth_on: bool) -> None:
    """What the sidecar component does to the app's pod: nothing it did not ask for."""
    pod, labels = tpl["spec"], tpl["metadata"].get("labels", {}) or {}
    ann = tpl["metadata"].get("annotations", {}) or {}
    configmaps = by_kind.get("ConfigMap", {})

    # Policies add up: a port one of them allows from anywhere is open, whatever the app's own say.
    policies = [p for p in by_kind.get("NetworkPolicy", {}).values()
                if all(labels.get(k) == v for k, v in
                       (p["spec"]["podSelector"].get("matchLabels") or {}).items())]
    rules = [r for p in policies for r in p["spec"].get("ingress", []) or []]
    opened = []
    for r in rules:
        ports = r.get("ports") or []
        if not r.get("from"):
            opened.append("a rule with no `from` (every source)")
        if not ports:
            opened.append("a rule with no `ports` (every port)")
        for pt in ports:
            if pt.get("protocol", "TCP") != "TCP" or pt.get("port") != listen_port \
                    or pt.get("endPort") not in (None, listen_port):
                opened.append(f"{pt.get('protocol', 'TCP')} {pt.get('port')}"
                              f"{'-' + str(pt['endPort']) if 'endPort' in pt else ''}")
    check(f"{n}: the NetworkPolicy allows only toolgate's port {listen_port}, only from named "
          f"peers, and [server.auth] asks for a key",
          bool(rules) and not opened and auth_on,
          f"{len(policies)} policy(ies); opens {', '.join(opened)}" if opened else
          f"{len(rules)} rule(s), auth {'on' if auth_on else 'off'}")

    apps = [c for c in (pod.get("containers") or []) + (pod.get("initContainers") or [])
            if c is not tg]
    app_ports = sorted({p["containerPort"] for c in apps for p in c.get("ports", []) or []})
    check(f"{n}: toolgate's port {listen_port} is none of the app's ports", listen_port not in
          app_ports, f"app ports {app_ports}")

    kept = {k: v for k, v in ((source_dep.get("spec") or {}).get("template", {})
                              .get("metadata", {}).get("annotations") or {}).items()}
    changed = [k for k, v in kept.items() if str(ann.get(k)) != str(v)]
    check(f"{n}: the app's own pod annotations are kept ({len(kept)} in its Deployment)",
          bool(source_dep) and not changed,
          "changed: " + ", ".join(f"{k}={ann.get(k)} (was {kept[k]})" for k in changed)
          if changed else "" if source_dep else "the app's Deployment source was not found")

    key_vars = [v for v in [(raw.get("server", {}).get("auth") or {}).get("api_keys_env")] if v]
    key_vars += [k.get("key_env") for k in (raw.get("server", {}).get("auth") or {})
                 .get("keys", []) or []]
    tg_refs = {e["name"]: (e["valueFrom"]["secretKeyRef"]["name"],
                           e["valueFrom"]["secretKeyRef"]["key"])
               for e in tg.get("env", []) or [] if "secretKeyRef" in (e.get("valueFrom") or {})}
    for c in apps:
        url = expand_env(c, "OPENAI_BASE_URL", configmaps)
        if url is not None:
            check(f"{n}: the app's OPENAI_BASE_URL is toolgate on port {listen_port}",
                  url in (f"http://127.0.0.1:{listen_port}/v1", f"http://localhost:{listen_port}/v1"),
                  f"{c['name']}: {url}")
        ref = next(((e["valueFrom"]["secretKeyRef"]["name"], e["valueFrom"]["secretKeyRef"]["key"])
                    for e in c.get("env", []) or [] if e["name"] == "OPENAI_API_KEY"
                    and "secretKeyRef" in (e.get("valueFrom") or {})), None)
        if ref is None:
            continue
        sec = by_kind.get("Secret", {}).get(ref[0]) or {}
        value = str({**(sec.get("stringData") or {}), **(sec.get("data") or {})}.get(ref[1], ""))
        several = listed_as_several(ref[1])
        accepted = any(tg_refs.get(v) == ref for v in key_vars)
        check(f"{n}: the app sends one key: its OPENAI_API_KEY is the Secret entry {ref[1]}, which "
              f"toolgate accepts and nothing tells to comma-separate",
              accepted and "," not in value and not several,
              "; ".join(([] if accepted else [f"toolgate reads no key from {ref[0]}/{ref[1]}"])
                        + (["the placeholder holds a comma"] if "," in value else [])
                        + [f"told to list several at {w}" for w in several]))


def check_kubernetes(bin_path: str, yamls: dict, docker: dict, sources: dict) -> list:
    live = []
    for path, docs in yamls.items():
        if os.sep + "kubernetes" + os.sep not in path:
            continue
        f = rel(path)
        sidecar = os.sep + "sidecar" in path
        by_kind: dict[str, dict[str, dict]] = {}
        for d in docs:
            by_kind.setdefault(d.get("kind"), {})[d["metadata"]["name"]] = d
        secrets = {n: {**(s.get("stringData") or {}), **(s.get("data") or {})}
                   for n, s in by_kind.get("Secret", {}).items()}
        configmaps = by_kind.get("ConfigMap", {})
        deployments = by_kind.get("Deployment", {})
        check(f"{f}: has a Deployment", bool(deployments))
        for dname, dep in deployments.items():
            tpl = dep["spec"]["template"]
            pod = tpl["spec"]
            ann = tpl["metadata"].get("annotations", {}) or {}
            labels = tpl["metadata"].get("labels", {}) or {}
            containers = [("initContainers", c) for c in pod.get("initContainers", []) or []] + \
                         [("containers", c) for c in pod.get("containers", []) or []]
            tg = [(where, c) for where, c in containers if "toolgate" in c.get("image", "")]
            if not check(f"{f}: Deployment {dname} runs a toolgate container", bool(tg)):
                continue
            for where, c in tg:
                n = f"{f}: {dname}/{c['name']}"
                if where == "initContainers":
                    check(f"{n}: init container is a native sidecar (restartPolicy: Always)",
                          c.get("restartPolicy") == "Always")
                env, from_secret, problems = container_env(c, docker["env"], secrets)
                check(f"{n}: secretKeyRefs name Secrets and keys defined in the file",
                      not problems, "; ".join(problems) or
                      f"{', '.join(from_secret) or 'none'} from Secrets")
                cfg_path, toml_text, src = config_for(c, pod, configmaps, env)
                if not check(f"{n}: config {cfg_path} comes from a ConfigMap", toml_text is not None,
                             src):
                    continue
                ok, eff = toolgate_check(bin_path, toml_text, env)
                if not check(f"{n}: ConfigMap toolgate.toml passes `toolgate check` with the "
                             f"container env", ok, "" if ok else eff):
                    continue
                raw = tomllib.loads(toml_text)
                eff_listen = eff["server"]["listen"]
                listen_port = port_of(eff_listen)
                grace = float(eff["server"]["shutdown_grace_secs"])
                tls = bool(eff["server"].get("tls"))
                scheme = "HTTPS" if tls else "HTTP"
                file_listen = raw.get("server", {}).get("listen")
                check(f"{n}: effective listen binds all interfaces (kubelet probes use the pod IP)",
                      host_of(eff_listen) in ("0.0.0.0", "::"),
                      f"toolgate check says listen = {eff_listen}")
                if file_listen is None:
                    # The sidecar's port is the kustomization's choice: the env alone says it.
                    check(f"{n}: TOOLGATE_SERVER__LISTEN sets the listen address (the ConfigMap "
                          f"sets none)", "TOOLGATE_SERVER__LISTEN" in env,
                          f"env {env.get('TOOLGATE_SERVER__LISTEN', '(unset)')}")
                else:
                    check(f"{n}: ConfigMap listen and TOOLGATE_SERVER__LISTEN agree",
                          port_of(file_listen) == listen_port,
                          f"file {file_listen}, env {env.get('TOOLGATE_SERVER__LISTEN', '(unset)')}")
                cports = [p["containerPort"] for p in c.get("ports", []) or []]
                check(f"{n}: containerPort matches the listen port", listen_port in cports,
                      f"listen {listen_port}, containerPort {cports}")
                if docker["exposed"] and not sidecar:  # a sidecar's port is the app's choice
                    check(f"{n}: listen port matches the Dockerfile's EXPOSE",
                          listen_port in docker["exposed"],
                          f"{listen_port} vs EXPOSE {docker['exposed']}")
                for probe, want in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz"),
                                    ("startupProbe", None)):
                    p = c.get(probe)
                    if p is None:
                        if want:
                            check(f"{n}: {probe} present", False)
                        continue
                    hg = p.get("httpGet") or {}
                    port = resolve_port(hg.get("port"), c)
                    good_path = hg.get("path") == want if want else \
                        hg.get("path") in ("/readyz", "/healthz")
                    check(f"{n}: {probe} GET {hg.get('path')} on port {hg.get('port')} "
                          f"({port}) {hg.get('scheme', 'HTTP')}",
                          good_path and port == listen_port
                          and hg.get("scheme", "HTTP").upper() == scheme,
                          f"want {want or '/readyz or /healthz'} on {listen_port} {scheme}")
                # A sidecar shares the pod's one set of prometheus.io/* annotations with the
                # app, which keeps them: toolgate's own are toolgate/* (deploy/prometheus.yml).
                pre_ann = "toolgate/" if sidecar else "prometheus.io/"
                check(f"{n}: {pre_ann}* annotations scrape {listen_port}/metrics",
                      str(ann.get(pre_ann + "scrape")) == "true"
                      and str(ann.get(pre_ann + "port")) == str(listen_port)
                      and ann.get(pre_ann + "path", "/metrics") == "/metrics"
                      and ann.get(pre_ann + "scheme", "http").upper() == scheme,
                      f"scrape={ann.get(pre_ann + 'scrape')} port={ann.get(pre_ann + 'port')}"
                      f" path={ann.get(pre_ann + 'path')}")
                tgps = pod.get("terminationGracePeriodSeconds", 30)
                pre = prestop_seconds(c)
                check(f"{n}: terminationGracePeriodSeconds > preStop + shutdown_grace_secs",
                      tgps > pre + grace,
                      f"{tgps} > {pre:g} + {grace:g}")
                sc = c.get("securityContext") or {}
                psc = pod.get("securityContext") or {}
                check(f"{n}: securityContext runAsNonRoot, readOnlyRootFilesystem, "
                      f"no privilege escalation",
                      (sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is True)
                      and sc.get("readOnlyRootFilesystem") is True
                      and sc.get("allowPrivilegeEscalation") is False)
                res = c.get("resources") or {}
                check(f"{n}: resource requests and limits set",
                      {"cpu", "memory"} <= set((res.get("requests") or {}))
                      and "memory" in (res.get("limits") or {}),
                      f"requests {res.get('requests')}, limits {res.get('limits')}")
                check(f"{n}: enableServiceLinks: false (no injected TOOLGATE_* variables)",
                      pod.get("enableServiceLinks") is False)
                wanted = [v for v in (p.get("api_key_env") for p in raw.get("providers", []))
                          if v]
                auth_table = raw.get("server", {}).get("auth") or {}
                auth = auth_table.get("api_keys_env") or auth_table.get("keys")
                wanted += [v for v in [auth_table.get("api_keys_env"),
                                       auth_table.get("admin_keys_env")] if v]
                wanted += [k["key_env"] for k in auth_table.get("keys", [])]
                password = (raw.get("store") or {}).get("password_env")
                wanted += [password] if password else []
                if os.sep + "gateway" in path:
                    store_url = (raw.get("store") or {}).get("url", "")
                    check(f"{n}: the shared gateway keeps its store in PostgreSQL, offers MCP "
                          f"servers and authenticates clients",
                          store_url.startswith("postgres") and bool(raw.get("mcp_servers"))
                          and auth is not None,
                          f"store {store_url or '(none)'}, "
                          f"{len(raw.get('mcp_servers', []))} MCP server(s)")
                if sidecar:
                    check_sidecar(n, f, dname, tpl, c, listen_port, raw, env, by_kind,
                                  sources.get(path, {}).get(dname, {}), auth is not None)
                check(f"{n}: every api_key_env comes from a Secret",
                      all(v in from_secret for v in wanted), f"{', '.join(wanted) or 'none'}")
                live.append((n, toml_text, env, grace))
                # Services that select this pod reach the container port.
                for sname, svc in by_kind.get("Service", {}).items():
                    sel = svc["spec"].get("selector") or {}
                    if not sel or any(labels.get(k) != v for k, v in sel.items()):
                        continue
                    for sp in svc["spec"]["ports"]:
                        tp = resolve_port(sp.get("targetPort", sp["port"]), c)
                        check(f"{f}: Service {sname} port {sp['port']} -> targetPort "
                              f"{sp.get('targetPort')} is the listen port", tp == listen_port,
                              f"resolves to {tp}, listen {listen_port}")
        if os.sep + "gateway" in path:
            check(f"{f}: a HorizontalPodAutoscaler and a PodDisruptionBudget",
                  bool(by_kind.get("HorizontalPodAutoscaler"))
                  and bool(by_kind.get("PodDisruptionBudget")))
        for hname, hpa in by_kind.get("HorizontalPodAutoscaler", {}).items():
            ref = hpa["spec"]["scaleTargetRef"]
            cpu = [m for m in hpa["spec"].get("metrics", [])
                   if m.get("type") == "Resource" and m["resource"]["name"] == "cpu"]
            check(f"{f}: HPA {hname} is autoscaling/v2 on CPU and targets Deployment "
                  f"{ref['name']}",
                  hpa["apiVersion"] == "autoscaling/v2" and bool(cpu)
                  and ref["kind"] == "Deployment" and ref["name"] in deployments)
    return live


def check_compose(yamls: dict, docker: dict) -> None:
    path = os.path.join(DEPLOY, "docker-compose.yml")
    if path not in yamls:
        report("FAIL", "deploy/docker-compose.yml: present and parses")
        return
    compose = yamls[path][0]
    services = compose.get("services", {})
    tg = services.get("toolgate", {})
    build = tg.get("build", {})
    ctx = os.path.normpath(os.path.join(DEPLOY, build.get("context", ".")))
    dockerfile = os.path.normpath(os.path.join(ctx, build.get("dockerfile", "Dockerfile")))
    check("docker-compose.yml: toolgate builds deploy/Dockerfile with the repo root as context",
          ctx == ROOT and dockerfile == DOCKERFILE, f"context {rel(ctx)}, dockerfile "
          f"{rel(dockerfile)}")
    env = dict(docker["env"])
    e = tg.get("environment", {})
    if isinstance(e, list):
        e = dict(x.split("=", 1) for x in e)
    env.update({k: str(v) for k, v in (e or {}).items()})
    listen = env.get("TOOLGATE_SERVER__LISTEN", "")
    port = port_of(listen) if listen else None
    published = [str(p).rsplit(":", 1)[-1].split("/")[0] for p in tg.get("ports", [])]
    check("docker-compose.yml: published container port is the listen port",
          port is not None and str(port) in published and port in docker["exposed"],
          f"listen {listen}, ports {tg.get('ports')}")
    sgp = str(tg.get("stop_grace_period", "10s"))
    m = re.fullmatch(r"(?:(\d+)m)?(?:(\d+)s)?", sgp)
    secs = (int(m.group(1) or 0) * 60 + int(m.group(2) or 0)) if m else 0
    check("docker-compose.yml: stop_grace_period > shutdown_grace_secs",
          secs > docker["grace"], f"{sgp} > {docker['grace']:g}s")
    missing = []
    for name, svc in services.items():
        for v in svc.get("volumes", []) or []:
            src = v.split(":")[0] if isinstance(v, str) else v.get("source", "")
            if src.startswith((".", "/")) and not os.path.exists(os.path.join(DEPLOY, src)):
                missing.append(f"{name}: {src}")
    check("docker-compose.yml: every bind-mounted file exists", not missing, ", ".join(missing))

    prom_path = os.path.join(DEPLOY, "prometheus.yml")
    prom = (yamls.get(prom_path) or [{}])[0]
    jobs = [j for j in prom.get("scrape_configs", [])
            if any(f"toolgate:{port}" in t for sc in j.get("static_configs", [])
                   for t in sc.get("targets", []))]
    check("prometheus.yml: a job scrapes toolgate:<listen port> at /metrics",
          bool(jobs) and all(j.get("metrics_path", "/metrics") == "/metrics" for j in jobs),
          f"target toolgate:{port}")


def check_systemd(bin_path: str, docker: dict) -> None:
    path = os.path.join(DEPLOY, "systemd", "toolgate.service")
    with open(path) as f:
        text = f.read()
    keys: dict[str, list[str]] = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")) and "=" in line:
            k, v = line.split("=", 1)
            keys.setdefault(k.strip(), []).append(v.strip())
    exec_start = " ".join(keys.get("ExecStart", []))
    m = re.search(r"--config[ =](\S+)", exec_start)
    check("toolgate.service: ExecStart serves --config", m is not None, exec_start)
    # The unit's file is installed from config/toolgate.toml (README).
    with open(os.path.join(ROOT, "config", "toolgate.toml")) as f:
        ok, eff = toolgate_check(bin_path, f.read(), {})
    grace = float(eff["server"]["shutdown_grace_secs"]) if ok else docker["grace"]
    t = (keys.get("TimeoutStopSec") or ["90s"])[-1]
    mt = re.fullmatch(r"(?:(\d+)min)?\s*(?:(\d+)s?)?", t)
    secs = (int(mt.group(1) or 0) * 60 + int(mt.group(2) or 0)) if mt else 0
    check("toolgate.service: TimeoutStopSec > shutdown_grace_secs", secs > grace,
          f"{t} > {grace:g}s")
    check("toolgate.service: KillSignal=SIGTERM, Restart=on-failure, ExecReload sends SIGHUP",
          keys.get("KillSignal", ["SIGTERM"])[-1] == "SIGTERM"
          and keys.get("Restart", [""])[-1] == "on-failure"
          and any("-HUP $MAINPID" in v for v in keys.get("ExecReload", [])))
    hard = {"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
            "PrivateTmp": "yes", "CapabilityBoundingSet": ""}
    bad = [k for k, v in hard.items() if keys.get(k, [None])[-1] != v]
    check("toolgate.service: StateDirectory=toolgate, the one place ProtectSystem=strict lets a "
          "SQLite store write (/var/lib/toolgate)", keys.get("StateDirectory", [""])[-1] == "toolgate")
    check("toolgate.service: hardening (NoNewPrivileges, ProtectSystem=strict, ...)",
          not bad and ("DynamicUser" in keys or "User" in keys), ", ".join(bad))
    analyze = shutil.which("systemd-analyze")
    if not analyze:
        report("skip", "toolgate.service: systemd-analyze verify", "systemd-analyze not installed")
        return
    with tempfile.TemporaryDirectory() as d:
        unit = os.path.join(d, "toolgate.service")
        with open(unit, "w") as f:
            f.write(text.replace("/usr/local/bin/toolgate", os.path.abspath(bin_path)))
        proc = subprocess.run([analyze, "verify", unit], capture_output=True, text=True)
        out = (proc.stdout + proc.stderr).strip()
        check("toolgate.service: systemd-analyze verify", proc.returncode == 0 and not out,
              out.replace("\n", " | "))


def check_dashboard(jsons: dict) -> None:
    path = os.path.join(DEPLOY, "grafana", "toolgate-dashboard.json")
    dash = jsons.get(path)
    if dash is None:
        report("FAIL", "grafana dashboard: present and parses")
        return
    with open(os.path.join(ROOT, "src", "metrics.rs")) as f:
        src = f.read()
    consts = dict(re.findall(r'pub const (\w+): &str = "(toolgate_\w+)";', src))
    hist = {consts[c] for c in re.findall(r"describe_histogram!\(\s*(\w+)", src) if c in consts}
    known = set(consts.values()) | {h + s for h in hist for s in ("_bucket", "_sum", "_count")}
    panels = [p for p in dash.get("panels", []) if p.get("type") != "row"]
    # Tempo panels hold TraceQL, not PromQL.
    exprs = [t["expr"] for p in panels for t in p.get("targets", []) if "expr" in t]
    used = set(re.findall(r"\btoolgate_\w+", " ".join(exprs)))
    check("grafana dashboard: schemaVersion >= 36 and every panel has a query",
          dash.get("schemaVersion", 0) >= 36 and all(p.get("targets") for p in panels),
          f"schemaVersion {dash.get('schemaVersion')}, {len(panels)} panels")
    check("grafana dashboard: every metric queried is exported (src/metrics.rs)",
          used <= known, "unknown: " + ", ".join(sorted(used - known)) if used - known
          else f"{len(used)} series names")
    quant = set(re.findall(r"histogram_quantile\([^,]+,.*?(toolgate_\w+)_bucket", " ".join(exprs)))
    check("grafana dashboard: histogram_quantile only over histograms", quant <= hist,
          ", ".join(sorted(quant - hist)))
    for needed in ("toolgate_requests_total", "toolgate_request_duration_seconds_bucket",
                   "toolgate_upstream_ttfb_seconds_bucket", "toolgate_tool_calls_total",
                   "toolgate_invalid_tool_blocks_total", "toolgate_repairs_total",
                   "toolgate_active_requests", "toolgate_active_streams",
                   "toolgate_gateway_tool_calls_total", "toolgate_mcp_server_up",
                   "toolgate_store_queue_depth", "toolgate_store_dropped_total",
                   "toolgate_upstream_attempts_total", "toolgate_upstream_target_up",
                   "toolgate_tokens_total", "toolgate_trace_spans_total",
                   "toolgate_time_to_first_token_seconds_bucket", "toolgate_cost_usd_total",
                   "toolgate_rate_limited_total", "toolgate_limiter_errors_total"):
        if needed not in used:
            check(f"grafana dashboard: a panel shows {needed}", False)
    variables = {v.get("name") for v in dash.get("templating", {}).get("list", [])}
    check("grafana dashboard: a tenant variable filters the request panels",
          "tenant" in variables and any('tenant=~"$tenant"' in e for e in exprs))


SIDECAR_PORT_MAP = "toolgate-sidecar-port"
OTHER_PORT = 18181


def overlay_sources(overlay: str) -> dict[str, dict]:
    """The Deployments an overlay lists as files of its own, by name, as written."""
    with open(os.path.join(overlay, "kustomization.yaml")) as fh:
        kust = yaml.safe_load(fh) or {}
    found = {}
    for r in kust.get("resources", []) or []:
        path = os.path.join(overlay, r)
        if os.path.isfile(path):
            with open(path) as fh:
                for d in yaml.safe_load_all(fh):
                    if d and d.get("kind") == "Deployment":
                        found[d["metadata"]["name"]] = d
    return found


def with_other_port(kubectl: str, overlay: str):
    """The sidecar overlay rendered with another port chosen: (docs, None) or (None, why)."""
    with open(os.path.join(overlay, "kustomization.yaml")) as fh:
        kust = yaml.safe_load(fh) or {}
    gens = [g for g in kust.get("configMapGenerator", []) or []
            if g.get("name") == SIDECAR_PORT_MAP]
    if not gens:
        return None, f"the kustomization generates no ConfigMap {SIDECAR_PORT_MAP}"
    gens[0]["literals"] = [lit for lit in gens[0].get("literals", []) or []
                           if not lit.startswith("port=")] + [f"port={OTHER_PORT}"]
    with tempfile.TemporaryDirectory() as d:
        # kustomize takes no absolute component path: relative to the copy's directory.
        for field in ("resources", "components"):
            kust[field] = [os.path.relpath(os.path.join(overlay, r), d)
                           for r in kust.get(field, []) or []]
        with open(os.path.join(d, "kustomization.yaml"), "w") as fh:
            yaml.safe_dump(kust, fh)
        proc = subprocess.run([kubectl, "kustomize", "--load-restrictor", "LoadRestrictionsNone", d],
                              capture_output=True, text=True)
    if proc.returncode != 0:
        return None, proc.stderr.strip()[-300:]
    return [d for d in yaml.safe_load_all(proc.stdout) if d is not None], None


def render_overlays() -> tuple[dict[str, list], dict[str, dict]]:
    """`kubectl kustomize` of every overlay, validated by `kubernetes-validate --strict`, and the
    Deployments each lists as its own files."""
    out, sources = {}, {}
    overlays = sorted(glob.glob(os.path.join(DEPLOY, "kubernetes", "overlays", "*", "")))
    component = os.path.join(DEPLOY, "kubernetes", "components", "sidecar", "kustomization.yaml")
    sidecar = os.path.join(DEPLOY, "kubernetes", "overlays", "sidecar", "kustomization.yaml")
    takes = False
    if os.path.exists(component) and os.path.exists(sidecar):
        with open(component) as f, open(sidecar) as g:
            takes = yaml.safe_load(f).get("kind") == "Component" and \
                "../../components/sidecar" in (yaml.safe_load(g).get("components") or [])
    check("kubernetes: the sidecar is a Component an existing Deployment takes "
          "(overlays/sidecar: a sample app taking it)", takes)
    check("kubernetes: overlays sidecar and gateway exist",
          {os.path.basename(o.rstrip(os.sep)) for o in overlays} >= {"sidecar", "gateway"},
          ", ".join(rel(o) for o in overlays))
    kubectl = shutil.which("kubectl")
    if not check("kubernetes: kubectl is installed (it renders the overlays)", kubectl is not None):
        return out, sources
    for overlay in overlays:
        name = rel(overlay.rstrip(os.sep))
        sources[overlay] = overlay_sources(overlay)
        proc = subprocess.run([kubectl, "kustomize", overlay], capture_output=True, text=True)
        if not check(f"{name}: `kubectl kustomize` renders it", proc.returncode == 0,
                     proc.stderr.strip()[-300:]):
            continue
        docs = [d for d in yaml.safe_load_all(proc.stdout) if d is not None]
        out[overlay] = docs
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            f.write(proc.stdout)
            rendered = f.name
        try:
            v = subprocess.run([sys.executable, "-m", "kubernetes_validate", "--strict",
                                "--quiet", rendered],
                               capture_output=True, text=True)
            check(f"{name}: `kubernetes-validate --strict` accepts all {len(docs)} resources",
                  v.returncode == 0, (v.stdout + v.stderr).strip()[-500:])
        finally:
            os.unlink(rendered)
        if os.path.basename(overlay.rstrip(os.sep)) == "sidecar":
            # The port is the app's choice: another one renders, and every check below holds
            # for it too (the rendering is checked as one more overlay).
            docs, why = with_other_port(kubectl, overlay)
            if check(f"{name}: the kustomization chooses toolgate's port (ConfigMap "
                     f"{SIDECAR_PORT_MAP}), and port {OTHER_PORT} renders", docs is not None,
                     why or ""):
                key = os.path.join(overlay, f"port-{OTHER_PORT}")
                out[key] = docs
                sources[key] = sources[overlay]
    return out, sources


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    bin_path = os.path.abspath(ap.parse_args().bin)
    skip_release = os.environ.get("TOOLGATE_SKIP_RELEASE_BUILD") == "1"

    yamls, jsons = parse_files()
    docker = check_dockerfile(bin_path, skip_release)
    # Kubernetes: what each overlay renders to, not the base's parts.
    kube, sources = render_overlays()
    live = check_kubernetes(bin_path, kube, docker, sources)
    check_compose(yamls, docker)
    check_systemd(bin_path, docker)
    check_dashboard(jsons)
    seen = set()
    for name, text, env, grace in live:
        if text in seen:
            continue
        seen.add(text)
        live_run(bin_path, name, text, env, grace, ["/healthz", "/readyz"], "/metrics")

    print(f"{'FAILED' if failures else 'passed'}: {failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
