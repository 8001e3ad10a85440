//! Transcripts: every recorded exchange's messages, tool calls
//! and results, in SQLite or PostgreSQL, written off the request path.
//!
//! A request gets a [`Recorder`] from [`Store::begin`] (which links it to
//! the chat it continues); the recorder turns the answer's events into rows
//! and `try_send`s them to a bounded queue. The writer (`writer`), on its
//! own thread and runtime, writes the queue in batches. A full queue or a
//! failing database drops rows, counted in `toolgate_store_dropped_total`
//! and logged: traffic never waits on the database. Reads (the API) run on
//! the store's runtime too.
//!
//! Every row belongs to a tenant, the identity of the key whose request
//! made it: a chat, its heads, a stored response, gateway steps. Every
//! lookup that reaches them carries the tenant, and another tenant's row
//! is found exactly as often as one that does not exist: never.

mod batch;
mod db;
mod file_watch;
mod generations;
mod link;
mod live;
pub mod record;
mod recorder;
mod redact;
mod writer;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use crate::config::{Record, StoreConfig};
use crate::metrics as m;
use db::Db;
use generations::Generations;
use link::{Choice, Reached};
use live::Live;
pub use record::{
    ChatFilter, ChatSummary, Kept, KeyRow, Message, StoredMessage, UsageColumn, UsageRow, Used,
};
use record::{ChatUpdate, StoredResponse, StoredSteps, Write, next_id, now_ms};
pub use recorder::Recorder;

/// Exchanges (a request's rows, queued together) waiting for the writer
/// at most: several seconds of a busy gateway's traffic, so that a writer
/// stalled by a checkpoint or starved of CPU catches up rather than drops.
const QUEUE: usize = 16_384;
/// Chats remembered as missing exchanges until the writer marks them.
const MISSED_CHATS: usize = 10_000;
/// Conversation states remembered in memory per generation (two kept).
const HEADS_PER_GENERATION: usize = 50_000;
/// Last answers waited for in vain, remembered per generation (two kept).
const AWAITED_PER_GENERATION: usize = 10_000;
/// Assistant turns of a history tried when linking, newest first.
const LINK_TRIES: usize = 8;
/// The first pause between two lookups of a continued chat's head.
const LINK_RETRY: Duration = Duration::from_millis(15);
/// How long a request may wait for gateway steps another replica kept.
const STEPS_DEADLINE: Duration = Duration::from_millis(250);
/// How long a stored response not found is looked for again (another
/// replica's write of it may be landing), and how long a delete waits for
/// this replica's queued write of it.
const RESPONSE_SETTLE: Duration = Duration::from_millis(250);
/// The pause between two looks.
const RESPONSE_RETRY: Duration = Duration::from_millis(25);
/// How long a request right after start waits for the store's first
/// attempt to open its database (the attempt itself gives up sooner when
/// the database does not answer).
const OPEN_WAIT: Duration = Duration::from_secs(5);
/// The request header naming (and the response header reporting) the chat.
pub const CHAT_HEADER: &str = "x-toolgate-chat-id";

/// How often the managed keys are read again when no change was announced.
const KEYS_REREAD: Duration = Duration::from_secs(5);

fn db_error(e: sqlx::Error) -> StoreError {
    StoreError::Database(e.to_string())
}

/// An hour, in ms.
const HOUR_MS: i64 = 3_600_000;

/// The hour `ms` falls in (ms since the epoch).
pub fn hour_of(ms: i64) -> i64 {
    ms - ms.rem_euclid(HOUR_MS)
}

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
    /// True until the first attempt to open the database ended.
    opening: AtomicBool,
    /// Woken when that attempt ended.
    opened: tokio::sync::Notify,
    tx: mpsc::Sender<Vec<Write>>,
    /// `None` while writes succeed; the last error otherwise.
    health: Mutex<Option<String>>,
    heads: Heads,
    live: Live,
    last_drop_log: Mutex<Option<Instant>>,
    /// Responses queued on this replica and not yet written: a request
    /// reads its own writes (`previous_response_id` at once) from here.
    queued: Mutex<HashMap<String, StoredResponse>>,
    /// Woken after every batch the writer finished.
    written: tokio::sync::Notify,
    /// Chats that lost exchanges (queue full, batch failed), each with its
    /// row and how many it lost, until the writer marks them incomplete.
    missed: Mutex<HashMap<Arc<str>, (ChatUpdate, u64)>>,
}

impl Shared {
    /// Queues one exchange's rows (or a single row) as a unit; never
    /// waits. A full queue drops the unit whole, counted, and its chat is
    /// marked incomplete later: a transcript may miss an exchange, never
    /// part of one.
    fn push(&self, unit: Vec<Write>) {
        if unit.is_empty() {
            return;
        }
        if unit.iter().any(|w| matches!(w, Write::Response(_))) {
            let mut queued = self
                .queued
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            for write in &unit {
                if let Write::Response(r) = write {
                    queued.insert(r.id.clone(), r.clone());
                }
            }
        }
        if let Err(e) = self.tx.try_send(unit) {
            let unit = match e {
                mpsc::error::TrySendError::Full(u) | mpsc::error::TrySendError::Closed(u) => u,
            };
            self.dropped(&unit);
            let mut last = self
                .last_drop_log
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if last.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                *last = Some(Instant::now());
                tracing::warn!(
                    queue = QUEUE,
                    "store: the write queue is full; exchanges are dropped until the database catches up"
                );
            }
        }
    }

    /// Rows that will not be written: counted, their responses settled,
    /// their chats remembered as incomplete.
    pub(crate) fn dropped(&self, rows: &[Write]) {
        metrics::counter!(m::STORE_DROPPED).increment(rows.len() as u64);
        let mut missed = self
            .missed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for write in rows {
            match write {
                Write::Response(r) => self.settled(&r.id),
                Write::Chat(c) => {
                    if let Some((_, n)) = missed.get_mut(&c.id) {
                        *n += 1;
                    } else if missed.len() < MISSED_CHATS {
                        let mut row = c.clone();
                        (row.tool_calls, row.messages, row.errors) = (0, 0, 0);
                        row.last_error.clear();
                        missed.insert(c.id.clone(), (row, 1));
                    }
                }
                _ => {}
            }
        }
    }

    /// The chats that lost exchanges since the last call.
    pub(crate) fn take_missed(&self) -> Vec<(ChatUpdate, u64)> {
        let mut missed = self
            .missed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        missed.drain().map(|(_, v)| v).collect()
    }

    /// Puts back chats whose marking failed.
    pub(crate) fn missed_again(&self, chats: Vec<(ChatUpdate, u64)>) {
        let mut missed = self
            .missed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (row, n) in chats {
            if missed.len() < MISSED_CHATS || missed.contains_key(&row.id) {
                missed.entry(row.id.clone()).or_insert((row, 0)).1 += n;
            }
        }
    }

    /// The writer is done with response `id` (written or dropped).
    pub(crate) fn settled(&self, id: &str) {
        self.queued
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(id);
    }

    /// A response of `tenant`'s still queued here.
    fn queued_response(&self, tenant: &str, id: &str) -> Option<Kept> {
        let queued = self
            .queued
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        queued
            .get(id)
            .filter(|r| &*r.tenant == tenant)
            .map(|r| Kept {
                conversation: (*r.conversation).clone(),
                response: (*r.response).clone(),
                chat: (!r.chat_id.is_empty()).then(|| r.chat_id.to_string()),
            })
    }

    fn is_queued(&self, id: &str) -> bool {
        self.queued
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains_key(id)
    }

    /// The first attempt to open the database ended (`db` is set if it
    /// succeeded).
    pub(crate) fn first_open_ended(&self) {
        self.opening.store(false, Ordering::Release);
        self.opened.notify_waiters();
    }

    fn set_health(&self, error: Option<String>) {
        metrics::gauge!(m::STORE_UP).set(if error.is_none() { 1.0 } else { 0.0 });
        *self
            .health
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = error;
    }
}

/// Conversation states toolgate answered recently: hash → (chat, length)
/// (hashes start from the tenant, so a lookup is the tenant's own), and the
/// tenant of each chat this replica recorded, each in bounded memory.
struct Heads {
    /// Hash → the chats that reached it, with the messages each covers
    /// and when, the latest last.
    states: Generations<String, Vec<Reached<Arc<str>>>>,
    /// Chat → its tenant.
    owners: Generations<Arc<str>, Arc<str>>,
    /// Last answers a request waited `link_wait_ms` for in vain (an edited
    /// or made-up history, such as few-shot examples sent every time): a
    /// later request ending with the same one looks once, without waiting.
    awaited: Generations<String, ()>,
}

impl Heads {
    fn new() -> Self {
        Heads {
            states: Generations::new(HEADS_PER_GENERATION),
            owners: Generations::new(HEADS_PER_GENERATION),
            awaited: Generations::new(AWAITED_PER_GENERATION),
        }
    }

    /// Keeps a state `chat` reached at `at` (the two latest chats per
    /// state: a request that names no chat continues the latest, and one
    /// that names an older one finds it in the database).
    fn remember(&self, hash: String, reached: Reached<Arc<str>>) {
        self.states.update(hash, |chats| {
            let mut chats = chats.unwrap_or_default();
            chats.retain(|r| r.chat != reached.chat);
            chats.push(reached);
            if chats.len() > 2 {
                chats.remove(0);
            }
            chats
        });
    }

    /// The chats that reached state `hash`.
    fn find(&self, hash: &str) -> Vec<Reached<Arc<str>>> {
        self.states.get(hash).unwrap_or_default()
    }

    /// Notes that the answer ending in state `hash` was waited for in vain.
    fn awaited_in_vain(&self, hash: &str) {
        self.awaited.insert(hash.to_owned(), ());
    }

    /// Whether the answer ending in state `hash` was waited for in vain.
    fn was_awaited(&self, hash: &str) -> bool {
        self.awaited.get(hash).is_some()
    }

    fn own(&self, chat: Arc<str>, tenant: Arc<str>) {
        self.owners.insert(chat, tenant);
    }

    fn owner(&self, chat: &str) -> Option<Arc<str>> {
        self.owners.get(chat)
    }
}

/// What [`Store::snapshot`] made.
#[derive(Debug)]
pub enum Snapshot {
    /// A copy of the SQLite database, open, already unlinked.
    File(std::fs::File),
    /// The store is PostgreSQL, which `pg_dump` copies.
    Postgres,
    /// The store lives in memory: there is no file to copy.
    InMemory,
}

pub struct Store {
    shared: Arc<Shared>,
    runtime: tokio::runtime::Handle,
    stop: CancellationToken,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// What [`Store::begin`] needs to know of a request.
pub struct Begin<'a> {
    /// The tenant the chat belongs to.
    pub tenant: &'a Arc<str>,
    pub provider: &'a str,
    pub model: &'a str,
    /// The request as Chat Completions JSON (any door's, translated).
    pub request: &'a Map<String, Value>,
    /// The `x-toolgate-chat-id` header, if sent.
    pub chat_header: Option<&'a str>,
    /// The provider offers gateway tools.
    pub gateway_tools: bool,
}

impl Shared {
    /// The state a store starts in: its database not yet open, nothing
    /// queued, no chat live; `tx` is the writer's queue.
    fn new(config: StoreConfig, tx: mpsc::Sender<Vec<Write>>) -> Shared {
        Shared {
            config,
            db: OnceLock::new(),
            opening: AtomicBool::new(true),
            opened: tokio::sync::Notify::new(),
            tx,
            health: Mutex::new(Some("connecting".into())),
            heads: Heads::new(),
            live: Live::default(),
            last_drop_log: Mutex::new(None),
            queued: Mutex::new(HashMap::new()),
            written: tokio::sync::Notify::new(),
            missed: Mutex::new(HashMap::new()),
        }
    }
}

impl Store {
    /// Starts the writer thread; the database is opened there (a database
    /// that is down is retried; requests are served meanwhile).
    pub fn start(config: StoreConfig) -> std::io::Result<Store> {
        let (tx, rx) = mpsc::channel(QUEUE);
        let shared = Arc::new(Shared::new(config, tx));
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
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Whether the database is open. A request that arrives while the
    /// first attempt to open it is under way (right after start) waits for
    /// that attempt, at most [`OPEN_WAIT`]: a chat it names is not mistaken
    /// for someone else's, nor a stored response for a missing one.
    async fn open(&self) -> bool {
        if self.shared.db.get().is_some() {
            return true;
        }
        let opened = self.shared.opened.notified();
        tokio::pin!(opened);
        opened.as_mut().enable();
        if self.shared.opening.load(Ordering::Acquire) {
            let _ = tokio::time::timeout(OPEN_WAIT, opened).await;
        }
        self.shared.db.get().is_some()
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
        let tenant = request.tenant;
        let mut chain = link::Chain::for_tenant(tenant);
        let tries = link::prefixes(&mut chain, messages, LINK_TRIES);
        let (chat, known) = self.link(&request, tries, header).await;
        let known = (known.max(0) as usize).min(messages.len());
        self.shared.heads.own(chat.clone(), tenant.clone());
        self.shared.live.start(&chat);
        Some(Recorder::start(
            self.shared.clone(),
            chat,
            &request,
            chain,
            messages,
            known,
        ))
    }

    /// The chat of the request's tenant's that a history continues and how
    /// many of its messages are recorded already, given the states it
    /// reached ([`link::prefixes`]). A header naming a chat that is not the
    /// tenant's own (nor claimed by it now) starts a new chat, with an id of
    /// toolgate's.
    async fn link(
        &self,
        request: &Begin<'_>,
        tries: Vec<(String, usize)>,
        header: Option<&str>,
    ) -> (Arc<str>, i64) {
        let tenant = request.tenant;
        let header = match header {
            Some(h) if self.claim(h, request).await => Some(h),
            _ => None,
        };
        let fresh = || match header {
            Some(h) => (Arc::from(h), 0),
            None => (Arc::from(next_id().0), 0),
        };
        // This replica's memory first; the database when the memory does
        // not hold the history's last answer, and always when it is shared:
        // another replica's chat may have reached the same state later.
        let here: Vec<Vec<Reached<Arc<str>>>> = tries
            .iter()
            .map(|(hash, _)| self.shared.heads.find(hash))
            .collect();
        let mut best = link::choose(here.clone(), header);
        let replicas = self.shared.db.get().is_some_and(Db::is_shared);
        if (best.open() || replicas) && !tries.is_empty() && self.open().await {
            // While the last answer may still be landing (another replica
            // wrote it), the lookup is repeated within `link_wait_ms`; a
            // database of one replica's is asked once, and so is a last
            // answer that was waited for in vain before.
            let last = tries[0].0.clone();
            let others = self.shared.db.get().is_some_and(Db::is_shared)
                && !self.shared.heads.was_awaited(&last);
            let started = tokio::time::Instant::now();
            let deadline = started + self.shared.config.link_wait;
            let hashes: Vec<String> = tries.into_iter().map(|(h, _)| h).collect();
            loop {
                let shared = self.shared.clone();
                let (owner, asked) = (tenant.clone(), hashes.clone());
                let lookup = self.runtime.spawn(async move {
                    match shared.db.get() {
                        Some(db) => db.find_heads(&owner, &asked).await.ok(),
                        None => None,
                    }
                });
                if let Ok(Ok(Some(rows))) = tokio::time::timeout_at(deadline, lookup).await {
                    let found = hashes.iter().zip(&here).map(|(hash, known)| {
                        let mut chats = known.clone();
                        for (_, chat, len, at) in rows.iter().filter(|(h, ..)| h == hash) {
                            if !chats.iter().any(|r| *r.chat == **chat) {
                                chats.push(Reached {
                                    chat: Arc::from(chat.as_str()),
                                    len: *len,
                                    at: *at,
                                });
                            }
                        }
                        chats
                    });
                    best = link::choose(found, header);
                    if !best.open() {
                        break;
                    }
                }
                // Lookups every 15 ms at first, then every quarter of the
                // time waited so far: a long `link_wait_ms` asks a few times
                // a second, not sixty. The last lookup leaves it time to
                // answer.
                let now = tokio::time::Instant::now();
                let next = (now + (now - started) / 4).max(now + LINK_RETRY);
                let next = next.min(deadline.checked_sub(LINK_RETRY).unwrap_or(started));
                // A decision the memory made stands when the database does
                // not answer.
                if !others || !best.open() {
                    break;
                }
                if next <= now {
                    if best.open() {
                        self.shared.heads.awaited_in_vain(&last);
                        metrics::counter!(m::STORE_LINK_WAITS).increment(1);
                    }
                    break;
                }
                tokio::time::sleep_until(next).await;
            }
        }
        match best.choice {
            Choice::Continue(chat, len) => (chat, len),
            Choice::Unknown => fresh(),
        }
    }

    /// Whether chat `id` is `request`'s tenant's: already, or claimed now.
    /// A chat no one has is claimed at first sight with one conditional
    /// insert, so of two tenants naming one new id at once, on one replica
    /// or two, exactly one gets it; the other is told it is taken. Unsure
    /// (the database is not connected, or does not answer within the
    /// linking deadline) counts as not.
    async fn claim(&self, id: &str, request: &Begin<'_>) -> bool {
        let tenant = request.tenant;
        if let Some(owner) = self.shared.heads.owner(id) {
            return owner == *tenant;
        }
        if !self.open().await {
            return false;
        }
        let shared = self.shared.clone();
        let (chat, owner, provider, model) = (
            id.to_owned(),
            tenant.clone(),
            request.provider.to_owned(),
            request.model.to_owned(),
        );
        let claim = self.runtime.spawn(async move {
            match shared.db.get() {
                Some(db) => db
                    .claim(&chat, &owner, &provider, &model, now_ms())
                    .await
                    .ok()
                    .flatten(),
                None => None,
            }
        });
        match tokio::time::timeout(self.shared.config.link_wait, claim).await {
            Ok(Ok(Some(owner))) if *owner == **tenant => {
                self.shared.heads.own(Arc::from(id), tenant.clone());
                true
            }
            _ => false,
        }
    }

    /// The tenant that owns chat `id`, if it exists (recorded here or in
    /// the database).
    pub async fn owner(&self, id: &str) -> Result<Option<String>, StoreError> {
        if let Some(owner) = self.shared.heads.owner(id) {
            return Ok(Some(owner.to_string()));
        }
        let id = id.to_owned();
        self.read(move |shared| async move {
            let db = shared.db.get().ok_or(StoreError::NotReady)?;
            db.chat(&id)
                .await
                .map(|c| c.map(|c| c.tenant))
                .map_err(|e| StoreError::Database(e.to_string()))
        })
        .await
    }

    async fn read<T, F>(&self, f: impl FnOnce(Arc<Shared>) -> F) -> Result<T, StoreError>
    where
        F: Future<Output = Result<T, StoreError>> + Send + 'static,
        T: Send + 'static,
    {
        if !self.open().await {
            return Err(StoreError::NotReady);
        }
        self.runtime
            .spawn(f(self.shared.clone()))
            .await
            .map_err(|e| StoreError::Database(e.to_string()))?
    }

    /// Chats by last activity, newest first, as `filter` narrows them.
    pub async fn chats(&self, filter: ChatFilter) -> Result<Vec<ChatSummary>, StoreError> {
        self.read(move |shared| async move {
            let db = shared.db.get().ok_or(StoreError::NotReady)?;
            db.chats(&filter)
                .await
                .map_err(|e| StoreError::Database(e.to_string()))
        })
        .await
    }

    /// Usage totals from `from` to `to` (ms, rounded to their hours; `to`
    /// excluded), of `tenant` or of every tenant, grouped by `group_by`.
    pub async fn usage(
        &self,
        tenant: Option<Arc<str>>,
        from: i64,
        to: i64,
        group_by: Vec<UsageColumn>,
    ) -> Result<Vec<UsageRow>, StoreError> {
        self.read(move |shared| async move {
            let db = shared.db.get().ok_or(StoreError::NotReady)?;
            db.usage(
                tenant.as_deref(),
                hour_of(from),
                hour_of(to.saturating_add(HOUR_MS - 1)),
                &group_by,
            )
            .await
            .map_err(|e| StoreError::Database(e.to_string()))
        })
        .await
    }

    /// Keeps a new managed key (an admin's request waits for it; traffic
    /// never writes keys).
    pub async fn create_key(&self, key: KeyRow) -> Result<(), StoreError> {
        self.read(move |shared| async move {
            let db = shared.db.get().ok_or(StoreError::NotReady)?;
            db.insert_key(&key).await.map_err(db_error)
        })
        .await
    }

    /// Every managed key, the revoked ones too, oldest first.
    pub async fn keys(&self) -> Result<Vec<KeyRow>, StoreError> {
        self.read(|shared| async move {
            let db = shared.db.get().ok_or(StoreError::NotReady)?;
            db.keys().await.map_err(db_error)
        })
        .await
    }

    /// Changes a managed key's name, policy and expiry; whether it exists.
    pub async fn update_key(&self, key: KeyRow) -> Result<bool, StoreError> {
        self.read(move |shared| async move {
            let db = shared.db.get().ok_or(StoreError::NotReady)?;
            db.update_key(&key, now_ms()).await.map_err(db_error)
        })
        .await
    }

    /// Revokes a managed key; whether it was live.
    pub async fn revoke_key(&self, id: String) -> Result<bool, StoreError> {
        self.read(move |shared| async move {
            let db = shared.db.get().ok_or(StoreError::NotReady)?;
            db.revoke_key(&id, now_ms()).await.map_err(db_error)
        })
        .await
    }

    /// What key `key_id` spent since `since` (ms): micro-dollars and tokens.
    pub async fn key_spend(&self, key_id: String, since: i64) -> Result<(i64, i64), StoreError> {
        self.read(move |shared| async move {
            let db = shared.db.get().ok_or(StoreError::NotReady)?;
            db.key_spend(&key_id, hour_of(since))
                .await
                .map_err(db_error)
        })
        .await
    }

    /// What tenant `tenant` spent since `since` (ms), all its keys
    /// together: micro-dollars and tokens.
    pub async fn tenant_spend(&self, tenant: String, since: i64) -> Result<(i64, i64), StoreError> {
        self.read(move |shared| async move {
            let db = shared.db.get().ok_or(StoreError::NotReady)?;
            db.tenant_spend(&tenant, hour_of(since))
                .await
                .map_err(db_error)
        })
        .await
    }

    /// Notes when managed keys were last used (queued on the store's
    /// runtime; nothing waits for it).
    pub fn touch_keys(&self, used: Vec<(String, i64)>) {
        let shared = self.shared.clone();
        self.runtime.spawn(async move {
            if let Some(db) = shared.db.get()
                && let Err(e) = db.touch_keys(&used).await
            {
                tracing::debug!(error = %e, "cannot note when keys were last used");
            }
        });
    }

    /// Runs `task` on the store's runtime until it ends or the store
    /// closes (the managed keys' expiry timer).
    pub fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        let stop = self.stop.clone();
        self.runtime.spawn(async move {
            tokio::select! {
                () = stop.cancelled() => {}
                () = task => {}
            }
        });
    }

    /// Calls `on_rows` with every managed key (the revoked ones too): when the database
    /// opens, whenever a replica announces a change (PostgreSQL `NOTIFY`),
    /// and every [`KEYS_REREAD`] in case an announcement was missed.
    pub fn watch_keys(&self, on_rows: Arc<dyn Fn(Vec<KeyRow>) + Send + Sync>) {
        let shared = self.shared.clone();
        let stop = self.stop.clone();
        self.runtime.spawn(async move {
            // The database first: the listener and the first read need it.
            while shared.db.get().is_none() {
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(Duration::from_millis(50)) => {}
                }
            }
            let mut listener = None;
            loop {
                if let Some(db) = shared.db.get() {
                    if listener.is_none() {
                        listener = db.listen_keys().await.ok().flatten();
                    }
                    match db.keys().await {
                        Ok(rows) => on_rows(rows),
                        Err(e) => tracing::warn!(error = %e, "cannot read the managed keys; the last read stays in force"),
                    }
                }
                let announced = async {
                    match listener.as_mut() {
                        Some(l) => l.recv().await.map(drop),
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(KEYS_REREAD) => {}
                    heard = announced => {
                        if heard.is_err() {
                            // Reconnected on the next turn.
                            listener = None;
                        }
                    }
                }
            }
        });
    }

    /// Queues what a request used (one row per provider it reached); added
    /// to its hour's totals by the writer. Kept whatever `record` says.
    pub fn record_usage(&self, used: Vec<Used>) {
        if !used.is_empty() {
            self.shared
                .push(used.into_iter().map(Write::Usage).collect());
        }
    }

    /// A chat and its messages in order (any tenant's: the caller checks
    /// the summary's `tenant`).
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

    /// Live rows of `chat`, and the rows its answers in flight made so far
    /// (not in the database yet). The viewer is gone when the [`Viewing`]
    /// is dropped, however its task ends: a view aborted mid-stream leaves
    /// nothing behind.
    pub fn subscribe(&self, chat: &str) -> (Viewing, Vec<Arc<Message>>) {
        let (rx, recent) = self.shared.live.subscribe(chat);
        let viewing = Viewing {
            shared: self.shared.clone(),
            chat: Arc::from(chat),
            rx: Some(rx),
        };
        (viewing, recent)
    }

    /// A consistent copy of a SQLite store, as an open file of its own
    /// (already unlinked: it is gone when the handle is closed), or why there
    /// is none. The copy is made by the store's one connection, so the
    /// writer waits while it is made (rows queue meanwhile).
    pub async fn snapshot(&self) -> Result<Snapshot, StoreError> {
        let dir = self
            .shared
            .db
            .get()
            .and_then(|db| db.file().and_then(std::path::Path::parent))
            .filter(|d| !d.as_os_str().is_empty())
            .map_or_else(std::env::temp_dir, std::path::Path::to_path_buf);
        let path = dir.join(format!(".toolgate-backup-{}.db", next_id().0));
        let name = path.display().to_string();
        // Decided once the database is open (a request right after start
        // waits for it): `None` for a store in memory, which has no file.
        let made = self
            .read(move |shared| async move {
                let db = shared.db.get().ok_or(StoreError::NotReady)?;
                if !db.is_shared() && db.file().is_none() {
                    return Ok(None);
                }
                db.snapshot(&name)
                    .await
                    .map(Some)
                    .map_err(|e| StoreError::Database(e.to_string()))
            })
            .await;
        match made? {
            None => return Ok(Snapshot::InMemory),
            Some(false) => return Ok(Snapshot::Postgres),
            Some(true) => {}
        }
        let opened = std::fs::File::open(&path);
        let _ = std::fs::remove_file(&path);
        opened
            .map(Snapshot::File)
            .map_err(|e| StoreError::Database(format!("cannot read the copy: {e}")))
    }

    /// Keeps `tenant`'s Responses API answer for `previous_response_id`
    /// (queued), with the chat its exchange was recorded in.
    pub fn save_response(
        &self,
        tenant: Arc<str>,
        id: String,
        chat: Option<&str>,
        conversation: Value,
        response: Value,
    ) {
        self.shared.push(vec![Write::Response(StoredResponse {
            id,
            tenant,
            at: now_ms(),
            conversation: Arc::new(conversation),
            response: Arc::new(response),
            chat_id: Arc::from(chat.unwrap_or_default()),
        })]);
    }

    /// Keeps `tenant`'s gateway steps for the client's follow-up under each
    /// call id (queued like every write: traffic never waits for it).
    pub fn save_steps(&self, tenant: Arc<str>, ids: Vec<String>, steps: Value) {
        self.shared.push(vec![Write::Steps(StoredSteps {
            tenant,
            ids,
            at: now_ms(),
            steps,
        })]);
    }

    /// `tenant`'s gateway steps kept under any of `ids` (by any replica),
    /// each with the ids it was kept under; empty when the database does not
    /// answer within 250 ms.
    pub async fn steps(&self, tenant: Arc<str>, ids: Vec<String>) -> Vec<(Vec<String>, Value)> {
        let lookup = self.read(move |shared| async move {
            let db = shared.db.get().ok_or(StoreError::NotReady)?;
            db.steps(&tenant, &ids)
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

    /// One of `tenant`'s stored responses. A request reads its own writes: a response
    /// still queued on this replica is read from the queue, and one not
    /// found is looked for again for up to [`RESPONSE_SETTLE`], while another
    /// replica's write of it may still be landing.
    pub async fn response(&self, tenant: Arc<str>, id: &str) -> Result<Option<Kept>, StoreError> {
        let deadline = Instant::now() + RESPONSE_SETTLE;
        loop {
            if let Some(found) = self.shared.queued_response(&tenant, id) {
                return Ok(Some(found));
            }
            let (tenant, owned) = (tenant.clone(), id.to_owned());
            let found = self
                .read(move |shared| async move {
                    let db = shared.db.get().ok_or(StoreError::NotReady)?;
                    db.response(&tenant, &owned)
                        .await
                        .map_err(|e| StoreError::Database(e.to_string()))
                })
                .await?;
            if found.is_some() || Instant::now() >= deadline {
                return Ok(found);
            }
            tokio::time::sleep(RESPONSE_RETRY).await;
        }
    }

    /// Deletes one of `tenant`'s stored responses; a response still queued
    /// here is written first (waiting at most [`RESPONSE_SETTLE`]), so the
    /// delete cannot be overtaken by its write.
    pub async fn delete_response(&self, tenant: Arc<str>, id: &str) -> Result<bool, StoreError> {
        let deadline = tokio::time::Instant::now() + RESPONSE_SETTLE;
        while self.shared.is_queued(id) {
            let written = self.shared.written.notified();
            if !self.shared.is_queued(id)
                || tokio::time::timeout_at(deadline, written).await.is_err()
            {
                break;
            }
        }
        let id = id.to_owned();
        self.read(move |shared| async move {
            let db = shared.db.get().ok_or(StoreError::NotReady)?;
            db.delete_response(&tenant, &id)
                .await
                .map_err(|e| StoreError::Database(e.to_string()))
        })
        .await
    }

    /// Stops taking rows, writes what is queued and closes the database,
    /// waiting at most `deadline`. Blocking: call it off the runtimes.
    pub fn close(&self, deadline: Duration) {
        self.stop.cancel();
        let Some(thread) = self
            .thread
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        else {
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

/// A viewer of a chat's live rows (see [`Store::subscribe`]).
pub struct Viewing {
    shared: Arc<Shared>,
    chat: Arc<str>,
    rx: Option<broadcast::Receiver<Arc<Message>>>,
}

impl Viewing {
    /// The next live row.
    pub async fn recv(&mut self) -> Result<Arc<Message>, broadcast::error::RecvError> {
        match &mut self.rx {
            Some(rx) => rx.recv().await,
            None => Err(broadcast::error::RecvError::Closed),
        }
    }
}

impl Drop for Viewing {
    fn drop(&mut self) {
        if let Some(rx) = self.rx.take() {
            self.shared.live.unsubscribe(&self.chat, rx);
        }
    }
}

/// Chat ids from clients: short and plain, as they end up in URLs and logs.
fn valid_chat_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}
