//! Each worker's sweep over the deadlines of its connections.
//!
//! Connections register their [`Activity`] with the worker that serves
//! them; that worker's sweep wakes a few times a second, closes the
//! connections past a deadline and forgets the ones that ended. The sweep's
//! timer is also the earliest timer of an idle worker, so timers that
//! requests arm for later (first-byte and stream timeouts) never need to
//! wake the worker's reactor early.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use super::conn::{Activity, now_ms};
use crate::workers;

/// The longest pause between two sweeps.
const MAX_INTERVAL: Duration = Duration::from_secs(1);

/// The connections of every worker, by worker index.
pub struct Sweep {
    slots: Box<[Mutex<Vec<Weak<Activity>>>]>,
}

impl Sweep {
    /// Slots for `workers` workers (threads that are not workers share the first).
    pub fn new(workers: usize) -> Arc<Self> {
        Arc::new(Sweep {
            slots: (0..workers.max(1)).map(|_| Mutex::default()).collect(),
        })
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Vec<Weak<Activity>>> {
        let slot = &self.slots[workers::current() % self.slots.len()];
        slot.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Watches `activity`'s deadlines from now on (call on its worker).
    pub fn register(&self, activity: &Arc<Activity>) {
        self.slot().push(Arc::downgrade(activity));
    }

    /// Sweeps the current worker's connections until the task is dropped.
    pub async fn run(self: Arc<Self>) {
        let mut interval = MAX_INTERVAL;
        loop {
            tokio::time::sleep(interval).await;
            interval = self.sweep_once(now_ms());
        }
    }

    /// Closes what is overdue at `now`, forgets what ended, and says when to
    /// look again: soon enough for the shortest deadline it watches.
    fn sweep_once(&self, now: u64) -> Duration {
        let mut interval = MAX_INTERVAL;
        self.slot().retain(|weak| {
            let Some(activity) = weak.upgrade() else {
                return false;
            };
            if activity.is_closed() {
                return false;
            }
            if let Some(why) = activity.overdue(now) {
                activity.close(why);
                return false;
            }
            interval = interval.min(activity.limits().sweep_interval());
            true
        });
        interval
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::conn::{Closed, Limits};

    #[test]
    fn overdue_connections_are_closed_and_ended_ones_forgotten() {
        let sweep = Sweep::new(1);
        let limits = Limits {
            request_head: Duration::from_secs(2),
            idle: Duration::from_secs(60),
            write_stall: Duration::from_secs(60),
        };
        let silent = Activity::new(limits);
        let busy = Activity::new(limits);
        let _request = busy.begin();
        let ended = Activity::new(limits);
        for a in [&silent, &busy, &ended] {
            sweep.register(a);
        }
        drop(ended);
        let interval = sweep.sweep_once(now_ms());
        assert_eq!(interval, Duration::from_millis(500), "a quarter of 2 s");
        assert_eq!(sweep.slot().len(), 2, "the ended connection is forgotten");
        assert!(!silent.is_closed());
        sweep.sweep_once(now_ms() + 2_000);
        assert!(silent.is_closed(), "no request within 2 s");
        assert!(!busy.is_closed());
        assert_eq!(sweep.slot().len(), 1);
        assert_eq!(silent.overdue(now_ms() + 2_000), Some(Closed::NoRequest));
    }
}
