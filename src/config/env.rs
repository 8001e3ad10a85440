//! `TOOLGATE_*` environment overrides.
//!
//! `TOOLGATE_SERVER__<KEY>` (nested keys joined by `__`) goes through
//! figment's env provider. Providers are a list, so an override names its
//! provider: `TOOLGATE_PROVIDERS__<name>__<KEY>` (e.g.
//! `TOOLGATE_PROVIDERS__openai__BASE_URL`, or
//! `TOOLGATE_PROVIDERS__local__TOOLS__MODE`) sets that key of the provider
//! called `<name>` in the file. Keys are case-insensitive, the name is
//! matched exactly (or, failing that, case-insensitively when only one
//! provider matches). A value is read as TOML (`3`, `true`, `["a", "b"]`,
//! `{ x = 1 }`) when it parses as one, and as a string otherwise.

use super::ConfigError;

const PREFIX: &str = "TOOLGATE_PROVIDERS__";

/// One provider override that was applied: the variable and the key path it set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub var: String,
    pub path: String,
}

/// Applies the `TOOLGATE_PROVIDERS__…` variables in `vars` to `doc`.
pub fn apply_provider_overrides(
    doc: &mut toml::Table,
    vars: impl IntoIterator<Item = (String, String)>,
) -> Result<Vec<Applied>, ConfigError> {
    let mut vars: Vec<(String, String)> = vars
        .into_iter()
        .filter(|(k, _)| k.len() > PREFIX.len() && k[..PREFIX.len()].eq_ignore_ascii_case(PREFIX))
        .collect();
    // The environment's order is arbitrary; apply in a stable one.
    vars.sort();
    let mut applied = Vec::with_capacity(vars.len());
    for (var, value) in vars {
        let rest = &var[PREFIX.len()..];
        let mut parts = rest.split("__");
        let name = parts.next().unwrap_or_default();
        let keys: Vec<String> = parts.map(str::to_ascii_lowercase).collect();
        if name.is_empty() || keys.is_empty() || keys.iter().any(String::is_empty) {
            return Err(ConfigError::new(
                "",
                format!(
                    "{var}: a provider override is TOOLGATE_PROVIDERS__<name>__<KEY> (nested keys joined by __)"
                ),
            ));
        }
        let providers = doc
            .get_mut("providers")
            .and_then(toml::Value::as_array_mut)
            .ok_or_else(|| {
                ConfigError::new(
                    "",
                    format!("{var}: the config has no [[providers]] for it to change"),
                )
            })?;
        let index = find(providers, name).ok_or_else(|| {
            ConfigError::new("", format!("{var}: names no configured provider: {name:?}"))
        })?;
        let mut table = providers[index].as_table_mut().ok_or_else(|| {
            ConfigError::new(
                format!("providers[{index}]"),
                format!("{var}: the provider is not a table"),
            )
        })?;
        let (last, parents) = keys.split_last().expect("at least one key");
        let mut path = format!("providers[{index}]");
        for key in parents {
            path.push('.');
            path.push_str(key);
            table = table
                .entry(key.clone())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()))
                .as_table_mut()
                .ok_or_else(|| ConfigError::new(&path, format!("{var}: `{key}` is not a table")))?;
        }
        path.push('.');
        path.push_str(last);
        table.insert(last.clone(), parse_value(&value));
        applied.push(Applied { var, path });
    }
    Ok(applied)
}

fn find(providers: &[toml::Value], name: &str) -> Option<usize> {
    let name_of = |p: &toml::Value| {
        p.get("name")
            .and_then(toml::Value::as_str)
            .map(str::to_owned)
    };
    if let Some(i) = providers
        .iter()
        .position(|p| name_of(p).as_deref() == Some(name))
    {
        return Some(i);
    }
    let mut matching = providers
        .iter()
        .enumerate()
        .filter(|(_, p)| name_of(p).is_some_and(|n| n.eq_ignore_ascii_case(name)));
    match (matching.next(), matching.next()) {
        (Some((i, _)), None) => Some(i),
        _ => None,
    }
}

/// A value as TOML when it is one, else the string itself.
fn parse_value(value: &str) -> toml::Value {
    match format!("v = {value}").parse::<toml::Table>() {
        Ok(mut t) => t
            .remove("v")
            .unwrap_or_else(|| toml::Value::String(value.to_owned())),
        Err(_) => toml::Value::String(value.to_owned()),
    }
}

/// Names the variable behind a config error on a key it set.
pub fn blame(mut error: ConfigError, applied: &[Applied]) -> ConfigError {
    if let Some(a) = applied
        .iter()
        .find(|a| error.path == a.path || error.path.starts_with(&format!("{}.", a.path)))
    {
        error.message = format!("{} (set by {})", error.message, a.var);
    }
    error
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc() -> toml::Table {
        r#"
        [[providers]]
        name = "openai"
        base_url = "https://api.openai.com/v1"
        [[providers]]
        name = "local"
        base_url = "http://127.0.0.1:8000/v1"
        "#
        .parse()
        .unwrap()
    }

    fn vars(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn overrides_set_a_named_providers_keys_nested_and_typed() {
        let mut d = doc();
        let applied = apply_provider_overrides(
            &mut d,
            vars(&[
                (
                    "TOOLGATE_PROVIDERS__openai__BASE_URL",
                    "http://127.0.0.1:9/v1",
                ),
                ("TOOLGATE_PROVIDERS__local__TOOLS__MODE", "natural"),
                (
                    "TOOLGATE_PROVIDERS__LOCAL__MODELS",
                    r#"["llama-*", "qwen-*"]"#,
                ),
                ("TOOLGATE_PROVIDERS__local__RETRY__ATTEMPTS", "2"),
                ("TOOLGATE_SERVER__LISTEN", "ignored here"),
                ("TOOLGATE_LOG", "ignored here"),
            ]),
        )
        .unwrap();
        assert_eq!(applied.len(), 4);
        let p = d["providers"].as_array().unwrap();
        assert_eq!(p[0]["base_url"].as_str(), Some("http://127.0.0.1:9/v1"));
        assert_eq!(p[1]["tools"]["mode"].as_str(), Some("natural"));
        assert_eq!(p[1]["models"].as_array().unwrap().len(), 2);
        assert_eq!(p[1]["retry"]["attempts"].as_integer(), Some(2));
        assert!(applied.contains(&Applied {
            var: "TOOLGATE_PROVIDERS__local__TOOLS__MODE".into(),
            path: "providers[1].tools.mode".into(),
        }));
    }

    #[test]
    fn an_unknown_provider_or_a_bad_form_names_the_variable() {
        for var in [
            "TOOLGATE_PROVIDERS__nope__BASE_URL",
            "TOOLGATE_PROVIDERS__openai",
            "TOOLGATE_PROVIDERS__openai____X",
        ] {
            let err = apply_provider_overrides(&mut doc(), vars(&[(var, "x")])).unwrap_err();
            assert!(err.message.starts_with(var), "{err}");
        }
    }
}
