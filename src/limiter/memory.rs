//! The counters of one replica, in its memory: what every subject's limits
//! use when `[server.limits]` names no Redis. A subject's state is a few
//! numbers (two TATs, requests in flight, the period's spend), kept only
//! for subjects with limits: tenants of the config and managed keys.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use super::gcra::{self, Reading};
use super::{Check, Limit, Readings, Settle, Verdict};

#[derive(Default)]
pub(super) struct Counters {
    subjects: Mutex<HashMap<String, State>>,
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
    /// Checks every limit of every subject of `check` and, when all admit,
    /// takes the request from each (its minute share, its concurrency slot).
    pub(super) fn admit(&self, check: &Check<'_>, now: u64) -> Verdict {
        let mut subjects = self.subjects.lock().unwrap_or_else(PoisonError::into_inner);
        for subject in &check.subjects {
            if !subjects.contains_key(subject.counter) {
                subjects.insert(subject.counter.to_owned(), State::default());
            }
        }
        for (i, subject) in check.subjects.iter().enumerate() {
            let state = &subjects[subject.counter];
            let quota = subject.quota;
            let readings = Readings {
                requests: quota
                    .requests_per_minute
                    .map(|n| gcra::peek_requests(state.requests_tat, now, u64::from(n.get()))),
                tokens: quota
                    .tokens_per_minute
                    .map(|n| token_reading(state.tokens_tat, now, n.get())),
            };
            let refuse = |limit, wait| Verdict::Refused {
                subject: i,
                limit,
                wait_us: wait,
                readings,
            };
            if let Some(budget) = subject.budget {
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
            if let Some(limit) = quota.requests_per_minute
                && let Err(wait) = gcra::request(state.requests_tat, now, u64::from(limit.get()))
            {
                return refuse(Limit::Requests, Some(wait));
            }
            if let Some(limit) = quota.tokens_per_minute
                && let Err(wait) = gcra::tokens_left(state.tokens_tat, now, limit.get())
            {
                return refuse(Limit::Tokens, Some(wait));
            }
        }
        for subject in &check.subjects {
            let Some(state) = subjects.get_mut(subject.counter) else {
                continue;
            };
            if let Some(limit) = subject.quota.requests_per_minute
                && let Ok((tat, _)) = gcra::request(state.requests_tat, now, u64::from(limit.get()))
            {
                state.requests_tat = tat;
            }
            if subject.quota.max_concurrent_requests.is_some() {
                state.in_flight += 1;
            }
        }
        Verdict::Admitted
    }

    /// Frees the request's slots and charges what it used.
    pub(super) fn settle(&self, settle: &Settle, now: u64) {
        let mut subjects = self.subjects.lock().unwrap_or_else(PoisonError::into_inner);
        for subject in &settle.subjects {
            let Some(state) = subjects.get_mut(subject.counter.as_str()) else {
                continue;
            };
            if subject.slot {
                state.in_flight = state.in_flight.saturating_sub(1);
            }
            if let Some(limit) = subject.tokens_per_minute {
                state.tokens_tat = gcra::charge_tokens(state.tokens_tat, now, limit, settle.tokens);
            }
            if let Some(period) = subject.period {
                if state.period != period {
                    state.period = period;
                    state.spent = 0.0;
                }
                state.spent += subject.spend;
            }
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
