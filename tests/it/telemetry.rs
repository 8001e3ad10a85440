//! OpenTelemetry traces, checked against a real OTLP/HTTP receiver
//! (`tests/otlp/receiver.py`, decoding each export with the official
//! `opentelemetry-proto` bindings) and a real streamable-HTTP MCP server
//! (`tests/otlp/mcp_traced.py`, from the `mcp` package) that answers with the
//! trace context its call arrived with. The gateway is the real binary: its
//! tracer is process-wide.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::agent::{calls_sse, last_role, sse, stream_request, text_sse};
use common::binary::Binary;
use common::installed::python;
use common::{Mock, Reply, TestConfig, get, send};
use http::Request;
use http_body_util::Full;
use serde_json::{Value, json};

/// The client's trace and span: toolgate's server span is the span's child.
const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

fn here(path: &str) -> String {
    format!("{}/tests/otlp/{path}", env!("CARGO_MANIFEST_DIR"))
}

struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Receiver {
    _process: Process,
    port: u16,
}

impl Receiver {
    fn start() -> Receiver {
        let mut child = Command::new(python())
            .arg(here("receiver.py"))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("the receiver printed {line:?}"));
        Receiver {
            _process: Process(child),
            port,
        }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    async fn all(&self) -> Vec<Value> {
        get(&format!("{}/spans", self.endpoint()))
            .await
            .json()
            .as_array()
            .unwrap()
            .clone()
    }

    /// The spans of `trace`, once there are at least `n` (10 s at most).
    async fn trace(&self, trace: &str, n: usize) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let spans: Vec<Value> = self
                .all()
                .await
                .into_iter()
                .filter(|s| s["trace_id"] == trace)
                .collect();
            if spans.len() >= n {
                return spans;
            }
            assert!(
                Instant::now() < deadline,
                "trace {trace}: {} spans of {n} arrived: {spans:#?}",
                spans.len()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The streamable-HTTP MCP server whose tool `trace_context` answers
/// `{"header": traceparent header, "meta": _meta.traceparent}`.
async fn mcp_traced() -> (Process, u16) {
    let port = common::free_port();
    let child = Command::new(python())
        .arg(here("mcp_traced.py"))
        .arg(port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("python starts");
    let process = Process(child);
    for _ in 0..300 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return (process, port);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the MCP server did not listen on {port}");
}

fn telemetry(receiver: &str, extra: &str) -> String {
    format!("[telemetry]\notlp_endpoint = \"{receiver}\"\n{extra}\n")
}

fn traceparent(request: &common::Recorded) -> Option<String> {
    request
        .headers
        .get("traceparent")
        .map(|v| v.to_str().unwrap().to_owned())
}

async fn post_traced(url: &str, body: String, traceparent: Option<&str>) -> common::Collected {
    let mut req = Request::post(url).header("content-type", "application/json");
    if let Some(tp) = traceparent {
        req = req.header("traceparent", tp);
    }
    send(req.body(Full::new(Bytes::from(body))).unwrap()).await
}

fn named<'a>(spans: &'a [Value], name: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["name"] == name).collect()
}

fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
}

/// One gateway-tools answer (two rounds, an MCP call and an HTTP tool call)
/// is one trace under the client's span: a server span, a `chat` span per
/// round with the GenAI attributes, an `execute_tool` span per call, and
/// every hop received the `traceparent` of the span that made it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_tools_answer_is_one_trace_and_every_hop_continues_it() {
    let receiver = Receiver::start();
    let (_mcp, mcp_port) = mcp_traced().await;
    let upstream = Mock::start(|r| {
        if last_role(r) == "tool" {
            sse(text_sse("Both answered."))
        } else {
            sse(calls_sse(&[
                ("trace_context", "{}"),
                ("lookup", r#"{"location":"Oslo"}"#),
            ]))
        }
    })
    .await;
    let tool = Mock::start(|_| Reply::json("\"sunny\"")).await;
    let config = TestConfig::new()
        .raw(&telemetry(&receiver.endpoint(), ""))
        .raw(&format!(
            "[[mcp_servers]]\nname = \"traced\"\nurl = \"http://127.0.0.1:{mcp_port}/mcp\"\n\n[[http_tools]]\nname = \"lookup\"\ndescription = \"Looks up a place\"\nurl = \"{}/lookup\"\nparameters = {{ type = \"object\", properties = {{ location = {{ type = \"string\" }} }} }}\n\n",
            tool.url()
        ))
        .raw("[store]\nurl = \"sqlite::memory:\"\nrecord = \"all\"\n")
        .agent(&upstream.url(), "passthrough", &["traced", "lookup"], "")
        .toml();
    let gateway = Binary::start(&config, &[("TOOLGATE_LOG", "info")]);
    // The MCP server is listed once it is up.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !get(&gateway.url("/readyz"))
        .await
        .text()
        .contains("up, 1 tools")
    {
        assert!(Instant::now() < deadline, "the MCP server never came up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let answer = post_traced(
        &gateway.url("/v1/chat/completions"),
        stream_request(json!({})),
        Some(&format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01")),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert!(
        answer.text().contains("Both answered."),
        "{}",
        answer.text()
    );

    let spans = receiver.trace(CLIENT_TRACE, 5).await;
    assert_eq!(spans.len(), 5, "{spans:#?}");
    assert!(spans.iter().all(|s| s["service"] == "toolgate"));
    let server = named(&spans, "POST /v1/chat/completions");
    assert_eq!(server.len(), 1, "{spans:#?}");
    let server = server[0];
    assert_eq!(server["kind"], "SPAN_KIND_SERVER");
    assert_eq!(server["parent_span_id"], CLIENT_SPAN);
    let server_id = server["span_id"].as_str().unwrap();
    let attrs = &server["attributes"];
    assert_eq!(attrs["http.response.status_code"], 200);
    assert_eq!(attrs["http.request.method"], "POST");
    assert_eq!(attrs["gen_ai.provider.name"], "up");
    assert_eq!(attrs["gen_ai.request.model"], "m");
    assert_eq!(attrs["toolgate.tenant"], "anonymous");

    // A chat span per round, children of the server span, in order.
    let mut chats = named(&spans, "chat m");
    chats.sort_by_key(|s| s["start_ns"].as_u64());
    assert_eq!(chats.len(), 2, "{spans:#?}");
    for (chat, finish) in chats.iter().zip(["tool_calls", "stop"]) {
        assert_eq!(chat["kind"], "SPAN_KIND_CLIENT");
        assert_eq!(chat["parent_span_id"], server_id);
        let a = &chat["attributes"];
        assert_eq!(a["gen_ai.operation.name"], "chat");
        assert_eq!(a["gen_ai.provider.name"], "up");
        assert_eq!(a["gen_ai.request.model"], "m");
        assert_eq!(a["server.address"], "127.0.0.1");
        assert_eq!(a["server.port"], upstream.addr.port());
        assert_eq!(a["http.response.status_code"], 200);
        assert_eq!(a["gen_ai.response.finish_reasons"], json!([finish]));
        assert_eq!(a["gen_ai.usage.input_tokens"], 10);
        assert_eq!(a["gen_ai.usage.output_tokens"], 5);
        assert!(
            a.get("gen_ai.input.messages").is_none(),
            "content is off by default"
        );
        assert_eq!(chat["status"], "STATUS_CODE_UNSET");
    }
    assert_eq!(chats[0]["attributes"]["gen_ai.response.model"], "m");
    assert_eq!(
        chats[1]["attributes"]["gen_ai.response.model"],
        common::UP_MODEL
    );
    // Each upstream request carried its own chat span as the parent.
    let sent: Vec<Option<String>> = upstream
        .requests
        .lock()
        .unwrap()
        .iter()
        .map(traceparent)
        .collect();
    let want: Vec<Option<String>> = chats
        .iter()
        .map(|c| {
            Some(format!(
                "00-{CLIENT_TRACE}-{}-01",
                c["span_id"].as_str().unwrap()
            ))
        })
        .collect();
    assert_eq!(sent, want);

    // An execute_tool span per call, under the server span.
    let first_round = upstream.requests.lock().unwrap()[1].json();
    let call_ids: Vec<&str> = first_round["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["tool_call_id"].as_str().unwrap())
        .collect();
    let mcp = named(&spans, "execute_tool trace_context");
    let http = named(&spans, "execute_tool lookup");
    assert_eq!((mcp.len(), http.len()), (1, 1), "{spans:#?}");
    for (span, name) in [(mcp[0], "trace_context"), (http[0], "lookup")] {
        assert_eq!(span["kind"], "SPAN_KIND_INTERNAL");
        assert_eq!(span["parent_span_id"], server_id);
        let a = &span["attributes"];
        assert_eq!(a["gen_ai.operation.name"], "execute_tool");
        assert_eq!(a["gen_ai.tool.name"], name);
        assert_eq!(a["gen_ai.tool.type"], "extension");
        assert!(
            call_ids.contains(&a["gen_ai.tool.call.id"].as_str().unwrap()),
            "{a}"
        );
    }
    // The HTTP tool and the MCP server (header and `_meta`) got the call's span.
    let mcp_parent = format!(
        "00-{CLIENT_TRACE}-{}-01",
        mcp[0]["span_id"].as_str().unwrap()
    );
    let http_parent = format!(
        "00-{CLIENT_TRACE}-{}-01",
        http[0]["span_id"].as_str().unwrap()
    );
    assert_eq!(traceparent(&tool.last()), Some(http_parent));
    let result = first_round["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool" && m["content"].as_str().unwrap().contains("header"))
        .expect("the MCP call's result")["content"]
        .as_str()
        .unwrap()
        .to_owned();
    let seen: Value = serde_json::from_str(&result).unwrap();
    assert_eq!(seen, json!({"header": mcp_parent, "meta": mcp_parent}));

    // The request's log line names the trace.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !gateway.log.lock().unwrap().iter().any(|l| {
        l.contains("toolgate::request") && l.contains(&format!("trace_id=\"{CLIENT_TRACE}\""))
    }) {
        assert!(Instant::now() < deadline, "no log line with the trace id");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // So does every transcript row of the exchange.
    let listed = common::chats_listed(&gateway.url(""), 1).await;
    let chat = listed["data"][0]["id"].as_str().unwrap().to_owned();
    let rows = get(&gateway.url(&format!("/toolgate/api/chats/{chat}")))
        .await
        .json()["messages"]
        .as_array()
        .unwrap()
        .clone();
    assert!(rows.len() >= 4, "{rows:?}");
    assert!(
        rows.iter().all(|m| m["traceId"] == CLIENT_TRACE),
        "{rows:?}"
    );
    // Tokens of both rounds, and the spans, counted.
    let metrics = get(&gateway.url("/metrics")).await.text();
    let tokens = "toolgate_tokens_total{provider=\"up\",tenant=\"anonymous\",kind=";
    assert_eq!(
        metric(
            &metrics,
            &format!("{tokens}\"input\",estimated=\"false\"}}")
        ),
        20.0
    );
    assert_eq!(
        metric(
            &metrics,
            &format!("{tokens}\"output\",estimated=\"false\"}}")
        ),
        10.0
    );
    assert!(metric(&metrics, "toolgate_trace_spans_total{outcome=\"exported\"}") >= 5.0);
    assert_eq!(
        metric(&metrics, "toolgate_trace_spans_total{outcome=\"dropped\"}"),
        0.0
    );
}

/// A failed attempt's span says why and the retry gets its own span;
/// `sample_ratio = 0` keeps no new trace but follows a sampled parent;
/// `capture_content` adds the messages in the GenAI shape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_sampling_and_content() {
    let receiver = Receiver::start();
    let upstream = Mock::start(|_| sse(text_sse("Hello."))).await;
    let refused = common::free_port();
    let config = TestConfig::new()
        .raw(&telemetry(
            &receiver.endpoint(),
            "sample_ratio = 0.0\ncapture_content = true",
        ))
        .raw(&format!(
            "[[providers]]\nname = \"two\"\nmodels = [\"m\"]\ntargets = [{{ name = \"down\", base_url = \"http://127.0.0.1:{refused}/v1\" }}, {{ name = \"up\", base_url = \"{}\" }}]\n[providers.retry]\nattempts = 2\nbackoff_ms = 1\n",
            upstream.url()
        ))
        .toml();
    let gateway = Binary::start(&config, &[]);
    let unsampled = post_traced(
        &gateway.url("/v1/chat/completions"),
        stream_request(json!({})),
        None,
    )
    .await;
    assert_eq!(unsampled.status, 200, "{}", unsampled.text());
    let trace = "0af7651916cd43dd8448eb211c80319c";
    let sampled = post_traced(
        &gateway.url("/v1/chat/completions"),
        stream_request(json!({})),
        Some(&format!("00-{trace}-b7ad6b7169203331-01")),
    )
    .await;
    assert_eq!(sampled.status, 200, "{}", sampled.text());
    let spans = receiver.trace(trace, 3).await;
    // The unsampled request told its upstream so (flags 00), on each attempt.
    let first = upstream.requests.lock().unwrap()[0].clone();
    let tp = traceparent(&first).expect("a traceparent, not sampled");
    assert!(tp.starts_with("00-") && tp.ends_with("-00"), "{tp}");
    // Nothing of the request that started its own trace at ratio 0.
    assert!(receiver.all().await.iter().all(|s| s["trace_id"] == trace));
    let mut chats = named(&spans, "chat m");
    chats.sort_by_key(|s| s["attributes"]["toolgate.attempt"].as_i64());
    assert_eq!(chats.len(), 2, "{spans:#?}");
    let (down, up) = (&chats[0]["attributes"], &chats[1]["attributes"]);
    assert_eq!(down["toolgate.target"], "down");
    assert_eq!(down["error.type"], "connect");
    assert_eq!(down["server.port"], refused);
    assert_eq!(chats[0]["status"], "STATUS_CODE_ERROR");
    assert_eq!(up["toolgate.target"], "up");
    assert_eq!(up["toolgate.attempt"], 2);
    assert_eq!(chats[1]["status"], "STATUS_CODE_UNSET");
    let input: Value = serde_json::from_str(up["gen_ai.input.messages"].as_str().unwrap()).unwrap();
    assert_eq!(
        input,
        json!([{"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]}])
    );
    let output: Value =
        serde_json::from_str(up["gen_ai.output.messages"].as_str().unwrap()).unwrap();
    assert_eq!(
        output,
        json!([{"role": "assistant", "parts": [{"type": "text", "content": "Hello."}], "finish_reason": "stop"}])
    );
}

/// A collector that is down costs requests nothing: they are answered, and
/// the failed exports are counted and logged once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_down_is_counted_not_waited_for() {
    let upstream = Mock::start(|_| sse(text_sse("Hello."))).await;
    let refused = common::free_port();
    let config = TestConfig::new()
        .raw(&telemetry(&format!("http://127.0.0.1:{refused}"), ""))
        .agent(&upstream.url(), "passthrough", &[], "")
        .toml();
    let gateway = Binary::start(&config, &[]);
    for _ in 0..3 {
        let r = post_traced(
            &gateway.url("/v1/chat/completions"),
            stream_request(json!({})),
            None,
        )
        .await;
        assert_eq!(r.status, 200);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let metrics = get(&gateway.url("/metrics")).await.text();
        if metric(&metrics, "toolgate_trace_spans_total{outcome=\"failed\"}") >= 6.0 {
            break;
        }
        assert!(Instant::now() < deadline, "{metrics}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let warnings = gateway
        .log
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("cannot export traces"))
        .count();
    assert_eq!(warnings, 1);
}

/// Without `[telemetry]` nothing is added: a client's own `traceparent`
/// reaches the upstream as the client sent it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_telemetry_a_client_traceparent_passes_untouched() {
    let upstream = Mock::start(|_| sse(text_sse("Hello."))).await;
    let config = TestConfig::new()
        .agent(&upstream.url(), "passthrough", &[], "")
        .toml();
    let gateway = Binary::start(&config, &[]);
    let client = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");
    let r = post_traced(
        &gateway.url("/v1/chat/completions"),
        stream_request(json!({})),
        Some(&client),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(traceparent(&upstream.last()), Some(client));
    let _ = post_traced(
        &gateway.url("/v1/chat/completions"),
        stream_request(json!({})),
        None,
    )
    .await;
    assert_eq!(traceparent(&upstream.last()), None);
}

/// Natural mode: the invalid block and the parsed call are events of the
/// request's span, the repair is a span of its own, and the fallback model's
/// `chat` span is the repair's child.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_natural_repair_is_a_span_with_the_fallback_chat_under_it() {
    let receiver = Receiver::start();
    let broken = "Checking.\n\n<GetWeather>\n{\"city\": \"Paris\",}\n</GetWeather>\n";
    let model = Mock::start(move |_| sse(common::upstream_sse(&[broken], None))).await;
    let fallback = Mock::start(|_| {
        Reply::json(&common::fallback_weather_call(
            "{\"location\": \"Paris\"}",
            40,
            9,
        ))
    })
    .await;
    let config = TestConfig::new()
        .raw(&telemetry(&receiver.endpoint(), ""))
        .provider(
            "nat",
            &model.url(),
            "[\"*\"]",
            "[providers.tools]\nmode = \"natural\"\non_invalid = \"fallback\"\nfallback = \"fb/small\"\n",
        )
        .provider("fb", &fallback.url(), "[]", "")
        .toml();
    let gateway = Binary::start(&config, &[]);
    let body = json!({
        "model": "m", "stream": true,
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [{"type": "function", "function": {"name": "GetWeather", "parameters": {
            "type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}}}]
    });
    let trace = "5b8efff798038103d269b633813fc60c";
    let r = post_traced(
        &gateway.url("/v1/chat/completions"),
        body.to_string(),
        Some(&format!("00-{trace}-eee19b7ec3c1b174-01")),
    )
    .await;
    assert!(r.text().contains("\"tool_calls\""), "{}", r.text());
    let spans = receiver.trace(trace, 4).await;
    let server = named(&spans, "POST /v1/chat/completions")[0];
    let repair = named(&spans, "repair_tool_call GetWeather");
    assert_eq!(repair.len(), 1, "{spans:#?}");
    assert_eq!(repair[0]["parent_span_id"], server["span_id"]);
    assert_eq!(repair[0]["attributes"]["gen_ai.provider.name"], "fb");
    let model_chat = named(&spans, "chat m");
    let fallback_chat = named(&spans, "chat small");
    assert_eq!(
        (model_chat.len(), fallback_chat.len()),
        (1, 1),
        "{spans:#?}"
    );
    assert_eq!(model_chat[0]["parent_span_id"], server["span_id"]);
    assert_eq!(fallback_chat[0]["parent_span_id"], repair[0]["span_id"]);
    assert_eq!(fallback_chat[0]["attributes"]["gen_ai.provider.name"], "fb");
    assert_eq!(
        fallback_chat[0]["attributes"]["gen_ai.usage.input_tokens"],
        40
    );
    let events: Vec<&str> = server["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        events,
        [
            "toolgate.natural.invalid_block",
            "toolgate.natural.tool_call"
        ],
        "{server:#}"
    );
}

/// An MCP client's `tools/call` is a trace of its own: the door's server
/// span continues the client's `traceparent`, and the call is an
/// `execute_tool` span under it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_door_call_is_an_execute_tool_span_under_the_doors_span() {
    let receiver = Receiver::start();
    let config = TestConfig::new()
        .raw(&telemetry(&receiver.endpoint(), ""))
        .raw("[mcp_gateway]\ntools = [\"builtin:calculator\"]\n")
        .demo("chunk_delay_ms = 0")
        .toml();
    let gateway = Binary::start(&config, &[]);
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "calculator", "arguments": {"expression": "6 * 7"}}});
    let r = send(
        Request::post(gateway.url("/mcp"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .header("traceparent", format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"))
            .body(Full::new(Bytes::from(call.to_string())))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("42"), "{}", r.text());
    let spans = receiver.trace(CLIENT_TRACE, 2).await;
    let server = named(&spans, "POST /mcp");
    assert_eq!(server.len(), 1, "{spans:#?}");
    assert_eq!(server[0]["parent_span_id"], CLIENT_SPAN);
    assert_eq!(server[0]["attributes"]["gen_ai.provider.name"], "mcp");
    let tool = named(&spans, "execute_tool calculator");
    assert_eq!(tool.len(), 1, "{spans:#?}");
    assert_eq!(tool[0]["parent_span_id"], server[0]["span_id"]);
    assert_eq!(tool[0]["attributes"]["gen_ai.tool.type"], "function");
}
