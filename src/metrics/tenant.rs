//! The `tenant` label, one rule for every series that has one
//! (`toolgate_requests_total`, `toolgate_request_duration_seconds`,
//! `toolgate_tokens_total`, `toolgate_cost_usd_total`,
//! `toolgate_rate_limited_total`), so a dashboard's tenant variable picks
//! a tenant's requests, tokens, spend and refusals alike.
//!
//! Tenants are made only by admins: the config's (`[[server.auth.keys]]`,
//! each `api_keys_env` key, `anonymous` without `[server.auth]`) and those
//! of managed keys. Each is labelled by its name. The set stays bounded:
//! managed keys' tenants the config does not name get their own label up
//! to [`MAX_MANAGED`] of them (by their first key's creation), and later
//! ones share `other`. A request no key was accepted for is `none`.
//!
//! [`ByTenant`] keeps a series' handles per label, registered once each.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use crate::config::Tenant;

/// The label of a request no key was accepted for.
pub const NO_KEY: &str = "none";
/// The label the managed keys' tenants past [`MAX_MANAGED`] share.
pub const OTHER: &str = "other";
/// The most tenants of managed keys (those the config does not name)
/// labelled by their names.
pub const MAX_MANAGED: usize = 1_000;

/// The label of `tenant` (`None`: no key was accepted).
pub fn label(tenant: Option<&Tenant>) -> &str {
    tenant.map_or(NO_KEY, |t| t.label())
}

/// [`label`], shared.
pub fn label_arc(tenant: Option<&Tenant>) -> Arc<str> {
    tenant.map_or_else(|| Arc::from(NO_KEY), |t| t.label().clone())
}

/// The label of a managed keys' tenant the config does not name, the
/// `rank`-th (from 0) by its first key's creation.
pub fn managed(name: &str, rank: usize) -> Arc<str> {
    if rank < MAX_MANAGED {
        Arc::from(name)
    } else {
        Arc::from(OTHER)
    }
}

/// A series' handles per `tenant` label: the config's tenants registered
/// up front, any other label (a managed key's tenant) on its first use.
/// The labels are bounded, so the map is.
pub struct ByTenant<T> {
    known: HashMap<Arc<str>, T>,
    more: RwLock<HashMap<Arc<str>, T>>,
}

impl<T: Clone> ByTenant<T> {
    /// Handles for `labels`, made by `make`.
    pub fn new(labels: &[Arc<str>], make: impl Fn(&str) -> T) -> Self {
        ByTenant {
            known: labels
                .iter()
                .cloned()
                .map(|l| {
                    let handles = make(&l);
                    (l, handles)
                })
                .collect(),
            more: RwLock::default(),
        }
    }

    /// The handles of `label`, made by `make` on its first use.
    pub fn get(&self, label: &str, make: impl FnOnce(&str) -> T) -> T {
        if let Some(h) = self.known.get(label) {
            return h.clone();
        }
        if let Some(h) = self
            .more
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(label)
        {
            return h.clone();
        }
        self.more
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(Arc::from(label))
            .or_insert_with(|| make(label))
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn managed_tenants_past_the_bound_share_other() {
        assert_eq!(&*managed("team-x", 0), "team-x");
        assert_eq!(&*managed("team-x", MAX_MANAGED - 1), "team-x");
        assert_eq!(&*managed("team-y", MAX_MANAGED), OTHER);
        assert_eq!(label(None), NO_KEY);
        assert_eq!(label(Some(&Tenant::anonymous())), "anonymous");
    }

    #[test]
    fn handles_are_made_once_per_label() {
        let made = std::sync::atomic::AtomicUsize::new(0);
        let make = |l: &str| {
            made.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            l.to_owned()
        };
        let by = ByTenant::new(&[Arc::from("a")], make);
        assert_eq!(made.load(std::sync::atomic::Ordering::Relaxed), 1);
        assert_eq!(by.get("a", make), "a");
        assert_eq!(by.get("b", make), "b");
        assert_eq!(by.get("b", make), "b");
        assert_eq!(made.load(std::sync::atomic::Ordering::Relaxed), 2);
    }
}
