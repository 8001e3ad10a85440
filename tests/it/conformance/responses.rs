//! Conformance rules 23-24: what the SDKs' Responses
//! stream helpers require of a `/v1/responses` stream. [`check_responses`]
//! validates a whole SSE body and returns what a client assembles from it.

use std::collections::HashSet;

use serde_json::Value;

use super::Call;

/// A Responses stream as a client assembles it.
#[derive(Debug, Clone, Default)]
pub struct ResponsesSummary {
    /// The text of every message item, in order.
    pub text: String,
    /// Function calls (`call_id`, name, arguments).
    pub calls: Vec<Call>,
    /// `mcp_call` items as they were when done.
    pub gateway: Vec<Value>,
    /// `completed`, `incomplete` or `failed`.
    pub status: String,
    /// The response object of the terminal event.
    pub response: Value,
    /// Event types in order.
    pub kinds: Vec<String>,
}

/// One output item being streamed.
#[derive(Debug)]
struct Item {
    id: String,
    kind: String,
    done: bool,
    /// Text of its content part or arguments, from the deltas.
    deltas: String,
    part_open: bool,
    text_done: bool,
    mcp_state: &'static str,
}

fn events(body: &[u8]) -> Result<Vec<Value>, String> {
    let text = std::str::from_utf8(body).map_err(|e| format!("not UTF-8: {e}"))?;
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        let mut name = None;
        let mut data = None;
        for line in block.lines() {
            if line.starts_with(':') || line.is_empty() {
                continue;
            } else if let Some(n) = line.strip_prefix("event: ") {
                name = Some(n);
            } else if let Some(d) = line.strip_prefix("data: ") {
                if data.is_some() {
                    return Err(format!("two data lines in one event: {block:?}"));
                }
                data = Some(d);
            } else {
                return Err(format!("unexpected line {line:?}"));
            }
        }
        let Some(data) = data else {
            if name.is_some() {
                return Err(format!("an event without data: {block:?}"));
            }
            continue;
        };
        let event: Value =
            serde_json::from_str(data).map_err(|e| format!("data is not JSON ({e}): {data}"))?;
        let kind = event["type"]
            .as_str()
            .ok_or_else(|| format!("rule 23: an event without `type`: {data}"))?;
        if let Some(name) = name
            && name != kind
        {
            return Err(format!("`event: {name}` but type {kind}"));
        }
        out.push(event);
    }
    Ok(out)
}

fn item_at<'a>(items: &'a mut [Item], event: &Value) -> Result<&'a mut Item, String> {
    let index = event["output_index"]
        .as_u64()
        .ok_or_else(|| format!("rule 24: no output_index: {event}"))? as usize;
    let item = items
        .get_mut(index)
        .ok_or_else(|| format!("rule 24: output_index {index} was never added: {event}"))?;
    if let Some(id) = event.get("item_id").and_then(Value::as_str)
        && id != item.id
    {
        return Err(format!(
            "rule 24: item_id {id} at output_index {index} is {}: {event}",
            item.id
        ));
    }
    if item.done {
        return Err(format!(
            "rule 24: an event after the item was done: {event}"
        ));
    }
    Ok(item)
}

/// Checks a whole `/v1/responses` stream (rules 23-24).
pub fn check_responses(body: &[u8]) -> Result<ResponsesSummary, String> {
    let events = events(body)?;
    let mut summary = ResponsesSummary::default();
    let mut items: Vec<Item> = Vec::new();
    let mut ids = HashSet::new();
    let mut last_seq: Option<u64> = None;
    let mut terminal = None;
    for (n, event) in events.iter().enumerate() {
        let kind = event["type"].as_str().unwrap_or_default();
        summary.kinds.push(kind.to_owned());
        let seq = event["sequence_number"]
            .as_u64()
            .ok_or_else(|| format!("rule 23: no sequence_number: {event}"))?;
        if last_seq.is_some_and(|last| seq <= last) {
            return Err(format!("rule 23: sequence_number {seq} after {last_seq:?}"));
        }
        last_seq = Some(seq);
        if terminal.is_some() {
            return Err(format!(
                "rule 23: an event after the terminal event: {event}"
            ));
        }
        if (n == 0) != (kind == "response.created") {
            return Err(format!(
                "rule 23: response.created must be first and only first; event {n} is {kind}"
            ));
        }
        match kind {
            "response.created" | "response.in_progress" => {}
            "response.completed" | "response.incomplete" | "response.failed" => {
                terminal = Some(event.clone());
            }
            "response.output_item.added" => {
                let index = event["output_index"].as_u64().unwrap_or(u64::MAX) as usize;
                if index != items.len() {
                    return Err(format!(
                        "rule 24: item added at {index}, expected {}",
                        items.len()
                    ));
                }
                let item = &event["item"];
                let id = item["id"].as_str().unwrap_or_default().to_owned();
                if id.is_empty() || !ids.insert(id.clone()) {
                    return Err(format!("rule 24: item id missing or repeated: {event}"));
                }
                items.push(Item {
                    id,
                    kind: item["type"].as_str().unwrap_or_default().to_owned(),
                    done: false,
                    deltas: String::new(),
                    part_open: false,
                    text_done: false,
                    mcp_state: "added",
                });
            }
            "response.content_part.added" => {
                let item = item_at(&mut items, event)?;
                if item.kind != "message" || item.part_open {
                    return Err(format!("rule 24: content_part.added out of place: {event}"));
                }
                item.part_open = true;
            }
            "response.output_text.delta" | "response.reasoning_text.delta" => {
                let item = item_at(&mut items, event)?;
                if kind == "response.output_text.delta" && (!item.part_open || item.text_done) {
                    return Err(format!(
                        "rule 24: text outside an open content part: {event}"
                    ));
                }
                item.deltas
                    .push_str(event["delta"].as_str().unwrap_or_default());
            }
            "response.output_text.done" | "response.reasoning_text.done" => {
                let item = item_at(&mut items, event)?;
                if event["text"].as_str() != Some(item.deltas.as_str()) {
                    return Err(format!(
                        "rule 24: done text is not the deltas' text: {event}"
                    ));
                }
                item.text_done = true;
            }
            "response.content_part.done" => {
                let item = item_at(&mut items, event)?;
                if !item.part_open || !item.text_done {
                    return Err(format!(
                        "rule 24: content_part.done before its text: {event}"
                    ));
                }
                item.part_open = false;
            }
            "response.function_call_arguments.delta" | "response.mcp_call_arguments.delta" => {
                let item = item_at(&mut items, event)?;
                item.deltas
                    .push_str(event["delta"].as_str().unwrap_or_default());
            }
            "response.function_call_arguments.done" | "response.mcp_call_arguments.done" => {
                let item = item_at(&mut items, event)?;
                let args = event["arguments"].as_str().unwrap_or_default();
                if args != item.deltas {
                    return Err(format!("rule 24: arguments are not the deltas': {event}"));
                }
                match serde_json::from_str::<Value>(args) {
                    Ok(Value::Object(_)) => {}
                    _ => return Err(format!("arguments are not a JSON object: {event}")),
                }
                item.text_done = true;
            }
            "response.mcp_call.in_progress" => {
                let item = item_at(&mut items, event)?;
                if item.kind != "mcp_call" || item.mcp_state != "added" {
                    return Err(format!(
                        "rule 24: mcp_call.in_progress out of place: {event}"
                    ));
                }
                item.mcp_state = "in_progress";
            }
            "response.mcp_call.completed" | "response.mcp_call.failed" => {
                let item = item_at(&mut items, event)?;
                if item.mcp_state != "in_progress" || !item.text_done {
                    return Err(format!(
                        "rule 24: {kind} before in_progress and arguments: {event}"
                    ));
                }
                item.mcp_state = if kind.ends_with("completed") {
                    "completed"
                } else {
                    "failed"
                };
            }
            "response.mcp_list_tools.in_progress" | "response.mcp_list_tools.completed" => {
                item_at(&mut items, event)?;
            }
            "response.output_item.done" => {
                let done = &event["item"];
                let item = item_at(&mut items, event)?;
                if done["id"].as_str() != Some(item.id.as_str()) {
                    return Err(format!("rule 24: item done with another id: {event}"));
                }
                match item.kind.as_str() {
                    "message" => {
                        if item.part_open || !item.text_done {
                            return Err(format!(
                                "rule 24: message done with its part open: {event}"
                            ));
                        }
                        let text = done["content"][0]["text"].as_str().unwrap_or_default();
                        if text != item.deltas {
                            return Err(format!(
                                "rule 24: message text is not its deltas': {event}"
                            ));
                        }
                        summary.text.push_str(text);
                    }
                    "function_call" => {
                        if !item.text_done
                            || done["arguments"].as_str() != Some(item.deltas.as_str())
                        {
                            return Err(format!(
                                "rule 24: call done without its arguments: {event}"
                            ));
                        }
                        summary.calls.push(Call {
                            id: done["call_id"].as_str().unwrap_or_default().to_owned(),
                            name: done["name"].as_str().unwrap_or_default().to_owned(),
                            arguments: item.deltas.clone(),
                        });
                    }
                    "mcp_call" => {
                        let status = done["status"].as_str().unwrap_or_default();
                        if status != item.mcp_state {
                            return Err(format!(
                                "rule 24: mcp_call done as {status} after {}: {event}",
                                item.mcp_state
                            ));
                        }
                        let field = if status == "completed" {
                            "output"
                        } else {
                            "error"
                        };
                        if !done[field].is_string() {
                            return Err(format!(
                                "rule 24: {status} mcp_call without {field}: {event}"
                            ));
                        }
                        summary.gateway.push(done.clone());
                    }
                    _ => {}
                }
                item.done = true;
            }
            "error" => {}
            other => return Err(format!("unknown event type {other}")),
        }
    }
    let terminal = terminal.ok_or("rule 23: no terminal event")?;
    let kind = terminal["type"].as_str().unwrap_or_default();
    let response = terminal["response"].clone();
    let status = response["status"].as_str().unwrap_or_default().to_owned();
    if kind.trim_start_matches("response.") != status {
        return Err(format!("{kind} with status {status}"));
    }
    if status != "failed" {
        if let Some(open) = items.iter().find(|i| !i.done) {
            return Err(format!("rule 24: item {} never done", open.id));
        }
        let output: Vec<&str> = response["output"]
            .as_array()
            .map(|o| {
                o.iter()
                    .map(|i| i["id"].as_str().unwrap_or_default())
                    .collect()
            })
            .unwrap_or_default();
        let streamed: Vec<&str> = items.iter().map(|i| i.id.as_str()).collect();
        if output != streamed {
            return Err(format!(
                "the final output {output:?} is not the streamed items {streamed:?}"
            ));
        }
    }
    summary.status = status;
    summary.response = response;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = concat!(
        "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{}}\n\n",
        "data: {\"type\":\"response.output_item.added\",\"sequence_number\":1,\"output_index\":0,\"item\":{\"id\":\"m\",\"type\":\"message\"}}\n\n",
        "data: {\"type\":\"response.content_part.added\",\"sequence_number\":2,\"output_index\":0,\"item_id\":\"m\"}\n\n",
        "data: {\"type\":\"response.output_text.delta\",\"sequence_number\":3,\"output_index\":0,\"item_id\":\"m\",\"delta\":\"Hi\"}\n\n",
        "data: {\"type\":\"response.output_text.done\",\"sequence_number\":4,\"output_index\":0,\"item_id\":\"m\",\"text\":\"Hi\"}\n\n",
        "data: {\"type\":\"response.content_part.done\",\"sequence_number\":5,\"output_index\":0,\"item_id\":\"m\"}\n\n",
        "data: {\"type\":\"response.output_item.done\",\"sequence_number\":6,\"output_index\":0,\"item\":{\"id\":\"m\",\"type\":\"message\",\"content\":[{\"text\":\"Hi\"}]}}\n\n",
        "data: {\"type\":\"response.completed\",\"sequence_number\":7,\"response\":{\"status\":\"completed\",\"output\":[{\"id\":\"m\"}]}}\n\n",
    );

    #[test]
    fn a_good_stream_passes_and_each_break_is_caught() {
        let s = check_responses(GOOD.as_bytes()).unwrap();
        assert_eq!(s.text, "Hi");
        let breaks = [
            ("\"sequence_number\":3", "\"sequence_number\":2"),
            ("\"delta\":\"Hi\"", "\"delta\":\"Ho\""),
            (
                "response.created\",\"sequence",
                "response.in_progress\",\"sequence",
            ),
            ("\"output\":[{\"id\":\"m\"}]", "\"output\":[]"),
            ("\"status\":\"completed\"", "\"status\":\"failed\""),
        ];
        for (from, to) in breaks {
            let broken = GOOD.replacen(from, to, 1);
            assert!(
                check_responses(broken.as_bytes()).is_err(),
                "{from} -> {to} passed"
            );
        }
        let truncated = GOOD
            .rsplit_once("data: {\"type\":\"response.completed")
            .unwrap()
            .0;
        assert!(check_responses(truncated.as_bytes()).is_err());
    }
}
