//! Spend over time: `GET /toolgate/api/usage?group_by=day` (or `hour`)
//! sums the usage rows per UTC day or hour, in time order, and a managed
//! key's row carries its name beside its id; in SQLite and PostgreSQL.

use crate::common;

use std::time::{Duration, Instant};

use common::postgres::Postgres;
use common::{Mock, Recorded, Reply, TestConfig};
use http::Method;
use serde_json::{Value, json};

const KEYS: [(&str, &str); 2] = [
    ("USAGE_TIME_ADMIN", "usage-admin"),
    ("USAGE_TIME_TEAM", "usage-team"),
];

fn keys() {
    for (var, key) in KEYS {
        // SAFETY: this module's own variables, set to the same values before
        // its gateways read them.
        unsafe { std::env::set_var(var, key) };
    }
}

const AUTH: &str = "[server.auth]\nadmin_keys_env = \"USAGE_TIME_ADMIN\"\nmanaged_keys = true\n\
    [[server.auth.keys]]\nname = \"team-u\"\nkey_env = \"USAGE_TIME_TEAM\"\n";

/// The usage rows `query` reads once `requests` requests landed in all.
async fn usage(base: &str, query: &str, requests: i64) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = common::call(
            Method::GET,
            &format!("{base}/toolgate/api/usage?{query}"),
            "usage-admin",
            None,
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
        let rows = r.json()["data"].as_array().cloned().unwrap();
        if rows
            .iter()
            .map(|r| r["requests"].as_i64().unwrap())
            .sum::<i64>()
            == requests
        {
            return rows;
        }
        assert!(Instant::now() < deadline, "usage never landed: {rows:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn usage_is_summed_per_day_and_hour_with_key_names_in_sqlite_and_postgresql() {
    keys();
    let pg = Postgres::start();
    for store in ["sqlite::memory:".to_owned(), pg.url()] {
        let mock =
            Mock::start(|_: &Recorded| Reply::json(&common::upstream_completion("hello"))).await;
        let gw = TestConfig::new()
            .server(AUTH)
            .up(&mock.url(), "")
            .raw(&format!("[store]\nurl = \"{store}\"\nrecord = \"none\"\n"))
            .start()
            .await;
        let base = gw.url("");
        let made = common::call(
            Method::POST,
            &format!("{base}/toolgate/api/keys"),
            "usage-admin",
            Some(json!({"tenant": "team-u", "name": "nightly-evals"})),
        )
        .await;
        assert_eq!(made.status, 201, "{}", made.text());
        let (id, secret) = (
            made.json()["id"].as_str().unwrap().to_owned(),
            made.json()["key"].as_str().unwrap().to_owned(),
        );
        let ask = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        for key in [&secret, &secret, &"usage-team".to_owned()] {
            let r = common::call(
                Method::POST,
                &format!("{base}/v1/chat/completions"),
                key,
                Some(ask.clone()),
            )
            .await;
            assert_eq!(r.status, 200, "{}", r.text());
        }
        let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
        let rows = usage(&base, "group_by=day,key", 3).await;
        let named = rows.iter().find(|r| r["key"] == id.as_str()).unwrap();
        assert_eq!(named["key_name"], "nightly-evals", "{store}: {rows:?}");
        assert_eq!(named["day"], today.as_str());
        assert_eq!(named["requests"], 2);
        assert_eq!(named["hour"], Value::Null, "not grouped by hour");
        assert_eq!(named["tenant"], Value::Null, "not grouped by tenant");
        let config_key = rows.iter().find(|r| r["key"] != id.as_str()).unwrap();
        assert_eq!(config_key["key_name"], Value::Null, "{rows:?}");
        assert_eq!(config_key["requests"], 1);

        let hour = chrono::Utc::now().format("%Y-%m-%dT%H:00:00Z").to_string();
        let rows = usage(&base, "group_by=hour,tenant", 3).await;
        // The hour may have turned between the requests and now.
        assert!(
            rows.iter()
                .all(|r| r["hour"].as_str().unwrap() <= hour.as_str() && r["tenant"] == "team-u"),
            "{store}: {rows:?}"
        );

        let bad = common::call(
            Method::GET,
            &format!("{base}/toolgate/api/usage?group_by=week"),
            "usage-admin",
            None,
        )
        .await;
        assert_eq!(bad.status, 400);
        assert!(bad.text().contains("day, hour"), "{}", bad.text());

        if store.starts_with("postgres") {
            // The config key's usage moved two days back: each day is its
            // own row, oldest first, and a date range of one day holds one.
            pg.query(&format!(
                "UPDATE usage SET hour = hour - 2 * 86400000 WHERE key_id <> '{id}'"
            ));
            let earlier = (chrono::Utc::now() - chrono::Duration::days(2))
                .format("%Y-%m-%d")
                .to_string();
            let rows = usage(&base, "group_by=day", 3).await;
            let days: Vec<_> = rows
                .iter()
                .map(|r| (r["day"].as_str().unwrap(), r["requests"].as_i64().unwrap()))
                .collect();
            assert_eq!(days, [(earlier.as_str(), 1), (today.as_str(), 2)]);
            let rows = usage(
                &base,
                &format!("group_by=day&from={earlier}&to={earlier}"),
                1,
            )
            .await;
            assert_eq!(rows.len(), 1, "{rows:?}");
        }
    }
}
