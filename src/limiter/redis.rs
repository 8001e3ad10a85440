//! The counters every replica shares, in Redis, each step atomic on
//! Redis's own clock (`batch.lua`). A tenant's admissions and settles are
//! queued per replica into one *lane*: while one batch of them is in
//! Redis, the next ones queue, and go together as the next script call, in
//! the order they came. Under load a request costs a fraction of a script
//! call, and it waits for one round trip (its batch's) at most after the
//! one before it; an idle lane sends each op at once. A lane's keys share
//! the tenant's hash tag, so a Redis Cluster can run every batch.
//!
//! Each worker thread keeps its own lanes and its own connections
//! ([`Connection`]: one socket a call, driven by the lane's task on the
//! worker's reactor, so a call wakes no other task and no other thread),
//! one for each of its lanes calling at once, up to [`MAX_CONNECTIONS`]. A
//! connection whose call failed is dropped and the next call connects
//! again; every call is bounded by `redis_timeout_ms`, and after a failed
//! connection attempt none is tried for a second (checks meanwhile fail at
//! once, as `on_redis_error` says).
//!
//! A call that failed may still run: one that timed out on our side sits in
//! the connection, and Redis runs it when it wakes. So no failed call is
//! forgotten: its admissions are released and its settles sent again, in
//! the lane's next calls (one a second while Redis fails), until Redis
//! answers. Each request's record in Redis makes that safe: a settle or a
//! release runs once, and an admission that arrives after its release
//! takes nothing.

use std::collections::HashMap;
use std::num::NonZero;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{Semaphore, SemaphorePermit, oneshot};

use super::connection::Connection;
use super::gcra::Reading;
use super::{Check, Limit, Readings, Seed, Settle, Verdict};

/// How long a replica holds a concurrency slot without settling it: a
/// replica that dies mid-request frees its slots after this.
const LEASE: Duration = Duration::from_secs(15 * 60);
/// How long after a failed connection attempt checks fail without trying.
const RECONNECT_AFTER: Duration = Duration::from_secs(1);
/// How long a lane waits after a failed call before sending what it must
/// reconcile again.
const RETRY_AFTER: Duration = Duration::from_secs(1);
/// The most releases and settles a lane keeps to send again; beyond them
/// the oldest are dropped (their slots then free with their lease).
const MAX_UNSETTLED: usize = 10_000;
/// The most ops one script call carries; more wait for the next.
const MAX_BATCH: usize = 256;
/// How long a connection may stay idle before it is checked for a closed
/// end (a restarted Redis) before its next call.
const RECHECK_AFTER: Duration = Duration::from_millis(500);
/// The most connections a worker holds: its lanes calling at once beyond
/// them wait for one.
const MAX_CONNECTIONS: usize = 16;
/// An admission's reply: verdict, subject, wait and two readings of
/// three numbers (limit, remaining, reset).
const REPLY_LEN: usize = 9;
const RUNNING: &str = "a running lane stays in the map";

pub(super) struct Counters {
    /// Where Redis is, as `redis_url` says.
    info: redis::ConnectionInfo,
    timeout: Duration,
    /// Each worker thread's lanes and connections.
    slots: Box<[Slot]>,
    batch: redis::Script,
    /// Whether the last call succeeded (errors are logged when this changes).
    healthy: AtomicBool,
}

/// One worker's part.
struct Slot {
    /// The ops queued per running lane (a tenant's hash tag); a lane is
    /// here exactly while a task runs its batches.
    lanes: Mutex<HashMap<String, Vec<Op>>>,
    /// Its connections not in a call, and since when.
    idle: Mutex<Vec<(Connection, Instant)>>,
    /// A permit per connection, idle or in a call.
    connections: Semaphore,
    failed_at: Mutex<Option<Instant>>,
}

impl Default for Slot {
    fn default() -> Slot {
        Slot {
            lanes: Mutex::default(),
            idle: Mutex::default(),
            connections: Semaphore::new(MAX_CONNECTIONS),
            failed_at: Mutex::default(),
        }
    }
}

/// One admission or settle, as `batch.lua` reads it.
struct Op {
    kind: OpKind,
    member: String,
    keys: Vec<String>,
    args: Vec<String>,
    /// An admission's waiter.
    reply: Option<oneshot::Sender<Result<[i64; REPLY_LEN], RedisFailure>>>,
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

    /// An admission of `check`, as `batch.lua` reads it.
    fn admission(check: &Check<'_>) -> Op {
        let mut op = Op::new(OpKind::Admit, check.member);
        let first = check.subjects.first().map_or("", |s| s.redis);
        op.keys.push(record(first, check.member));
        op.args.extend([
            check.subjects.len().to_string(),
            check.reserve_tokens.to_string(),
        ]);
        for subject in &check.subjects {
            let keys = Keys::of(subject.redis, subject.budget.map_or(0, |b| b.period));
            let quota = subject.quota;
            let concurrent = quota.max_concurrent_requests.map_or(0, NonZero::get);
            op.keys.extend([
                keys.requests,
                keys.tokens,
                keys.in_flight,
                keys.budget,
                keys.held,
            ]);
            op.args.extend([
                quota
                    .requests_per_minute
                    .map_or(0, NonZero::get)
                    .to_string(),
                quota.tokens_per_minute.map_or(0, NonZero::get).to_string(),
                concurrent.to_string(),
                subject.budget.map_or(0.0, |b| b.amount).to_string(),
                subject.budget.map_or(0.0, |b| b.reserve).to_string(),
                match subject.budget.map(|b| b.seed) {
                    Some(Seed::Known(spent)) => spent.to_string(),
                    Some(Seed::Ask) => "-2".to_owned(),
                    Some(Seed::Zero) | None => "-1".to_owned(),
                },
                subject.budget.map_or(0, |b| b.ttl_secs).to_string(),
            ]);
        }
        op
    }

    /// The settle that undoes an admission (frees its concurrency slots,
    /// gives its reservation back, charges nothing) if it ran, and keeps it
    /// from taking anything if it runs later. Read from the admission's own
    /// keys and arguments (`batch.lua`'s layout: the record, then five keys
    /// a subject; the subject count and reserved tokens, then seven
    /// arguments a subject).
    fn release(self) -> Op {
        let mut release = Op::new(OpKind::Settle, &self.member);
        let subjects = self.keys.len() / 5;
        release
            .args
            .extend(["0".to_owned(), self.args[1].clone(), subjects.to_string()]);
        release.keys.push(self.keys[0].clone());
        for (keys, args) in self.keys[1..]
            .chunks_exact(5)
            .zip(self.args[2..].chunks_exact(7))
        {
            release.keys.extend_from_slice(&keys[1..5]);
            let slot = u8::from(args[2] != "0");
            release.args.extend([
                args[1].clone(),
                slot.to_string(),
                "0".to_owned(),
                args[4].clone(),
                args[6].clone(),
                "1".to_owned(),
            ]);
        }
        release
    }
}

/// The key of the record of request `member`, beside its first subject's
/// keys (`base`), under its tenant's hash tag.
fn record(base: &str, member: &str) -> String {
    format!("toolgate:{}:op:{member}", lane(base))
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
            info: client.get_connection_info().clone(),
            timeout,
            slots: (0..workers.max(1)).map(|_| Slot::default()).collect(),
            batch: redis::Script::new(include_str!("batch.lua")),
            healthy: AtomicBool::new(true),
        })
    }

    /// The current worker's slot and its index.
    fn slot(&self) -> usize {
        let worker = crate::workers::current();
        if worker < self.slots.len() { worker } else { 0 }
    }

    /// One of `slot`'s connections for a call: an idle one, else a new
    /// one, with the permit it holds while in the call.
    async fn connection<'a>(
        &self,
        slot: &'a Slot,
    ) -> Result<(SemaphorePermit<'a>, Connection), RedisFailure> {
        let permit = tokio::time::timeout(self.timeout, slot.connections.acquire())
            .await
            .map_err(|_| RedisFailure::Timeout(self.timeout))?
            .expect("the semaphore is never closed");
        loop {
            let idle = slot
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop();
            match idle {
                // One idle a while is checked first: Redis may have restarted.
                Some((connection, since))
                    if since.elapsed() < RECHECK_AFTER || connection.is_open() =>
                {
                    return Ok((permit, connection));
                }
                Some(_) => continue,
                None => break,
            }
        }
        let recent = slot
            .failed_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some_and(|at| at.elapsed() < RECONNECT_AFTER);
        if recent {
            return Err(RedisFailure::Waiting);
        }
        let opened = tokio::time::timeout(self.timeout, Connection::open(&self.info))
            .await
            .map_err(|_| RedisFailure::Timeout(self.timeout))
            .and_then(|opened| opened.map_err(RedisFailure::from));
        if opened.is_err() {
            *slot
                .failed_at
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
        }
        Ok((permit, opened?))
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
        let mut op = Op::admission(check);
        let (tx, rx) = oneshot::channel();
        op.reply = Some(tx);
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
            r_limit,
            r_remaining,
            r_reset,
            t_limit,
            t_remaining,
            t_reset,
        ] = reply;
        let n = |v: i64| u64::try_from(v).unwrap_or(0);
        let reading = |limit: i64, remaining: i64, reset: i64| {
            (limit > 0).then(|| Reading {
                limit: n(limit),
                remaining: n(remaining),
                reset_us: n(reset),
            })
        };
        let readings = Readings {
            requests: reading(r_limit, r_remaining, r_reset),
            tokens: reading(t_limit, t_remaining, t_reset),
        };
        let index = usize::try_from(subject - 1).unwrap_or(usize::MAX);
        if index >= check.subjects.len() {
            return match verdict {
                0 => Ok(Verdict::Admitted { readings }),
                _ => Err(RedisFailure::Reply(reply.to_vec())),
            };
        }
        let limit = match verdict {
            1 => Limit::Budget,
            2 => Limit::Concurrency,
            3 => Limit::Requests,
            4 => Limit::Tokens,
            5 => return Ok(Verdict::Unknown { subject: index }),
            7 => Limit::Reserved,
            _ => return Err(RedisFailure::Reply(reply.to_vec())),
        };
        Ok(Verdict::Refused {
            subject: index,
            limit,
            wait_us: (wait >= 0).then(|| n(wait)),
            readings,
        })
    }

    /// Queues the settling of a request whose answer ended into its
    /// tenant's next batch.
    pub(super) fn settle(self: &Arc<Self>, settle: &Settle) {
        let mut op = Op::new(OpKind::Settle, &settle.member);
        let first = settle.subjects.first().map_or("", |s| &s.redis);
        op.keys.push(record(first, &settle.member));
        op.args.extend([
            settle.tokens.to_string(),
            settle.reserved_tokens.to_string(),
            settle.subjects.len().to_string(),
        ]);
        for subject in &settle.subjects {
            let keys = Keys::of(&subject.redis, subject.period.unwrap_or(0));
            op.keys
                .extend([keys.tokens, keys.in_flight, keys.budget, keys.held]);
            let budgeted = |v: f64| if subject.period.is_some() { v } else { 0.0 };
            op.args.extend([
                subject.tokens_per_minute.unwrap_or(0).to_string(),
                u8::from(subject.slot).to_string(),
                budgeted(subject.spend).to_string(),
                budgeted(subject.reserved).to_string(),
                subject.budget_ttl_secs.to_string(),
                u8::from(subject.rebuild).to_string(),
            ]);
        }
        self.submit(lane(settle.subjects.first().map_or("", |s| &s.redis)), op);
    }

    /// Adds `op` to `lane`'s queue on this worker, and starts the lane's
    /// batches when none is running. Must be called inside a runtime.
    fn submit(self: &Arc<Self>, lane: &str, op: Op) {
        let slot = self.slot();
        let mut lanes = self.slots[slot]
            .lanes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(queue) = lanes.get_mut(lane) {
            queue.push(op);
            return;
        }
        lanes.insert(lane.to_owned(), Vec::new());
        drop(lanes);
        let (counters, lane) = (self.clone(), lane.to_owned());
        tokio::spawn(async move { counters.drain(slot, lane, vec![op]).await });
    }

    /// Runs `batch`, then whatever queued meanwhile, until the lane's
    /// queue is empty and nothing is left to reconcile (the lane is then
    /// removed: a later op starts it again).
    async fn drain(self: Arc<Self>, slot: usize, lane: String, mut batch: Vec<Op>) {
        // Releases and settles whose call failed: sent again, first, in
        // the next call.
        let mut unsettled: Vec<Op> = Vec::new();
        loop {
            // An admission nobody waits for any more was never sent: it
            // needs no release.
            batch.retain(|op| op.reply.as_ref().is_none_or(|tx| !tx.is_closed()));
            let result = if batch.is_empty() {
                Ok(Vec::new())
            } else {
                self.run(slot, &batch).await
            };
            let failed = result.is_err();
            match result {
                Ok(replies) => {
                    self.note(None);
                    let mut replies = replies.chunks_exact(REPLY_LEN);
                    for mut op in batch {
                        let Some(tx) = op.reply.take() else { continue };
                        let Some(verdict) = replies.next().and_then(|r| r.try_into().ok()) else {
                            let _ = tx.send(Err(RedisFailure::Reply(Vec::new())));
                            continue;
                        };
                        if let Err(Ok([0, ..])) = tx.send(Ok(verdict)) {
                            // Admitted, and nobody waits for it any more:
                            // its slots would stay taken for the lease.
                            unsettled.push(op.release());
                        }
                    }
                }
                Err((failure, sent)) => {
                    // An admission counts its own failure (`admit`).
                    let failure = Arc::new(failure);
                    for mut op in batch {
                        let failed = RedisFailure::Batch(failure.clone());
                        match op.reply.take() {
                            Some(tx) => {
                                drop(tx.send(Err(failed)));
                                // It may run yet: undo it once Redis answers.
                                if sent {
                                    unsettled.push(op.release());
                                }
                            }
                            None => {
                                self.note(Some(&failed));
                                unsettled.push(op);
                            }
                        }
                    }
                    if unsettled.len() > MAX_UNSETTLED {
                        let dropped = unsettled.len() - MAX_UNSETTLED;
                        unsettled.drain(..dropped);
                        tracing::warn!(
                            lane,
                            dropped,
                            "too many settles wait for Redis: the oldest are dropped, their slots free with their lease"
                        );
                    }
                }
            }
            if failed && !unsettled.is_empty() {
                tokio::time::sleep(RETRY_AFTER).await;
            }
            let mut lanes = self.slots[slot]
                .lanes
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let queue = lanes.get_mut(&lane).expect(RUNNING);
            if queue.is_empty() && unsettled.is_empty() {
                lanes.remove(&lane);
                return;
            }
            let take = queue.len().min(MAX_BATCH.saturating_sub(unsettled.len()));
            batch = std::mem::take(&mut unsettled);
            batch.extend(queue.drain(..take));
            if batch.len() > MAX_BATCH {
                unsettled = batch.split_off(MAX_BATCH);
            }
        }
    }

    /// One `batch.lua` call for `batch`, on one of worker `slot`'s
    /// connections: the admissions' replies, in order, or why not and
    /// whether the call may run yet (it was sent).
    async fn run(&self, slot: usize, batch: &[Op]) -> Result<Vec<i64>, (RedisFailure, bool)> {
        let slot = &self.slots[slot];
        let (_permit, mut connection) = self.connection(slot).await.map_err(|e| (e, false))?;
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
        // A connection whose call failed goes with it: a reply may still be
        // on its way.
        match tokio::time::timeout(self.timeout, call.invoke_async(&mut connection)).await {
            Ok(Ok(replies)) => {
                slot.idle
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push((connection, Instant::now()));
                Ok(replies)
            }
            Ok(Err(e)) => {
                let sent = !e.is_connection_refusal();
                Err((e.into(), sent))
            }
            Err(_) => Err((RedisFailure::Timeout(self.timeout), true)),
        }
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
    /// The period's spend: a cache of the store's usage rows.
    budget: String,
    /// What the period's requests in flight reserved.
    held: String,
}

impl Keys {
    fn of(base: &str, period: u64) -> Keys {
        Keys {
            requests: format!("{base}:requests"),
            tokens: format!("{base}:tokens"),
            in_flight: format!("{base}:in_flight"),
            budget: format!("{base}:spent:{period}"),
            held: format!("{base}:held:{period}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::num::{NonZeroU32, NonZeroU64};

    use super::*;
    use crate::config::limits::Quota;
    use crate::limiter::{BudgetCheck, Check, SubjectCheck};

    fn quotas() -> [Quota; 2] {
        [
            Quota {
                max_concurrent_requests: NonZeroU32::new(4),
                requests_per_minute: NonZeroU32::new(60),
                ..Quota::default()
            },
            Quota {
                tokens_per_minute: NonZeroU64::new(1000),
                ..Quota::default()
            },
        ]
    }

    fn check<'a>(quotas: &'a [Quota; 2], member: &'a str) -> Check<'a> {
        Check {
            subjects: vec![
                SubjectCheck {
                    counter: "tenant:t",
                    redis: "toolgate:{t}",
                    quota: &quotas[0],
                    budget: None,
                },
                SubjectCheck {
                    counter: "key:k",
                    redis: "toolgate:{t}:key:k",
                    quota: &quotas[1],
                    budget: Some(BudgetCheck {
                        period: 7,
                        amount: 100.0,
                        reserve: 2.5,
                        seed: Seed::Ask,
                        ttl_secs: 900,
                    }),
                },
            ],
            reserve_tokens: 60,
            member,
        }
    }

    #[test]
    fn a_release_frees_exactly_the_slots_and_the_reservation_its_admission_took() {
        let quotas = quotas();
        let admission = Op::admission(&check(&quotas, "m1"));
        assert_eq!(
            admission.args,
            [
                "2", "60", "60", "0", "4", "0", "0", "-1", "0", "0", "1000", "0", "100", "2.5",
                "-2", "900"
            ]
        );
        let release = admission.release();
        assert!(matches!(release.kind, OpKind::Settle));
        assert_eq!(release.member, "m1");
        assert_eq!(
            release.keys,
            [
                "toolgate:{t}:op:m1",
                "toolgate:{t}:tokens",
                "toolgate:{t}:in_flight",
                "toolgate:{t}:spent:0",
                "toolgate:{t}:held:0",
                "toolgate:{t}:key:k:tokens",
                "toolgate:{t}:key:k:in_flight",
                "toolgate:{t}:key:k:spent:7",
                "toolgate:{t}:key:k:held:7",
            ]
        );
        // Nothing used, 60 tokens reserved; the tenant's slot freed, the key
        // (no concurrency limit) has none, its 2.5 given back; a spend it
        // did not find is left for the store.
        assert_eq!(
            release.args,
            [
                "0", "60", "2", "0", "1", "0", "0", "0", "1", "1000", "0", "0", "2.5", "900", "1"
            ]
        );
        assert_eq!(lane("toolgate:{t}:key:k"), "{t}");
    }

    /// A lane lives while it has work: once its ops are done (here: failed,
    /// Redis does not listen), it is gone from the map.
    #[tokio::test]
    async fn lanes_are_removed_when_their_work_is_done() {
        let counters =
            Arc::new(Counters::new("redis://127.0.0.1:1", Duration::from_millis(200), 1).unwrap());
        let quotas = quotas();
        for member in ["m1", "m2", "m3"] {
            assert!(counters.admit(&check(&quotas, member)).await.is_err());
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while !counters.slots[0].lanes.lock().unwrap().is_empty() {
            assert!(Instant::now() < deadline, "a lane outlived its work");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}
