//! The counters of one replica, in its memory: what every subject's limits
//! use when `[server.limits]` names no Redis. A subject's state is a few
//! numbers (two TATs, requests in flight, the period's spend and what
//! requests in flight hold against it), kept only for subjects with limits:
//! tenants of the config and managed keys.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use super::gcra::{self, Reading};
use super::{Check, Limit, Readings, Seed, Settle, Verdict};

#[derive(Default)]
pub(super) struct Counters {
    subjects: Mutex<HashMap<String, State>>,
}

#[derive(Default)]
struct State {
    requests_tat: u64,
    tokens_tat: u64,
    in_flight: u32,
    /// The budget period's first day and what it spent; `None` until the
    /// spend is known.
    period: Option<u64>,
    spent: f64,
    /// What the period's requests in flight reserved.
    held: f64,
}

impl Counters {
    /// Checks every limit of every subject of `check` and, when all admit,
    /// takes the request from each (its minute share, its concurrency slot,
    /// its reservation).
    pub(super) fn admit(&self, check: &Check<'_>, now: u64) -> Verdict {
        let mut subjects = self.subjects.lock().unwrap_or_else(PoisonError::into_inner);
        for (i, subject) in check.subjects.iter().enumerate() {
            let state = subjects.entry(subject.counter.to_owned()).or_default();
            if let Some(budget) = subject.budget
                && state.period != Some(budget.period)
            {
                let spent = match budget.seed {
                    Seed::Ask => return Verdict::Unknown { subject: i },
                    Seed::Zero => 0.0,
                    Seed::Known(spent) => spent,
                };
                // A new period: what earlier ones held is theirs.
                (state.period, state.spent, state.held) = (Some(budget.period), spent, 0.0);
            }
        }
        for (i, subject) in check.subjects.iter().enumerate() {
            let state = &subjects[subject.counter];
            let quota = subject.quota;
            let readings = state.readings(quota, now);
            let refuse = |limit, wait| Verdict::Refused {
                subject: i,
                limit,
                wait_us: wait,
                readings,
            };
            if let Some(budget) = subject.budget {
                if state.spent >= budget.amount {
                    return refuse(Limit::Budget, None);
                }
                if state.spent + state.held >= budget.amount {
                    return refuse(Limit::Reserved, Some(super::CONCURRENCY_WAIT_US));
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
            if let Some(limit) = subject.quota.tokens_per_minute {
                state.tokens_tat =
                    gcra::charge_tokens(state.tokens_tat, now, limit.get(), check.reserve_tokens);
            }
            if let Some(budget) = subject.budget {
                state.held += budget.reserve;
            }
        }
        // What is left once the request was taken, as the headers show it.
        let readings = check
            .subjects
            .iter()
            .map(|subject| subjects[subject.counter].readings(subject.quota, now))
            .fold(Readings::default(), Readings::tighter);
        Verdict::Admitted { readings }
    }

    /// Frees the request's slots and replaces its reservation by what it
    /// used.
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
                state.tokens_tat = gcra::settle_tokens(
                    state.tokens_tat,
                    now,
                    limit,
                    settle.reserved_tokens,
                    settle.tokens,
                );
            }
            // A request admitted in a period that has since ended is that
            // period's: nothing of it is left here.
            if subject.period.is_some() && subject.period == state.period {
                state.held -= subject.reserved;
                if state.held < 1e-9 {
                    // What sums of floats leave over once nothing is held.
                    state.held = 0.0;
                }
                state.spent += subject.spend;
            }
        }
    }
}

impl State {
    /// What the minute has left of each per-minute limit `quota` sets.
    fn readings(&self, quota: &crate::config::limits::Quota, now: u64) -> Readings {
        Readings {
            requests: quota
                .requests_per_minute
                .map(|n| gcra::peek_requests(self.requests_tat, now, u64::from(n.get()))),
            tokens: quota
                .tokens_per_minute
                .map(|n| token_reading(self.tokens_tat, now, n.get())),
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

#[cfg(test)]
mod tests {
    use std::num::NonZeroU64;

    use super::*;
    use crate::config::limits::Quota;
    use crate::limiter::{BudgetCheck, SubjectCheck, SubjectSettle};

    const NOW: u64 = 1_700_000_000_000_000;

    fn check<'a>(quota: &'a Quota, budget: Option<BudgetCheck>, member: &'a str) -> Check<'a> {
        Check {
            subjects: vec![SubjectCheck {
                counter: "tenant:t",
                redis: "toolgate:{t}",
                quota,
                budget,
            }],
            reserve_tokens: 40,
            member,
        }
    }

    fn settle(quota: &Quota, reserved: f64, used: u64) -> Settle {
        Settle {
            member: "m".into(),
            tokens: used,
            reserved_tokens: 40,
            subjects: vec![SubjectSettle {
                counter: "tenant:t".into(),
                redis: "toolgate:{t}".into(),
                slot: false,
                tokens_per_minute: quota.tokens_per_minute.map(NonZeroU64::get),
                period: Some(3),
                spend: used as f64,
                reserved,
                budget_ttl_secs: 0,
                rebuild: false,
            }],
        }
    }

    /// 100 tokens, 40 reserved a request: a burst admits while the spend
    /// and what is held stay below 100 (three), and settles make room for
    /// what the answers did not use.
    #[test]
    fn a_burst_admits_against_reservations_and_settles_give_back_the_rest() {
        let quota = Quota {
            tokens_per_minute: NonZeroU64::new(100),
            ..Quota::default()
        };
        let budget = BudgetCheck {
            period: 3,
            amount: 100.0,
            reserve: 40.0,
            seed: Seed::Zero,
            ttl_secs: 0,
        };
        let counters = Counters::default();
        let admitted = |b: Option<BudgetCheck>| {
            (0..10)
                .filter(|_| {
                    matches!(
                        counters.admit(&check(&quota, b, "m"), NOW),
                        Verdict::Admitted { .. }
                    )
                })
                .count()
        };
        assert_eq!(admitted(None), 3, "tokens per minute");
        let counters = Counters::default();
        let unlimited = Quota::default();
        let burst = (0..10)
            .map(|_| counters.admit(&check(&unlimited, Some(budget), "m"), NOW))
            .collect::<Vec<_>>();
        assert_eq!(
            burst
                .iter()
                .filter(|v| matches!(v, Verdict::Admitted { .. }))
                .count(),
            3,
            "budget"
        );
        assert!(matches!(
            burst[3],
            Verdict::Refused {
                limit: Limit::Reserved,
                ..
            }
        ));
        // Each used 29: 87 spent, nothing held; one more fits.
        for _ in 0..3 {
            counters.settle(&settle(&unlimited, 40.0, 29), NOW);
        }
        let next = || counters.admit(&check(&unlimited, Some(budget), "m"), NOW);
        assert!(matches!(next(), Verdict::Admitted { .. }));
        counters.settle(&settle(&unlimited, 40.0, 29), NOW);
        assert!(matches!(
            next(),
            Verdict::Refused {
                limit: Limit::Budget,
                ..
            }
        ));
    }

    #[test]
    fn a_period_without_a_spend_asks_for_one_and_takes_nothing() {
        let quota = Quota::default();
        let mut budget = BudgetCheck {
            period: 3,
            amount: 100.0,
            reserve: 40.0,
            seed: Seed::Ask,
            ttl_secs: 0,
        };
        let counters = Counters::default();
        let check_with = |b| counters.admit(&check(&quota, Some(b), "m"), NOW);
        assert!(matches!(
            check_with(budget),
            Verdict::Unknown { subject: 0 }
        ));
        budget.seed = Seed::Known(100.0);
        assert!(matches!(
            check_with(budget),
            Verdict::Refused {
                limit: Limit::Budget,
                ..
            }
        ));
    }
}
