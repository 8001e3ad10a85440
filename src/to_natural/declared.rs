//! The tool declarations of a request whose history holds no natural text:
//! they go upstream as they came, but must be valid first.
//!
//! A client sends the same `tools` with every turn of a conversation, and
//! validating them (a parse into a tree, then [`ToolSet::from_request`])
//! costs more than rewriting a short history. Each worker thread remembers
//! the last few declaration texts that passed, byte for byte; a request
//! repeating one skips the check. Only successes are remembered, and only
//! texts of moderate size, so the memory this holds stays small.

use std::cell::RefCell;
use std::collections::VecDeque;

use serde_json::Value;

use crate::natural::error::RequestError;
use crate::natural::tools::ToolSet;

/// Declaration texts remembered per thread.
const REMEMBERED: usize = 8;

/// Longer declarations (`tools` and `functions` together) are checked every time.
const MAX_REMEMBERED_BYTES: usize = 32 * 1024;

thread_local! {
    /// Most recently used first.
    static VALID: RefCell<VecDeque<(Box<str>, Box<str>)>> = const { RefCell::new(VecDeque::new()) };
}

/// Checks a request's raw `tools` and `functions` (absent or `null`: `None`).
pub fn check(tools: Option<&str>, functions: Option<&str>) -> Result<(), RequestError> {
    let (tools, functions) = (tools.unwrap_or(""), functions.unwrap_or(""));
    let small = tools.len() + functions.len() <= MAX_REMEMBERED_BYTES;
    if small && remembered(tools, functions) {
        return Ok(());
    }
    let parse = |raw: &str| {
        (!raw.is_empty())
            .then(|| serde_json::from_str::<Value>(raw))
            .transpose()
            .map_err(|e| RequestError::InvalidJson {
                message: e.to_string(),
            })
    };
    let (parsed_tools, parsed_functions) = (parse(tools)?, parse(functions)?);
    ToolSet::from_request(parsed_tools.as_ref(), parsed_functions.as_ref())?;
    if small {
        VALID.with_borrow_mut(|valid| {
            valid.truncate(REMEMBERED - 1);
            valid.push_front((tools.into(), functions.into()));
        });
    }
    Ok(())
}

/// Whether this text passed before; moves it to the front if so.
fn remembered(tools: &str, functions: &str) -> bool {
    VALID.with_borrow_mut(|valid| {
        let Some(at) = valid
            .iter()
            .position(|(t, f)| **t == *tools && **f == *functions)
        else {
            return false;
        };
        if at > 0 {
            let entry = valid.remove(at).expect("found above");
            valid.push_front(entry);
        }
        true
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOOLS: &str =
        r#"[{"type":"function","function":{"name":"GetWeather","parameters":{"type":"object"}}}]"#;

    #[test]
    fn valid_declarations_are_remembered_and_invalid_ones_never() {
        assert!(check(Some(TOOLS), None).is_ok());
        assert!(remembered(TOOLS, ""));
        let bad = r#"[{"type":"function","function":{"parameters":{}}}]"#;
        for _ in 0..2 {
            assert!(check(Some(bad), None).is_err(), "a tool without a name");
            assert!(!remembered(bad, ""));
        }
        assert!(check(Some("[1,"), None).is_err());
        assert!(check(None, None).is_ok());
    }

    #[test]
    fn the_memory_is_bounded() {
        let texts: Vec<String> = (0..REMEMBERED + 2)
            .map(|i| TOOLS.replace("GetWeather", &format!("Tool{i}")))
            .collect();
        for text in &texts {
            check(Some(text), None).unwrap();
        }
        VALID.with_borrow(|valid| assert_eq!(valid.len(), REMEMBERED));
        assert!(!remembered(&texts[0], ""), "the oldest went first");
        assert!(remembered(&texts[REMEMBERED + 1], ""));
        let big = TOOLS.replace(
            "\"type\":\"object\"",
            &format!(
                "\"type\":\"object\",\"description\":\"{}\"",
                "x".repeat(MAX_REMEMBERED_BYTES)
            ),
        );
        check(Some(&big), None).unwrap();
        assert!(!remembered(&big, ""), "too long to remember");
    }
}
