//! The probe's results: a table for people, JSON for machines.

use std::fmt::Write;

use serde_json::{Value, json};

use super::Arm;
use super::grammars::Grammars;
use super::score::{AgentTally, Tally, median};
use crate::config::Constrain;

/// Every arm's tallies, per case.
#[derive(Debug, Clone)]
pub struct Report {
    pub provider: String,
    pub model: String,
    pub runs: usize,
    pub cases: Vec<String>,
    pub agent_cases: Vec<String>,
    /// What the server did with a grammar (`constrain = "gbnf"`).
    pub grammars: Grammars,
    /// What the server did with a structural tag (`constrain = "structural_tag"`).
    pub structural_tags: Grammars,
    /// Per arm, one tally per case (in `cases` order).
    pub arms: Vec<(Arm, Vec<Tally>)>,
    /// Per arm, one tally per agent case (in `agent_cases` order).
    pub agent: Vec<(Arm, Vec<AgentTally>)>,
}

/// A column's count and what it is a share of.
type Count = fn(&Tally) -> (usize, usize);

/// The table's columns.
const COLUMNS: [(&str, Count); 9] = [
    ("expected", |t| (t.expected, t.want_call)),
    ("valid args", |t| (t.valid_arguments, t.want_call)),
    ("wrong tool", |t| (t.wrong_tool, t.want_call)),
    ("no call", |t| (t.no_call, t.want_call)),
    ("invalid", |t| (t.invalid, t.attempts)),
    ("unwanted", |t| (t.unwanted, t.want_none)),
    ("errors", |t| (t.failed, t.attempts)),
    ("loop closed", |t| (t.closed, t.loops)),
    ("result used", |t| (t.used, t.loops)),
];

/// An agent column's count and what it is a share of.
type AgentCount = fn(&AgentTally) -> (usize, usize);

/// The agent table's columns.
const AGENT_COLUMNS: [(&str, AgentCount); 4] = [
    ("text answer", |t| (t.text, t.attempts)),
    ("result used", |t| (t.used, t.attempts)),
    ("repeated call", |t| (t.repeated, t.attempts)),
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
            sum.quiet += t.quiet;
            sum.failed += t.failed;
            sum.loops += t.loops;
            sum.closed += t.closed;
            sum.used += t.used;
            sum.called_again += t.called_again;
            sum.loop_failed += t.loop_failed;
            sum.latencies.extend(&t.latencies);
            if sum.first_failure.is_none() {
                sum.first_failure.clone_from(&t.first_failure);
            }
        }
        sum
    }

    /// One arm's agent tallies over all its cases.
    pub fn agent_total(tallies: &[AgentTally]) -> AgentTally {
        let mut sum = AgentTally::default();
        for t in tallies {
            sum.attempts += t.attempts;
            sum.text += t.text;
            sum.used += t.used;
            sum.repeated += t.repeated;
            sum.calls += t.calls;
            sum.failed += t.failed;
            sum.latencies.extend(&t.latencies);
            if sum.first_failure.is_none() {
                sum.first_failure.clone_from(&t.first_failure);
            }
        }
        sum
    }

    /// The arm that did best: the most expected first calls, closed loops
    /// that used the result and prompts that needed no tool answered
    /// without one (then agent answers that used the results); ties go to
    /// the arm listed first. An arm that never called is not the best
    /// however well it stayed quiet.
    pub fn best(&self) -> Option<Arm> {
        let score = |a: usize| {
            let (arm, tallies) = &self.arms[a];
            let t = Self::total(tallies);
            let agent = self
                .agent
                .get(a)
                .map_or(0, |(_, t)| Self::agent_total(t).used);
            let right = t.expected + t.used;
            (
                *arm,
                if right + agent > 0 {
                    right + t.quiet
                } else {
                    0
                },
                agent,
            )
        };
        (0..self.arms.len())
            .map(score)
            .filter(|(_, first, agent)| first + agent > 0)
            .fold(None, |best: Option<(Arm, usize, usize)>, s| match best {
                Some(b) if (b.1, b.2) >= (s.1, s.2) => Some(b),
                _ => Some(s),
            })
            .map(|(arm, _, _)| arm)
    }

    /// The `[providers.tools]` block of the [`Report::best`] arm, with the
    /// figures that chose it, ready to paste under the provider's entry.
    pub fn recommendation(&self) -> String {
        let Some(best) = self.best() else {
            return format!(
                "# toolgate probe: no arm made an expected call or used a result for {} on {};\n# no recommendation.\n",
                self.model, self.provider
            );
        };
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# toolgate probe --recommend: `{}` did best for model {} ({} run(s)).",
            best.as_str(),
            self.model,
            self.runs
        );
        for (arm, tallies) in &self.arms {
            let t = Self::total(tallies);
            let mut line = format!(
                "#   {:<10} first calls {}, loops closed using the result {}, no-tool prompts answered without a call {}",
                arm.as_str(),
                share(t.expected, t.want_call),
                share(t.used, t.loops),
                share(t.quiet, t.want_none)
            );
            if let Some((_, agent)) = self.agent.iter().find(|(a, _)| a == arm) {
                let a = Self::agent_total(agent);
                let _ = write!(
                    line,
                    ", agent answers using the results {}",
                    share(a.used, a.attempts)
                );
            }
            let _ = writeln!(out, "{line}");
        }
        let _ = writeln!(
            out,
            "# Grammars: {}.",
            self.grammars.describe(Constrain::Gbnf)
        );
        let _ = writeln!(
            out,
            "# Structural tags: {}.",
            self.structural_tags.describe(Constrain::StructuralTag)
        );
        let _ = writeln!(
            out,
            "# Under the [[providers]] entry named {:?}:",
            self.provider
        );
        out.push_str("[providers.tools]\n");
        out.push_str(&best.tools_block());
        // Constrained, a call the model starts is a valid one.
        let constrain = if self.grammars.followed() {
            Some(Constrain::Gbnf)
        } else {
            self.structural_tags
                .followed()
                .then_some(Constrain::StructuralTag)
        };
        if let (Arm::Natural(_), Some(constrain)) = (best, constrain) {
            let _ = writeln!(out, "constrain = \"{}\"", constrain.as_str());
        }
        out
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
        let _ = writeln!(
            out,
            "grammars: {}\nstructural tags: {}\n",
            self.grammars.describe(Constrain::Gbnf),
            self.structural_tags.describe(Constrain::StructuralTag)
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
            "loop closed: after a call to the expected tool (whatever its values), its result sent back,\n",
            "the answer called no tool again; result used: ... and mentioned what the result said. Both are\n",
            "shares of the loops tried: every first answer that called the expected tool, so more than expected.\n",
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
                } else if t.loops > 0 {
                    format!(
                        "{}/{}, used {}/{}",
                        t.expected, t.want_call, t.used, t.loops
                    )
                } else {
                    format!("{}/{}", t.expected, t.want_call)
                };
                let _ = write!(row, "  {cell:>18}");
            }
            let _ = writeln!(out, "{row}");
        }
        if !self.agent_cases.is_empty() {
            self.agent_table(&mut out);
        }
        out
    }

    fn agent_table(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "\ngateway tools ({} agent prompts x {} run(s) per syntax):\n",
            self.agent_cases.len(),
            self.runs
        );
        let mut header = format!("{:<10}", "syntax");
        for (name, _) in AGENT_COLUMNS {
            let _ = write!(header, "  {name:>13}");
        }
        let _ = writeln!(out, "{header}  {:>9}  {:>11}", "calls", "latency p50");
        for (arm, tallies) in &self.agent {
            let t = Self::agent_total(tallies);
            let mut row = format!("{:<10}", arm.as_str());
            for (_, count) in AGENT_COLUMNS {
                let (n, of) = count(&t);
                let _ = write!(row, "  {:>13}", share(n, of));
            }
            let latency =
                median(&t.latencies).map_or("-".to_owned(), |d| format!("{} ms", d.as_millis()));
            let _ = writeln!(out, "{row}  {:>9}  {latency:>11}", t.calls);
        }
        out.push_str(concat!(
            "\ntext answer: the answer ended in text; result used: ... mentioning what the tools returned;\n",
            "repeated call: one tool called twice with the same arguments; calls: gateway calls in all.\n",
        ));
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
        let agent: Vec<Value> = self
            .agent
            .iter()
            .map(|(arm, tallies)| {
                let mut v = json!({"syntax": arm.as_str()});
                merge(&mut v, agent_counts(&Self::agent_total(tallies)));
                v["cases"] = tallies
                    .iter()
                    .zip(&self.agent_cases)
                    .map(|(t, name)| {
                        let mut c = json!({"name": name});
                        merge(&mut c, agent_counts(t));
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
            "grammars": self.grammars.as_str(),
            "structural_tags": self.structural_tags.as_str(),
            "syntaxes": arms,
            "agent": agent,
            "best": self.best().map(Arm::as_str),
            "recommendation": self.best().map(|_| self.recommendation()),
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
        "answered_without_call": t.quiet,
        "errors": t.failed,
        "first_error": t.first_failure,
        "median_latency_ms": t.median_latency().map(|d| d.as_secs_f64() * 1000.0),
        "loops": t.loops,
        "loops_closed": t.closed,
        "loops_result_used": t.used,
        "loops_called_again": t.called_again,
        "loops_failed": t.loop_failed,
    })
}

fn agent_counts(t: &AgentTally) -> Value {
    json!({
        "attempts": t.attempts,
        "text_answers": t.text,
        "result_used": t.used,
        "repeated_calls": t.repeated,
        "gateway_calls": t.calls,
        "errors": t.failed,
        "first_error": t.first_failure,
        "median_latency_ms": median(&t.latencies).map(|d| d.as_secs_f64() * 1000.0),
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
