//! What a managed key is made with besides its name: `models` and
//! `gateway_tools` (its tenant's policy when the config does not name the
//! tenant, a narrowing of the config's when it does), `limits` and `budget`
//! (its own share), as the API took them.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::config::raw::limits::{RawBudget, RawLimits};
use crate::error::GatewayError;

/// A managed key's policy and share.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Globs over the requested model (within the config's, when it names the tenant).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub models: Option<Vec<String>>,
    /// Gateway tools it may be offered (likewise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_tools: Option<Vec<String>>,
    /// Its own limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<RawLimits>,
    /// Its own budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<RawBudget>,
}

/// The request members a policy is made of.
const MEMBERS: [&str; 4] = ["models", "gateway_tools", "limits", "budget"];
/// The other members a key request may have.
const OTHERS: [&str; 4] = ["tenant", "name", "expires_at", "id"];

impl Policy {
    /// The policy members of a create request (anything unknown is a `400`).
    pub fn from_request(request: &Map<String, Value>) -> Result<Policy, GatewayError> {
        let mut policy = Policy::default();
        policy.apply(request)?;
        Ok(policy)
    }

    /// Replaces the members `change` has (`null` removes one).
    pub fn apply(&mut self, change: &Map<String, Value>) -> Result<(), GatewayError> {
        if let Some(unknown) = change
            .keys()
            .find(|k| !MEMBERS.contains(&k.as_str()) && !OTHERS.contains(&k.as_str()))
        {
            return Err(GatewayError::bad_request(
                format!(
                    "unknown field `{unknown}`; a key takes tenant, name, models, gateway_tools, limits, budget and expires_at"
                ),
                Some(unknown),
            ));
        }
        let mut tree = serde_json::to_value(&*self).unwrap_or_default();
        for member in MEMBERS {
            match change.get(member) {
                None => {}
                Some(Value::Null) => {
                    tree.as_object_mut().map(|t| t.remove(member));
                }
                Some(value) => {
                    tree[member] = value.clone();
                }
            }
        }
        *self = serde_json::from_value(tree)
            .map_err(|e| GatewayError::bad_request(format!("the key's policy: {e}"), None))?;
        Ok(())
    }

    /// As kept in the store.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".into())
    }

    /// As kept; a policy that no longer reads is an error (its key is
    /// refused, never served without it).
    pub fn from_json(text: &str) -> Result<Policy, String> {
        serde_json::from_str(text).map_err(|e| format!("the kept policy does not read: {e}"))
    }
}
