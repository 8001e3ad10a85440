//! What a reload may not change: the keys that need a restart.

use crate::config::Config;

/// A reload that would change what only a restart may change; names the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{0} changes need a restart")]
pub struct ReloadRefused(pub &'static str);

/// Listening elsewhere, or turning TLS or inbound auth on or off, would
/// silently weaken (or break) a running deployment: those need a restart.
pub(super) fn refuse_reload(old: &Config, new: &Config) -> Option<ReloadRefused> {
    if old.server.listen != new.server.listen {
        return Some(ReloadRefused("server.listen"));
    }
    if old.server.tls.is_some() != new.server.tls.is_some() {
        return Some(ReloadRefused("server.tls"));
    }
    // Keys and their policies change on reload; turning auth on or off does not.
    if old.server.auth.is_some() != new.server.auth.is_some() {
        return Some(ReloadRefused("server.auth"));
    }
    let managed = |c: &Config| c.server.auth.as_ref().is_some_and(|a| a.managed);
    if managed(old) != managed(new) {
        return Some(ReloadRefused("server.auth.managed_keys"));
    }
    let admin = |c: &Config| c.server.auth.as_ref().is_some_and(|a| a.has_admin_keys());
    if admin(old) != admin(new) {
        return Some(ReloadRefused("server.auth.admin_keys_env"));
    }
    if old.raw.server.cors != new.raw.server.cors {
        // The CORS layer is built once, around every connection's service.
        return Some(ReloadRefused("server.cors"));
    }
    if old.raw.telemetry != new.raw.telemetry {
        // The exporter is started once, at boot.
        return Some(ReloadRefused("telemetry"));
    }
    if old.server.limiter != new.server.limiter {
        // The counters (and their Redis connections) are made once, at boot.
        return Some(ReloadRefused("server.limits"));
    }
    if old.raw.mcp_gateway.as_ref().map(|m| &m.path)
        != new.raw.mcp_gateway.as_ref().map(|m| &m.path)
    {
        // The MCP door's service is built once, at boot.
        return Some(ReloadRefused("mcp_gateway"));
    }
    if old.raw.store != new.raw.store {
        // The store's connection and writer are started once, at boot.
        return Some(ReloadRefused("store"));
    }
    None
}
