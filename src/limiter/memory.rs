//! The counters of one replica, in its memory: what every tenant's limits
//! use when `[server.limits]` names no Redis. The state of a tenant is a
//! few numbers (two TATs, requests in flight, the period's spend), kept
//! only for tenants with limits, so it is bounded by the config.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::gcra::{self, Reading};
use super::{Check, Limit, Readings, Settle, Verdict};

#[derive(Default)]
pub(super) struct Counters {
    tenants: Mutex<HashMap<Arc<str>, State>>,
}

#[derive(Default)]
struct State {
    requests_tat: u64,
    tokens_tat: u64,
    in_flight: u32,
    /// The budget period's first day and what it spent.
    period: u64,
    spent: f64,
}

impl Counters {
    /// Checks every limit of `check` and, when all admit, takes the
    /// request (its minute share and its concurrency slot).
    pub(super) fn admit(&self, check: &Check<'_>, now: u64) -> Verdict {
        let mut tenants = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        let state = tenants.entry(check.tenant.clone()).or_default();
        let quota = check.quota;
        let requests = quota.requests_per_minute.map(|n| u64::from(n.get()));
        let tokens = quota.tokens_per_minute.map(std::num::NonZeroU64::get);
        let readings = Readings {
            requests: requests.map(|limit| gcra::peek_requests(state.requests_tat, now, limit)),
            tokens: tokens.map(|limit| token_reading(state.tokens_tat, now, limit)),
        };
        let refuse = |limit, wait| Verdict::Refused {
            limit,
            wait_us: wait,
            readings,
        };
        if let Some(budget) = check.budget {
            let spent = if state.period == budget.period {
                state.spent
            } else {
                0.0
            };
            if spent >= budget.amount {
                return refuse(Limit::Budget, None);
            }
        }
        if let Some(n) = quota.max_concurrent_requests
            && state.in_flight >= n.get()
        {
            return refuse(Limit::Concurrency, Some(super::CONCURRENCY_WAIT_US));
        }
        let mut taken = None;
        if let Some(limit) = requests {
            match gcra::request(state.requests_tat, now, limit) {
                Ok(next) => taken = Some(next),
                Err(wait) => return refuse(Limit::Requests, Some(wait)),
            }
        }
        if let Some(limit) = tokens
            && let Err(wait) = gcra::tokens_left(state.tokens_tat, now, limit)
        {
            return refuse(Limit::Tokens, Some(wait));
        }
        if let Some((tat, _)) = taken {
            state.requests_tat = tat;
        }
        if quota.max_concurrent_requests.is_some() {
            state.in_flight += 1;
        }
        Verdict::Admitted
    }

    /// Frees the request's slot and charges what it used.
    pub(super) fn settle(&self, settle: &Settle, now: u64) {
        let mut tenants = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        let state = tenants.entry(settle.tenant.clone()).or_default();
        if settle.counted_in_flight {
            state.in_flight = state.in_flight.saturating_sub(1);
        }
        if let Some(limit) = settle.tokens_per_minute {
            state.tokens_tat = gcra::charge_tokens(state.tokens_tat, now, limit, settle.tokens);
        }
        if let Some(period) = settle.period {
            if state.period != period {
                state.period = period;
                state.spent = 0.0;
            }
            state.spent += settle.spend;
        }
    }
}

/// The tokens reading, also when no token is left.
fn token_reading(tat: u64, now: u64, limit: u64) -> Reading {
    gcra::tokens_left(tat, now, limit).unwrap_or(Reading {
        limit,
        remaining: 0,
        reset_us: tat.saturating_sub(now),
    })
}
