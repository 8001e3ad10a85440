//! Tenants' limits and budgets (`limits` and `budget` on a
//! `[[server.auth.keys]]` entry, and a managed key's own share), counted in
//! this replica's memory or, with `[server.limits] redis_url`, in Redis,
//! shared by every replica.
//!
//! - [`Limiter::admit`] checks a request before anything is sent upstream
//!   against each of its subjects (its tenant's limits, all its keys
//!   together; a managed key's own): a spent budget, the requests in flight,
//!   requests and tokens per minute, every subject checked before any is
//!   charged (in one Redis script call; none for a request without limits). A
//!   refusal is a `429` [`GatewayError::Limited`] with `Retry-After` and
//!   `x-ratelimit-*`; an admission's answer carries `x-ratelimit-*` too,
//!   what its per-minute limits have left after it (read by the same call).
//! - An admitted request *reserves* what it may use ([`reserve`]: its prompt
//!   estimate and its output limit, priced): the tokens go into the minute
//!   at once, the amount is held against the budget, and a request is
//!   admitted only while the budget's spend plus what requests in flight
//!   hold is below it. Whatever the burst, spend then ends at most one
//!   reservation past a budget (or a minute).
//! - The [`Admission`] it returns is the request's [`Meter`]: every answered
//!   upstream attempt (gateway-tool rounds and repairs too) reports its
//!   tokens to it, priced by the provider's `pricing`. When the request's
//!   last piece of work ends it is dropped, which *settles* it: frees its
//!   concurrency slots, replaces its reservation by what it used (in Redis:
//!   queued into the tenant's next script call, which the request does not
//!   wait for) and queues its usage rows.
//! - A budget's spend lives in the store's usage rows; the counters are a
//!   cache of it. With a store, a subject whose counters hold nothing for
//!   the period (a fresh replica, Redis restarted empty) has its spend read
//!   from the rows before it is admitted.
//!
//! `gcra` holds the arithmetic both counters run; `memory` and `redis` the
//! two counters.

mod connection;
mod gcra;
mod memory;
mod redis;
mod reserve;

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::HeaderValue;
use http::header::HeaderName;

use crate::config::Tenant;
use crate::config::limits::{Amount, LimiterConfig, OnRedisError, Price, Quota};
use crate::error::{GatewayError, Limited};
use crate::store::{Store, Used};
use crate::telemetry::scope::{Meter, Tokens};

use gcra::Reading;
use reserve::Reserve;

pub use reserve::Ask;

/// What a refused concurrency check tells the client to wait: the slot
/// frees when another request ends, which no clock predicts.
const CONCURRENCY_WAIT_US: u64 = 1_000_000;
/// How long an admission waits for the store's usage rows when the
/// counters hold no spend for a budget's period; past it, `on_redis_error`
/// decides, as for Redis.
const SPEND_READ_TIMEOUT: Duration = Duration::from_secs(1);

/// Checks requests against their subjects' limits; kept across reloads (a
/// reload changes the limits, never the counts).
pub struct Limiter {
    memory: Arc<memory::Counters>,
    redis: Option<Arc<redis::Counters>>,
    on_redis_error: OnRedisError,
}

/// A managed key's own share of its tenant's use.
#[derive(Debug, Clone)]
pub struct Share {
    /// The key's id.
    pub id: Arc<str>,
    /// The key's name, for messages.
    pub name: Arc<str>,
    /// Its own `limits` and `budget`, on top of its tenant's.
    pub quota: Quota,
}

/// Whose limits a request counts against.
#[derive(Debug, Clone)]
struct Subject {
    /// Its counters' name in memory.
    counter: String,
    /// Its keys' base name in Redis.
    redis: String,
    /// Names it in a refusal.
    shown: String,
    /// Whose usage rows are its spend.
    rows: Rows,
    quota: Quota,
}

/// Whose usage rows a subject's spend is.
#[derive(Debug, Clone)]
enum Rows {
    Tenant(Arc<str>),
    Key(Arc<str>),
}

impl Subject {
    fn tenant(tenant: &Tenant) -> Subject {
        Subject {
            counter: format!("tenant:{}", tenant.name),
            redis: format!("toolgate:{{{}}}", tenant.name),
            shown: tenant.name.to_string(),
            rows: Rows::Tenant(tenant.name.clone()),
            quota: tenant.quota.clone(),
        }
    }

    fn key(tenant: &Tenant, share: &Share) -> Subject {
        Subject {
            counter: format!("key:{}", share.id),
            redis: format!("toolgate:{{{}}}:key:{}", tenant.name, share.id),
            shown: format!("key `{}` of {}", share.name, tenant.name),
            rows: Rows::Key(share.id.clone()),
            quota: share.quota.clone(),
        }
    }
}

impl Limiter {
    /// Counters for `[server.limits]`; `workers` connections to Redis at
    /// most, one per worker thread.
    pub fn new(config: &LimiterConfig, workers: usize) -> Result<Limiter, String> {
        let redis = config
            .redis_url
            .as_deref()
            .map(|url| redis::Counters::new(url, config.redis_timeout, workers).map(Arc::new))
            .transpose()?;
        Ok(Limiter {
            memory: Arc::default(),
            redis,
            on_redis_error: config.on_redis_error,
        })
    }

    /// Admits a request of `tenant` (and, for a managed key, of its `share`)
    /// for `model` (as the client wrote it), reserving what `ask` may use
    /// (nothing without one), or says which limit refuses it. With a
    /// `usage` store, what the request uses is recorded there under
    /// `key_id`, the key it presented, and a budget's spend is read from
    /// its rows when the counters hold none for the period.
    pub async fn admit(
        &self,
        tenant: &Arc<Tenant>,
        share: Option<&Share>,
        model: &str,
        ask: Option<Ask<'_>>,
        usage: Option<(Arc<Store>, String)>,
    ) -> Result<Arc<Admission>, GatewayError> {
        let subjects: Vec<Subject> = std::iter::once(Subject::tenant(tenant))
            .chain(share.map(|s| Subject::key(tenant, s)))
            .filter(|s| s.quota.is_limited())
            .collect();
        let wants_usage = subjects.iter().any(|s| s.quota.counts_tokens());
        let store = usage.as_ref().map(|(store, _)| store.clone());
        let mut admission = Admission {
            tenant: tenant.clone(),
            model: model.to_owned(),
            wants_usage,
            held: None,
            readings: Readings::default(),
            usage,
            used: Mutex::default(),
        };
        if subjects.is_empty() {
            return Ok(Arc::new(admission));
        }
        let reserve = match ask {
            Some(ask) if wants_usage => Reserve::of(ask, model),
            _ => Reserve::default(),
        };
        let now = now_us();
        let member = new_member();
        let mut check = Check {
            subjects: subjects
                .iter()
                .map(|s| SubjectCheck {
                    counter: &s.counter,
                    redis: &s.redis,
                    quota: &s.quota,
                    budget: s.quota.budget.map(|b| {
                        let (period, end) = gcra::period(now / 1_000_000, b.period_days.get());
                        let (amount, reserve) = match b.amount {
                            Amount::Usd(usd) => (usd, reserve.usd),
                            Amount::Tokens(n) => (n as f64, reserve.tokens as f64),
                        };
                        BudgetCheck {
                            period,
                            amount,
                            reserve,
                            seed: if store.is_some() {
                                Seed::Ask
                            } else {
                                Seed::Zero
                            },
                            // Kept a day past the period's end.
                            ttl_secs: end.saturating_sub(now / 1_000_000) + 86_400,
                        }
                    }),
                })
                .collect(),
            reserve_tokens: reserve.tokens,
            member: &member,
        };
        let (counters, verdict) = loop {
            let (counters, outcome) = match &self.redis {
                None => (
                    Counters::Memory(self.memory.clone()),
                    Ok(self.memory.admit(&check, now)),
                ),
                Some(redis) => (Counters::Redis(redis.clone()), redis.admit(&check).await),
            };
            let unknown = match outcome {
                Ok(Verdict::Unknown { subject }) => subject,
                Ok(verdict) => break (counters, Some(verdict)),
                Err(_) if self.on_redis_error == OnRedisError::Deny => {
                    return Err(GatewayError::LimiterUnavailable);
                }
                // Served uncounted; what it uses is still charged if Redis is back by then.
                Err(_) => break (counters, None),
            };
            // The counters hold no spend for this period: the store's rows do.
            let read = match (&store, &mut check.subjects[unknown].budget) {
                (Some(store), Some(budget)) if budget.seed == Seed::Ask => {
                    spent_in_rows(store, &subjects[unknown], budget.period).await
                }
                _ => Err("the counters asked twice for a spend they were given".to_owned()),
            };
            match read {
                Ok(spent) => {
                    if let Some(budget) = &mut check.subjects[unknown].budget {
                        budget.seed = Seed::Known(spent);
                    }
                }
                Err(e) => {
                    tracing::warn!(tenant = %tenant.name, error = %e, "cannot read a budget's spend from the store's usage rows");
                    if self.on_redis_error == OnRedisError::Deny {
                        return Err(GatewayError::LimiterUnavailable);
                    }
                    break (counters, None);
                }
            }
        };
        if let Some(Verdict::Refused {
            subject,
            limit,
            wait_us,
            readings,
        }) = verdict
        {
            metrics::counter!(crate::metrics::RATE_LIMITED, "tenant" => crate::metrics::tenant::label_arc(Some(tenant)), "limit" => limit.name())
                .increment(1);
            return Err(refusal(&subjects[subject], limit, wait_us, &readings, now));
        }
        if let Some(Verdict::Admitted { readings }) = verdict {
            admission.readings = readings;
        }
        let counted = verdict.is_some();
        let budgets = check.subjects.iter().map(|s| s.budget).collect();
        admission.held = Some(Held {
            counters,
            counted,
            subjects,
            budgets,
            reserve: if counted { reserve } else { Reserve::default() },
            rebuild: store.is_some(),
            // An admission whose outcome is unknown is released under its
            // own member (`redis`); what this request uses is settled
            // under another, as if it had never been admitted.
            member: if counted { member } else { new_member() },
        });
        Ok(Arc::new(admission))
    }
}

/// Names a request's slots and reservation in the counters.
fn new_member() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// What `subject` spent in the budget period starting on day `period`,
/// from the store's usage rows.
async fn spent_in_rows(store: &Store, subject: &Subject, period: u64) -> Result<f64, String> {
    let since = i64::try_from(period * 86_400_000).unwrap_or(i64::MAX);
    let read = async {
        match &subject.rows {
            Rows::Tenant(name) => store.tenant_spend(name.to_string(), since).await,
            Rows::Key(id) => store.key_spend(id.to_string(), since).await,
        }
    };
    let (micros, tokens) = tokio::time::timeout(SPEND_READ_TIMEOUT, read)
        .await
        .map_err(|_| format!("no answer within {SPEND_READ_TIMEOUT:?}"))?
        .map_err(|e| e.to_string())?;
    Ok(match subject.quota.budget.map(|b| b.amount) {
        Some(Amount::Usd(_)) => crate::metrics::cost::dollars(micros.max(0) as u64),
        _ => tokens as f64,
    })
}

/// One admitted request: its meter while it runs, and its settling when
/// the last of its work drops it.
pub struct Admission {
    tenant: Arc<Tenant>,
    model: String,
    /// Whether a subject counts tokens (its streams then ask for usage).
    wants_usage: bool,
    /// `None` for a request without limits.
    held: Option<Held>,
    /// What its per-minute limits had left once it was admitted (none
    /// for a request without them, or one Redis did not count).
    readings: Readings,
    /// Where its usage is recorded, and the key it presented.
    usage: Option<(Arc<Store>, String)>,
    /// What its answers used, per provider.
    used: Mutex<Vec<Spent>>,
}

/// What the answers of one provider used.
struct Spent {
    provider: String,
    input: u64,
    output: u64,
    /// Micro-dollars.
    micros: u64,
    /// Some answer reported no usage: its tokens are estimates.
    estimated: bool,
}

struct Held {
    counters: Counters,
    /// Whether the admission was counted (not when Redis was down).
    counted: bool,
    subjects: Vec<Subject>,
    /// Each subject's budget as the admission checked it (its period).
    budgets: Vec<Option<BudgetCheck>>,
    /// What the admission reserved (nothing when it was not counted).
    reserve: Reserve,
    /// Whether a missing spend is read from the store (a settle then does
    /// not start one).
    rebuild: bool,
    /// Names the request's slots and reservation in the counters.
    member: String,
}

enum Counters {
    Memory(Arc<memory::Counters>),
    Redis(Arc<redis::Counters>),
}

impl Admission {
    /// The `x-ratelimit-*` headers of its answer (as OpenAI sends them on
    /// every answer): what its requests and tokens per minute had left once
    /// it was admitted; none for limits it does not have.
    pub fn rate_headers(&self) -> Vec<(HeaderName, HeaderValue)> {
        self.readings.headers()
    }
}

impl fmt::Debug for Admission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Admission({})", self.tenant.name)
    }
}

impl Meter for Admission {
    fn wants_usage(&self) -> bool {
        self.wants_usage
    }

    fn model(&self) -> &str {
        &self.model
    }

    fn used(&self, provider: &str, price: Option<Price>, tokens: Tokens) {
        let cost = price.map_or(0, |p| p.cost_micros(tokens.input, tokens.output));
        crate::metrics::cost::add(
            provider,
            &crate::metrics::tenant::label_arc(Some(&self.tenant)),
            cost,
        );
        let mut used = self.used.lock().unwrap_or_else(PoisonError::into_inner);
        let spent = match used.iter().position(|s| s.provider == provider) {
            Some(i) => &mut used[i],
            None => {
                used.push(Spent {
                    provider: provider.to_owned(),
                    input: 0,
                    output: 0,
                    micros: 0,
                    estimated: false,
                });
                used.last_mut().expect("just pushed")
            }
        };
        spent.input += tokens.input;
        spent.output += tokens.output;
        spent.micros += cost;
        spent.estimated |= tokens.estimated;
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        let used = std::mem::take(self.used.get_mut().unwrap_or_else(PoisonError::into_inner));
        if let Some((store, key_id)) = self.usage.take() {
            let hour = crate::store::hour_of(now_us() as i64 / 1_000);
            store.record_usage(
                used.iter()
                    .map(|s| Used {
                        hour,
                        tenant: self.tenant.name.clone(),
                        key_id: key_id.clone(),
                        provider: s.provider.clone(),
                        model: self.model.clone(),
                        requests: 1,
                        input_tokens: s.input as i64,
                        output_tokens: s.output as i64,
                        cost_micros: s.micros as i64,
                        estimated: i64::from(s.estimated),
                    })
                    .collect(),
            );
        }
        let Some(held) = self.held.take() else {
            return;
        };
        let tokens: u64 = used.iter().map(|s| s.input + s.output).sum();
        let usd = crate::metrics::cost::dollars(used.iter().map(|s| s.micros).sum());
        let reserve = held.reserve;
        let settle = Settle {
            member: held.member,
            tokens,
            reserved_tokens: reserve.tokens,
            subjects: held
                .subjects
                .iter()
                .zip(&held.budgets)
                .map(|(s, budget)| SubjectSettle {
                    counter: s.counter.clone(),
                    redis: s.redis.clone(),
                    slot: held.counted && s.quota.max_concurrent_requests.is_some(),
                    tokens_per_minute: s.quota.tokens_per_minute.map(std::num::NonZeroU64::get),
                    period: budget.map(|b| b.period),
                    spend: match s.quota.budget.map(|b| b.amount) {
                        Some(Amount::Usd(_)) => usd,
                        Some(Amount::Tokens(_)) => tokens as f64,
                        None => 0.0,
                    },
                    reserved: budget.map_or(0.0, |b| b.reserve),
                    budget_ttl_secs: budget.map_or(0, |b| b.ttl_secs),
                    rebuild: held.rebuild,
                })
                .collect(),
        };
        // Requests per minute alone are settled at admission: nothing to send.
        let nothing = settle
            .subjects
            .iter()
            .all(|s| !s.slot && s.tokens_per_minute.is_none() && s.period.is_none());
        if nothing {
            return;
        }
        match held.counters {
            Counters::Memory(memory) => memory.settle(&settle, now_us()),
            Counters::Redis(redis) => match tokio::runtime::Handle::try_current() {
                // Queued into the tenant's next batch, by a task of this runtime.
                Ok(_) => redis.settle(&settle),
                Err(_) => tracing::warn!(
                    tenant = %self.tenant.name,
                    "a request ended outside any runtime: its limits were not settled"
                ),
            },
        }
    }
}

/// What one check reads.
struct Check<'a> {
    subjects: Vec<SubjectCheck<'a>>,
    /// Tokens taken from each subject's minute at admission.
    reserve_tokens: u64,
    /// Names the request's concurrency slots and reservation.
    member: &'a str,
}

struct SubjectCheck<'a> {
    counter: &'a str,
    redis: &'a str,
    quota: &'a Quota,
    budget: Option<BudgetCheck>,
}

#[derive(Debug, Clone, Copy)]
struct BudgetCheck {
    /// The current period's first day.
    period: u64,
    /// USD or tokens.
    amount: f64,
    /// What the request holds against it while in flight.
    reserve: f64,
    /// Where the period's spend comes from when the counters have none.
    seed: Seed,
    /// How long the period's counters are kept.
    ttl_secs: u64,
}

/// A period's spend when the counters hold none for it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Seed {
    /// Nothing spent: there is no store to ask.
    Zero,
    /// Unknown: the check answers [`Verdict::Unknown`], to be asked again
    /// with the store's figure.
    Ask,
    /// The store's usage rows say this much.
    Known(f64),
}

/// What one request's end charges.
struct Settle {
    member: String,
    /// Its answers' tokens, input and output.
    tokens: u64,
    /// What its admission took from each minute.
    reserved_tokens: u64,
    subjects: Vec<SubjectSettle>,
}

struct SubjectSettle {
    counter: String,
    redis: String,
    /// Whether a concurrency slot was taken.
    slot: bool,
    tokens_per_minute: Option<u64>,
    /// The budget period (its first day) the spend goes to: the one it
    /// was admitted in.
    period: Option<u64>,
    spend: f64,
    /// What its admission held against the budget.
    reserved: f64,
    budget_ttl_secs: u64,
    /// Whether a spend the counters lost is left for the store's rows to
    /// rebuild (not started by this settle).
    rebuild: bool,
}

/// The limits' readings, for the headers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Readings {
    requests: Option<Reading>,
    tokens: Option<Reading>,
}

impl Readings {
    /// Per limit, the reading with less remaining (on a tie, the later
    /// reset): what the headers show of a request several subjects limit.
    /// `batch.lua` picks the same way.
    fn tighter(self, other: Readings) -> Readings {
        fn pick(a: Option<Reading>, b: Option<Reading>) -> Option<Reading> {
            match (a, b) {
                (Some(a), Some(b)) => Some(
                    if b.remaining < a.remaining
                        || (b.remaining == a.remaining && b.reset_us > a.reset_us)
                    {
                        b
                    } else {
                        a
                    },
                ),
                (a, b) => a.or(b),
            }
        }
        Readings {
            requests: pick(self.requests, other.requests),
            tokens: pick(self.tokens, other.tokens),
        }
    }

    /// OpenAI's `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`:
    /// the reset as a duration (`1s`, `6m0s`); none for a limit the
    /// request does not have.
    fn headers(&self) -> Vec<(HeaderName, HeaderValue)> {
        let mut headers = Vec::new();
        for (suffix, reading) in [("requests", self.requests), ("tokens", self.tokens)] {
            let Some(reading) = reading else { continue };
            for (what, value) in [
                ("limit", reading.limit.to_string()),
                ("remaining", reading.remaining.to_string()),
                ("reset", go_duration(reading.reset_us)),
            ] {
                if let (Ok(name), Ok(value)) = (
                    HeaderName::try_from(format!("x-ratelimit-{what}-{suffix}")),
                    HeaderValue::try_from(value),
                ) {
                    headers.push((name, value));
                }
            }
        }
        headers
    }
}

enum Verdict {
    /// Taken; what its limits have left after it.
    Admitted { readings: Readings },
    /// The counters hold no spend for a subject's budget period: ask the
    /// store, then check again. Nothing was taken.
    Unknown { subject: usize },
    Refused {
        /// Which of the check's subjects refused.
        subject: usize,
        limit: Limit,
        /// `None`: until the budget's period ends.
        wait_us: Option<u64>,
        readings: Readings,
    },
}

/// Which limit refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Limit {
    Budget,
    /// The budget is not spent, but what requests in flight hold reaches it.
    Reserved,
    Concurrency,
    Requests,
    Tokens,
}

impl Limit {
    fn name(self) -> &'static str {
        match self {
            Limit::Budget => "budget",
            Limit::Reserved => "reserved",
            Limit::Concurrency => "concurrency",
            Limit::Requests => "requests",
            Limit::Tokens => "tokens",
        }
    }
}

/// The `429` a refusal answers.
fn refusal(
    subject: &Subject,
    limit: Limit,
    wait_us: Option<u64>,
    readings: &Readings,
    now_us: u64,
) -> GatewayError {
    let quota = &subject.quota;
    let name = &subject.shown;
    let (message, wait) = match (limit, quota.budget) {
        (Limit::Budget, Some(budget)) => {
            let (_, end) = gcra::period(now_us / 1_000_000, budget.period_days.get());
            let amount = match budget.amount {
                Amount::Usd(usd) => format!("${usd:.2}"),
                Amount::Tokens(n) => format!("{n} tokens"),
            };
            let resets = chrono::DateTime::from_timestamp(end as i64, 0)
                .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
                .unwrap_or_default();
            (
                format!(
                    "{name} has spent its budget of {amount} for this {}-day period; it resets at {resets}",
                    budget.period_days
                ),
                (end * 1_000_000).saturating_sub(now_us),
            )
        }
        (Limit::Reserved, Some(budget)) => (
            format!(
                "{name}'s requests in flight have reserved what is left of its budget of {}; retry when one ends",
                match budget.amount {
                    Amount::Usd(usd) => format!("${usd:.2}"),
                    Amount::Tokens(n) => format!("{n} tokens"),
                }
            ),
            CONCURRENCY_WAIT_US,
        ),
        (Limit::Concurrency, _) => (
            format!(
                "{name} has {} requests in flight, its limit; retry when one ends",
                quota
                    .max_concurrent_requests
                    .map_or(0, std::num::NonZero::get)
            ),
            CONCURRENCY_WAIT_US,
        ),
        (Limit::Requests | Limit::Tokens | Limit::Budget | Limit::Reserved, _) => {
            let wait = wait_us.unwrap_or(CONCURRENCY_WAIT_US);
            let what = match limit {
                Limit::Tokens => format!(
                    "{} tokens per minute",
                    quota.tokens_per_minute.map_or(0, std::num::NonZero::get)
                ),
                _ => format!(
                    "{} requests per minute",
                    quota.requests_per_minute.map_or(0, std::num::NonZero::get)
                ),
            };
            (
                format!(
                    "{name} is over its limit of {what}; retry in {}",
                    go_duration(wait)
                ),
                wait,
            )
        }
    };
    GatewayError::Limited(Box::new(Limited {
        message,
        budget: limit == Limit::Budget,
        retry_after: Duration::from_micros(wait),
        headers: readings.headers(),
    }))
}

/// A duration as OpenAI's `x-ratelimit-reset-*` headers write it: `20ms`,
/// `1.5s`, `6m0s`, `1h2m3s`.
fn go_duration(us: u64) -> String {
    if us < 1_000_000 {
        return format!("{}ms", us.div_ceil(1_000));
    }
    let ms = us.div_ceil(1_000);
    let (h, rest) = (ms / 3_600_000, ms % 3_600_000);
    let (m, rest) = (rest / 60_000, rest % 60_000);
    let secs = if rest % 1_000 == 0 {
        format!("{}s", rest / 1_000)
    } else {
        let s = format!("{}.{:03}", rest / 1_000, rest % 1_000);
        format!("{}s", s.trim_end_matches('0'))
    };
    match (h, m) {
        (0, 0) => secs,
        (0, m) => format!("{m}m{secs}"),
        (h, m) => format!("{h}h{m}m{secs}"),
    }
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Of several subjects' readings, each limit shows the one with the
    /// least left (on a tie, the later reset); a limit only one subject
    /// has is shown as it is.
    #[test]
    fn headers_show_the_tightest_subject_per_limit() {
        let r = |limit, remaining, reset_us| Reading {
            limit,
            remaining,
            reset_us,
        };
        let tenant = Readings {
            requests: Some(r(100, 40, 5_000_000)),
            tokens: None,
        };
        let key = Readings {
            requests: Some(r(10, 9, 6_000_000)),
            tokens: Some(r(1000, 955, 2_700_000)),
        };
        let shown = Readings::default().tighter(tenant).tighter(key);
        assert_eq!(shown.requests, Some(r(10, 9, 6_000_000)));
        assert_eq!(shown.tokens, Some(r(1000, 955, 2_700_000)));
        let tie = Readings {
            requests: Some(r(20, 9, 9_000_000)),
            tokens: None,
        };
        assert_eq!(shown.tighter(tie).requests, Some(r(20, 9, 9_000_000)));
        let headers: Vec<(String, String)> = shown
            .headers()
            .into_iter()
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_owned()))
            .collect();
        assert_eq!(
            headers,
            [
                ("x-ratelimit-limit-requests", "10"),
                ("x-ratelimit-remaining-requests", "9"),
                ("x-ratelimit-reset-requests", "6s"),
                ("x-ratelimit-limit-tokens", "1000"),
                ("x-ratelimit-remaining-tokens", "955"),
                ("x-ratelimit-reset-tokens", "2.7s"),
            ]
            .map(|(n, v)| (n.to_owned(), v.to_owned()))
        );
        assert!(Readings::default().headers().is_empty());
    }

    #[test]
    fn durations_read_like_openais_headers() {
        assert_eq!(go_duration(17_000), "17ms");
        assert_eq!(go_duration(1), "1ms");
        assert_eq!(go_duration(1_000_000), "1s");
        assert_eq!(go_duration(1_500_000), "1.5s");
        assert_eq!(go_duration(360_000_000), "6m0s");
        assert_eq!(go_duration(3_723_000_000), "1h2m3s");
    }
}
