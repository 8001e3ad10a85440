//! `[server.auth]`: every inbound key is an identity, a [`Tenant`], which
//! owns what its requests store and carries the key's policy (the models
//! it may ask for, the gateway tools it may be offered).
//!
//! Keys come from the environment, never from the file: `api_keys_env`
//! holds keys that are each their own tenant (`key-` and the first 8 hex
//! digits of the key's SHA-256), `[[server.auth.keys]]` names a tenant and
//! its keys (`key_env`, comma-separated, so a key can be rotated), and
//! `admin_keys_env` holds the keys that read every tenant's transcripts.

use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, OnceLock};

use globset::{Glob, GlobSet, GlobSetBuilder};
use sha2::{Digest, Sha256};

use super::ConfigError;
use super::limits::Quota;
use super::raw::RawAuth;

/// The tenant of every request when `[server.auth]` is off, and the owner
/// of rows stored before tenants existed.
pub const ANONYMOUS: &str = "anonymous";

/// Who a request comes from.
pub struct Tenant {
    /// Names it in logs, in the transcript API and in stored rows.
    pub name: Arc<str>,
    /// Its `tenant` label in metrics: its name, unless whoever made it
    /// (a managed key past `metrics::tenant`'s bound) said otherwise.
    label: Arc<str>,
    /// `models`: lists of globs over the requested `model`, compiled and
    /// as written, each of which must allow a model (the config's, then a
    /// managed key's own); none allows any.
    models: Vec<(GlobSet, Vec<String>)>,
    /// `gateway_tools`: the entries (as a provider's `gateway_tools` names
    /// them) this tenant may be offered; `None` allows all.
    gateway_tools: Option<HashSet<String>>,
    /// Its `limits` and `budget`, all its keys together.
    pub quota: Quota,
}

impl Tenant {
    /// The one tenant of a gateway without `[server.auth]`.
    pub fn anonymous() -> Arc<Tenant> {
        static ANON: OnceLock<Arc<Tenant>> = OnceLock::new();
        ANON.get_or_init(|| {
            Arc::new(Tenant {
                name: ANONYMOUS.into(),
                label: ANONYMOUS.into(),
                models: Vec::new(),
                gateway_tools: None,
                quota: Quota::default(),
            })
        })
        .clone()
    }

    /// Whether the tenant may ask for `model` (as the client wrote it):
    /// every `models` list allows it.
    pub fn allows_model(&self, model: &str) -> bool {
        self.models.iter().all(|(m, _)| m.is_match(model))
    }

    /// The narrowest `models` globs as written (a managed key's own when
    /// it has some), those the lists before it allow too; `None` when the
    /// tenant is limited to none.
    pub fn model_patterns(&self) -> Option<Vec<&str>> {
        let ((_, last), before) = self.models.split_last()?;
        Some(
            last.iter()
                .filter(|p| before.iter().all(|(m, _)| m.is_match(p.as_str())))
                .map(String::as_str)
                .collect(),
        )
    }

    /// The `gateway_tools` entries it may be offered, sorted; `None`: all.
    pub fn tool_entries(&self) -> Option<Vec<&str>> {
        let mut entries: Vec<&str> = self
            .gateway_tools
            .as_ref()?
            .iter()
            .map(String::as_str)
            .collect();
        entries.sort_unstable();
        Some(entries)
    }

    /// Its `tenant` label in metrics (read through `metrics::tenant`).
    pub fn label(&self) -> &Arc<str> {
        &self.label
    }

    /// The same tenant labelled `label` in metrics.
    #[must_use]
    pub fn labelled(mut self, label: Arc<str>) -> Tenant {
        self.label = label;
        self
    }

    /// This tenant as one of its managed keys narrows it: its name, label
    /// and limits, with the models it allows also allowed by `models`, and
    /// only those of its tool entries `gateway_tools` names too.
    pub fn narrowed(
        &self,
        models: Option<(GlobSet, Vec<String>)>,
        gateway_tools: Option<&HashSet<String>>,
    ) -> Tenant {
        let gateway_tools = match (&self.gateway_tools, gateway_tools) {
            (Some(own), Some(key)) => Some(own.intersection(key).cloned().collect()),
            (own, key) => own.clone().or_else(|| key.cloned()),
        };
        Tenant {
            name: self.name.clone(),
            label: self.label.clone(),
            models: self.models.iter().cloned().chain(models).collect(),
            gateway_tools,
            quota: self.quota.clone(),
        }
    }

    /// Whether the tenant may be offered the tools of this `gateway_tools`
    /// entry (`time`, `builtin:calculator`, an `[[http_tools]]` name).
    pub fn allows_tools(&self, entry: &str) -> bool {
        self.gateway_tools
            .as_ref()
            .is_none_or(|allowed| allowed.contains(entry))
    }
}

impl fmt::Debug for Tenant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tenant({})", self.name)
    }
}

/// The validated `[server.auth]`.
pub struct Auth {
    /// Every client key and its tenant.
    keys: Vec<(Vec<u8>, Arc<Tenant>)>,
    /// `admin_keys_env`; empty when not set.
    admin: Vec<Vec<u8>>,
    /// `managed_keys`: keys made through the API are accepted too.
    pub managed: bool,
    /// The `gateway_tools` entries the config can name (for managed keys'
    /// policies).
    entries: HashSet<String>,
}

/// What a presented key is.
#[derive(Debug, Clone)]
pub enum Caller {
    Client(Arc<Tenant>),
    /// An `admin_keys_env` key: reads every tenant's transcripts.
    Admin,
}

impl Auth {
    /// The caller `presented` identifies. Every key is compared in full
    /// whatever the outcome, so timing reveals neither which key nor how
    /// much of one matched.
    pub fn identify(&self, presented: &[u8]) -> Option<Caller> {
        let mut found: Option<&Arc<Tenant>> = None;
        for (key, tenant) in &self.keys {
            if constant_time_eq(key, presented) {
                found = Some(tenant);
            }
        }
        let mut admin = false;
        for key in &self.admin {
            admin |= constant_time_eq(key, presented);
        }
        match (found, admin) {
            (_, true) => Some(Caller::Admin),
            (Some(tenant), false) => Some(Caller::Client(tenant.clone())),
            (None, false) => None,
        }
    }

    /// Whether `admin_keys_env` is set.
    pub fn has_admin_keys(&self) -> bool {
        !self.admin.is_empty()
    }

    /// The configured tenant named `name` (its policy and limits apply to
    /// its managed keys too).
    pub fn tenant_named(&self, name: &str) -> Option<&Arc<Tenant>> {
        self.keys.iter().map(|(_, t)| t).find(|t| &*t.name == name)
    }

    /// The tenant of a managed key of tenant `name` with its own `models`
    /// and `gateway_tools`: the configured tenant of that name narrowed by
    /// them (its limits stay the tenant's, all its keys together), or,
    /// when the config does not name it, a tenant of the key's own policy.
    pub fn managed_tenant(
        &self,
        name: &str,
        models: Option<&[String]>,
        gateway_tools: Option<&[String]>,
    ) -> Result<Tenant, ConfigError> {
        let configured = self.tenant_named(name);
        if configured.is_none() {
            check_name("tenant", name)?;
        }
        let models = models
            .map(|globs| model_globs("models", globs).map(|set| (set, globs.to_vec())))
            .transpose()?;
        let gateway_tools = gateway_tools
            .map(|list| self.tool_entries("gateway_tools", list))
            .transpose()?;
        let unconfigured = Tenant {
            name: name.into(),
            label: name.into(),
            models: Vec::new(),
            gateway_tools: None,
            quota: Quota::default(),
        };
        Ok(configured
            .map_or(&unconfigured, |t| &**t)
            .narrowed(models, gateway_tools.as_ref()))
    }

    /// `list`, each entry checked against the config's gateway tools.
    pub fn tool_entries(
        &self,
        path: &str,
        list: &[String],
    ) -> Result<HashSet<String>, ConfigError> {
        for (j, tool) in list.iter().enumerate() {
            if !self.entries.contains(tool) {
                return Err(ConfigError::new(
                    format!("{path}[{j}]"),
                    format!("names no [[mcp_servers]], [[http_tools]] or builtin:… tool: {tool:?}"),
                ));
            }
        }
        Ok(list.iter().cloned().collect())
    }

    /// Every tenant with a key, once each.
    pub fn tenant_list(&self) -> impl Iterator<Item = &Arc<Tenant>> {
        let mut seen = HashSet::new();
        self.keys
            .iter()
            .map(|(_, t)| t)
            .filter(move |t| seen.insert(t.name.clone()))
    }

    /// The tenants' names (for checking names elsewhere in the config).
    pub fn tenants(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(|(_, t)| &*t.name)
    }
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Auth({} keys, {} admin keys)",
            self.keys.len(),
            self.admin.len()
        )
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    // Lengths of API keys are not secret; their bytes are.
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// The tenant name of an `api_keys_env` key: `key-` and the first 8 hex
/// digits of its SHA-256 (a name, not a secret: it cannot be reversed).
pub fn key_tenant_name(key: &[u8]) -> String {
    let digest = Sha256::digest(key);
    let hex: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
    format!("key-{hex}")
}

/// Validates `[server.auth]`, reading the keys from the environment;
/// `tool_entries` are the `gateway_tools` entries the config can name (for
/// `keys[].gateway_tools`).
pub fn auth(raw: &RawAuth, tool_entries: &HashSet<String>) -> Result<Auth, ConfigError> {
    auth_from(raw, tool_entries, |var| std::env::var(var).ok())
}

/// [`auth`] with the environment given.
fn auth_from(
    raw: &RawAuth,
    tool_entries: &HashSet<String>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Auth, ConfigError> {
    let env_keys = |path: &str, var: &str| env_keys(path, var, &env);
    let mut keys: Vec<(Vec<u8>, Arc<Tenant>)> = Vec::new();
    if let Some(var) = &raw.api_keys_env {
        for key in env_keys("server.auth.api_keys_env", var)? {
            let tenant = Arc::new(Tenant {
                name: key_tenant_name(&key).into(),
                label: key_tenant_name(&key).into(),
                models: Vec::new(),
                gateway_tools: None,
                quota: Quota::default(),
            });
            push_key(&mut keys, key, tenant, "server.auth.api_keys_env")?;
        }
    }
    let mut names: HashSet<&str> = HashSet::new();
    for (i, entry) in raw.keys.iter().enumerate() {
        let path = format!("server.auth.keys[{i}]");
        let name = entry.name.as_str();
        check_name(&format!("{path}.name"), name)?;
        if !names.insert(name) {
            return Err(ConfigError::new(
                format!("{path}.name"),
                format!("two [[server.auth.keys]] entries are named {name:?}"),
            ));
        }
        let models = entry
            .models
            .as_ref()
            .map(|globs| {
                model_globs(&format!("{path}.models"), globs).map(|set| (set, globs.clone()))
            })
            .transpose()?;
        let gateway_tools = entry
            .gateway_tools
            .as_ref()
            .map(|list| tool_set(tool_entries, &format!("{path}.gateway_tools"), list))
            .transpose()?;
        let quota = super::limits::quota(&path, entry.limits.as_ref(), entry.budget.as_ref())?;
        let tenant = Arc::new(Tenant {
            name: name.into(),
            label: name.into(),
            models: models.into_iter().collect(),
            gateway_tools,
            quota,
        });
        let (source, found) = match (&entry.key_env, &entry.key_file) {
            (Some(var), None) => {
                let source = format!("{path}.key_env");
                let found = env_keys(&source, var)?;
                (source, found)
            }
            (None, Some(file)) => {
                let source = format!("{path}.key_file");
                let found = file_keys(&source, file)?;
                (source, found)
            }
            _ => {
                return Err(ConfigError::new(
                    path,
                    "takes one of `key_env` (an environment variable) or `key_file` (a file of keys)",
                ));
            }
        };
        for key in found {
            push_key(&mut keys, key, tenant.clone(), &source)?;
        }
    }
    if keys.is_empty() && !raw.managed_keys {
        return Err(ConfigError::new(
            "server.auth",
            "names no keys: set api_keys_env or add [[server.auth.keys]]",
        ));
    }
    let admin = match &raw.admin_keys_env {
        Some(var) => env_keys("server.auth.admin_keys_env", var)?,
        None => Vec::new(),
    };
    if raw.managed_keys && admin.is_empty() {
        return Err(ConfigError::new(
            "server.auth.managed_keys",
            "needs admin_keys_env: only an admin key makes keys",
        ));
    }
    if admin.iter().any(|a| keys.iter().any(|(k, _)| k == a)) {
        return Err(ConfigError::new(
            "server.auth.admin_keys_env",
            "a key is both an admin key and a client key",
        ));
    }
    Ok(Auth {
        keys,
        admin,
        managed: raw.managed_keys,
        entries: tool_entries.clone(),
    })
}

/// The keys in file `file`: separated by commas or line breaks; lines
/// starting with `#` are comments.
fn file_keys(path: &str, file: &str) -> Result<Vec<Vec<u8>>, ConfigError> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| ConfigError::new(path, format!("cannot read {file}: {e}")))?;
    let keys: Vec<Vec<u8>> = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .flat_map(|l| l.split(','))
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .map(|k| k.as_bytes().to_vec())
        .collect();
    if keys.is_empty() {
        return Err(ConfigError::new(path, format!("{file} holds no key")));
    }
    Ok(keys)
}

/// `list` (at `path`), each entry one of `entries`.
fn tool_set(
    entries: &HashSet<String>,
    path: &str,
    list: &[String],
) -> Result<HashSet<String>, ConfigError> {
    for (j, tool) in list.iter().enumerate() {
        if !entries.contains(tool) {
            return Err(ConfigError::new(
                format!("{path}[{j}]"),
                format!("names no [[mcp_servers]], [[http_tools]] or builtin:… tool: {tool:?}"),
            ));
        }
    }
    Ok(list.iter().cloned().collect())
}

/// A tenant's name: what `[[server.auth.keys]] name` and a managed key's
/// `tenant` may be.
fn check_name(path: &str, name: &str) -> Result<(), ConfigError> {
    let plain = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if name.is_empty() || name.len() > 64 || !plain {
        return Err(ConfigError::new(
            path,
            "must be 1 to 64 letters, digits, '-', '_' or '.'",
        ));
    }
    if name == ANONYMOUS || name.starts_with("key-") {
        return Err(ConfigError::new(
            path,
            format!(
                "{name:?} is reserved (`{ANONYMOUS}`, and `key-…` names the api_keys_env keys)"
            ),
        ));
    }
    Ok(())
}

fn push_key(
    keys: &mut Vec<(Vec<u8>, Arc<Tenant>)>,
    key: Vec<u8>,
    tenant: Arc<Tenant>,
    path: &str,
) -> Result<(), ConfigError> {
    if let Some((_, other)) = keys.iter().find(|(k, _)| *k == key) {
        return Err(ConfigError::new(
            path,
            format!(
                "a key is listed twice (it already identifies {}); one key is one identity",
                other.name
            ),
        ));
    }
    keys.push((key, tenant));
    Ok(())
}

/// The comma-separated keys in env var `var`.
fn env_keys(
    path: &str,
    var: &str,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Vec<Vec<u8>>, ConfigError> {
    let value = env(var)
        .ok_or_else(|| ConfigError::new(path, format!("environment variable {var} is not set")))?;
    let keys: Vec<Vec<u8>> = value
        .split(',')
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .map(|k| k.as_bytes().to_vec())
        .collect();
    if keys.is_empty() {
        return Err(ConfigError::new(path, format!("{var} holds no key")));
    }
    Ok(keys)
}

fn model_globs(path: &str, globs: &[String]) -> Result<GlobSet, ConfigError> {
    let mut builder = GlobSetBuilder::new();
    for (i, pattern) in globs.iter().enumerate() {
        let glob = Glob::new(pattern)
            .map_err(|e| ConfigError::new(format!("{path}[{i}]"), format!("not a glob: {e}")))?;
        builder.add(glob);
    }
    builder
        .build()
        .map_err(|e| ConfigError::new(path, format!("cannot compile the globs: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> RawAuth {
        toml::from_str(text).unwrap()
    }

    /// The test's environment.
    fn env(var: &str) -> Option<String> {
        let value = match var {
            "PLAIN" => "k1, k2",
            "TEAM" => "ta1,ta2",
            "ADMIN" => "adm",
            "ONE" => "same",
            _ => return None,
        };
        Some(value.to_owned())
    }

    fn auth(raw: &RawAuth, entries: &HashSet<String>) -> Result<Auth, ConfigError> {
        auth_from(raw, entries, env)
    }

    #[test]
    fn each_key_is_an_identity() {
        let entries: HashSet<String> = ["builtin:clock".to_owned()].into();
        let auth = auth(
            &raw(r#"
                api_keys_env = "PLAIN"
                admin_keys_env = "ADMIN"
                [[keys]]
                name = "team-a"
                key_env = "TEAM"
                models = ["gpt-*", "demo"]
                gateway_tools = ["builtin:clock"]
            "#),
            &entries,
        )
        .unwrap();
        let tenant = |k: &str| match auth.identify(k.as_bytes()) {
            Some(Caller::Client(t)) => t.name.to_string(),
            other => format!("{other:?}"),
        };
        assert_eq!(tenant("k1"), key_tenant_name(b"k1"));
        assert_ne!(
            tenant("k1"),
            tenant("k2"),
            "each plain key is its own tenant"
        );
        assert!(tenant("k1").starts_with("key-") && tenant("k1").len() == 12);
        assert_eq!(tenant("ta1"), "team-a");
        assert_eq!(
            tenant("ta2"),
            "team-a",
            "rotation: both keys are the tenant"
        );
        assert!(matches!(auth.identify(b"adm"), Some(Caller::Admin)));
        assert!(auth.identify(b"nope").is_none());
        let Some(Caller::Client(team)) = auth.identify(b"ta1") else {
            unreachable!()
        };
        assert!(team.allows_model("gpt-4o") && team.allows_model("demo"));
        assert!(!team.allows_model("claude-3") && !team.allows_model("demo-agent"));
        assert!(team.allows_tools("builtin:clock") && !team.allows_tools("builtin:calculator"));
        let Some(Caller::Client(plain)) = auth.identify(b"k1") else {
            unreachable!()
        };
        assert!(plain.allows_model("anything") && plain.allows_tools("anything"));
    }

    #[test]
    fn bad_entries_name_their_key() {
        let entries = HashSet::new();
        let err = |text: &str| auth(&raw(text), &entries).unwrap_err().to_string();
        assert!(err("").contains("names no keys"));
        assert!(err("[[keys]]\nname = \"anonymous\"\nkey_env = \"ONE\"").contains("reserved"));
        assert!(err("[[keys]]\nname = \"a b\"\nkey_env = \"ONE\"").contains("keys[0].name"));
        let twice = err("api_keys_env = \"ONE\"\n[[keys]]\nname = \"t\"\nkey_env = \"ONE\"");
        assert!(
            twice.contains("listed twice") && twice.contains("keys[0].key_env"),
            "{twice}"
        );
        let tool = err("[[keys]]\nname = \"t\"\nkey_env = \"ONE\"\ngateway_tools = [\"time\"]");
        assert!(tool.contains("keys[0].gateway_tools[0]"), "{tool}");
        assert!(err("[[keys]]\nname = \"t\"\nkey_env = \"UNSET\"").contains("not set"));
    }
}
