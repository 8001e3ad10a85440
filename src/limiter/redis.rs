//! The counters every replica shares, in Redis: one script per check
//! (`admit.lua`) and one when the answer ends (`settle.lua`), each one
//! atomic step on Redis's own clock. Each worker thread keeps its own
//! connection (the `redis` crate's connection manager, which reconnects),
//! so a check never wakes another thread; every call is bounded by
//! `redis_timeout_ms`, and a connection that failed is not tried again for
//! a second (checks meanwhile fail at once, as `on_redis_error` says).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::OnceCell;

use super::gcra::Reading;
use super::{Check, Limit, Readings, Settle, Verdict};

/// How long a replica holds a concurrency slot without settling it: a
/// replica that dies mid-request frees its slots after this.
const LEASE: Duration = Duration::from_secs(15 * 60);
/// How long after a failed connection attempt checks fail without trying.
const RECONNECT_AFTER: Duration = Duration::from_secs(1);

pub(super) struct Counters {
    client: redis::Client,
    timeout: Duration,
    /// One connection per worker thread, made on first use.
    slots: Box<[Slot]>,
    admit: redis::Script,
    settle: redis::Script,
    /// Whether the last call succeeded (errors are logged when this changes).
    healthy: AtomicBool,
}

#[derive(Default)]
struct Slot {
    conn: OnceCell<ConnectionManager>,
    failed_at: Mutex<Option<Instant>>,
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
}

impl Counters {
    pub(super) fn new(url: &str, timeout: Duration, workers: usize) -> Result<Self, String> {
        let client = redis::Client::open(url).map_err(|e| e.to_string())?;
        Ok(Counters {
            client,
            timeout,
            slots: (0..workers.max(1)).map(|_| Slot::default()).collect(),
            admit: redis::Script::new(include_str!("admit.lua")),
            settle: redis::Script::new(include_str!("settle.lua")),
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

    /// Runs `admit.lua` for `check`.
    pub(super) async fn admit(&self, check: &Check<'_>) -> Result<Verdict, RedisFailure> {
        let result = self.try_admit(check).await;
        self.note(result.as_ref().err());
        result
    }

    async fn try_admit(&self, check: &Check<'_>) -> Result<Verdict, RedisFailure> {
        let mut conn = self.connection().await?;
        let mut call = self.admit.prepare_invoke();
        call.arg(check.member)
            .arg(LEASE.as_micros() as u64)
            .arg(check.subjects.len());
        for subject in &check.subjects {
            let keys = Keys::of(subject.redis, subject.budget.map_or(0, |b| b.period));
            let quota = subject.quota;
            call.key(keys.requests)
                .key(keys.tokens)
                .key(keys.in_flight)
                .key(keys.budget)
                .arg(quota.requests_per_minute.map_or(0, std::num::NonZero::get))
                .arg(quota.tokens_per_minute.map_or(0, std::num::NonZeroU64::get))
                .arg(
                    quota
                        .max_concurrent_requests
                        .map_or(0, std::num::NonZero::get),
                )
                .arg(subject.budget.map_or(0.0, |b| b.amount));
        }
        let reply: Vec<i64> = tokio::time::timeout(self.timeout, call.invoke_async(&mut conn))
            .await
            .map_err(|_| RedisFailure::Timeout(self.timeout))??;
        let [
            verdict,
            subject,
            wait,
            r_remaining,
            r_reset,
            t_remaining,
            t_reset,
        ] = reply[..]
        else {
            return Err(RedisFailure::Reply(reply));
        };
        let limit = match verdict {
            0 => return Ok(Verdict::Admitted),
            1 => Limit::Budget,
            2 => Limit::Concurrency,
            3 => Limit::Requests,
            4 => Limit::Tokens,
            _ => return Err(RedisFailure::Reply(reply)),
        };
        let n = |v: i64| u64::try_from(v).unwrap_or(0);
        let index = usize::try_from(subject - 1).unwrap_or(usize::MAX);
        let Some(refusing) = check.subjects.get(index) else {
            return Err(RedisFailure::Reply(reply));
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

    /// Runs `settle.lua` for a request whose answer ended.
    pub(super) async fn settle(&self, settle: &Settle) {
        let result = async {
            let mut conn = self.connection().await?;
            let mut call = self.settle.prepare_invoke();
            call.arg(&settle.member)
                .arg(settle.tokens)
                .arg(settle.subjects.len());
            for subject in &settle.subjects {
                let keys = Keys::of(&subject.redis, subject.period.unwrap_or(0));
                call.key(keys.tokens)
                    .key(keys.in_flight)
                    .key(keys.budget)
                    .arg(subject.tokens_per_minute.unwrap_or(0))
                    .arg(u8::from(subject.slot))
                    .arg(if subject.period.is_some() {
                        subject.spend
                    } else {
                        0.0
                    })
                    .arg(subject.budget_ttl_secs);
            }
            tokio::time::timeout(self.timeout, call.invoke_async::<i64>(&mut conn))
                .await
                .map_err(|_| RedisFailure::Timeout(self.timeout))??;
            Ok::<(), RedisFailure>(())
        }
        .await;
        self.note(result.as_ref().err());
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
