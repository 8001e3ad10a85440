//! `toolgate_cost_usd_total`: what the upstreams' answers cost, kept in
//! integer micro-dollars per provider and tenant and shown in dollars.
//!
//! The gauge is set to the running total, never incremented by fractions:
//! a dollar amount added up in floating point drifts (0.0015 + 0.003
//! reads 0.0045000000000000005), while a total of whole micro-dollars
//! divided once by a million is the double nearest the exact amount, which
//! the exporter prints as that amount.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::COST_USD;

/// A (provider, tenant)'s total in micro-dollars and its gauge.
type Totals = HashMap<(String, Arc<str>), (u64, metrics::Gauge)>;

/// Every (provider, tenant)'s total so far. Bounded as the labels are:
/// providers are the config's, tenants are made by admins.
static TOTALS: Mutex<Option<Totals>> = Mutex::new(None);

/// Adds `micros` micro-dollars to what `provider`'s answers cost `tenant`.
pub fn add(provider: &str, tenant: &Arc<str>, micros: u64) {
    if micros == 0 {
        return;
    }
    let mut totals = TOTALS.lock().unwrap_or_else(PoisonError::into_inner);
    let totals = totals.get_or_insert_with(HashMap::new);
    let key = (provider.to_owned(), tenant.clone());
    let (total, gauge) = totals.entry(key).or_insert_with(|| {
        let gauge = metrics::gauge!(COST_USD, "provider" => provider.to_owned(), "tenant" => tenant.clone());
        (0, gauge)
    });
    *total = total.saturating_add(micros);
    gauge.set(dollars(*total));
}

/// Micro-dollars in dollars: the double nearest the exact amount (exact
/// in decimal up to 2^53 micro-dollars).
pub fn dollars(micros: u64) -> f64 {
    micros as f64 / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dollars_print_as_the_exact_decimal() {
        // 0.0015 + 0.003 in floating point is 0.0045000000000000005.
        assert_ne!((0.0015f64 + 0.003).to_string(), "0.0045");
        assert_eq!(dollars(1_500 + 3_000).to_string(), "0.0045");
        assert_eq!(dollars(123_456_789_012).to_string(), "123456.789012");
        let mut sum = 0.0f64;
        let mut micros = 0u64;
        for _ in 0..10 {
            sum += 0.1;
            micros += 100_000;
        }
        assert_ne!(sum.to_string(), "1");
        assert_eq!(dollars(micros).to_string(), "1");
    }
}
