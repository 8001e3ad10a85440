//! The prompts `toolgate probe` sends: a built-in set, or the user's JSONL.
//!
//! A case is one user turn (or a whole `messages` array), the tools it
//! declares, and the call it expects (`expect: null` or no `expect`: no call).
//! A line of the JSONL file:
//!
//! ```json
//! {"name": "weather", "prompt": "Weather in Paris?", "tools": [{"type": "function", "function": {…}}],
//!  "expect": {"name": "get_weather", "arguments": {"location": "Paris"}}}
//! ```
//!
//! `arguments` lists the values the call must carry (others may be present);
//! strings compare without case and surrounding spaces, numbers by value.
//!
//! A case with `result` is also a **loop** case: after the expected call the
//! probe sends the conversation back as the SDKs do (the assistant turn as
//! received, the `result` as the call's `tool` message) and reads the answer,
//! which must not call again and should mention one of `answer`'s strings
//! (any case). A case with `gateway_tools` instead of `tools` is an **agent**
//! case: the gateway runs those tools itself, and the answer must end in text
//! that mentions one of `answer`'s strings, without repeating a call.

use serde_json::{Map, Value, json};

use crate::natural::tools::ToolSet;

/// One prompt and what a good answer to it calls.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    pub messages: Vec<Value>,
    /// OpenAI `tools` array, as sent.
    pub tools: Value,
    pub tool_choice: Option<Value>,
    pub expect: Option<Expected>,
    /// The tools, parsed once: argument checks use their schemas.
    pub set: ToolSet,
    /// The expected tool's output, sent back to close the loop.
    pub result: Option<String>,
    /// What an answer that uses the result mentions (any of them, any case).
    pub answer: Vec<String>,
}

/// A prompt the gateway answers with its own tools.
#[derive(Debug, Clone)]
pub struct AgentCase {
    pub name: String,
    pub messages: Vec<Value>,
    /// Gateway tools offered, as a provider's `gateway_tools` names them.
    pub gateway_tools: Vec<String>,
    /// What an answer that uses the tools' results mentions (any of them, any case).
    pub answer: Vec<String>,
}

/// Everything one probe sends.
#[derive(Debug, Clone, Default)]
pub struct Cases {
    pub client: Vec<Case>,
    pub agent: Vec<AgentCase>,
}

/// One line of a cases file.
enum Line {
    Client(Box<Case>),
    Agent(AgentCase),
}

/// The call a case expects.
#[derive(Debug, Clone)]
pub struct Expected {
    pub name: String,
    pub arguments: Map<String, Value>,
}

/// Cases from JSONL text; blank lines and lines starting with `#` are skipped.
/// Errors name the line.
pub fn from_jsonl(text: &str) -> Result<Cases, String> {
    let mut cases = Cases::default();
    let mut count = 0;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let value: Value =
            serde_json::from_str(line).map_err(|e| format!("line {}: not JSON: {e}", i + 1))?;
        match case(value, count).map_err(|e| format!("line {}: {e}", i + 1))? {
            Line::Client(c) => cases.client.push(*c),
            Line::Agent(c) => cases.agent.push(c),
        }
        count += 1;
    }
    if count == 0 {
        return Err("no cases in the file".into());
    }
    Ok(cases)
}

fn case(value: Value, index: usize) -> Result<Line, String> {
    let Value::Object(mut o) = value else {
        return Err("a case must be a JSON object".into());
    };
    let name = match o.remove("name") {
        Some(Value::String(s)) => s,
        None => format!("case {}", index + 1),
        Some(_) => return Err("`name` must be a string".into()),
    };
    let messages = match (o.remove("prompt"), o.remove("messages")) {
        (Some(Value::String(p)), None) => vec![json!({"role": "user", "content": p})],
        (None, Some(Value::Array(m))) if !m.is_empty() => m,
        (Some(_), Some(_)) => return Err("give `prompt` or `messages`, not both".into()),
        (Some(_), None) => return Err("`prompt` must be a string".into()),
        (None, Some(_)) => return Err("`messages` must be a non-empty array".into()),
        (None, None) => return Err("`prompt` (a string) or `messages` is required".into()),
    };
    let answer = match o.remove("answer") {
        None => Vec::new(),
        Some(Value::String(s)) => vec![s],
        Some(Value::Array(a)) => a
            .into_iter()
            .map(|v| match v {
                Value::String(s) if !s.trim().is_empty() => Ok(s),
                _ => Err("`answer` must be a string or an array of non-empty strings"),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("`answer` must be a string or an array of non-empty strings".into()),
    };
    if let Some(gateway_tools) = o.remove("gateway_tools") {
        if o.contains_key("tools") {
            return Err("give `tools` (the client's) or `gateway_tools`, not both".into());
        }
        let gateway_tools: Vec<String> = match gateway_tools {
            Value::Array(a) if !a.is_empty() => a
                .into_iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s),
                    _ => Err("`gateway_tools` must be a non-empty array of tool names"),
                })
                .collect::<Result<_, _>>()?,
            _ => return Err("`gateway_tools` must be a non-empty array of tool names".into()),
        };
        if answer.is_empty() {
            return Err(
                "an agent case (`gateway_tools`) needs `answer`: what a good answer mentions"
                    .into(),
            );
        }
        if let Some(key) = o.keys().next() {
            return Err(format!(
                "`{key}`: unknown key in an agent case (expected name, prompt or messages, gateway_tools, answer)"
            ));
        }
        return Ok(Line::Agent(AgentCase {
            name,
            messages,
            gateway_tools,
            answer,
        }));
    }
    let tools = o
        .remove("tools")
        .filter(|t| t.as_array().is_some_and(|a| !a.is_empty()))
        .ok_or("`tools` must be a non-empty array of OpenAI tool objects")?;
    let set = ToolSet::from_request(Some(&tools), None).map_err(|e| format!("`tools`: {e}"))?;
    let tool_choice = o.remove("tool_choice");
    let expect = match o.remove("expect") {
        None | Some(Value::Null) => None,
        Some(Value::Object(mut e)) => {
            let Some(Value::String(name)) = e.remove("name") else {
                return Err("`expect.name` must be a string".into());
            };
            if set.get(&name).is_none() {
                return Err(format!(
                    "`expect.name`: {name:?} is not one of the case's tools"
                ));
            }
            let arguments = match e.remove("arguments") {
                None => Map::new(),
                Some(Value::Object(a)) => a,
                Some(_) => return Err("`expect.arguments` must be an object".into()),
            };
            if let Some(key) = e.keys().next() {
                return Err(format!("`expect.{key}`: unknown key"));
            }
            Some(Expected { name, arguments })
        }
        Some(_) => return Err("`expect` must be an object or null".into()),
    };
    let result = match o.remove("result") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s),
        Some(other) => Some(other.to_string()),
    };
    if result.is_some() && (expect.is_none() || answer.is_empty()) {
        return Err("a loop case (`result`) needs `expect` and `answer`".into());
    }
    if let Some(key) = o.keys().next() {
        return Err(format!(
            "`{key}`: unknown key (expected name, prompt or messages, tools, tool_choice, expect, result, answer, gateway_tools)"
        ));
    }
    Ok(Line::Client(Box::new(Case {
        name,
        messages,
        tools,
        tool_choice,
        expect,
        set,
        result,
        answer,
    })))
}

/// The built-in set: one tool, a choice between tools, several arguments,
/// integer and enum arguments, and a prompt that needs no tool. The four
/// that call are loop cases, each result carrying a detail the model can
/// only know from it. Then three agent prompts on the built-in tools.
pub fn builtin() -> Cases {
    let weather = tool(
        "get_weather",
        "Get the current weather for a city.",
        json!({"type": "object", "properties": {
            "location": {"type": "string", "description": "City name, e.g. Paris"}
        }, "required": ["location"]}),
    );
    let time = tool(
        "get_time",
        "Get the current time in a time zone.",
        json!({"type": "object", "properties": {
            "timezone": {"type": "string", "description": "IANA time zone, e.g. Europe/Paris"}
        }, "required": ["timezone"]}),
    );
    let email = tool(
        "send_email",
        "Send an email.",
        json!({"type": "object", "properties": {
            "to": {"type": "string", "description": "Recipient address"},
            "subject": {"type": "string"},
            "body": {"type": "string"}
        }, "required": ["to", "subject", "body"]}),
    );
    let thermostat = tool(
        "set_thermostat",
        "Set the thermostat.",
        json!({"type": "object", "properties": {
            "temperature": {"type": "integer", "description": "Target temperature"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}
        }, "required": ["temperature", "unit"]}),
    );
    let lines = [
        json!({"name": "one tool", "prompt": "What is the weather in Paris right now?",
               "tools": [weather],
               "expect": {"name": "get_weather", "arguments": {"location": "Paris"}},
               "result": {"location": "Paris", "temperature_c": 14, "conditions": "light rain"},
               "answer": ["14", "rain"]}),
        json!({"name": "choice", "prompt": "What time is it now in the Asia/Tokyo time zone?",
               "tools": [weather, time, email],
               "expect": {"name": "get_time", "arguments": {"timezone": "Asia/Tokyo"}},
               "result": {"timezone": "Asia/Tokyo", "time": "21:47"},
               "answer": ["21:47", "9:47"]}),
        json!({"name": "several arguments",
               "prompt": "Send an email to alice@example.com with the subject \"Lunch\" and the body \"See you at noon.\"",
               "tools": [weather, email],
               "expect": {"name": "send_email", "arguments": {"to": "alice@example.com", "subject": "Lunch"}},
               "result": {"status": "queued", "delivery": "in about 5 minutes"},
               "answer": ["queued", "5 minutes", "five minutes"]}),
        json!({"name": "integer and enum", "prompt": "Set the thermostat to 21 degrees celsius.",
               "tools": [thermostat, weather],
               "expect": {"name": "set_thermostat", "arguments": {"temperature": 21, "unit": "celsius"}},
               "result": {"status": "ok", "current_temperature": 17, "target": 21, "minutes_to_target": 25},
               "answer": ["17", "25"]}),
        json!({"name": "no tool needed", "prompt": "Say hello in French.",
               "tools": [weather, time]}),
        json!({"name": "agent: arithmetic", "prompt": "What is 17 * 23 + 4?",
               "gateway_tools": ["builtin:calculator"], "answer": ["395"]}),
        json!({"name": "agent: decimals", "prompt": "Use the calculator: what is (12.5 * 4) - 7?",
               "gateway_tools": ["builtin:calculator", "builtin:clock"], "answer": ["43"]}),
        json!({"name": "agent: date", "prompt": "What is today's date? Check the clock.",
               "gateway_tools": ["builtin:clock", "builtin:calculator"], "answer": today()}),
    ];
    let mut cases = Cases::default();
    for (i, v) in lines.into_iter().enumerate() {
        match case(v, i).expect("the built-in cases are valid") {
            Line::Client(c) => cases.client.push(*c),
            Line::Agent(c) => cases.agent.push(c),
        }
    }
    cases
}

/// Ways an answer can name today's date (UTC, what `builtin:clock` tells),
/// or tomorrow's (a run may pass midnight).
fn today() -> Vec<String> {
    let now = chrono::Utc::now();
    [now, now + chrono::TimeDelta::days(1)]
        .into_iter()
        .flat_map(|day| {
            [
                "%Y-%m-%d",
                "%B %-d",
                "%-d %B",
                "%b %-d",
                "%-m/%-d/%Y",
                "%d/%m/%Y",
            ]
            .map(|f| day.format(f).to_string())
        })
        .collect()
}

/// Whether `text` mentions one of `markers` (ASCII case ignored).
pub fn mentions(text: &str, markers: &[String]) -> bool {
    let text = text.to_ascii_lowercase();
    markers
        .iter()
        .any(|m| text.contains(&m.to_ascii_lowercase()))
}

fn tool(name: &str, description: &str, parameters: Value) -> Value {
    json!({"type": "function", "function": {"name": name, "description": description, "parameters": parameters}})
}

/// Whether `actual` carries every expected value.
pub fn arguments_match(expected: &Map<String, Value>, actual: &Map<String, Value>) -> bool {
    expected
        .iter()
        .all(|(k, want)| actual.get(k).is_some_and(|got| same_value(want, got)))
}

fn same_value(want: &Value, got: &Value) -> bool {
    match (want, got) {
        (Value::String(a), Value::String(b)) => a.trim().eq_ignore_ascii_case(b.trim()),
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        _ => want == got,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_set_covers_what_probe_promises() {
        let all = builtin();
        assert_eq!(all.agent.len(), 3);
        assert!(all.agent.iter().all(|c| !c.answer.is_empty()));
        let cases = all.client;
        assert_eq!(cases.len(), 5);
        assert_eq!(
            cases.iter().filter(|c| c.result.is_some()).count(),
            4,
            "every case that expects a call closes a loop"
        );
        assert!(cases.iter().any(|c| c.expect.is_none()));
        assert!(cases.iter().any(|c| c.set.tools.len() >= 3));
        assert!(cases.iter().any(|c| {
            c.expect
                .as_ref()
                .is_some_and(|e| e.arguments.values().any(Value::is_number))
        }));
    }

    #[test]
    fn jsonl_cases_are_read_and_errors_name_the_line() {
        let t = r#"{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}"#;
        let ok = format!(
            "# comment\n\n{{\"prompt\":\"hi\",\"tools\":[{t}],\"expect\":{{\"name\":\"f\",\"arguments\":{{\"a\":1}}}}}}\n{{\"name\":\"none\",\"messages\":[{{\"role\":\"user\",\"content\":\"x\"}}],\"tools\":[{t}],\"expect\":null}}\n"
        );
        let cases = from_jsonl(&ok).unwrap().client;
        assert_eq!(cases.len(), 2);
        assert_eq!(cases[0].name, "case 1");
        assert_eq!(cases[0].expect.as_ref().unwrap().name, "f");
        assert!(cases[1].expect.is_none());

        let bad = format!(
            "{{\"prompt\":\"hi\",\"tools\":[{t}]}}\n{{\"prompt\":\"hi\",\"tools\":[{t}],\"expect\":{{\"name\":\"g\"}}}}"
        );
        let e = from_jsonl(&bad).unwrap_err();
        assert!(e.starts_with("line 2:") && e.contains("\"g\""), "{e}");
        assert!(
            from_jsonl("{\"prompt\":\"hi\"}")
                .unwrap_err()
                .contains("`tools`")
        );
        assert!(from_jsonl("{\"prompt\":\"hi\",\"tools\":[1],\"x\":1}").is_err());
        assert!(from_jsonl("\n# only a comment\n").is_err());
    }

    #[test]
    fn arguments_compare_loosely_but_completely() {
        let m = |v: Value| v.as_object().unwrap().clone();
        let want = m(json!({"location": "Paris", "n": 21}));
        assert!(arguments_match(
            &want,
            &m(json!({"location": " paris", "n": 21.0, "x": 1}))
        ));
        assert!(!arguments_match(&want, &m(json!({"location": "Paris"}))));
        assert!(!arguments_match(
            &want,
            &m(json!({"location": "Lyon", "n": 21}))
        ));
        assert!(!arguments_match(
            &want,
            &m(json!({"location": "Paris", "n": "21"}))
        ));
    }
}
