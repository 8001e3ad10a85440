//! The transcript API and page: `/toolgate/api/chats` (newest
//! first), `/toolgate/api/chats/{id}` (every message in order),
//! `/toolgate/api/chats/{id}/events` (SSE: the chat's summary as a `chat`
//! event, its stored messages replayed, then live ones while the chat is
//! answered), `/toolgate/api/whoami` (what the key may do) and
//! `/toolgate/ui/`, one page
//! (with its script and style sheet as files, under a strict CSP) embedded
//! in the binary. API answers are `no-store`.
//!
//! A client key sees its own tenant's chats; another tenant's chat is not
//! found, like one that does not exist. An admin key sees every tenant's,
//! and may list one tenant's with `?tenant=`.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Response, header};
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;

use super::key_streams::{KeyStreams, Kind, Ticket};
pub use super::viewer::Viewer;
use crate::body::{self, Body};
use crate::error::GatewayError;
use crate::store::{ChatFilter, Message, Snapshot, Store, StoreError};

const PAGE: &str = include_str!("transcripts.html");
const SCRIPT: &str = include_str!("transcripts.js");
const STYLE: &str = include_str!("transcripts.css");
const ADMIN_SCRIPT: &str = include_str!("admin.js");
/// The usage chart's library, vendored (`vendor/uplot/README.md`): served
/// under its version, so it may be cached for good.
const UPLOT_SCRIPT: &str = include_str!("vendor/uplot/uPlot.iife.min.js");
const UPLOT_STYLE: &str = include_str!("vendor/uplot/uPlot.min.css");
const UPLOT_LICENSE: &str = include_str!("vendor/uplot/LICENSE");
/// A versioned file never changes: a year, and no revalidation.
const FOREVER: &str = "public, max-age=31536000, immutable";
/// The page runs only its own script file and style sheet, shows what it
/// reads as text, and is never framed.
const PAGE_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";
const DEFAULT_LIMIT: i64 = 50;
const MAX_LIMIT: i64 = 500;
/// A comment this often keeps an idle events stream open through proxies.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// An events stream ends after this long (the page reconnects).
const MAX_EVENTS: Duration = Duration::from_secs(3600);

/// Live views, as their refusals and gauge name them.
pub const LIVE_VIEWS: Kind = Kind {
    what: "live views",
    total_from: "`store.max_live_views`",
    per_key_from: "`store.max_live_views_per_key`",
    code: "too_many_live_views",
    gauge: crate::metrics::LIVE_VIEWS,
};

/// A request to the transcript API: who reads, and the key it presented
/// (empty without `[server.auth]`), which its live views are counted by
/// and identified by again when the keys change.
pub struct Reader {
    pub viewer: Viewer,
    pub key: Arc<[u8]>,
}

/// The transcripts a gateway with a `[store]` serves, and their open live
/// views.
pub struct Transcripts {
    pub store: Arc<Store>,
    pub views: Arc<KeyStreams>,
}

/// The page's files under `/toolgate/ui/` (public: its data comes from the
/// API, which asks for a key), or `None` for a path that is not one.
pub fn page(path: &str) -> Option<Response<Body>> {
    const JS: &str = "text/javascript; charset=utf-8";
    const CSS: &str = "text/css; charset=utf-8";
    let (text, content_type, versioned) = match path {
        "/toolgate/ui" | "/toolgate/ui/" => (PAGE, "text/html; charset=utf-8", false),
        "/toolgate/ui/transcripts.js" => (SCRIPT, JS, false),
        "/toolgate/ui/transcripts.css" => (STYLE, CSS, false),
        "/toolgate/ui/admin.js" => (ADMIN_SCRIPT, JS, false),
        "/toolgate/ui/vendor/uplot-1.6.32.min.js" => (UPLOT_SCRIPT, JS, true),
        "/toolgate/ui/vendor/uplot-1.6.32.min.css" => (UPLOT_STYLE, CSS, true),
        "/toolgate/ui/vendor/uplot-1.6.32.LICENSE.txt" => {
            (UPLOT_LICENSE, "text/plain; charset=utf-8", true)
        }
        _ => return None,
    };
    let mut r = Response::new(body::full(text));
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if versioned {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static(FOREVER));
    }
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(PAGE_POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    Some(r)
}

/// What every transcript API answer carries, errors included: transcripts
/// are private to their key, so no cache keeps them and no browser guesses
/// their type.
pub fn private(mut r: Response<Body>) -> Response<Body> {
    let h = r.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    r
}

pub async fn handle(
    transcripts: Option<&Transcripts>,
    reader: &Reader,
    method: &Method,
    path: &str,
    query: Option<&str>,
) -> Result<Response<Body>, GatewayError> {
    if method != Method::GET {
        return Err(GatewayError::UnknownRoute {
            method: method.to_string(),
            path: path.to_owned(),
            hint: "",
        });
    }
    if path == "/toolgate/api/whoami" {
        return Ok(whoami(reader));
    }
    let transcripts = transcripts.ok_or_else(|| {
        GatewayError::NotFound("Transcripts are off: configure a [store] to record them".into())
    })?;
    if path == "/toolgate/api/backup" {
        return backup(&transcripts.store, reader).await;
    }
    if path == "/toolgate/api/usage" {
        return super::usage::handle(&transcripts.store, &reader.viewer, query).await;
    }
    let Some(rest) = path.strip_prefix("/toolgate/api/chats") else {
        return Err(GatewayError::UnknownRoute {
            method: method.to_string(),
            path: path.to_owned(),
            hint: "",
        });
    };
    let (store, viewer) = (&transcripts.store, &reader.viewer);
    let segments: Vec<&str> = rest.split('/').filter(|s| !s.is_empty()).collect();
    match segments.as_slice() {
        [] => list(store, viewer, query).await,
        [id] => chat(store, viewer, id).await,
        [id, "events"] => {
            // A chat that does not exist yet may be watched (a client names
            // its chat with the header); its rows are shown only once the
            // chat turns out to be the viewer's.
            if let Some(owner) = store.owner(id).await.map_err(unavailable)?
                && !viewer.sees(&owner)
            {
                return Err(no_chat(id));
            }
            let ticket = transcripts.views.open(&reader.key, viewer)?;
            Ok(events(
                store.clone(),
                viewer.clone(),
                (*id).to_owned(),
                ticket,
            ))
        }
        _ => Err(GatewayError::UnknownRoute {
            method: method.to_string(),
            path: path.to_owned(),
            hint: "",
        }),
    }
}

/// `GET /toolgate/api/whoami`: what the presented key may do, so the page
/// offers only that: `admin` (keys, backup, every tenant), the `tenant` a
/// client key reads, and whether the gateway asks for keys at all (`auth`;
/// without it anyone reads the one tenant's chats and its backup).
fn whoami(reader: &Reader) -> Response<Body> {
    let tenant = match &reader.viewer {
        Viewer::Admin => Value::Null,
        Viewer::Tenant(name) => json!(name),
    };
    super::json(&json!({
        "admin": reader.viewer == Viewer::Admin,
        "tenant": tenant,
        "auth": !reader.key.is_empty(),
    }))
}

/// `GET /toolgate/api/backup`: a consistent copy of a SQLite store, made
/// while toolgate runs, streamed as a database file `sqlite3` opens. An
/// admin key's (or anyone's without `[server.auth]`, where one tenant
/// owns every row).
async fn backup(store: &Store, reader: &Reader) -> Result<Response<Body>, GatewayError> {
    if reader.viewer != Viewer::Admin && !reader.key.is_empty() {
        return Err(GatewayError::Forbidden(
            "The backup holds every tenant's transcripts: it takes an admin key".into(),
        ));
    }
    let file = match store.snapshot().await.map_err(unavailable)? {
        Snapshot::File(file) => file,
        Snapshot::Postgres => {
            return Err(GatewayError::bad_request(
                "The store is PostgreSQL: back it up with pg_dump",
                None,
            ));
        }
        Snapshot::InMemory => {
            return Err(GatewayError::bad_request(
                "The store is in memory (`sqlite::memory:`): it has no file to back up, and its rows end with the process",
                None,
            ));
        }
    };
    let size = file.metadata().map(|m| m.len()).ok();
    let body = body::channel::spawn(4, move |tx| async move {
        use tokio::io::AsyncReadExt;
        let mut file = tokio::fs::File::from_std(file);
        loop {
            let mut chunk = bytes::BytesMut::with_capacity(256 * 1024);
            match file.read_buf(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if tx.send(chunk.freeze()).await.is_err() {
                        break;
                    }
                }
            }
        }
    });
    let mut r = Response::new(body);
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/vnd.sqlite3"),
    );
    h.insert(
        header::CONTENT_DISPOSITION,
        HeaderValue::from_static("attachment; filename=\"toolgate-transcripts.db\""),
    );
    if let Some(size) = size {
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(size));
    }
    Ok(r)
}

fn unavailable(e: StoreError) -> GatewayError {
    GatewayError::StoreUnavailable(e.to_string())
}

fn no_chat(id: &str) -> GatewayError {
    GatewayError::NotFound(format!("No chat `{id}`"))
}

/// The most words `q` may hold: each is a search of its own.
const MAX_WORDS: usize = 8;

/// `q`'s words, each to be found somewhere in a chat, in any order; a
/// phrase in double quotes is one word (`"number 42" widgets`).
fn words(q: &str) -> Result<Vec<String>, GatewayError> {
    let mut words = Vec::new();
    for (i, part) in q.split('"').enumerate() {
        if i % 2 == 1 {
            // Inside quotes: the phrase as written, spaces and all.
            let phrase = part.trim();
            if !phrase.is_empty() {
                words.push(phrase.to_owned());
            }
        } else {
            words.extend(part.split_whitespace().map(str::to_owned));
        }
    }
    words.dedup();
    if words.len() > MAX_WORDS {
        return Err(GatewayError::bad_request(
            format!(
                "`q` holds {} words; a search takes at most {MAX_WORDS}",
                words.len()
            ),
            Some("q"),
        ));
    }
    Ok(words)
}

/// `GET /toolgate/api/chats`: newest activity first, `limit` (50, at most
/// 500) at a time; `q` searches titles, prompts, calls and results for
/// every one of its words (or `"quoted phrases"`), in any order;
/// `provider`, `model` and `errors=1` filter; `before` and `before_id` (the
/// `next` of the previous page) page on.
async fn list(
    store: &Store,
    viewer: &Viewer,
    query: Option<&str>,
) -> Result<Response<Body>, GatewayError> {
    let number = |name: &str| -> Result<Option<i64>, GatewayError> {
        super::param(query, name)
            .map(|v| {
                v.parse::<i64>().map_err(|_| {
                    GatewayError::bad_request(format!("`{name}` must be an integer"), Some(name))
                })
            })
            .transpose()
    };
    let limit = number("limit")?
        .unwrap_or(DEFAULT_LIMIT)
        .clamp(1, MAX_LIMIT);
    let before =
        number("before")?.map(|ms| (ms, super::param(query, "before_id").unwrap_or_default()));
    let asked = super::param(query, "tenant");
    let tenant = match viewer {
        Viewer::Admin => asked,
        Viewer::Tenant(own) => match asked {
            Some(other) if *other != **own => {
                return Err(GatewayError::Forbidden(
                    "`tenant` filters chats for admin keys only; this key sees its own".into(),
                ));
            }
            _ => Some(own.to_string()),
        },
    };
    let errors_only = match super::param(query, "errors").as_deref() {
        None | Some("0" | "false") => false,
        Some("1" | "true") => true,
        Some(_) => {
            return Err(GatewayError::bad_request(
                "`errors` is 1 (only chats with a failed answer) or 0",
                Some("errors"),
            ));
        }
    };
    let filter = ChatFilter {
        tenant,
        provider: super::param(query, "provider"),
        model: super::param(query, "model"),
        errors_only,
        words: words(super::param(query, "q").as_deref().unwrap_or(""))?,
        before,
        limit: limit + 1,
    };
    let chats = store.chats(filter).await.map_err(unavailable)?;
    let has_more = chats.len() as i64 > limit;
    let data: Vec<_> = chats.into_iter().take(limit as usize).collect();
    let next = match (has_more, data.last()) {
        (true, Some(last)) => json!({"before": last.updated_at, "before_id": last.id}),
        _ => Value::Null,
    };
    Ok(super::json(
        &json!({"data": data, "has_more": has_more, "next": next}),
    ))
}

async fn chat(store: &Store, viewer: &Viewer, id: &str) -> Result<Response<Body>, GatewayError> {
    match store.chat(id).await.map_err(unavailable)? {
        Some((chat, _)) if !viewer.sees(&chat.tenant) => Err(no_chat(id)),
        None => Err(no_chat(id)),
        Some((chat, messages)) => {
            let messages: Vec<&Value> = messages.iter().map(|m| &m.message).collect();
            Ok(super::json(&json!({"chat": chat, "messages": messages})))
        }
    }
}

/// The seed's event name for a row kind.
fn event_name(kind: &str) -> &str {
    match kind {
        "tools_call" => "tools_call_update",
        other => other,
    }
}

fn frame(kind: &str, message: &impl std::fmt::Display) -> Bytes {
    Bytes::from(format!("event: {}\ndata: {message}\n\n", event_name(kind)))
}

/// Replays the chat's stored messages, then streams its live ones, as long
/// as the chat is the viewer's to see and its key still names the viewer
/// (`ticket`, which also holds the view's place among the open ones).
fn events(store: Arc<Store>, viewer: Viewer, id: String, ticket: Ticket) -> Response<Body> {
    let body = body::channel::spawn(64, move |tx| async move {
        let closed = ticket.closed.clone();
        tokio::select! {
            () = replay_then_follow(&store, &viewer, &id, &tx) => {}
            () = closed.cancelled() => {}
        }
        drop(ticket);
    });
    super::event_stream(body)
}

async fn replay_then_follow(
    store: &Store,
    viewer: &Viewer,
    id: &str,
    tx: &tokio::sync::mpsc::Sender<Bytes>,
) {
    // Subscribed first, so nothing written meanwhile is missed; then the
    // stored rows, and the rows of answers in flight (which reach the
    // database when they end) that are not stored yet. Live rows already
    // sent are skipped by sequence number. The subscription ends with
    // `live`, however this task ends.
    let (mut live, in_flight) = store.subscribe(id);
    let mut last = i64::MIN;
    let mut sent = std::collections::HashSet::new();
    let sees = async |store: &Store| {
        store
            .owner(id)
            .await
            .is_ok_and(|o| o.is_some_and(|o| viewer.sees(&o)))
    };
    match store.chat(id).await {
        Ok(Some((chat, stored))) => {
            if !viewer.sees(&chat.tenant) {
                return;
            }
            // What the chat is, for the view's header.
            if let Ok(summary) = serde_json::to_string(&chat)
                && tx.send(frame("chat", &summary)).await.is_err()
            {
                return;
            }
            for m in stored {
                last = last.max(m.sequence);
                sent.insert(m.id);
                if tx.send(frame(&m.kind, &m.message)).await.is_err() {
                    return;
                }
            }
        }
        // A chat whose first answer is still in flight: its owner is known
        // to this replica only.
        _ if !in_flight.is_empty() && !sees(store).await => return,
        _ => {}
    }
    for m in in_flight.iter().filter(|m| !sent.contains(&m.id)) {
        if !send_live(tx, m, &mut last).await {
            return;
        }
    }
    let _ = tx.send(Bytes::from_static(b": replayed\n\n")).await;
    let deadline = tokio::time::Instant::now() + MAX_EVENTS;
    loop {
        let next = tokio::select! {
            m = live.recv() => m,
            () = tokio::time::sleep(KEEP_ALIVE) => {
                if tx.send(Bytes::from_static(b": keep-alive\n\n")).await.is_err() {
                    return;
                }
                continue;
            }
            () = tokio::time::sleep_until(deadline) => return,
        };
        let sent = match next {
            // Checked per row: the chat may have begun after the viewer came.
            Ok(_) if !sees(store).await => return,
            Ok(m) => send_live(tx, &m, &mut last).await,
            // A slow viewer missed rows: it reloads the chat.
            Err(RecvError::Lagged(_)) => tx
                .send(Bytes::from_static(b"event: reload\ndata: {}\n\n"))
                .await
                .is_ok(),
            Err(RecvError::Closed) => return,
        };
        if !sent {
            return;
        }
    }
}

async fn send_live(tx: &tokio::sync::mpsc::Sender<Bytes>, m: &Message, last: &mut i64) -> bool {
    if m.sequence <= *last {
        return true;
    }
    *last = m.sequence;
    tx.send(frame(m.kind.as_str(), &&*m.json)).await.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_asks_for_the_vendored_files_it_serves() {
        for path in [
            "/toolgate/ui/vendor/uplot-1.6.32.min.js",
            "/toolgate/ui/vendor/uplot-1.6.32.min.css",
        ] {
            assert!(PAGE.contains(path), "{path}");
            let r = page(path).unwrap();
            assert_eq!(r.headers()[header::CACHE_CONTROL], FOREVER);
        }
        assert!(UPLOT_SCRIPT.contains("(v1.6.32)"), "the version served");
        assert!(
            page("/toolgate/ui/admin.js")
                .unwrap()
                .headers()
                .get(header::CACHE_CONTROL)
                .is_none()
        );
    }

    #[test]
    fn a_search_is_its_words_in_any_order_and_quoted_phrases_whole() {
        assert_eq!(words("widgets 42").unwrap(), ["widgets", "42"]);
        assert_eq!(words("  ").unwrap(), Vec::<String>::new());
        assert_eq!(
            words("\"number 42\"  widgets").unwrap(),
            ["number 42", "widgets"]
        );
        // An unclosed quote runs to the end.
        assert_eq!(words("a \"b c").unwrap(), ["a", "b c"]);
        assert!(words("1 2 3 4 5 6 7 8").is_ok());
        assert!(words("1 2 3 4 5 6 7 8 9").is_err());
    }
}
