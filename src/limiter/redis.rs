//! The counters every replica shares, in Redis, each step atomic on
//! Redis's own clock (`batch.lua`). A tenant's admissions and settles are
//! queued per replica into one *lane*: while one batch of them is in
//! Redis, the next ones queue, and go together as the next script call, in
//! the order they came. Under load a request costs a fraction of a script
//! call, and it waits for one round trip (its batch's) at most after the
//! one before it; an idle lane sends each op at once. A lane's keys share
//! the tenant's hash tag, so a Redis Cluster can run every batch.
//!
//! Each worker thread keeps its own connection (the `redis` crate's
//! connection manager, which reconnects); every call is bounded by
//! `redis_timeout_ms`, and a connection that failed is not tried again for
//! a second (checks meanwhile fail at once, as `on_redis_error` says).

use std::collections::HashMap;
use std::num::NonZero;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::{OnceCell, oneshot};

use super::gcra::Reading;
use super::{Check, Limit, Readings, Settle, Verdict};

/// How long a replica holds a concurrency slot without settling it: a
/// replica that dies mid-request frees its slots after this.
const LEASE: Duration = Duration::from_secs(15 * 60);
/// How long after a failed connection attempt checks fail without trying.
const RECONNECT_AFTER: Duration = Duration::from_secs(1);
/// The most ops one script call carries; more wait for the next.
const MAX_BATCH: usize = 256;
/// An admission's reply: verdict, subject, wait and four readings.
const REPLY_LEN: usize = 7;
const RUNNING: &str = "a running lane stays in the map";

pub(super) struct Counters {
    client: redis::Client,
    timeout: Duration,
    /// One connection per worker thread, made on first use.
    slots: Box<[Slot]>,
    batch: redis::Script,
    /// The ops queued per running lane (a tenant's hash tag); a lane is
    /// here exactly while a task runs its batches.
    lanes: Mutex<HashMap<String, Vec<Op>>>,
    /// Whether the last call succeeded (errors are logged when this changes).
    healthy: AtomicBool,
}

#[derive(Default)]
struct Slot {
    conn: OnceCell<ConnectionManager>,
    failed_at: Mutex<Option<Instant>>,
}

/// One admission or settle, as `batch.lua` reads it.
struct Op {
    kind: OpKind,
    member: String,
    keys: Vec<String>,
    args: Vec<String>,
    /// An admission's waiter.
    reply: Option<Reply>,
}

#[derive(Clone, Copy)]
enum OpKind {
    Admit,
    Settle,
}

impl OpKind {
    fn code(self) -> &'static str {
        match self {
            OpKind::Admit => "a",
            OpKind::Settle => "s",
        }
    }
}

struct Reply {
    tx: oneshot::Sender<Result<[i64; REPLY_LEN], RedisFailure>>,
    /// Frees the admission's slots when its waiter is gone.
    release: Box<Op>,
}

impl Op {
    fn new(kind: OpKind, member: &str) -> Op {
        Op {
            kind,
            member: member.to_owned(),
            keys: Vec::new(),
            args: Vec::new(),
            reply: None,
        }
    }
}

/// The lane of a subject's keys: its hash tag, `{tenant}`.
fn lane(base: &str) -> &str {
    match (base.find('{'), base.find('}')) {
        (Some(open), Some(close)) if open < close => &base[open..=close],
        _ => base,
    }
}

/// Why Redis did not answer.
#[derive(Debug, thiserror::Error)]
pub(super) enum RedisFailure {
    #[error("{0}")]
    Redis(#[from] redis::RedisError),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("the last connection attempt failed less than a second ago")]
    Waiting,
    #[error("unexpected reply {0:?}")]
    Reply(Vec<i64>),
    #[error("{0}")]
    Batch(Arc<RedisFailure>),
    #[error("the batch was dropped")]
    Dropped,
}

impl Counters {
    pub(super) fn new(url: &str, timeout: Duration, workers: usize) -> Result<Self, String> {
        let client = redis::Client::open(url).map_err(|e| e.to_string())?;
        Ok(Counters {
            client,
            timeout,
            slots: (0..workers.max(1)).map(|_| Slot::default()).collect(),
            batch: redis::Script::new(include_str!("batch.lua")),
            lanes: Mutex::default(),
            healthy: AtomicBool::new(true),
        })
    }

    async fn connection(&self) -> Result<ConnectionManager, RedisFailure> {
        let slot = self
            .slots
            .get(crate::workers::current())
            .unwrap_or(&self.slots[0]);
        if let Some(conn) = slot.conn.get() {
            return Ok(conn.clone());
        }
        let recent = slot
            .failed_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some_and(|at| at.elapsed() < RECONNECT_AFTER);
        if recent {
            return Err(RedisFailure::Waiting);
        }
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout));
        let made = slot
            .conn
            .get_or_try_init(|| async {
                tokio::time::timeout(
                    self.timeout,
                    ConnectionManager::new_with_config(self.client.clone(), config),
                )
                .await
                .map_err(|_| RedisFailure::Timeout(self.timeout))?
                .map_err(RedisFailure::from)
            })
            .await;
        if made.is_err() {
            *slot
                .failed_at
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
        }
        made.cloned()
    }

    /// Checks `check` in its tenant's next batch.
    pub(super) async fn admit(
        self: &Arc<Self>,
        check: &Check<'_>,
    ) -> Result<Verdict, RedisFailure> {
        let result = self.try_admit(check).await;
        self.note(result.as_ref().err());
        result
    }

    async fn try_admit(self: &Arc<Self>, check: &Check<'_>) -> Result<Verdict, RedisFailure> {
        let mut op = Op::new(OpKind::Admit, check.member);
        op.args.push(check.subjects.len().to_string());
        // Frees the slots again if the request is gone when its verdict comes.
        let mut release = Op::new(OpKind::Settle, check.member);
        release
            .args
            .extend(["0".to_owned(), check.subjects.len().to_string()]);
        for subject in &check.subjects {
            let keys = Keys::of(subject.redis, subject.budget.map_or(0, |b| b.period));
            let quota = subject.quota;
            let concurrent = quota.max_concurrent_requests.map_or(0, NonZero::get);
            release.keys.extend([
                keys.tokens.clone(),
                keys.in_flight.clone(),
                keys.budget.clone(),
            ]);
            release.args.extend([
                "0".to_owned(),
                u8::from(concurrent > 0).to_string(),
                "0".to_owned(),
                "0".to_owned(),
            ]);
            op.keys
                .extend([keys.requests, keys.tokens, keys.in_flight, keys.budget]);
            op.args.extend([
                quota
                    .requests_per_minute
                    .map_or(0, NonZero::get)
                    .to_string(),
                quota.tokens_per_minute.map_or(0, NonZero::get).to_string(),
                concurrent.to_string(),
                subject.budget.map_or(0.0, |b| b.amount).to_string(),
            ]);
        }
        let (tx, rx) = oneshot::channel();
        op.reply = Some(Reply {
            tx,
            release: Box::new(release),
        });
        self.submit(lane(check.subjects.first().map_or("", |s| s.redis)), op);
        // The batch before this one may still be in Redis.
        let reply = tokio::time::timeout(self.timeout * 2, rx)
            .await
            .map_err(|_| RedisFailure::Timeout(self.timeout))?
            .map_err(|_| RedisFailure::Dropped)??;
        let [
            verdict,
            subject,
            wait,
            r_remaining,
            r_reset,
            t_remaining,
            t_reset,
        ] = reply;
        let limit = match verdict {
            0 => return Ok(Verdict::Admitted),
            1 => Limit::Budget,
            2 => Limit::Concurrency,
            3 => Limit::Requests,
            4 => Limit::Tokens,
            _ => return Err(RedisFailure::Reply(reply.to_vec())),
        };
        let n = |v: i64| u64::try_from(v).unwrap_or(0);
        let index = usize::try_from(subject - 1).unwrap_or(usize::MAX);
        let Some(refusing) = check.subjects.get(index) else {
            return Err(RedisFailure::Reply(reply.to_vec()));
        };
        let quota = refusing.quota;
        Ok(Verdict::Refused {
            subject: index,
            limit,
            wait_us: (wait >= 0).then(|| n(wait)),
            readings: Readings {
                requests: quota.requests_per_minute.map(|limit| Reading {
                    limit: u64::from(limit.get()),
                    remaining: n(r_remaining),
                    reset_us: n(r_reset),
                }),
                tokens: quota.tokens_per_minute.map(|limit| Reading {
                    limit: limit.get(),
                    remaining: n(t_remaining),
                    reset_us: n(t_reset),
                }),
            },
        })
    }

    /// Queues the settling of a request whose answer ended into its
    /// tenant's next batch.
    pub(super) fn settle(self: &Arc<Self>, settle: &Settle) {
        let mut op = Op::new(OpKind::Settle, &settle.member);
        op.args
            .extend([settle.tokens.to_string(), settle.subjects.len().to_string()]);
        for subject in &settle.subjects {
            let keys = Keys::of(&subject.redis, subject.period.unwrap_or(0));
            op.keys.extend([keys.tokens, keys.in_flight, keys.budget]);
            op.args.extend([
                subject.tokens_per_minute.unwrap_or(0).to_string(),
                u8::from(subject.slot).to_string(),
                if subject.period.is_some() {
                    subject.spend
                } else {
                    0.0
                }
                .to_string(),
                subject.budget_ttl_secs.to_string(),
            ]);
        }
        self.submit(lane(settle.subjects.first().map_or("", |s| &s.redis)), op);
    }

    /// Adds `op` to `lane`'s queue, and starts the lane's batches when none
    /// is running. Must be called inside a runtime.
    fn submit(self: &Arc<Self>, lane: &str, op: Op) {
        let mut lanes = self.lanes.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(queue) = lanes.get_mut(lane) {
            queue.push(op);
            return;
        }
        lanes.insert(lane.to_owned(), Vec::new());
        drop(lanes);
        let (counters, lane) = (self.clone(), lane.to_owned());
        tokio::spawn(async move { counters.drain(lane, vec![op]).await });
    }

    /// Runs `batch`, then whatever queued meanwhile, until the lane's
    /// queue is empty (the lane is then removed: a later op starts it again).
    async fn drain(self: Arc<Self>, lane: String, mut batch: Vec<Op>) {
        loop {
            let result = self.run(&batch).await;
            let settles = batch.iter().filter(|op| op.reply.is_none()).count();
            let admissions = batch.into_iter().filter_map(|op| op.reply);
            match result {
                Ok(replies) => {
                    self.note(None);
                    let mut replies = replies.chunks_exact(REPLY_LEN);
                    for reply in admissions {
                        let Some(verdict) = replies.next().and_then(|r| r.try_into().ok()) else {
                            let _ = reply.tx.send(Err(RedisFailure::Reply(Vec::new())));
                            continue;
                        };
                        if let Err(Ok([0, ..])) = reply.tx.send(Ok(verdict)) {
                            // Admitted, and nobody waits for it any more:
                            // its slots would stay taken for the lease.
                            self.lanes
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .get_mut(&lane)
                                .expect(RUNNING)
                                .push(*reply.release);
                        }
                    }
                }
                Err(failure) => {
                    // Each admission counts its own failure.
                    let failure = Arc::new(failure);
                    for reply in admissions {
                        let _ = reply.tx.send(Err(RedisFailure::Batch(failure.clone())));
                    }
                    for _ in 0..settles {
                        self.note(Some(&RedisFailure::Batch(failure.clone())));
                    }
                }
            }
            let mut lanes = self.lanes.lock().unwrap_or_else(PoisonError::into_inner);
            let queue = lanes.get_mut(&lane).expect(RUNNING);
            if queue.is_empty() {
                lanes.remove(&lane);
                return;
            }
            let take = queue.len().min(MAX_BATCH);
            batch = queue.drain(..take).collect();
        }
    }

    /// One `batch.lua` call for `batch`: the admissions' replies, in order.
    async fn run(&self, batch: &[Op]) -> Result<Vec<i64>, RedisFailure> {
        let mut conn = self.connection().await?;
        let mut call = self.batch.prepare_invoke();
        call.arg(LEASE.as_micros() as u64);
        for op in batch {
            call.arg(op.kind.code()).arg(&op.member);
            for key in &op.keys {
                call.key(key);
            }
            for arg in &op.args {
                call.arg(arg);
            }
        }
        let replies: Vec<i64> = tokio::time::timeout(self.timeout, call.invoke_async(&mut conn))
            .await
            .map_err(|_| RedisFailure::Timeout(self.timeout))??;
        Ok(replies)
    }

    /// Counts a failure, and logs when Redis starts or stops failing.
    fn note(&self, failure: Option<&RedisFailure>) {
        match failure {
            Some(e) => {
                metrics::counter!(crate::metrics::LIMITER_ERRORS).increment(1);
                if self.healthy.swap(false, Ordering::Relaxed) {
                    tracing::warn!(error = %e, "Redis cannot answer the limiter; `on_redis_error` decides requests until it does");
                }
            }
            None => {
                if !self.healthy.swap(true, Ordering::Relaxed) {
                    tracing::info!("Redis answers the limiter again");
                }
            }
        }
    }
}

/// A subject's keys in Redis, under `base` (`toolgate:{tenant}` or
/// `toolgate:{tenant}:key:ID`). The braces make one hash tag of the tenant,
/// so a Redis Cluster keeps one request's keys (one script's) together.
struct Keys {
    requests: String,
    tokens: String,
    in_flight: String,
    budget: String,
}

impl Keys {
    fn of(base: &str, period: u64) -> Keys {
        Keys {
            requests: format!("{base}:requests"),
            tokens: format!("{base}:tokens"),
            in_flight: format!("{base}:in_flight"),
            budget: format!("{base}:spent:{period}"),
        }
    }
}
