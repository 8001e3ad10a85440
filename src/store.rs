//! Transcripts (seed 004): every recorded exchange's messages, tool calls
//! and results, in SQLite or PostgreSQL, written off the request path.
//!
//! A request gets a [`Recorder`] from [`Store::begin`] (which links it to
//! the chat it continues); the recorder turns the answer's events into rows
//! and `try_send`s them to a bounded queue. The writer (`writer`), on its
//! own thread and runtime, writes the queue in batches. A full queue or a
//! failing database drops rows, counted in `toolgate_store_dropped_total`
//! and logged: traffic never waits on the database. Reads (the API) run on
//! the store's runtime too.

mod db;
mod link;
mod live;
pub mod record;
mod recorder;
mod redact;
mod writer;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use crate::config::{Record, StoreConfig};
use crate::metrics as m;
use db::Db;
use live::Live;
pub use record::{ChatSummary, Message, StoredMessage};
use record::{StoredResponse, StoredSteps, Write, next_id, now_ms};
pub use recorder::Recorder;

/// Rows waiting for the writer at most.
const QUEUE: usize = 16_384;
/// Conversation states remembered in memory per generation (two kept).
const HEADS_PER_GENERATION: usize = 50_000;
/// How long linking may ask the database before starting a new chat.
const LINK_DEADLINE: Duration = Duration::from_millis(100);
/// Assistant turns of a history tried when linking, newest first.
const LINK_TRIES: usize = 8;
/// How long a request may wait for gateway steps another replica kept.
const STEPS_DEADLINE: Duration = Duration::from_millis(250);
/// The request header naming (and the response header reporting) the chat.
pub const CHAT_HEADER: &str = "x-toolgate-chat-id";

/// Why a read failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("the store is not connected yet")]
    NotReady,
    #[error("the store's database failed: {0}")]
    Database(String),
}

pub(crate) struct Shared {
    config: StoreConfig,
    db: OnceLock<Db>,
    tx: mpsc::Sender<Write>,
    /// `None` while writes succeed; the last error otherwise.
    health: Mutex<Option<String>>,
    heads: Heads,
    live: Live,
    last_drop_log: Mutex<Option<Instant>>,
}

impl Shared {
    /// Queues a row; never waits. A full queue drops it, counted.
    fn push(&self, write: Write) {
        if self.tx.try_send(write).is_err() {
            metrics::counter!(m::STORE_DROPPED).increment(1);
            let mut last = self.last_drop_log.lock().unwrap_or_else(|e| e.into_inner());
            if last.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                *last = Some(Instant::now());
                tracing::warn!(
                    queue = QUEUE,
                    "store: the write queue is full; rows are dropped until the database catches up"
                );
            }
        }
    }

    fn set_health(&self, error: Option<String>) {
        metrics::gauge!(m::STORE_UP).set(if error.is_none() { 1.0 } else { 0.0 });
        *self.health.lock().unwrap_or_else(|e| e.into_inner()) = error;
    }
}

/// Conversation states toolgate answered recently: hash → (chat, length).
/// Two generations bound the memory; the older is dropped when the newer fills.
#[derive(Default)]
struct Heads {
    maps: Mutex<[HeadMap; 2]>,
}

/// Hash → (chat, messages it covers).
type HeadMap = HashMap<String, (Arc<str>, i64)>;

impl Heads {
    fn remember(&self, hash: String, chat: Arc<str>, len: i64) {
        let mut maps = self.maps.lock().unwrap_or_else(|e| e.into_inner());
        if maps[0].len() >= HEADS_PER_GENERATION {
            maps[1] = std::mem::take(&mut maps[0]);
        }
        maps[0].insert(hash, (chat, len));
    }

    fn find(&self, hash: &str) -> Option<(Arc<str>, i64)> {
        let maps = self.maps.lock().unwrap_or_else(|e| e.into_inner());
        maps[0].get(hash).or_else(|| maps[1].get(hash)).cloned()
    }
}

pub struct Store {
    shared: Arc<Shared>,
    runtime: tokio::runtime::Handle,
    stop: CancellationToken,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// What [`Store::begin`] needs to know of a request.
pub struct Begin<'a> {
    pub provider: &'a str,
    pub model: &'a str,
    /// The request as Chat Completions JSON (any door's, translated).
    pub request: &'a Map<String, Value>,
    /// The `x-toolgate-chat-id` header, if sent.
    pub chat_header: Option<&'a str>,
    /// The provider offers gateway tools.
    pub gateway_tools: bool,
}

impl Store {
    /// Starts the writer thread; the database is opened there (a database
    /// that is down is retried; requests are served meanwhile).
    pub fn start(config: StoreConfig) -> std::io::Result<Store> {
        let (tx, rx) = mpsc::channel(QUEUE);
        let shared = Arc::new(Shared {
            config,
            db: OnceLock::new(),
            tx,
            health: Mutex::new(Some("connecting".into())),
            heads: Heads::default(),
            live: Live::default(),
            last_drop_log: Mutex::new(None),
        });
        let stop = CancellationToken::new();
        let (handle_tx, handle_rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("toolgate-store".into())
            .spawn({
                let shared = shared.clone();
                let stop = stop.clone();
                move || {
                    let runtime = match tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    {
                        Ok(r) => r,
                        Err(e) => {
                            let _ = handle_tx.send(Err(e));
                            return;
                        }
                    };
                    let _ = handle_tx.send(Ok(runtime.handle().clone()));
                    runtime.block_on(writer::run(shared, rx, stop));
                }
            })?;
        let runtime = handle_rx
            .recv()
            .map_err(|_| std::io::Error::other("the store thread did not start"))??;
        Ok(Store {
            shared,
            runtime,
            stop,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// `None` while the database takes writes; the last error otherwise.
    pub fn health(&self) -> Option<String> {
        self.shared
            .health
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Whether `[store] record` asks for this exchange.
    fn wants(&self, request: &Map<String, Value>, gateway_tools: bool) -> bool {
        match self.shared.config.record {
            Record::All => true,
            Record::None => false,
            Record::Tools => {
                let declared = ["tools", "functions"].iter().any(|k| {
                    request
                        .get(*k)
                        .and_then(Value::as_array)
                        .is_some_and(|a| !a.is_empty())
                });
                let history = request
                    .get("messages")
                    .and_then(Value::as_array)
                    .is_some_and(|messages| {
                        messages.iter().any(|m| {
                            m.get("role").and_then(Value::as_str) == Some("tool")
                                || m.get("tool_calls").is_some_and(|c| !c.is_null())
                        })
                    });
                gateway_tools || declared || history
            }
        }
    }

    /// A recorder for this request, linked to the chat it continues (or a
    /// new one); `None` when `[store] record` leaves it out.
    pub async fn begin(&self, request: Begin<'_>) -> Option<Recorder> {
        if !self.wants(request.request, request.gateway_tools) {
            return None;
        }
        let messages: &[Value] = request
            .request
            .get("messages")
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice);
        let header = request.chat_header.filter(|h| valid_chat_id(h));
        let (chat, known) = self.link(messages, header).await;
        let known = (known.max(0) as usize).min(messages.len());
        self.shared.live.start(&chat);
        Some(Recorder::start(
            self.shared.clone(),
            chat,
            request.provider,
            request.model,
            messages,
            known,
        ))
    }

    /// The chat a history continues and how many of its messages are
    /// recorded already.
    async fn link(&self, messages: &[Value], header: Option<&str>) -> (Arc<str>, i64) {
        let tries = link::prefixes(messages, LINK_TRIES);
        let matches = |chat: &str| header.is_none_or(|h| h == chat);
        for (hash, _) in &tries {
            if let Some((chat, len)) = self.shared.heads.find(hash)
                && matches(&chat)
            {
                return (chat, len);
            }
        }
        if !tries.is_empty() && self.shared.db.get().is_some() {
            let shared = self.shared.clone();
            let hashes: Vec<String> = tries.iter().map(|(h, _)| h.clone()).collect();
            let lookup = self.runtime.spawn(async move {
                match shared.db.get() {
                    Some(db) => db.find_head(&hashes).await.ok().flatten(),
                    None => None,
                }
            });
            if let Ok(Ok(Some((chat, len)))) = tokio::time::timeout(LINK_DEADLINE, lookup).await
                && matches(&chat)
            {
                return (Arc::from(chat), len);
            }
        }
        match header {
            Some(h) => (Arc::from(h), 0),
            None => (Arc::from(next_id().0), 0),
        }
    }

    async fn read<T, F>(&self, f: impl FnOnce(Arc<Shared>) -> F) -> Result<T, StoreError>
    where
        F: Future<Output = Result<T, StoreError>> + Send + 'static,
        T: Send + 'static,
    {
        if self.shared.db.get().is_none() {
            return Err(StoreError::NotReady);
        }
        self.runtime
            .spawn(f(self.shared.clone()))
            .await
            .map_err(|e| StoreError::Database(e.to_string()))?
    }

    /// Chats by last activity, newest first.
    pub async fn chats(
        &self,
        limit: i64,
        before: Option<i64>,
    ) -> Result<Vec<ChatSummary>, StoreError> {
        self.read(move |shared| async move {
            let db = shared.db.get().ok_or(StoreError::NotReady)?;
            db.chats(limit, before)
                .await
                .map_err(|e| StoreError::Database(e.to_string()))
        })
        .await
    }

    /// A chat and its messages in order.
    pub async fn chat(
        &self,
        id: &str,
    ) -> Result<Option<(ChatSummary, Vec<StoredMessage>)>, StoreError> {
        let id = id.to_owned();
        self.read(move |shared| async move {
            let db = shared.db.get().ok_or(StoreError::NotReady)?;
            let err = |e: sqlx::Error| StoreError::Database(e.to_string());
            let Some(chat) = db.chat(&id).await.map_err(err)? else {
                return Ok(None);
            };
            let messages = db.messages(&id).await.map_err(err)?;
            Ok(Some((chat, messages)))
        })
        .await
    }

    /// Live rows of `chat` (see [`Store::unsubscribe`]).
    pub fn subscribe(&self, chat: &str) -> broadcast::Receiver<Arc<Message>> {
        self.shared.live.subscribe(chat)
    }

    pub fn unsubscribe(&self, chat: &str, receiver: broadcast::Receiver<Arc<Message>>) {
        self.shared.live.unsubscribe(chat, receiver);
    }

    /// Keeps a Responses API answer for `previous_response_id` (queued).
    pub fn save_response(&self, id: String, conversation: Value, response: Value) {
        self.shared.push(Write::Response(StoredResponse {
            id,
            at: now_ms(),
            conversation,
            response,
        }));
    }

    /// Keeps gateway steps for the client's follow-up under each call id
    /// (queued like every write: traffic never waits for it).
    pub fn save_steps(&self, ids: Vec<String>, steps: Value) {
        self.shared.push(Write::Steps(StoredSteps {
            ids,
            at: now_ms(),
            steps,
        }));
    }

    /// Gateway steps kept under any of `ids` (by any replica), each with the
    /// ids it was kept under; empty when the database does not answer within
    /// 250 ms.
    pub async fn steps(&self, ids: Vec<String>) -> Vec<(Vec<String>, Value)> {
        let lookup = self.read(move |shared| async move {
            let db = shared.db.get().ok_or(StoreError::NotReady)?;
            db.steps(&ids)
                .await
                .map_err(|e| StoreError::Database(e.to_string()))
        });
        match tokio::time::timeout(STEPS_DEADLINE, lookup).await {
            Ok(Ok(found)) => found
                .into_iter()
                .filter_map(|(ids, json)| Some((ids, serde_json::from_str(&json).ok()?)))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// A stored response: the conversation it ended and the response object.
    pub async fn response(&self, id: &str) -> Result<Option<(Value, Value)>, StoreError> {
        let id = id.to_owned();
        self.read(move |shared| async move {
            let db = shared.db.get().ok_or(StoreError::NotReady)?;
            db.response(&id)
                .await
                .map_err(|e| StoreError::Database(e.to_string()))
        })
        .await
    }

    pub async fn delete_response(&self, id: &str) -> Result<bool, StoreError> {
        let id = id.to_owned();
        self.read(move |shared| async move {
            let db = shared.db.get().ok_or(StoreError::NotReady)?;
            db.delete_response(&id)
                .await
                .map_err(|e| StoreError::Database(e.to_string()))
        })
        .await
    }

    /// Stops taking rows, writes what is queued and closes the database,
    /// waiting at most `deadline`. Blocking: call it off the runtimes.
    pub fn close(&self, deadline: Duration) {
        self.stop.cancel();
        let Some(thread) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return;
        };
        let started = Instant::now();
        while !thread.is_finished() {
            if started.elapsed() >= deadline {
                tracing::warn!("store: queued rows were not all written before shutdown");
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = thread.join();
    }
}

/// Chat ids from clients: short and plain, as they end up in URLs and logs.
fn valid_chat_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}
