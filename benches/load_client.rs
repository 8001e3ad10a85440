//! Small measuring client for `benches/load.sh` (wrk does the throughput part).
//!
//! Like `mock_upstream`, a `[[bench]]` target with `harness = false` only so
//! that `cargo bench --no-run` builds it; under `cargo bench` it exits at once.
//!
//! ```text
//! load_client freeport
//! load_client ttfb <host:port> <body.json> <n>
//! load_client hold <host:port> <body.json> <n> <pid>
//! load_client scale <host:port> <body.json> <n> <pid> <expect>
//! ```
//!
//! `ttfb` sends the streaming request (to `$LOAD_PATH`, by default
//! `/v1/chat/completions`) `n` times (after 20 warm-up requests)
//! on one keep-alive HTTP/1.1 connection and prints the p50/p99 of the time
//! from writing the request to the first byte of the first `data:` event, and
//! to the end of the stream, in microseconds.
//!
//! `hold` opens `n` connections at once, sends the request on each, waits
//! until every one has received its first event, then reads the RSS of
//! process `pid` from /proc while all `n` streams are still open.
//!
//! `scale` runs `n` whole streams at once (paced by the mock's
//! `--slow-count`): it opens the `n` connections (at most 256 connecting at
//! a time), reads each stream to its end and counts it complete when it is
//! a `200` whose body holds `expect` and ends with `[DONE]`. Meanwhile it
//! reads process `pid`'s RSS every 50 ms. It prints the RSS before, the
//! highest RSS seen, and the RSS 5 s after the last stream ended; the most
//! streams open at once (each from its first event to its end); and `pid`'s
//! CPU ticks (utime + stime) over the run.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The request's path: `LOAD_PATH`, else the chat door.
fn request(addr: &str, body: &[u8]) -> Vec<u8> {
    let path = std::env::var("LOAD_PATH").unwrap_or_else(|_| "/v1/chat/completions".into());
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
accept: text/event-stream\r\nauthorization: Bearer sk-bench\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body);
    req
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(haystack, needle)
}

/// One exchange on `stream`: (time to the first `data:` byte, time to the end).
/// Both servers answer a stream with chunked encoding, which ends with `0\r\n\r\n`.
async fn exchange(
    stream: &mut TcpStream,
    req: &[u8],
    buf: &mut Vec<u8>,
) -> std::io::Result<(Duration, Duration)> {
    buf.clear();
    let start = Instant::now();
    stream.write_all(req).await?;
    let mut first = None;
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::Error::other("connection closed mid-response"));
        }
        buf.extend_from_slice(&chunk[..n]);
        if first.is_none() && find(buf, b"data:").is_some() {
            first = Some(start.elapsed());
        }
        if buf.ends_with(b"\r\n0\r\n\r\n") {
            if !buf.starts_with(b"HTTP/1.1 200") {
                return Err(std::io::Error::other(format!(
                    "unexpected answer: {}",
                    String::from_utf8_lossy(&buf[..buf.len().min(300)])
                )));
            }
            let first = first.ok_or_else(|| std::io::Error::other("stream without data"))?;
            return Ok((first, start.elapsed()));
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

async fn ttfb(addr: &str, body: &[u8], n: usize) -> std::io::Result<()> {
    let sock: SocketAddr = addr.parse().map_err(std::io::Error::other)?;
    let mut stream = TcpStream::connect(sock).await?;
    stream.set_nodelay(true)?;
    let req = request(addr, body);
    let mut buf = Vec::new();
    for _ in 0..20 {
        exchange(&mut stream, &req, &mut buf).await?;
    }
    let mut firsts = Vec::with_capacity(n);
    let mut totals = Vec::with_capacity(n);
    for _ in 0..n {
        let (first, total) = exchange(&mut stream, &req, &mut buf).await?;
        firsts.push(first);
        totals.push(total);
    }
    firsts.sort();
    totals.sort();
    println!(
        "ttfb_p50_us={:.0} ttfb_p99_us={:.0} total_p50_us={:.0} total_p99_us={:.0}",
        percentile(&firsts, 0.5),
        percentile(&firsts, 0.99),
        percentile(&totals, 0.5),
        percentile(&totals, 0.99)
    );
    Ok(())
}

fn proc_status_kb(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

async fn open_one(sock: SocketAddr, req: std::sync::Arc<Vec<u8>>) -> std::io::Result<TcpStream> {
    let mut stream = TcpStream::connect(sock).await?;
    stream.write_all(&req).await?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while find(&buf, b"data:").is_none() {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::Error::other("closed before the first event"));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    if !buf.starts_with(b"HTTP/1.1 200") {
        return Err(std::io::Error::other("not a 200"));
    }
    Ok(stream)
}

async fn hold(addr: &str, body: &[u8], n: usize, pid: u32) -> std::io::Result<()> {
    let sock: SocketAddr = addr.parse().map_err(std::io::Error::other)?;
    let req = std::sync::Arc::new(request(addr, body));
    let before = proc_status_kb(pid, "VmRSS:");
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..n {
        tasks.spawn(open_one(sock, req.clone()));
    }
    let mut open = Vec::with_capacity(n);
    let mut failed = 0;
    while let Some(joined) = tasks.join_next().await {
        match joined.map_err(std::io::Error::other)? {
            Ok(stream) => open.push(stream),
            Err(e) => {
                failed += 1;
                if failed == 1 {
                    eprintln!("load_client: a stream failed to open: {e}");
                }
            }
        }
    }
    let opened_in = started.elapsed();
    // Let every stream receive a few more slow chunks while all are open.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let rss = proc_status_kb(pid, "VmRSS:");
    let hwm = proc_status_kb(pid, "VmHWM:");
    println!(
        "open={} failed={failed} opened_in_ms={} rss_before_kb={before} rss_kb={rss} hwm_kb={hwm}",
        open.len(),
        opened_in.as_millis()
    );
    drop(open);
    Ok(())
}

fn proc_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name (which may hold spaces), from field 3.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15, here 11 and 12.
    field(11) + field(12)
}

/// One whole stream: true when it is a `200` holding `expect`, ended by
/// `[DONE]` and the last chunk. `open` counts the streams between their first
/// event and their end.
async fn one_stream(
    sock: SocketAddr,
    req: std::sync::Arc<Vec<u8>>,
    expect: std::sync::Arc<Vec<u8>>,
    connecting: std::sync::Arc<tokio::sync::Semaphore>,
    open: std::sync::Arc<std::sync::atomic::AtomicUsize>,
) -> std::io::Result<bool> {
    use std::sync::atomic::Ordering;
    let permit = connecting
        .acquire_owned()
        .await
        .map_err(std::io::Error::other)?;
    let mut stream = TcpStream::connect(sock).await?;
    drop(permit);
    stream.write_all(&req).await?;
    // Small buffers: thousands of these run at once in this one process.
    let mut chunk = [0u8; 2048];
    let mut head = Vec::new();
    let mut found = false;
    let mut tail: Vec<u8> = Vec::new();
    let mut counted = false;
    let ended = loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break false;
        }
        if head.len() < 16 {
            head.extend_from_slice(&chunk[..n.min(16)]);
        }
        // What was read, after the end of what came before (a match may
        // straddle two reads).
        tail.extend_from_slice(&chunk[..n]);
        if !counted && find(&tail, b"data:").is_some() {
            counted = true;
            open.fetch_add(1, Ordering::Relaxed);
        }
        found = found || find(&tail, &expect).is_some();
        if tail.ends_with(b"\r\n0\r\n\r\n") {
            break find(&tail, b"data: [DONE]").is_some();
        }
        let keep = tail.len().saturating_sub(256);
        tail.drain(..keep);
    };
    if counted {
        open.fetch_sub(1, Ordering::Relaxed);
    }
    Ok(ended && found && head.starts_with(b"HTTP/1.1 200"))
}

async fn scale(addr: &str, body: &[u8], n: usize, pid: u32, expect: &str) -> std::io::Result<()> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let sock: SocketAddr = addr.parse().map_err(std::io::Error::other)?;
    let req = Arc::new(request(addr, body));
    let expect = Arc::new(expect.as_bytes().to_vec());
    let connecting = Arc::new(tokio::sync::Semaphore::new(256));
    let open = Arc::new(AtomicUsize::new(0));
    let before = proc_status_kb(pid, "VmRSS:");
    let ticks_before = proc_ticks(pid);
    let started = Instant::now();
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (open, done) = (open.clone(), done.clone());
        tokio::spawn(async move {
            let (mut peak, mut most) = (0, 0);
            while !done.load(Ordering::Relaxed) {
                peak = peak.max(proc_status_kb(pid, "VmRSS:"));
                most = most.max(open.load(Ordering::Relaxed));
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            (peak, most)
        })
    };
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..n {
        tasks.spawn(one_stream(
            sock,
            req.clone(),
            expect.clone(),
            connecting.clone(),
            open.clone(),
        ));
    }
    let (mut complete, mut failed) = (0, 0);
    while let Some(joined) = tasks.join_next().await {
        match joined.map_err(std::io::Error::other)? {
            Ok(true) => complete += 1,
            Ok(false) => failed += 1,
            Err(e) => {
                failed += 1;
                if failed == 1 {
                    eprintln!("load_client: a stream failed: {e}");
                }
            }
        }
    }
    let took = started.elapsed();
    let ticks = proc_ticks(pid).saturating_sub(ticks_before);
    done.store(true, Ordering::Relaxed);
    let (peak, most) = sampler.await.map_err(std::io::Error::other)?;
    // Time for the process to hand back what the streams used.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = proc_status_kb(pid, "VmRSS:");
    println!(
        "n={n} complete={complete} failed={failed} max_open={most} rss_before_kb={before} \
rss_peak_kb={peak} rss_after_kb={after} ticks={ticks} took_ms={}",
        took.as_millis()
    );
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let body = |i: usize| std::fs::read(&args[i]).expect("cannot read the body file");
    let result = match args.first().map(String::as_str) {
        Some("freeport") => {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            println!("{}", l.local_addr().expect("addr").port());
            Ok(())
        }
        Some("ttfb") if args.len() >= 4 => {
            rt.block_on(ttfb(&args[1], &body(2), args[3].parse().expect("n")))
        }
        Some("hold") if args.len() >= 5 => rt.block_on(hold(
            &args[1],
            &body(2),
            args[3].parse().expect("n"),
            args[4].parse().expect("pid"),
        )),
        Some("scale") if args.len() >= 6 => rt.block_on(scale(
            &args[1],
            &body(2),
            args[3].parse().expect("n"),
            args[4].parse().expect("pid"),
            &args[5],
        )),
        // `cargo bench` runs every bench target with `--bench`: nothing to do here.
        _ => {
            eprintln!("load_client: a helper of benches/load.sh (freeport, ttfb, hold, scale)");
            Ok(())
        }
    };
    if let Err(e) = result {
        eprintln!("load_client: {e}");
        std::process::exit(1);
    }
}
