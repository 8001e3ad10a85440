//! Who a request comes from: the key it presents (`Authorization: Bearer`,
//! or Anthropic's `x-api-key`) identified against `[server.auth]`. Without
//! `[server.auth]` every request is the anonymous tenant's.

use std::sync::Arc;

use http::{Request, header};

use crate::api::transcripts::{Reader, Viewer};
use crate::config::{Caller, Config, Tenant};
use crate::error::{GatewayError, KeyRefused};
use crate::keys::{Lookup, ManagedKeys};
use crate::limiter::Share;

/// Who a `/v1` request comes from.
pub struct Identity {
    pub tenant: Arc<Tenant>,
    /// A managed key's own limits and budget.
    pub share: Option<Share>,
    /// A managed key's id (usage rows name it).
    pub managed_id: Option<Arc<str>>,
}

/// The tenant of a `/v1` request: a static key's (`[server.auth]`), else a
/// managed key's. Admin keys read transcripts and make keys; they do not
/// call models, and are told so. A revoked or expired managed key is told
/// which; any other key gets the one message a missing key gets.
pub fn tenant<B>(
    config: &Config,
    keys: Option<&ManagedKeys>,
    req: &Request<B>,
) -> Result<Identity, GatewayError> {
    let Some(auth) = &config.server.auth else {
        return Ok(Identity {
            tenant: Tenant::anonymous(),
            share: None,
            managed_id: None,
        });
    };
    let key = presented(req).ok_or(GatewayError::Unauthorized(KeyRefused::Unknown))?;
    match auth.identify(key) {
        Some(Caller::Client(tenant)) => Ok(Identity {
            tenant,
            share: None,
            managed_id: None,
        }),
        Some(Caller::Admin) => Err(GatewayError::Unauthorized(KeyRefused::AdminKey)),
        None => match keys.map_or(Lookup::Unknown, |k| k.look_up(key)) {
            Lookup::InForce(managed) => Ok(Identity {
                tenant: managed.tenant.clone(),
                share: Some(managed.share.clone()),
                managed_id: Some(managed.id.clone()),
            }),
            gone => Err(GatewayError::Unauthorized(refused(&gone))),
        },
    }
}

/// What a managed key that is not in force is told (times as the keys
/// API writes them).
fn refused(lookup: &Lookup) -> KeyRefused {
    let time = |ms: i64| {
        chrono::DateTime::from_timestamp_millis(ms)
            .map(|t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
            .unwrap_or_default()
    };
    match lookup {
        Lookup::Revoked(at) => KeyRefused::Revoked(time(*at)),
        Lookup::Expired(at) => KeyRefused::Expired(time(*at)),
        Lookup::InForce(_) | Lookup::Unknown => KeyRefused::Unknown,
    }
}

/// Who reads the transcript API: an admin key sees every tenant, a client
/// key (static or managed) its own tenant, and without `[server.auth]`
/// everyone is anonymous.
pub fn reader<B>(
    config: &Config,
    keys: Option<&ManagedKeys>,
    req: &Request<B>,
) -> Result<Reader, GatewayError> {
    let key = presented(req).unwrap_or_default();
    let viewer = viewer_of(config, keys, key).ok_or_else(|| {
        let lookup = match (&config.server.auth, keys) {
            (Some(_), Some(keys)) if !key.is_empty() => keys.look_up(key),
            _ => Lookup::Unknown,
        };
        GatewayError::Unauthorized(refused(&lookup))
    })?;
    Ok(Reader {
        viewer,
        key: stream_key(config, req),
    })
}

/// The key a request presents, as the streams it opens are counted and
/// identified again by: empty without `[server.auth]`.
pub fn stream_key<B>(config: &Config, req: &Request<B>) -> Arc<[u8]> {
    match (&config.server.auth, presented(req)) {
        (Some(_), Some(key)) => Arc::from(key),
        _ => Arc::from(&b""[..]),
    }
}

/// Who `key` reads the transcripts as under `config` and the managed
/// `keys`; `None`: no one.
pub fn viewer_of(config: &Config, keys: Option<&ManagedKeys>, key: &[u8]) -> Option<Viewer> {
    let Some(auth) = &config.server.auth else {
        return Some(Viewer::Tenant(Tenant::anonymous().name.clone()));
    };
    match auth.identify(key) {
        Some(Caller::Admin) => Some(Viewer::Admin),
        Some(Caller::Client(tenant)) => Some(Viewer::Tenant(tenant.name.clone())),
        None => keys
            .and_then(|k| k.identify(key))
            .map(|m| Viewer::Tenant(m.tenant.name.clone())),
    }
}

/// The key a request presents.
fn presented<B>(req: &Request<B>) -> Option<&[u8]> {
    presented_in(req.headers())
}

/// The key `headers` present.
fn presented_in(headers: &http::HeaderMap) -> Option<&[u8]> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| bearer_token(v.as_bytes()))
        .or_else(|| headers.get("x-api-key").map(|v| v.as_bytes().trim_ascii()))
}

/// Names the key `headers` present without showing it (`key-` and the
/// first 8 hex digits of its SHA-256), for usage rows; without
/// `[server.auth]`, `anonymous`.
pub fn key_id(config: &Config, headers: &http::HeaderMap) -> String {
    match (&config.server.auth, presented_in(headers)) {
        (Some(_), Some(key)) => crate::config::auth::key_tenant_name(key),
        _ => crate::config::auth::ANONYMOUS.to_owned(),
    }
}

/// The token of an `Authorization: Bearer <token>` header. The scheme is
/// case-insensitive (RFC 9110 §11.1), so `bearer` and `BEARER` are accepted.
fn bearer_token(value: &[u8]) -> Option<&[u8]> {
    let (scheme, token) = value.split_at_checked(7)?;
    scheme
        .eq_ignore_ascii_case(b"Bearer ")
        .then(|| token.trim_ascii())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_scheme_is_case_insensitive() {
        assert_eq!(bearer_token(b"Bearer k"), Some(&b"k"[..]));
        assert_eq!(bearer_token(b"bearer  k "), Some(&b"k"[..]));
        assert_eq!(bearer_token(b"BEARER k"), Some(&b"k"[..]));
        assert_eq!(bearer_token(b"Basic k"), None);
        assert_eq!(bearer_token(b"Bear"), None);
    }
}
