//! The probe's results: a table for people, JSON for machines.

use std::fmt::Write;

use serde_json::{Value, json};

use super::Arm;
use super::score::Tally;

/// Every arm's tallies, per case.
#[derive(Debug, Clone)]
pub struct Report {
    pub provider: String,
    pub model: String,
    pub runs: usize,
    pub cases: Vec<String>,
    /// Per arm, one tally per case (in `cases` order).
    pub arms: Vec<(Arm, Vec<Tally>)>,
}

/// A column's count and what it is a share of.
type Count = fn(&Tally) -> (usize, usize);

/// The table's columns.
const COLUMNS: [(&str, Count); 7] = [
    ("expected", |t| (t.expected, t.want_call)),
    ("valid args", |t| (t.valid_arguments, t.want_call)),
    ("wrong tool", |t| (t.wrong_tool, t.want_call)),
    ("no call", |t| (t.no_call, t.want_call)),
    ("invalid", |t| (t.invalid, t.attempts)),
    ("unwanted", |t| (t.unwanted, t.want_none)),
    ("errors", |t| (t.failed, t.attempts)),
];

impl Report {
    /// One arm's tallies over all its cases.
    pub fn total(tallies: &[Tally]) -> Tally {
        let mut sum = Tally::default();
        for t in tallies {
            sum.attempts += t.attempts;
            sum.want_call += t.want_call;
            sum.want_none += t.want_none;
            sum.expected += t.expected;
            sum.valid_arguments += t.valid_arguments;
            sum.wrong_tool += t.wrong_tool;
            sum.no_call += t.no_call;
            sum.invalid += t.invalid;
            sum.unwanted += t.unwanted;
            sum.failed += t.failed;
            sum.latencies.extend(&t.latencies);
            if sum.first_failure.is_none() {
                sum.first_failure.clone_from(&t.first_failure);
            }
        }
        sum
    }

    /// The table: one row per syntax, then the per-case share of expected calls.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "provider {}, model {}: {} cases x {} run(s) per syntax\n",
            self.provider,
            self.model,
            self.cases.len(),
            self.runs
        );
        let mut header = format!("{:<10}", "syntax");
        for (name, _) in COLUMNS {
            let _ = write!(header, "  {name:>10}");
        }
        let _ = writeln!(out, "{header}  {:>11}", "latency p50");
        for (arm, tallies) in &self.arms {
            let t = Self::total(tallies);
            let mut row = format!("{:<10}", arm.as_str());
            if t.all_failed() {
                let why = t.first_failure.as_deref().unwrap_or("");
                let _ = writeln!(out, "{row}  unavailable: every request failed ({why})");
                continue;
            }
            for (_, count) in COLUMNS {
                let (n, of) = count(&t);
                let _ = write!(row, "  {:>10}", share(n, of));
            }
            let latency = t
                .median_latency()
                .map_or("-".to_owned(), |d| format!("{} ms", d.as_millis()));
            let _ = writeln!(out, "{row}  {latency:>11}");
        }
        out.push_str(concat!(
            "\nexpected: the expected tool with the expected values; valid args: the expected tool with\n",
            "arguments its schema accepts; wrong tool: calls, none to the expected tool; no call: plain text.\n",
            "These four are shares of the prompts that expect a call, unwanted (calls) of those that expect\n",
            "none; invalid (call blocks the gateway refused) and errors are shares of all prompts.\n",
        ));
        let _ = writeln!(out, "\nexpected calls per case:");
        let mut header = format!("{:<10}", "syntax");
        for name in &self.cases {
            let _ = write!(header, "  {:>18}", truncate(name, 18));
        }
        let _ = writeln!(out, "{header}");
        for (arm, tallies) in &self.arms {
            let mut row = format!("{:<10}", arm.as_str());
            for t in tallies {
                let cell = if t.want_call == 0 {
                    format!("{} unwanted", t.unwanted)
                } else {
                    format!("{}/{}", t.expected, t.want_call)
                };
                let _ = write!(row, "  {cell:>18}");
            }
            let _ = writeln!(out, "{row}");
        }
        out
    }

    pub fn json(&self) -> Value {
        let arms: Vec<Value> = self
            .arms
            .iter()
            .map(|(arm, tallies)| {
                let total = Self::total(tallies);
                let mut v = json!({"syntax": arm.as_str(), "available": !total.all_failed()});
                merge(&mut v, counts(&total));
                v["cases"] = tallies
                    .iter()
                    .zip(&self.cases)
                    .map(|(t, name)| {
                        let mut c = json!({"name": name});
                        merge(&mut c, counts(t));
                        c
                    })
                    .collect();
                v
            })
            .collect();
        json!({
            "provider": self.provider,
            "model": self.model,
            "runs": self.runs,
            "syntaxes": arms,
        })
    }
}

fn counts(t: &Tally) -> Value {
    json!({
        "attempts": t.attempts,
        "expect_call": t.want_call,
        "expect_none": t.want_none,
        "expected_call": t.expected,
        "valid_arguments": t.valid_arguments,
        "wrong_tool": t.wrong_tool,
        "no_call": t.no_call,
        "invalid_blocks": t.invalid,
        "unwanted_calls": t.unwanted,
        "errors": t.failed,
        "first_error": t.first_failure,
        "median_latency_ms": t.median_latency().map(|d| d.as_secs_f64() * 1000.0),
    })
}

fn merge(into: &mut Value, from: Value) {
    if let (Value::Object(into), Value::Object(from)) = (into, from) {
        into.extend(from);
    }
}

fn share(n: usize, of: usize) -> String {
    if of == 0 {
        return "-".into();
    }
    format!("{n}/{of} {:.0}%", 100.0 * n as f64 / of as f64)
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(max - 1).collect();
        t.push('…');
        t
    }
}
