//! Which target of a provider a request goes to, and which targets are out.
//!
//! Targets take turns in smooth weighted round-robin order: weights 2 and 1
//! give `a b a`, never `a a b`. The order is computed once per config (it is
//! `sum(weights)` entries long), and each worker thread walks it with a
//! cursor of its own, so choosing a target takes no lock and shares no
//! cache line between workers.
//!
//! A target that fails `failures_to_eject` times in a row is ejected for
//! `eject_secs`. When that time is up, the first request that comes by
//! takes the target as a probe, and the target stays out for everyone else
//! until the probe's outcome puts it back (a success) or ejects it again. A
//! target with no outcome at all (a probe whose client left) is probed again
//! after another `eject_secs`.
//!
//! Nothing here does IO or reads a clock: `now` is milliseconds on
//! [`Clock`], passed in, so the tests drive time by hand.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::config::{HealthPolicy, UpstreamTarget};

/// Milliseconds since the first use, for ejection deadlines.
pub struct Clock;

impl Clock {
    pub fn now() -> u64 {
        static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        let start = START.get_or_init(Instant::now);
        // Starts at 1: 0 means "not ejected".
        start.elapsed().as_millis() as u64 + 1
    }
}

/// One target's recent record, shared by every worker (and kept across
/// reloads while the target is unchanged).
#[derive(Debug, Default)]
pub struct Health {
    /// Failures since the last success.
    failures: AtomicU32,
    /// [`Clock`] time until which it is out; 0 when it is in.
    ejected_until: AtomicU64,
}

/// What an outcome changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    None,
    /// The target was ejected.
    Ejected,
    /// An ejected target answered and is back.
    Restored,
}

impl Health {
    pub fn is_up(&self) -> bool {
        self.ejected_until.load(Ordering::Relaxed) == 0
    }

    /// A response head that is not a failure.
    pub fn succeeded(&self) -> Change {
        if self.failures.load(Ordering::Relaxed) != 0 {
            self.failures.store(0, Ordering::Relaxed);
        }
        // Read first: a write on every success would bounce the cache line
        // between the workers.
        if self.ejected_until.load(Ordering::Relaxed) != 0
            && self.ejected_until.swap(0, Ordering::AcqRel) != 0
        {
            Change::Restored
        } else {
            Change::None
        }
    }

    /// A failure that `retry.on` names (connect, timeout, a listed status).
    pub fn failed(&self, policy: &HealthPolicy, now: u64) -> Change {
        let failures = self
            .failures
            .fetch_add(1, Ordering::AcqRel)
            .saturating_add(1);
        let until = self.ejected_until.load(Ordering::Acquire);
        if until != 0 {
            // A failed probe (or a late failure): out for another period.
            self.ejected_until
                .store(now + millis(policy.eject_for), Ordering::Release);
            return Change::None;
        }
        match policy.failures_to_eject {
            Some(limit) if failures >= limit => {
                let deadline = now + millis(policy.eject_for);
                if self
                    .ejected_until
                    .compare_exchange(0, deadline, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    Change::Ejected
                } else {
                    Change::None
                }
            }
            _ => Change::None,
        }
    }

    /// Whether a request may go to this target now; an ejected target whose
    /// time is up admits exactly one request (the probe) per `eject_for`.
    fn admits(&self, now: u64, eject_for: Duration) -> bool {
        let until = self.ejected_until.load(Ordering::Acquire);
        until == 0
            || (now >= until
                && self
                    .ejected_until
                    .compare_exchange(
                        until,
                        now + millis(eject_for),
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    )
                    .is_ok())
    }
}

impl AsRef<Health> for Health {
    fn as_ref(&self) -> &Health {
        self
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX / 2)
}

/// A cursor on a cache line of its own.
#[repr(align(64))]
#[derive(Default)]
struct Cursor(AtomicUsize);

/// The turn order of a provider's targets and their health.
pub struct Balancer {
    /// Target indices in smooth weighted round-robin order.
    order: Box<[u8]>,
    cursors: Box<[Cursor]>,
    eject_for: Duration,
}

impl Balancer {
    pub fn new(targets: &[UpstreamTarget], health: &HealthPolicy, workers: usize) -> Self {
        let weights: Vec<u32> = targets.iter().map(|t| t.weight).collect();
        Balancer {
            order: smooth_order(&weights),
            cursors: (0..workers.max(1)).map(|_| Cursor::default()).collect(),
            eject_for: health.eject_for,
        }
    }

    /// The target for an attempt. `tried` has bit `i` set for each target
    /// this request already tried. Prefers, in turn order: an untried target
    /// that is in (or due for its probe); then any untried target, even if
    /// ejected (every target out is no reason to fail outright); then the
    /// next in turn.
    pub fn pick<H: AsRef<Health>>(
        &self,
        health: &[H],
        tried: u64,
        worker: usize,
        now: u64,
    ) -> usize {
        let n = self.order.len();
        if health.len() == 1 {
            return 0;
        }
        let start = self.cursors[worker % self.cursors.len()]
            .0
            .fetch_add(1, Ordering::Relaxed);
        let untried = |i: usize| tried & (1 << i) == 0;
        let mut fallback = None;
        for k in 0..n {
            let i = usize::from(self.order[(start + k) % n]);
            if !untried(i) {
                continue;
            }
            if health[i].as_ref().admits(now, self.eject_for) {
                return i;
            }
            fallback.get_or_insert(i);
        }
        fallback.unwrap_or_else(|| usize::from(self.order[start % n]))
    }
}

/// Smooth weighted round-robin: each turn every target gains its weight,
/// the one with the most goes and loses the total.
fn smooth_order(weights: &[u32]) -> Box<[u8]> {
    let total: i64 = weights.iter().map(|&w| i64::from(w)).sum();
    let mut current = vec![0i64; weights.len()];
    let mut order = Vec::with_capacity(total as usize);
    for _ in 0..total {
        let mut best = 0;
        for (i, &w) in weights.iter().enumerate() {
            current[i] += i64::from(w);
            if current[i] > current[best] {
                best = i;
            }
        }
        current[best] -= total;
        order.push(best as u8);
    }
    order.into_boxed_slice()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const POLICY: HealthPolicy = HealthPolicy {
        failures_to_eject: Some(3),
        eject_for: Duration::from_secs(30),
    };

    fn balancer(weights: &[u32]) -> Balancer {
        Balancer {
            order: smooth_order(weights),
            cursors: vec![Cursor::default()].into_boxed_slice(),
            eject_for: POLICY.eject_for,
        }
    }

    #[test]
    fn weights_two_and_one_interleave() {
        assert_eq!(&*smooth_order(&[2, 1]), &[0, 1, 0]);
        assert_eq!(&*smooth_order(&[5, 1, 1]), &[0, 0, 1, 0, 2, 0, 0]);
    }

    proptest! {
        #[test]
        fn every_target_gets_its_weight_share(weights in prop::collection::vec(1u32..=20, 1..8)) {
            let order = smooth_order(&weights);
            for (i, &w) in weights.iter().enumerate() {
                prop_assert_eq!(order.iter().filter(|&&t| usize::from(t) == i).count(), w as usize);
            }
        }

        #[test]
        fn a_request_never_repeats_a_target_while_another_is_untried(
            weights in prop::collection::vec(1u32..=5, 2..6),
            ejected in prop::collection::vec(any::<bool>(), 6),
        ) {
            let b = balancer(&weights);
            let health: Vec<Health> = weights.iter().map(|_| Health::default()).collect();
            for (h, &out) in health.iter().zip(&ejected) {
                if out {
                    h.ejected_until.store(1_000_000, Ordering::Relaxed);
                }
            }
            let refs: Vec<&Health> = health.iter().collect();
            let mut tried = 0u64;
            for _ in 0..weights.len() {
                let i = b.pick(&refs, tried, 0, 10);
                prop_assert_eq!(tried & (1 << i), 0, "target {} picked twice", i);
                tried |= 1 << i;
            }
        }
    }

    #[test]
    fn an_ejected_target_gets_no_traffic_until_its_probe() {
        let b = balancer(&[1, 1]);
        let (a, z) = (Health::default(), Health::default());
        for _ in 0..2 {
            assert_eq!(z.failed(&POLICY, 100), Change::None);
        }
        assert_eq!(z.failed(&POLICY, 100), Change::Ejected);
        assert!(!z.is_up());
        let picks: Vec<usize> = (0..10).map(|_| b.pick(&[&a, &z], 0, 0, 1_000)).collect();
        assert!(picks.iter().all(|&i| i == 0), "{picks:?}");
        // Time is up: exactly one request probes it.
        let due = 100 + 30_000;
        let picks: Vec<usize> = (0..10).map(|_| b.pick(&[&a, &z], 0, 0, due)).collect();
        assert_eq!(picks.iter().filter(|&&i| i == 1).count(), 1, "{picks:?}");
        // The probe answered: back in the rotation.
        assert_eq!(z.succeeded(), Change::Restored);
        let picks: Vec<usize> = (0..10).map(|_| b.pick(&[&a, &z], 0, 0, due)).collect();
        assert_eq!(picks.iter().filter(|&&i| i == 1).count(), 5, "{picks:?}");
    }

    #[test]
    fn a_failed_probe_ejects_again_and_all_out_still_picks_one() {
        let b = balancer(&[1, 1]);
        let (a, z) = (Health::default(), Health::default());
        for h in [&a, &z] {
            for _ in 0..3 {
                h.failed(&POLICY, 0);
            }
        }
        // Both out: requests still go somewhere, each to an untried target first.
        let first = b.pick(&[&a, &z], 0, 0, 5);
        let second = b.pick(&[&a, &z], 1 << first, 0, 5);
        assert_ne!(first, second);
        // z's probe fails: out for another 30 s from then.
        assert!(z.admits(30_000, POLICY.eject_for));
        assert_eq!(z.failed(&POLICY, 30_001), Change::None);
        assert!(!z.admits(59_000, POLICY.eject_for));
        assert!(z.admits(60_001, POLICY.eject_for));
    }

    #[test]
    fn failures_to_eject_zero_never_ejects() {
        let never = HealthPolicy {
            failures_to_eject: None,
            ..POLICY
        };
        let h = Health::default();
        for _ in 0..100 {
            assert_eq!(h.failed(&never, 1), Change::None);
        }
        assert!(h.is_up());
    }
}
