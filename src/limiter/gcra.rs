//! The arithmetic of every limit, pure: what the in-memory counters run
//! and what `batch.lua` runs in Redis, step for step, so both refuse at
//! the same point. Times are microseconds since the Unix epoch.
//!
//! Requests and tokens per minute are GCRA (the generic cell rate
//! algorithm): a tenant's state is one instant, its *theoretical arrival
//! time* (TAT); each request (each token) pushes it `60 s / limit` later,
//! and a request is admitted while the TAT stays within a minute of now.
//! So a tenant idle for a minute may send its whole minute's worth at once,
//! exactly `limit`, and after that one more each `60 s / limit`: a client
//! that keeps to that pace is never refused, and the long-run rate never
//! exceeds `limit` a minute. The window error is the bucket's: a minute
//! that starts with a full bucket admits the bucket and the minute's refill
//! (`2 × limit − 1` at most). Tokens are
//! known only when the answer ends: a request is admitted while at least
//! one token of the minute is left, and takes its reservation from the
//! minute at once (`charge_tokens`); when it ends, the reservation is
//! replaced by what it used (`settle_tokens`). A burst therefore ends at
//! most one reservation past the minute, and an answer longer than its
//! reservation overdraws it (the next requests wait it out).

/// A minute, in microseconds.
pub const MINUTE_US: u64 = 60_000_000;

/// One limit's reading for the `x-ratelimit-*` headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    pub limit: u64,
    pub remaining: u64,
    /// Until the window is back to `limit`, in microseconds.
    pub reset_us: u64,
}

/// The spacing of `limit` requests in a minute (rounded up: never more
/// than `limit` a minute).
pub fn interval(limit: u64) -> u64 {
    MINUTE_US.div_ceil(limit)
}

/// A request against `limit` requests a minute: the new TAT and the
/// reading, or how long until one would be admitted. A burst from rest
/// takes exactly `limit` (the spacing is rounded up, so those `limit` span
/// at least a minute).
pub fn request(tat: u64, now: u64, limit: u64) -> Result<(u64, Reading), u64> {
    let t = interval(limit);
    let tolerance = (limit - 1) * t;
    let start = tat.max(now);
    if start - now > tolerance {
        return Err(start - now - tolerance);
    }
    let new = start + t;
    Ok((new, peek_requests(new, now, limit)))
}

/// The reading of `limit` requests a minute without taking one (for the
/// headers of a request another limit refused).
pub fn peek_requests(tat: u64, now: u64, limit: u64) -> Reading {
    let t = interval(limit);
    let start = tat.max(now);
    Reading {
        limit,
        remaining: (now + limit * t).saturating_sub(start) / t,
        reset_us: start - now,
    }
}

/// Whether a request may start against `limit` tokens a minute (at least
/// one token of the minute is left): the reading, or how long until one is.
pub fn tokens_left(tat: u64, now: u64, limit: u64) -> Result<Reading, u64> {
    let used = tat.saturating_sub(now);
    let left = MINUTE_US.saturating_sub(used);
    let remaining = (left as u128 * limit as u128 / MINUTE_US as u128) as u64;
    if remaining == 0 {
        return Err((used + interval(limit)).saturating_sub(MINUTE_US).max(1));
    }
    Ok(Reading {
        limit,
        remaining,
        reset_us: used,
    })
}

/// The TAT after `tokens` were used against `limit` tokens a minute.
pub fn charge_tokens(tat: u64, now: u64, limit: u64, tokens: u64) -> u64 {
    // Rounded down: with `tokens_left` rounding down too, n of a limit of
    // n leave exactly none, whatever n.
    let cost = tokens as u128 * MINUTE_US as u128 / limit as u128;
    tat.max(now)
        .saturating_add(u64::try_from(cost).unwrap_or(u64::MAX))
}

/// The TAT once a request that took `reserved` tokens at admission is
/// found to have used `used`: the difference charged or given back, each
/// rounded as `charge_tokens` rounds, so a reservation given back whole
/// leaves the TAT where it would be without it. Never before `now` (a
/// minute holds no more than its limit).
pub fn settle_tokens(tat: u64, now: u64, limit: u64, reserved: u64, used: u64) -> u64 {
    let cost = |tokens: u64| {
        u64::try_from(tokens as u128 * MINUTE_US as u128 / limit as u128).unwrap_or(u64::MAX)
    };
    let (used, reserved) = (cost(used), cost(reserved));
    if used >= reserved {
        tat.max(now).saturating_add(used - reserved)
    } else {
        tat.saturating_sub(reserved - used).max(now)
    }
}

/// A day, in seconds.
const DAY_SECS: u64 = 86_400;

/// The budget period holding `now_secs`: its first day (days since the
/// epoch, a multiple of `days`) and when it ends (seconds since the epoch).
pub fn period(now_secs: u64, days: u32) -> (u64, u64) {
    let day = now_secs / DAY_SECS;
    let first = day - day % u64::from(days);
    (first, (first + u64::from(days)) * DAY_SECS)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000;

    /// From rest, exactly `limit` requests pass at once; then one more
    /// each `60 s / limit`, and no sooner.
    #[test]
    fn a_minute_from_rest_admits_exactly_the_limit() {
        for limit in [1, 5, 7, 600] {
            let now = 1_700_000_000 * S;
            let mut tat = 0;
            for i in 0..limit {
                let (new, reading) = request(tat, now, limit)
                    .unwrap_or_else(|_| panic!("request {i} of {limit} refused below the limit"));
                assert_eq!(reading.remaining, limit - i - 1, "limit {limit}");
                tat = new;
            }
            let wait = request(tat, now, limit).expect_err("one over the limit");
            assert_eq!(wait, interval(limit));
            assert!(request(tat, now + wait - 1, limit).is_err());
            assert!(request(tat, now + wait, limit).is_ok());
            // Once the burst's spacing ran out (a minute, rounded up), the
            // whole limit is back.
            let back = now + limit * interval(limit);
            assert!(limit * interval(limit) - MINUTE_US < limit);
            assert_eq!(request(tat, back, limit).unwrap().1.remaining, limit - 1);
        }
    }

    #[test]
    fn tokens_admit_while_one_is_left_and_charge_afterwards() {
        let now = 1_700_000_000 * S;
        let limit = 1000;
        let fresh = tokens_left(0, now, limit).unwrap();
        assert_eq!((fresh.remaining, fresh.reset_us), (1000, 0));
        let tat = charge_tokens(0, now, limit, 600);
        assert_eq!(tokens_left(tat, now, limit).unwrap().remaining, 400);
        let tat = charge_tokens(tat, now, limit, 399);
        assert_eq!(tokens_left(tat, now, limit).unwrap().remaining, 1);
        // An answer may overdraw the minute; then requests wait it out.
        let tat = charge_tokens(tat, now, limit, 1001);
        let wait = tokens_left(tat, now, limit).unwrap_err();
        assert_eq!(wait, 60 * S + interval(limit));
        assert!(tokens_left(tat, now + wait, limit).is_ok());
        // Spacing that does not divide the minute: 6 of 7 used leaves one.
        let tat = charge_tokens(0, now, 7, 6);
        assert_eq!(tokens_left(tat, now, 7).unwrap().remaining, 1);
        let tat = charge_tokens(tat, now, 7, 1);
        let wait = tokens_left(tat, now, 7).unwrap_err();
        assert!(tokens_left(tat, now + wait, 7).is_ok());
        assert!(tokens_left(tat, now + wait - 1, 7).is_err());
    }

    #[test]
    fn a_settle_replaces_the_reservation_by_the_use() {
        let now = 1_700_000_000 * S;
        let limit = 100;
        // 60 reserved, 29 used: as if 29 had been charged.
        let reserved = charge_tokens(0, now, limit, 60);
        assert_eq!(tokens_left(reserved, now, limit).unwrap().remaining, 40);
        let settled = settle_tokens(reserved, now, limit, 60, 29);
        assert_eq!(settled, charge_tokens(0, now, limit, 29));
        // More used than reserved: the rest is charged.
        let over = settle_tokens(reserved, now, limit, 60, 130);
        assert_eq!(over, charge_tokens(0, now, limit, 130));
        // A reservation that has partly elapsed gives back no more than
        // the minute had: never a TAT before now.
        let later = now + 50 * S;
        assert_eq!(settle_tokens(reserved, later, limit, 60, 0), later);
        assert_eq!(settle_tokens(0, later, limit, 60, 0), later);
    }

    #[test]
    fn periods_start_at_utc_midnight() {
        // 2026-11-28T10:00:00Z is day 20_785.
        let now = 20_785 * DAY_SECS + 36_000;
        assert_eq!(period(now, 1), (20_785, 20_786 * DAY_SECS));
        let (first, end) = period(now, 30);
        assert_eq!(first % 30, 0);
        assert!(first <= 20_785 && end > now && end - first * DAY_SECS == 30 * DAY_SECS);
    }
}
