//! Operating toolgate: inbound keys, the concurrency limit, draining many
//! streams, ending streams at the grace deadline, SIGHUP reload, TLS on the
//! listener and towards upstreams, and the tool-block size cap.

use crate::common;

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http::Request;
use http_body_util::{BodyExt, Full};
use tokio::net::TcpListener;

fn slow_stream(events: usize, every: Duration) -> Reply {
    let mut pieces: Vec<(Duration, Bytes)> = (0..events)
        .map(|i| (every, Bytes::from(format!("data: {{\"n\":{i}}}\n\n"))))
        .collect();
    pieces.push((Duration::ZERO, Bytes::from_static(b"data: [DONE]\n\n")));
    Reply::Stream {
        status: 200,
        headers: vec![("content-type", "text/event-stream".into())],
        pieces,
    }
}

fn stream_request(gw: &TestGateway) -> Request<Full<Bytes>> {
    Request::post(gw.url("/v1/chat/completions"))
        .body(Full::new(Bytes::from_static(
            b"{\"model\":\"m\",\"stream\":true}",
        )))
        .unwrap()
}

#[tokio::test]
async fn inbound_keys_are_required_and_never_forwarded() {
    // SAFETY: the variable name is unique to this test.
    unsafe { std::env::set_var("TOOLGATE_TEST_INBOUND_KEYS", "key-one, key-two") };
    let mock = Mock::start(|_| Reply::json("{}")).await;
    let toml = format!(
        "[server.auth]\napi_keys_env = \"TOOLGATE_TEST_INBOUND_KEYS\"\n{}",
        provider_toml("up", &mock.url(), "[\"*\"]", "")
    );
    let gw = TestGateway::start(&toml).await;
    let with = |key: Option<&str>| {
        let mut b = Request::post(gw.url("/v1/chat/completions"));
        if let Some(k) = key {
            b = b.header("authorization", format!("Bearer {k}"));
        }
        b.body(Full::new(Bytes::from_static(b"{\"model\":\"m\"}")))
            .unwrap()
    };
    for key in [None, Some("nope"), Some("key-one-and-more"), Some("")] {
        let r = send(with(key)).await;
        assert_eq!(r.status, 401, "{key:?}");
        assert_eq!(r.json()["error"]["code"], "invalid_api_key");
    }
    assert_eq!(mock.count(), 0);
    assert_eq!(send(with(Some("key-two"))).await.status, 200);
    assert!(
        mock.last().headers.get("authorization").is_none(),
        "the inbound key must not go upstream"
    );
    assert_eq!(
        get(&gw.url("/healthz")).await.status,
        200,
        "probes need no key"
    );
    assert_eq!(get(&gw.url("/v1/models")).await.status, 401);
}

#[tokio::test]
async fn requests_beyond_the_limit_get_503_with_retry_after() {
    let mock = Mock::start(|_| slow_stream(3, Duration::from_millis(300))).await;
    let toml = format!(
        "[server]\nmax_concurrent_requests = 2\n{}",
        provider_toml("up", &mock.url(), "[\"*\"]", "")
    );
    let gw = TestGateway::start(&toml).await;
    let a = client().request(stream_request(&gw)).await.unwrap();
    let b = client().request(stream_request(&gw)).await.unwrap();
    let r = send(stream_request(&gw)).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.headers["retry-after"], "1");
    assert_eq!(r.json()["error"]["code"], "overloaded");
    // Once a stream ends, its place is free again.
    a.into_body().collect().await.unwrap();
    b.into_body().collect().await.unwrap();
    assert_eq!(send(stream_request(&gw)).await.status, 200);
}

#[tokio::test]
async fn drain_lets_a_hundred_open_streams_finish() {
    let mock = Mock::start(|_| slow_stream(5, Duration::from_millis(100))).await;
    let toml = format!(
        "[server]\nshutdown_grace_secs = 10\n{}",
        provider_toml("up", &mock.url(), "[\"*\"]", "")
    );
    let mut gw = TestGateway::start(&toml).await;
    let client = client();
    let mut bodies = Vec::new();
    for _ in 0..100 {
        bodies.push(
            client
                .request(stream_request(&gw))
                .await
                .unwrap()
                .into_body(),
        );
    }
    let server = gw.shutdown();
    // The server task takes the signal on its next poll; then /readyz is 503 at once.
    let mut readiness = 200;
    for _ in 0..100 {
        let r = gw
            .gateway
            .handle(
                Request::get("/readyz")
                    .body(Full::new(Bytes::new()))
                    .unwrap(),
            )
            .await;
        readiness = r.status().as_u16();
        if readiness == 503 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(readiness, 503, "/readyz turns 503 when the drain starts");
    let mut done = 0;
    for body in bodies {
        let bytes = body
            .collect()
            .await
            .expect("stream completes during drain")
            .to_bytes();
        assert!(
            bytes.ends_with(b"data: {\"n\":4}\n\ndata: [DONE]\n\n"),
            "{bytes:?}"
        );
        done += 1;
    }
    assert_eq!(done, 100);
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("server exits")
        .unwrap();
}

#[tokio::test]
async fn streams_open_at_the_grace_deadline_end_with_an_error_event() {
    // Events every 200 ms, split in two writes: the deadline may fall mid-event.
    let mock = Mock::start(|_| Reply::Stream {
        status: 200,
        headers: vec![("content-type", "text/event-stream".into())],
        pieces: (0..100)
            .flat_map(|i| {
                [
                    (
                        Duration::from_millis(100),
                        Bytes::from_static(b"data: {\"n\":"),
                    ),
                    (
                        Duration::from_millis(100),
                        Bytes::from(format!("{i}}}\n\n")),
                    ),
                ]
            })
            .collect(),
    })
    .await;
    let toml = format!(
        "[server]\nshutdown_grace_secs = 0.5\n{}",
        provider_toml("up", &mock.url(), "[\"*\"]", "")
    );
    let mut gw = TestGateway::start(&toml).await;
    let body = client()
        .request(stream_request(&gw))
        .await
        .unwrap()
        .into_body();
    let server = gw.shutdown();
    let bytes = tokio::time::timeout(Duration::from_secs(5), body.collect())
        .await
        .expect("stream ended after the grace period")
        .expect("ended cleanly, not cut")
        .to_bytes();
    let text = String::from_utf8_lossy(&bytes);
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
    let error = events[events.len() - 2];
    assert!(
        error.starts_with("data: {\"error\"") && error.contains("shutting_down"),
        "{text}"
    );
    for e in &events[..events.len() - 2] {
        assert!(
            e.starts_with("data: {\"n\":") && e.ends_with('}'),
            "an event was cut: {e:?}"
        );
    }
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("server exits")
        .unwrap();
}

#[tokio::test]
async fn tool_blocks_over_the_size_cap_are_invalid() {
    let reply = format!(
        "Here.\n<GetWeather>\n{{\"location\": \"{}\"}}\n</GetWeather>",
        "x".repeat(500)
    );
    let mock = Mock::start(move |_| Reply::json(&upstream_completion(&reply))).await;
    let gw = tools_gateway(&mock, "natural", "max_block_bytes = 100").await;
    let request = r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"GetWeather","parameters":{"type":"object","properties":{"location":{"type":"string"}}}}}]}"#;
    let r = post(&gw.url("/v1/chat/completions"), request).await;
    assert_eq!(r.status, 502, "{}", r.text());
    assert!(r.text().contains("too large"), "{}", r.text());
}

/// A self-signed certificate for localhost, written as PEM files.
fn certificate(
    dir: &std::path::Path,
) -> (
    std::path::PathBuf,
    std::path::PathBuf,
    rustls::pki_types::CertificateDer<'static>,
) {
    let ck =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .unwrap();
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
    (cert, key, ck.cert.der().clone())
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("toolgate-ops-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn tls_client(
    root: rustls::pki_types::CertificateDer<'static>,
    h2: bool,
) -> hyper_util::client::legacy::Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    Full<Bytes>,
> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(root).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_only();
    let connector = if h2 {
        builder.enable_http2().build()
    } else {
        builder.enable_http1().build()
    };
    let mut b = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new());
    b.http2_only(h2);
    b.build(connector)
}

#[tokio::test]
async fn tls_listener_serves_http1_and_http2() {
    let dir = temp_dir("listener");
    let (cert, key, der) = certificate(&dir);
    let mock = Mock::start(|_| Reply::json("{\"ok\":1}")).await;
    let toml = format!(
        "[server.tls]\ncert = \"{}\"\nkey = \"{}\"\n{}",
        cert.display(),
        key.display(),
        provider_toml("up", &mock.url(), "[\"*\"]", "")
    );
    let gw = TestGateway::start(&toml).await;
    let url = format!("https://localhost:{}/v1/chat/completions", gw.addr.port());
    for h2 in [false, true] {
        let req = Request::post(&url)
            .body(Full::new(Bytes::from_static(b"{\"model\":\"m\"}")))
            .unwrap();
        let resp = tls_client(der.clone(), h2)
            .request(req)
            .await
            .expect("TLS request");
        assert_eq!(
            resp.version(),
            if h2 {
                http::Version::HTTP_2
            } else {
                http::Version::HTTP_11
            }
        );
        assert_eq!(
            &resp.into_body().collect().await.unwrap().to_bytes()[..],
            b"{\"ok\":1}"
        );
    }
}

#[tokio::test]
async fn https_upstreams_trust_the_configured_ca_bundle() {
    let dir = temp_dir("upstream");
    let (cert, key, _) = certificate(&dir);
    // A TLS upstream serving a fixed completion.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server_config = {
        use rustls::pki_types::pem::PemObject;
        let chain = vec![rustls::pki_types::CertificateDer::from_pem_file(&cert).unwrap()];
        let key = rustls::pki_types::PrivateKeyDer::from_pem_file(&key).unwrap();
        let mut c = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
        c.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Arc::new(c)
    };
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = tokio_rustls::TlsAcceptor::from(server_config.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let svc = hyper::service::service_fn(|_req| async {
                    Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
                        Bytes::from_static(b"{\"secure\":true}"),
                    )))
                });
                let _ = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                )
                .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                .await;
            });
        }
    });
    let upstream = format!("https://localhost:{port}/v1");
    let trusted = TestGateway::start(&format!(
        "[server]\nupstream_ca_bundle = \"{}\"\n{}",
        cert.display(),
        provider_toml("up", &upstream, "[\"*\"]", "")
    ))
    .await;
    let r = post(&trusted.url("/v1/chat/completions"), r#"{"model":"m"}"#).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(&r.body[..], b"{\"secure\":true}");
    let untrusted = TestGateway::start(&provider_toml("up", &upstream, "[\"*\"]", "")).await;
    let r = post(&untrusted.url("/v1/chat/completions"), r#"{"model":"m"}"#).await;
    assert_eq!(
        r.status,
        502,
        "an unknown CA must not be trusted: {}",
        r.text()
    );
}

#[test]
fn sighup_reloads_a_valid_config_and_keeps_the_old_one_on_error() {
    use std::process::{Command, Stdio};
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mock = rt.block_on(Mock::start(|_| Reply::json("{\"ok\":true}")));
    let dir = temp_dir("reload");
    let path = dir.join("toolgate.toml");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = |models: &str| {
        format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\n{}",
            provider_toml("up", &mock.url(), models, "")
        )
    };
    std::fs::write(&path, config("[\"first\"]")).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .arg("--config")
        .arg(&path)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let status = |model: &str| {
        let body = format!("{{\"model\":\"{model}\"}}");
        rt.block_on(async {
            for _ in 0..100 {
                let req = Request::post(format!("{base}/v1/chat/completions"))
                    .body(Full::new(Bytes::from(body.clone())))
                    .unwrap();
                if let Ok(r) = client().request(req).await {
                    return r.status().as_u16();
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            panic!("gateway not reachable");
        })
    };
    let hup = |child: &std::process::Child| {
        assert!(
            Command::new("kill")
                .args(["-HUP", &child.id().to_string()])
                .status()
                .unwrap()
                .success()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(status("first"), 200);
    assert_eq!(status("second"), 404);
    std::fs::write(&path, config("[\"second\"]")).unwrap();
    hup(&child);
    assert_eq!(status("second"), 200, "the new config serves");
    assert_eq!(status("first"), 404);
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    writeln!(f, "bogus_key = 1").unwrap();
    hup(&child);
    assert_eq!(
        status("second"),
        200,
        "an invalid file leaves the old config serving"
    );
    let metrics = rt.block_on(async { get(&format!("{base}/metrics")).await.text() });
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("toolgate_config_reloads_total{outcome=\"invalid\"} 1")),
        "{metrics}"
    );
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("toolgate_config_reloads_total{outcome=\"success\"} 1")),
        "{metrics}"
    );
    assert!(
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    assert!(child.wait().unwrap().success());
}
