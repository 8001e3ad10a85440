//! The real `toolgate` binary: config validation, offline commands, serving
//! from `TOOLGATE_CONFIG`, and SIGTERM draining an open stream.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::binary::run_with_input;

const BIN: &str = env!("CARGO_BIN_EXE_toolgate");

fn temp_file(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("toolgate-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn check_names_a_misspelled_key_and_fails() {
    let path = temp_file(
        "bad.toml",
        "[server]\nlisten = \"127.0.0.1:1\"\n\n[[providers]]\nname = \"a\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodles = [\"x\"]\n",
    );
    let out = Command::new(BIN)
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("providers[0].modles"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one-line reason: {err}");
}

#[test]
fn check_prints_the_effective_config_with_env_overrides_and_redaction() {
    let path = temp_file(
        "good.toml",
        "[[providers]]\nname = \"a\"\nbase_url = \"http://127.0.0.1:9/v1\"\nheaders = { \"X-Api-Key\" = \"sk-secret\" }\n",
    );
    let out = Command::new(BIN)
        .args(["check", "--config"])
        .arg(&path)
        .env("TOOLGATE_SERVER__LISTEN", "0.0.0.0:9999")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("0.0.0.0:9999"), "{text}");
    assert!(!text.contains("sk-secret"), "{text}");
    assert!(text.contains("fallback_max_calls = 3"), "{text}");
}

#[test]
fn missing_config_file_is_an_error() {
    let out = Command::new(BIN)
        .env("TOOLGATE_CONFIG", "/nonexistent/toolgate.toml")
        .arg("check")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/toolgate.toml"));
}

#[test]
fn render_and_parse_work_offline() {
    let request = r#"{"model":"demo","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"GetWeather","parameters":{"type":"object","properties":{"location":{"type":"string"}},"required":["location"]}}}]}"#;
    let out = run_with_input(
        Command::new(BIN).args(["render", "--provider", "demo"]),
        request.as_bytes(),
    );
    assert!(out.status.success());
    let rendered: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(rendered.get("tools").is_none());
    assert!(
        rendered["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("## GetWeather")
    );

    let tools = temp_file(
        "tools.json",
        &serde_json::from_str::<serde_json::Value>(request).unwrap()["tools"].to_string(),
    );
    let out = run_with_input(
        Command::new(BIN)
            .args(["parse", "--syntax", "tag", "--tools"])
            .arg(&tools),
        b"Let me look.\n<GetWeather>\n```json\n{\"location\": \"Paris\"}\n```\n</GetWeather>\n",
    );
    let parsed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        parsed["tool_calls"][0]["function"]["arguments"],
        "{\"location\":\"Paris\"}"
    );
    assert_eq!(parsed["content"], "Let me look.\n\n");
}

/// `toolgate check | head -2` and `toolgate parse … | head -1`: the reader
/// has gone before the output is written. The command ends quietly (exit 0,
/// nothing on stderr but its own lines), not with a panic and a backtrace.
#[test]
fn commands_whose_reader_left_exit_quietly() {
    let tools = temp_file(
        "pipe-tools.json",
        r#"[{"type":"function","function":{"name":"GetWeather"}}]"#,
    );
    let runs: [(&[&str], &[u8]); 2] = [
        (&["check"], b""),
        (
            &[
                "parse",
                "--syntax",
                "tag",
                "--tools",
                tools.to_str().unwrap(),
            ],
            b"<GetWeather>\n{}\n</GetWeather>\n",
        ),
    ];
    for (args, input) in runs {
        // A pipe whose reading end is closed before the command starts: its
        // first write fails with EPIPE, deterministically.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let mut child = Command::new(BIN)
            .args(args)
            .env("RUST_BACKTRACE", "1")
            .stdin(Stdio::piped())
            .stdout(writer)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input).unwrap();
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {:?} {err}", out.status);
        assert!(
            !err.contains("panicked") && !err.contains("Broken pipe"),
            "{args:?}: {err}"
        );
    }
}

/// Serves the embedded default on a free port, opens a slow demo stream,
/// sends SIGTERM: the stream must still end with `[DONE]` and the process exit 0.
#[test]
fn sigterm_drains_an_open_stream_and_exits_zero() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new(BIN)
        .env("TOOLGATE_SERVER__LISTEN", format!("127.0.0.1:{port}"))
        // toolgate's own non-config variables must not be read as config keys.
        .env("TOOLGATE_LOG", "info")
        .env("TOOLGATE_LOG_FORMAT", "json")
        .env_remove("TOOLGATE_CONFIG")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let logs = std::thread::spawn(move || stderr.lines().map_while(Result::ok).collect::<Vec<_>>());
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut stream = loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => break s,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => panic!("gateway did not start: {e}"),
        }
    };
    // A long reply: the demo echoes the user text, 16 chars per 10 ms chunk.
    let body = format!(
        r#"{{"model":"demo","stream":true,"messages":[{{"role":"user","content":"{}"}}]}}"#,
        "word ".repeat(40)
    );
    write!(stream, "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len()).unwrap();
    let mut first = [0u8; 64];
    stream.read_exact(&mut first).unwrap();
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let mut rest = Vec::new();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.read_to_end(&mut rest).unwrap();
    let text = String::from_utf8_lossy(&rest).into_owned();
    if !text.contains("data: [DONE]") {
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "stream cut during drain: {text:?}\nlogs: {:?}",
            logs.join().unwrap()
        );
    }
    assert!(
        text.contains("data: [DONE]"),
        "stream cut during drain: {text}"
    );
    let exit = child.wait().unwrap();
    assert!(
        exit.success(),
        "exit status {exit:?}; logs: {:?}",
        logs.join().unwrap()
    );
}

#[test]
fn env_overrides_apply_strays_are_ignored_and_typos_rejected() {
    let run = |vars: &[(&str, &str)]| {
        let mut c = Command::new(BIN);
        c.arg("check").env_remove("TOOLGATE_CONFIG");
        for (k, v) in vars {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    // Kubernetes service links and unrelated TOOLGATE_* variables are not config keys.
    let out = run(&[
        ("TOOLGATE_SERVER__LISTEN", "0.0.0.0:18089"),
        // The embedded config keeps transcripts; served open, knowingly.
        ("TOOLGATE_SERVER__ALLOW_OPEN_STORE", "true"),
        ("TOOLGATE_SERVICE_HOST", "10.0.0.1"),
        ("TOOLGATE_SERVER_SERVICE_PORT", "80"),
        ("TOOLGATE_LOG", "debug"),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("listen = \"0.0.0.0:18089\""));
    // Traces can be turned on from the environment (the image's config has none).
    let out = run(&[
        ("TOOLGATE_SERVER__ALLOW_OPEN_STORE", "true"),
        ("TOOLGATE_TELEMETRY__OTLP_ENDPOINT", "http://tempo:4318"),
        ("TOOLGATE_TELEMETRY__SAMPLE_RATIO", "0.25"),
    ]);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        shown.contains("[telemetry]")
            && shown.contains("otlp_endpoint = \"http://tempo:4318\"")
            && shown.contains("sample_ratio = 0.25"),
        "{shown}"
    );
    let out = run(&[
        ("TOOLGATE_SERVER__ALLOW_OPEN_STORE", "true"),
        ("TOOLGATE_TELEMETRY__OTLP_ENDPOINT", "http://tempo:4318"),
        ("TOOLGATE_TELEMETRY__SAMPLE_RATIO", "2"),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("telemetry.sample_ratio") && err.contains("TOOLGATE_TELEMETRY__SAMPLE_RATIO"),
        "{err}"
    );
    // An error on a key the environment set names the variable to fix.
    for (var, value, key) in [
        ("TOOLGATE_SERVER__LISTN", "0.0.0.0:1", "server.listn"),
        ("TOOLGATE_SERVER__WORKERS", "lots", "server.workers"),
    ] {
        let out = run(&[(var, value)]);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(key) && err.contains(var), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
}

/// `TOOLGATE_PROVIDERS__<name>__<KEY>` changes the named provider's keys,
/// nested ones too; an error on a key it set names the variable, and one
/// naming no provider is an error of its own.
#[test]
fn provider_overrides_name_their_provider() {
    let run = |vars: &[(&str, &str)]| {
        let mut c = Command::new(BIN);
        c.arg("check")
            .env_remove("TOOLGATE_CONFIG")
            .env("TOOLGATE_SERVER__ALLOW_OPEN_STORE", "true");
        for (k, v) in vars {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    let out = run(&[
        ("TOOLGATE_PROVIDERS__demo__MODELS", r#"["demo", "demo-2"]"#),
        ("TOOLGATE_PROVIDERS__demo__TOOLS__SYNTAX", "bracket"),
        ("TOOLGATE_PROVIDERS__demo__RETRY__ATTEMPTS", "2"),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("\"demo-2\""), "{stdout}");
    assert!(stdout.contains("syntax = \"bracket\""), "{stdout}");
    assert!(stdout.contains("attempts = 2"), "{stdout}");
    let out = run(&[("TOOLGATE_PROVIDERS__demo__TOOLS__MODE", "sideways")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("providers[0].tools.mode")
            && stderr.contains("TOOLGATE_PROVIDERS__demo__TOOLS__MODE"),
        "{stderr}"
    );
    let out = run(&[(
        "TOOLGATE_PROVIDERS__nobody__BASE_URL",
        "http://127.0.0.1:1/v1",
    )]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("TOOLGATE_PROVIDERS__nobody__BASE_URL: names no configured provider"),
        "{stderr}"
    );
}

/// A store or tool servers on a non-loopback address without `[server.auth]`
/// is refused at start and by `toolgate check`, with one line naming the
/// fix; `allow_open_store` accepts it, and `[server.auth]` needs neither.
#[test]
fn an_open_store_on_the_network_is_refused_unless_asked_for() {
    let dir = std::env::temp_dir().join(format!("toolgate-open-store-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, extra: &str| {
        let path = dir.join(name);
        std::fs::write(
            &path,
            format!(
                "{extra}[[providers]]\nname = \"p\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodels = [\"*\"]\n"
            ),
        )
        .unwrap();
        path
    };
    let check = |path: &std::path::Path, listen: &str, env: &[(&str, &str)]| {
        let mut c = Command::new(BIN);
        c.args(["check", "--config"]).arg(path);
        c.env("TOOLGATE_SERVER__LISTEN", listen);
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    let store = write("store.toml", "[store]\nurl = \"sqlite::memory:\"\n");
    let tools = write(
        "tools.toml",
        "[[http_tools]]\nname = \"t\"\nurl = \"http://127.0.0.1:9/\"\n",
    );
    for path in [&store, &tools] {
        let out = check(path, "0.0.0.0:8080", &[]);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("server.listen")
                && err.contains("[server.auth]")
                && err.contains("allow_open_store"),
            "{err}"
        );
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        // Loopback is fine, so is asking for it, so is a key.
        assert!(check(path, "127.0.0.1:8080", &[]).status.success());
        assert!(check(path, "[::1]:8080", &[]).status.success());
        let allowed = check(
            path,
            "0.0.0.0:8080",
            &[("TOOLGATE_SERVER__ALLOW_OPEN_STORE", "true")],
        );
        assert!(allowed.status.success());
    }
    let keyed = write(
        "keyed.toml",
        "[server.auth]\napi_keys_env = \"PATH\"\n[store]\nurl = \"sqlite::memory:\"\n",
    );
    assert!(check(&keyed, "0.0.0.0:8080", &[]).status.success());
    // The server refuses to start, too.
    let out = Command::new(BIN)
        .arg("--config")
        .arg(&store)
        .env("TOOLGATE_SERVER__LISTEN", "0.0.0.0:0")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("allow_open_store"));
}

/// `toolgate tools` with an HTTP tool nothing listens for: exit 1 naming
/// it (the listing is still printed); a one-shot command says nothing of
/// retrying.
#[test]
fn tools_names_a_dead_http_tool_and_fails() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let path = temp_file(
        "dead-tool.toml",
        &format!(
            "[[providers]]\nname = \"a\"\nbase_url = \"http://127.0.0.1:9/v1\"\n[[http_tools]]\nname = \"lookup\"\nurl = \"http://127.0.0.1:{port}/lookup\"\n"
        ),
    );
    let out = Command::new(BIN)
        .args(["tools", "--wait", "2", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("http tool `lookup`"), "{err}");
    assert!(!err.contains("retrying"), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"lookup\""));
}
