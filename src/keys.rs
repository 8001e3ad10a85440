//! Keys an admin makes at run time (`[server.auth] managed_keys = true`):
//! kept in the transcript store (only their SHA-256), read by every replica
//! when one announces a change (PostgreSQL `NOTIFY`) and every few seconds
//! in case an announcement was missed, and checked beside the config's
//! static keys.
//!
//! A managed key names its tenant. Every field of a key applies, on top of
//! its tenant's: when the config names the tenant too
//! (`[[server.auth.keys]]`), the config's policy (models, gateway tools) and
//! limits apply to all the tenant's keys together, and a key's own `models`
//! and `gateway_tools` narrow that policy (a request needs both; an entry
//! outside the tenant's is refused when the key is made or changed);
//! otherwise the key's own `models` and `gateway_tools` are its tenant's
//! policy. A key's own `limits` and `budget` are its share, enforced on top
//! of its tenant's.
//!
//! Whoever is told of changes (`on_change`) is told again when a key in
//! force expires, by a timer at its `expires_at` (not at the next read of
//! the keys): the gateway then closes the key's streams.
//!
//! `policy`: what a key is made with, validated against the config.

mod policy;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

use arc_swap::ArcSwap;
use base64::Engine;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use tokio::sync::Notify;

use crate::config::{Config, Tenant};
use crate::error::GatewayError;
use crate::limiter::Share;
use crate::store::{KeyRow, Store, StoreError};

pub use policy::Policy;

/// How often a key's use is written back as its `last_used_at`, at most.
const TOUCH_EVERY_MS: i64 = 60_000;

/// What is told of a change of the keys in force.
type OnChange = Box<dyn Fn(&ManagedKeys) + Send + Sync>;

/// The managed keys in force, kept current.
pub struct ManagedKeys {
    store: Arc<Store>,
    config: ArcSwap<Config>,
    /// The keys as last read, the revoked ones too.
    rows: Mutex<Vec<KeyRow>>,
    /// The keys in force by the SHA-256 of the key.
    by_hash: ArcSwap<HashMap<[u8; 32], Arc<ManagedKey>>>,
    /// When each revoked key was revoked, by the SHA-256 of the key.
    revoked: ArcSwap<HashMap<[u8; 32], i64>>,
    /// When each key was last noted as used.
    touched: Mutex<HashMap<Arc<str>, i64>>,
    /// Told after every change of the keys in force, and when one expires.
    on_change: OnceLock<OnChange>,
    /// Wakes the expiry timer: the keys in force changed.
    rebuilt: Arc<Notify>,
}

/// One managed key in force.
#[derive(Debug)]
pub struct ManagedKey {
    /// `key_…`: names it in the API and in usage rows.
    pub id: Arc<str>,
    /// Its tenant: the config's, or one made of the key's own policy.
    pub tenant: Arc<Tenant>,
    /// Its own limits and budget.
    pub share: Share,
    /// ms since the epoch; `None`: never.
    pub expires_at: Option<i64>,
}

/// What a presented key is among the managed keys.
#[derive(Debug)]
pub enum Lookup {
    /// A key in force, not expired.
    InForce(Arc<ManagedKey>),
    /// It expired at this time (ms since the epoch).
    Expired(i64),
    /// It was revoked at this time (ms since the epoch).
    Revoked(i64),
    /// No managed key.
    Unknown,
}

/// A key just made: the only time its secret is seen.
pub struct Made {
    /// The key as kept.
    pub row: KeyRow,
    /// `tg-` and 32 random bytes, URL-safe base64.
    pub secret: String,
}

impl ManagedKeys {
    /// The keys of `store`, read now and whenever they change.
    pub fn start(store: Arc<Store>, config: Arc<Config>) -> Arc<ManagedKeys> {
        let keys = Arc::new(ManagedKeys {
            store: store.clone(),
            config: ArcSwap::new(config),
            rows: Mutex::default(),
            by_hash: ArcSwap::default(),
            revoked: ArcSwap::default(),
            touched: Mutex::default(),
            on_change: OnceLock::new(),
            rebuilt: Arc::default(),
        });
        let weak: Weak<ManagedKeys> = Arc::downgrade(&keys);
        store.watch_keys(Arc::new(move |rows| {
            if let Some(keys) = weak.upgrade() {
                keys.set_rows(rows);
            }
        }));
        store.spawn(expire(Arc::downgrade(&keys), keys.rebuilt.clone()));
        keys
    }

    /// `f` is told after every change of the keys in force, and when a key
    /// expires (to close the streams of a key that went).
    pub fn on_change(&self, f: impl Fn(&ManagedKeys) + Send + Sync + 'static) {
        let _ = self.on_change.set(Box::new(f));
    }

    /// The config the keys are built against.
    pub fn config(&self) -> Arc<Config> {
        self.config.load_full()
    }

    /// A reload: the keys are built again against the new config.
    pub fn reconfigure(&self, config: Arc<Config>) {
        self.config.store(config);
        self.rebuild();
    }

    fn set_rows(&self, rows: Vec<KeyRow>) {
        let mut kept = self.rows.lock().unwrap_or_else(PoisonError::into_inner);
        if *kept == rows {
            return;
        }
        *kept = rows;
        drop(kept);
        self.rebuild();
    }

    fn rebuild(&self) {
        let config = self.config.load_full();
        let rows = self
            .rows
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let (rows, revoked): (Vec<KeyRow>, Vec<KeyRow>) =
            rows.into_iter().partition(|r| r.revoked_at.is_none());
        let labels = labels(&config, &rows);
        let mut map = HashMap::with_capacity(rows.len());
        for row in &rows {
            match build(&config, row, labels.get(row.tenant.as_str()).cloned()) {
                Ok(key) => {
                    if let Some(hash) = decode_hash(&row.sha256) {
                        map.insert(hash, Arc::new(key));
                    }
                }
                Err(e) => {
                    tracing::error!(id = %row.id, tenant = %row.tenant, error = %e, "a managed key's policy no longer fits the config; the key is refused");
                }
            }
        }
        self.by_hash.store(Arc::new(map));
        self.revoked.store(Arc::new(
            revoked
                .iter()
                .filter_map(|r| Some((decode_hash(&r.sha256)?, r.revoked_at?)))
                .collect(),
        ));
        self.rebuilt.notify_one();
        self.tell();
    }

    fn tell(&self) {
        if let Some(f) = self.on_change.get() {
            f(self);
        }
    }

    /// The earliest `expires_at` of a key in force after `after` (ms).
    fn next_expiry(&self, after: i64) -> Option<i64> {
        self.by_hash
            .load()
            .values()
            .filter_map(|k| k.expires_at)
            .filter(|&at| at > after)
            .min()
    }

    /// The managed key `presented` is, when it is one in force and not
    /// expired.
    pub fn identify(&self, presented: &[u8]) -> Option<Arc<ManagedKey>> {
        match self.look_up(presented) {
            Lookup::InForce(key) => Some(key),
            _ => None,
        }
    }

    /// What managed key `presented` is: one in force (its use noted), or
    /// one that expired or was revoked, and when (ms), or none.
    pub fn look_up(&self, presented: &[u8]) -> Lookup {
        let hash: [u8; 32] = Sha256::digest(presented).into();
        let Some(key) = self.by_hash.load().get(&hash).cloned() else {
            return match self.revoked.load().get(&hash) {
                Some(&at) => Lookup::Revoked(at),
                None => Lookup::Unknown,
            };
        };
        let now = now_ms();
        if let Some(at) = key.expires_at.filter(|&at| now >= at) {
            return Lookup::Expired(at);
        }
        let mut touched = self.touched.lock().unwrap_or_else(PoisonError::into_inner);
        let last = touched.entry(key.id.clone()).or_insert(0);
        if now - *last >= TOUCH_EVERY_MS {
            *last = now;
            drop(touched);
            self.store.touch_keys(vec![(key.id.to_string(), now)]);
        }
        Lookup::InForce(key)
    }

    /// Makes a key as `request` says (`tenant`, `name`, and optionally
    /// `models`, `gateway_tools`, `limits`, `budget`, `expires_at`).
    pub async fn create(&self, request: &Map<String, Value>) -> Result<Made, GatewayError> {
        let tenant = text(request, "tenant")?;
        let name = text(request, "name")?;
        let expires_at = expiry(request.get("expires_at"))?;
        let policy = Policy::from_request(request)?;
        let bytes: [u8; 32] = rand::random();
        let secret = format!(
            "tg-{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
        );
        let row = KeyRow {
            id: format!("key_{:016x}", rand::random::<u64>()),
            tenant,
            name,
            prefix: secret[..9].to_owned(),
            sha256: hex(&Sha256::digest(secret.as_bytes())),
            policy: policy.to_json(),
            created_at: now_ms(),
            expires_at,
            last_used_at: None,
            revoked_at: None,
        };
        let config = self.config.load();
        within_tenant(&config, &row.tenant, &policy)?;
        build(&config, &row, None).map_err(|e| GatewayError::bad_request(e, None))?;
        self.store
            .create_key(row.clone())
            .await
            .map_err(unavailable)?;
        self.refresh().await;
        Ok(Made { row, secret })
    }

    /// The keys in force, `tenant`'s only when given, oldest first.
    pub fn list(&self, tenant: Option<&str>) -> Vec<KeyRow> {
        let touched = self.touched.lock().unwrap_or_else(PoisonError::into_inner);
        self.rows
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|r| r.revoked_at.is_none() && tenant.is_none_or(|t| r.tenant == t))
            .map(|r| {
                let mut r = r.clone();
                if let Some(&at) = touched.get(r.id.as_str()) {
                    r.last_used_at = Some(r.last_used_at.map_or(at, |was| was.max(at)));
                }
                r
            })
            .collect()
    }

    /// Changes key `id`: the members of `change` replace the key's (`null`
    /// removes a policy member or the expiry); its tenant stays.
    pub async fn update(
        &self,
        id: &str,
        change: &Map<String, Value>,
    ) -> Result<KeyRow, GatewayError> {
        if change.contains_key("tenant") {
            return Err(GatewayError::bad_request(
                "a key's tenant cannot change: make a key for the other tenant",
                Some("tenant"),
            ));
        }
        let Some(mut row) = self.list(None).into_iter().find(|r| r.id == id) else {
            return Err(no_key(id));
        };
        if change.contains_key("name") {
            row.name = text(change, "name")?;
        }
        if change.contains_key("expires_at") {
            row.expires_at = expiry(change.get("expires_at"))?;
        }
        let mut policy = Policy::from_json(&row.policy).map_err(GatewayError::StoreUnavailable)?;
        policy.apply(change)?;
        row.policy = policy.to_json();
        let config = self.config.load();
        within_tenant(&config, &row.tenant, &policy)?;
        build(&config, &row, None).map_err(|e| GatewayError::bad_request(e, None))?;
        if !self
            .store
            .update_key(row.clone())
            .await
            .map_err(unavailable)?
        {
            return Err(no_key(id));
        }
        self.refresh().await;
        Ok(row)
    }

    /// Revokes key `id`: refused at once here, within a second on every
    /// replica.
    pub async fn revoke(&self, id: &str) -> Result<(), GatewayError> {
        if !self
            .store
            .revoke_key(id.to_owned())
            .await
            .map_err(unavailable)?
        {
            return Err(no_key(id));
        }
        self.refresh().await;
        Ok(())
    }

    /// What key `id` spent since `since` (ms): micro-dollars and tokens.
    pub async fn spent(&self, id: &str, since: i64) -> Result<(i64, i64), GatewayError> {
        self.store
            .key_spend(id.to_owned(), since)
            .await
            .map_err(unavailable)
    }

    /// Reads the keys again now (after a change made here).
    async fn refresh(&self) {
        match self.store.keys().await {
            Ok(rows) => self.set_rows(rows),
            Err(e) => tracing::warn!(error = %e, "cannot read the managed keys back"),
        }
    }
}

/// The expiry timer: sleeps until the next key in force expires, then
/// tells `on_change` (whose `identify` now refuses that key); woken by
/// `rebuilt` when the keys change, since the next expiry may have too.
async fn expire(keys: Weak<ManagedKeys>, rebuilt: Arc<Notify>) {
    // Expiries at or before this were told.
    let mut told = now_ms();
    loop {
        let Some(next) = keys.upgrade().map(|k| k.next_expiry(told)) else {
            return;
        };
        let due = async {
            match next {
                // A millisecond late rather than early: `identify` refuses
                // a key from its `expires_at` on.
                Some(at) => {
                    let wait = u64::try_from(at - now_ms() + 1).unwrap_or(0);
                    tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = rebuilt.notified() => {}
            () = due => {
                let Some(keys) = keys.upgrade() else {
                    return;
                };
                // A timer that fired early (the wall clock moved) leaves
                // `told` before the expiry, which is then waited for again.
                told = now_ms();
                keys.tell();
            }
        }
    }
}

/// A key's own `models` and `gateway_tools` narrow those of a tenant the
/// config names (both apply): an entry that could never apply is refused,
/// naming it, rather than kept and silently ignored. (A glob may still
/// meet the tenant's globs, so only a literal model is checked.)
fn within_tenant(config: &Config, tenant: &str, policy: &Policy) -> Result<(), GatewayError> {
    let Some(configured) = config
        .server
        .auth
        .as_ref()
        .and_then(|a| a.tenant_named(tenant))
    else {
        return Ok(());
    };
    for (j, model) in policy.models.iter().flatten().enumerate() {
        let literal = !model.contains(['*', '?', '[', '{']);
        if literal && !configured.allows_model(model) {
            return Err(GatewayError::bad_request(
                format!(
                    "`models[{j}]`: tenant `{tenant}`'s models in the config ({}) do not allow {model:?}, and a key's models only narrow its tenant's",
                    configured.model_patterns().unwrap_or_default().join(", ")
                ),
                Some("models"),
            ));
        }
    }
    for (j, entry) in policy.gateway_tools.iter().flatten().enumerate() {
        if !configured.allows_tools(entry) {
            return Err(GatewayError::bad_request(
                format!(
                    "`gateway_tools[{j}]`: tenant `{tenant}`'s gateway_tools in the config ({}) do not include {entry:?}, and a key's gateway_tools only narrow its tenant's",
                    configured.tool_entries().unwrap_or_default().join(", ")
                ),
                Some("gateway_tools"),
            ));
        }
    }
    Ok(())
}

/// The metrics label of each tenant of `rows` the config does not name
/// (`metrics::tenant`'s rule, by their first key's creation: `rows` come
/// oldest first).
fn labels(config: &Config, rows: &[KeyRow]) -> HashMap<String, Arc<str>> {
    let auth = config.server.auth.as_ref();
    let mut labels = HashMap::new();
    for row in rows {
        if auth.is_some_and(|a| a.tenant_named(&row.tenant).is_some())
            || labels.contains_key(&row.tenant)
        {
            continue;
        }
        let label = crate::metrics::tenant::managed(&row.tenant, labels.len());
        labels.insert(row.tenant.clone(), label);
    }
    labels
}

/// A key row as a key in force under `config`; `label` names its tenant
/// in metrics when the config does not.
fn build(config: &Config, row: &KeyRow, label: Option<Arc<str>>) -> Result<ManagedKey, String> {
    let auth = config
        .server
        .auth
        .as_ref()
        .ok_or("managed keys need [server.auth]")?;
    let policy = Policy::from_json(&row.policy)?;
    let tenant = match auth.tenant_named(&row.tenant) {
        // The config's tenant as it is, when the key does not narrow it.
        Some(configured) if policy.models.is_none() && policy.gateway_tools.is_none() => {
            configured.clone()
        }
        _ => {
            let tenant = auth
                .managed_tenant(
                    &row.tenant,
                    policy.models.as_deref(),
                    policy.gateway_tools.as_deref(),
                )
                .map_err(|e| e.to_string())?;
            Arc::new(match label {
                Some(label) => tenant.labelled(label),
                None => tenant,
            })
        }
    };
    let quota = crate::config::limits::quota("", policy.limits.as_ref(), policy.budget.as_ref())
        .map_err(|e| e.to_string())?;
    Ok(ManagedKey {
        id: row.id.as_str().into(),
        tenant,
        share: Share {
            id: row.id.as_str().into(),
            name: row.name.as_str().into(),
            quota,
        },
        expires_at: row.expires_at,
    })
}

fn text(request: &Map<String, Value>, field: &str) -> Result<String, GatewayError> {
    match request.get(field) {
        Some(Value::String(s)) if !s.trim().is_empty() && s.len() <= 128 => Ok(s.clone()),
        _ => Err(GatewayError::bad_request(
            format!("`{field}` must be a string of 1 to 128 characters"),
            Some(field),
        )),
    }
}

/// `expires_at`: an RFC 3339 time in the future, or null.
fn expiry(value: Option<&Value>) -> Result<Option<i64>, GatewayError> {
    let bad =
        |why: &str| GatewayError::bad_request(format!("`expires_at` {why}"), Some("expires_at"));
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => {
            let at = chrono::DateTime::parse_from_rfc3339(s)
                .map_err(|_| bad("must be an RFC 3339 time"))?
                .timestamp_millis();
            if at <= now_ms() {
                return Err(bad("is in the past"));
            }
            Ok(Some(at))
        }
        Some(_) => Err(bad("must be an RFC 3339 time or null")),
    }
}

fn no_key(id: &str) -> GatewayError {
    GatewayError::NotFound(format!("No key `{id}`"))
}

fn unavailable(e: StoreError) -> GatewayError {
    GatewayError::StoreUnavailable(e.to_string())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn decode_hash(hex: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    if hex.len() != 64 {
        return None;
    }
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// ms since the epoch.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}
