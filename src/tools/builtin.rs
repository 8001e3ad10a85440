//! Tools answered inside the gateway, for the demo and for setups without
//! any tool server: `builtin:clock` and `builtin:calculator`. Pure except
//! for the clock.

use serde_json::{Map, Value, json};

pub use crate::config::Builtin;

/// Longest expression the calculator reads.
const MAX_EXPRESSION: usize = 1024;
/// Deepest nesting of parentheses and unary minus it follows.
const MAX_DEPTH: usize = 64;

impl Builtin {
    pub fn description(self) -> &'static str {
        match self {
            Builtin::Clock => "The current date and time in UTC (ISO 8601).",
            Builtin::Calculator => {
                "Evaluates an arithmetic expression with + - * / %, parentheses and decimals, e.g. \"(2 + 3) * 4\"."
            }
        }
    }

    pub fn parameters(self) -> Value {
        match self {
            Builtin::Clock => json!({"type": "object", "properties": {}}),
            Builtin::Calculator => json!({
                "type": "object",
                "properties": {"expression": {"type": "string", "description": "The expression to evaluate"}},
                "required": ["expression"],
            }),
        }
    }

    /// Runs the tool: its output, or an error the model sees.
    pub fn run(self, arguments: &Map<String, Value>) -> Result<String, String> {
        match self {
            Builtin::Clock => {
                Ok(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
            }
            Builtin::Calculator => {
                let expression = arguments
                    .get("expression")
                    .and_then(Value::as_str)
                    .ok_or("`expression` must be a string")?;
                calculate(expression).map(format_number)
            }
        }
    }
}

fn format_number(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        format!("{x}")
    }
}

/// Evaluates `expression` by recursive descent over its bytes.
pub fn calculate(expression: &str) -> Result<f64, String> {
    if expression.len() > MAX_EXPRESSION {
        return Err(format!(
            "the expression is longer than {MAX_EXPRESSION} characters"
        ));
    }
    let mut p = Calc {
        s: expression.as_bytes(),
        at: 0,
        depth: 0,
    };
    let value = p.sum()?;
    p.skip_space();
    if p.at < p.s.len() {
        return Err(format!(
            "unexpected {:?} at position {}",
            p.s[p.at] as char, p.at
        ));
    }
    if value.is_finite() {
        Ok(value)
    } else {
        Err("the result is not a finite number (division by zero?)".into())
    }
}

struct Calc<'a> {
    s: &'a [u8],
    at: usize,
    depth: usize,
}

impl Calc<'_> {
    fn skip_space(&mut self) {
        while self.s.get(self.at).is_some_and(u8::is_ascii_whitespace) {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_space();
        self.s.get(self.at).copied()
    }

    fn sum(&mut self) -> Result<f64, String> {
        let mut value = self.product()?;
        while let Some(op @ (b'+' | b'-')) = self.peek() {
            self.at += 1;
            let rhs = self.product()?;
            value = if op == b'+' { value + rhs } else { value - rhs };
        }
        Ok(value)
    }

    fn product(&mut self) -> Result<f64, String> {
        let mut value = self.unary()?;
        while let Some(op @ (b'*' | b'/' | b'%')) = self.peek() {
            self.at += 1;
            let rhs = self.unary()?;
            value = match op {
                b'*' => value * rhs,
                b'/' => value / rhs,
                _ => value % rhs,
            };
        }
        Ok(value)
    }

    fn unary(&mut self) -> Result<f64, String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(format!("nested deeper than {MAX_DEPTH} levels"));
        }
        let value = match self.peek() {
            Some(b'-') => {
                self.at += 1;
                self.unary().map(|v| -v)
            }
            Some(b'+') => {
                self.at += 1;
                self.unary()
            }
            Some(b'(') => {
                self.at += 1;
                let v = self.sum()?;
                if self.peek() != Some(b')') {
                    return Err(format!("missing ')' at position {}", self.at));
                }
                self.at += 1;
                Ok(v)
            }
            _ => self.number(),
        };
        self.depth -= 1;
        value
    }

    fn number(&mut self) -> Result<f64, String> {
        let start = self.at;
        while self
            .s
            .get(self.at)
            .is_some_and(|b| b.is_ascii_digit() || *b == b'.')
        {
            self.at += 1;
        }
        let text = std::str::from_utf8(&self.s[start..self.at]).unwrap_or("");
        text.parse::<f64>().map_err(|_| match self.s.get(start) {
            Some(&b) => format!(
                "expected a number at position {start}, found {:?}",
                b as char
            ),
            None => "the expression ends where a number was expected".to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic() {
        for (expr, want) in [
            ("1 + 2 * 3", 7.0),
            ("(1 + 2) * 3", 9.0),
            ("-2 * -(3 - 5)", -4.0),
            ("7 % 4 + 0.5", 3.5),
            ("10 / 4", 2.5),
        ] {
            assert_eq!(calculate(expr), Ok(want), "{expr}");
        }
    }

    #[test]
    fn errors_are_explained() {
        assert!(calculate("1 +").unwrap_err().contains("ends"));
        assert!(calculate("2 $ 3").unwrap_err().contains("'$'"));
        assert!(calculate("1 / 0").unwrap_err().contains("finite"));
        assert!(calculate("(1").unwrap_err().contains("')'"));
        let deep = format!("{}1{}", "(".repeat(500), ")".repeat(500));
        assert!(calculate(&deep).unwrap_err().contains("nested"));
        assert!(calculate(&"1+".repeat(600)).unwrap_err().contains("longer"));
    }

    #[test]
    fn run_formats_whole_numbers_plainly() {
        let args = json!({"expression": "6 * 7"});
        let out = Builtin::Calculator.run(args.as_object().unwrap());
        assert_eq!(out.as_deref(), Ok("42"));
        let clock = Builtin::Clock.run(&Map::new()).unwrap();
        assert!(clock.ends_with('Z') && clock.len() == 20, "{clock}");
    }
}
