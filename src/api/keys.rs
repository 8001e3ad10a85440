//! `/toolgate/api/keys`: keys an admin makes, changes and revokes at run
//! time (`[server.auth] managed_keys = true`).
//!
//! - `POST /toolgate/api/keys` (admin): `{"tenant", "name", "models",
//!   "gateway_tools", "limits", "budget", "expires_at"}` → `201` with the
//!   key itself, shown this once.
//! - `GET /toolgate/api/keys` and `GET /toolgate/api/keys/{id}`: an admin
//!   key sees every key, a client key its own tenant's; never a secret.
//!   A key of a tenant the config names shows that tenant's policy
//!   (`tenant_policy`) and how it combines with the key's: both apply.
//! - `PATCH /toolgate/api/keys/{id}` (admin): the members given replace the
//!   key's (`null` removes one); `DELETE /toolgate/api/keys/{id}` (admin)
//!   revokes it.

use bytes::Bytes;
use http::{Method, Response, StatusCode};
use serde_json::{Value, json};

use super::viewer::Viewer;
use crate::body::Body;
use crate::error::GatewayError;
use crate::keys::{ManagedKeys, Policy};
use crate::store::KeyRow;

pub async fn handle(
    keys: Option<&ManagedKeys>,
    viewer: &Viewer,
    method: &Method,
    path: &str,
    body: &Bytes,
) -> Result<Response<Body>, GatewayError> {
    let keys = keys.ok_or_else(|| {
        GatewayError::NotFound(
            "Managed keys are off: set [server.auth] managed_keys = true (with a [store])".into(),
        )
    })?;
    let rest = path
        .strip_prefix("/toolgate/api/keys")
        .unwrap_or_default()
        .trim_matches('/');
    let admin = || match viewer {
        Viewer::Admin => Ok(()),
        Viewer::Tenant(_) => Err(GatewayError::Forbidden(
            "only an admin key makes, changes or revokes keys".into(),
        )),
    };
    let own = |row: &KeyRow| match viewer {
        Viewer::Admin => true,
        Viewer::Tenant(t) => **t == *row.tenant,
    };
    match (method, rest) {
        (&Method::GET, "") => {
            let tenant = match viewer {
                Viewer::Admin => None,
                Viewer::Tenant(t) => Some(&**t),
            };
            let mut data = Vec::new();
            for row in keys.list(tenant) {
                data.push(view(keys, &row).await?);
            }
            Ok(super::json(&json!({"data": data})))
        }
        (&Method::POST, "") => {
            admin()?;
            let request = super::json_object(body)?;
            let made = keys.create(&request).await?;
            let mut shown = view(keys, &made.row).await?;
            shown["key"] = json!(made.secret);
            let mut response = super::json(&shown);
            *response.status_mut() = StatusCode::CREATED;
            Ok(response)
        }
        (&Method::GET, id) => {
            let row = keys
                .list(None)
                .into_iter()
                .find(|r| r.id == id && own(r))
                .ok_or_else(|| GatewayError::NotFound(format!("No key `{id}`")))?;
            Ok(super::json(&view(keys, &row).await?))
        }
        (&Method::PATCH, id) if !id.contains('/') => {
            admin()?;
            let change = super::json_object(body)?;
            let row = keys.update(id, &change).await?;
            Ok(super::json(&view(keys, &row).await?))
        }
        (&Method::DELETE, id) if !id.contains('/') => {
            admin()?;
            keys.revoke(id).await?;
            Ok(super::json(&json!({"id": id, "revoked": true})))
        }
        _ => Err(GatewayError::UnknownRoute {
            method: method.to_string(),
            path: path.to_owned(),
            hint: "",
        }),
    }
}

/// A key as the API shows it: everything but the secret, and what its
/// budget's period spent so far.
async fn view(keys: &ManagedKeys, row: &KeyRow) -> Result<Value, GatewayError> {
    let policy = Policy::from_json(&row.policy).unwrap_or_default();
    let spent = match &policy.budget {
        None => Value::Null,
        Some(budget) => {
            let days = budget
                .period
                .strip_suffix('d')
                .and_then(|n| n.parse::<i64>().ok())
                .filter(|&n| n > 0)
                .unwrap_or(1);
            let today = crate::keys::now_ms().div_euclid(86_400_000);
            let since = (today - today.rem_euclid(days)) * 86_400_000;
            let (micros, tokens) = keys.spent(&row.id, since).await?;
            let usd = crate::metrics::cost::dollars(micros.max(0) as u64);
            json!({"since": time(Some(since)), "usd": usd, "tokens": tokens})
        }
    };
    let config = keys.config();
    let configured = config
        .server
        .auth
        .as_ref()
        .and_then(|a| a.tenant_named(&row.tenant));
    let tenant_policy = configured.map_or(Value::Null, |t| {
        json!({
            "models": t.model_patterns(),
            "gateway_tools": t.tool_entries(),
            "applies": format!(
                "both: the config names tenant `{}`, so a request of this key needs a model that the tenant's models and the key's allow, is offered only the gateway tools that both name, and is held to the tenant's limits and budget as well as the key's own",
                t.name
            ),
        })
    });
    Ok(json!({
        "id": row.id,
        "tenant": row.tenant,
        "name": row.name,
        "prefix": row.prefix,
        "created_at": time(Some(row.created_at)),
        "last_used_at": time(row.last_used_at),
        "expires_at": time(row.expires_at),
        "models": policy.models,
        "gateway_tools": policy.gateway_tools,
        "limits": policy.limits,
        "budget": policy.budget,
        "spent_this_period": spent,
        "tenant_policy": tenant_policy,
    }))
}

/// ms since the epoch as RFC 3339, or null.
fn time(ms: Option<i64>) -> Value {
    ms.and_then(chrono::DateTime::from_timestamp_millis)
        .map_or(Value::Null, |t| {
            json!(t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
        })
}
