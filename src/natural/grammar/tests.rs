//! The grammar writer held to what it promises, through a small GBNF
//! recognizer (below) that reads the grammar's text as llama.cpp's parser
//! would: a value `jsonschema` accepts is admitted, one it rejects is not;
//! text is free but for the openers; the calls the instructions show are
//! admitted, and so is what the parser reads back as those calls.

use std::collections::{BTreeSet, HashMap};

use proptest::prelude::*;
use serde_json::{Map, Value, json};

use super::*;
use crate::natural::parser::{Event, Parser, ParserOptions};
use crate::natural::tools::ToolSet;

// ---- a GBNF recognizer ------------------------------------------------------

#[derive(Debug, Clone)]
enum Expr {
    Literal(Vec<char>),
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
    Rule(String),
    Seq(Vec<Expr>),
    Alt(Vec<Expr>),
    Repeat(Box<Expr>, usize, Option<usize>),
}

struct Grammar {
    rules: HashMap<String, Expr>,
}

struct Reader<'a> {
    s: &'a [char],
    i: usize,
}

impl Reader<'_> {
    fn skip(&mut self) {
        while self.i < self.s.len() && matches!(self.s[self.i], ' ' | '\t') {
            self.i += 1;
        }
    }
    fn peek(&self) -> Option<char> {
        self.s.get(self.i).copied()
    }
    /// An escape, read as llama.cpp's oldest parsers read one: only
    /// `\x \u \U \t \r \n \\ \" \[ \]`; any other is "unknown escape".
    fn escaped(&mut self) -> char {
        self.i += 1;
        let c = self.s[self.i];
        self.i += 1;
        let mut hex = |digits: usize| {
            let hex: String = self.s[self.i..self.i + digits].iter().collect();
            self.i += digits;
            char::from_u32(u32::from_str_radix(&hex, 16).unwrap()).unwrap()
        };
        match c {
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'x' => hex(2),
            'u' => hex(4),
            'U' => hex(8),
            '\\' | '"' | '[' | ']' => c,
            other => panic!("unknown escape \\{other}"),
        }
    }
    fn alternation(&mut self) -> Expr {
        let mut alts = vec![self.sequence()];
        loop {
            self.skip();
            if self.peek() == Some('|') {
                self.i += 1;
                alts.push(self.sequence());
            } else {
                break;
            }
        }
        if alts.len() == 1 {
            alts.pop().unwrap()
        } else {
            Expr::Alt(alts)
        }
    }
    fn sequence(&mut self) -> Expr {
        let mut items = Vec::new();
        loop {
            self.skip();
            let Some(c) = self.peek() else { break };
            let item = match c {
                '"' => {
                    self.i += 1;
                    let mut lit = Vec::new();
                    while self.peek() != Some('"') {
                        if self.peek() == Some('\\') {
                            lit.push(self.escaped());
                        } else {
                            lit.push(self.s[self.i]);
                            self.i += 1;
                        }
                    }
                    self.i += 1;
                    Expr::Literal(lit)
                }
                '[' => {
                    self.i += 1;
                    let negated = self.peek() == Some('^');
                    if negated {
                        self.i += 1;
                    }
                    let mut ranges = Vec::new();
                    while self.peek() != Some(']') {
                        let lo = if self.peek() == Some('\\') {
                            self.escaped()
                        } else {
                            self.i += 1;
                            self.s[self.i - 1]
                        };
                        let hi = if self.peek() == Some('-') && self.s.get(self.i + 1) != Some(&']')
                        {
                            self.i += 1;
                            if self.peek() == Some('\\') {
                                self.escaped()
                            } else {
                                self.i += 1;
                                self.s[self.i - 1]
                            }
                        } else {
                            lo
                        };
                        ranges.push((lo, hi));
                    }
                    self.i += 1;
                    Expr::Class { negated, ranges }
                }
                '(' => {
                    self.i += 1;
                    let inner = self.alternation();
                    self.skip();
                    assert_eq!(self.peek(), Some(')'));
                    self.i += 1;
                    inner
                }
                c if c.is_ascii_alphanumeric() || c == '-' => {
                    let start = self.i;
                    while self
                        .peek()
                        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '-')
                    {
                        self.i += 1;
                    }
                    Expr::Rule(self.s[start..self.i].iter().collect())
                }
                _ => break,
            };
            let item = match self.peek() {
                Some('*') => {
                    self.i += 1;
                    Expr::Repeat(Box::new(item), 0, None)
                }
                Some('+') => {
                    self.i += 1;
                    Expr::Repeat(Box::new(item), 1, None)
                }
                Some('?') => {
                    self.i += 1;
                    Expr::Repeat(Box::new(item), 0, Some(1))
                }
                Some('{') => {
                    self.i += 1;
                    let close = self.s[self.i..].iter().position(|&c| c == '}').unwrap() + self.i;
                    let spec: String = self.s[self.i..close].iter().collect();
                    self.i = close + 1;
                    let (lo, hi) = match spec.split_once(',') {
                        None => (spec.parse().unwrap(), Some(spec.parse().unwrap())),
                        Some((lo, "")) => (lo.parse().unwrap(), None),
                        Some((lo, hi)) => (lo.parse().unwrap(), Some(hi.parse().unwrap())),
                    };
                    Expr::Repeat(Box::new(item), lo, hi)
                }
                _ => item,
            };
            items.push(item);
        }
        if items.len() == 1 {
            items.pop().unwrap()
        } else {
            Expr::Seq(items)
        }
    }
}

impl Grammar {
    fn parse(text: &str) -> Grammar {
        let mut rules = HashMap::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let (name, body) = line.split_once(" ::= ").expect("a rule");
            let chars: Vec<char> = body.chars().collect();
            let mut reader = Reader { s: &chars, i: 0 };
            let expr = reader.alternation();
            reader.skip();
            assert_eq!(reader.i, chars.len(), "unread: {line}");
            assert!(
                rules.insert(name.to_owned(), expr).is_none(),
                "{name} twice"
            );
        }
        for expr in rules.values() {
            check_refs(expr, &rules);
        }
        Grammar { rules }
    }

    /// Whether `input` is in the grammar's language (from `root`).
    fn accepts(&self, input: &str) -> bool {
        let chars: Vec<char> = input.chars().collect();
        let mut memo = HashMap::new();
        self.ends(&Expr::Rule("root".into()), &chars, 0, &mut memo)
            .contains(&chars.len())
    }

    fn ends(
        &self,
        e: &Expr,
        s: &[char],
        at: usize,
        memo: &mut HashMap<(String, usize), BTreeSet<usize>>,
    ) -> BTreeSet<usize> {
        match e {
            Expr::Literal(lit) => {
                if s[at..].starts_with(lit) {
                    [at + lit.len()].into()
                } else {
                    BTreeSet::new()
                }
            }
            Expr::Class { negated, ranges } => match s.get(at) {
                Some(&c) if ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi) != *negated => {
                    [at + 1].into()
                }
                _ => BTreeSet::new(),
            },
            Expr::Rule(name) => {
                let key = (name.clone(), at);
                if let Some(found) = memo.get(&key) {
                    return found.clone();
                }
                memo.insert(key.clone(), BTreeSet::new());
                let found = self.ends(&self.rules[name], s, at, memo);
                memo.insert(key, found.clone());
                found
            }
            Expr::Seq(items) => {
                let mut here: BTreeSet<usize> = [at].into();
                for item in items {
                    here = here
                        .iter()
                        .flat_map(|&p| self.ends(item, s, p, memo))
                        .collect();
                    if here.is_empty() {
                        break;
                    }
                }
                here
            }
            Expr::Alt(alts) => alts
                .iter()
                .flat_map(|a| self.ends(a, s, at, memo))
                .collect(),
            Expr::Repeat(item, lo, hi) => {
                let mut out = BTreeSet::new();
                let mut here: BTreeSet<usize> = [at].into();
                let mut n = 0;
                loop {
                    if n >= *lo {
                        out.extend(here.iter().copied());
                    }
                    if hi.is_some_and(|hi| n >= hi) || here.is_empty() {
                        break;
                    }
                    let next: BTreeSet<usize> = here
                        .iter()
                        .flat_map(|&p| self.ends(item, s, p, memo))
                        .filter(|&p| !out.contains(&p) || n < *lo)
                        .collect();
                    if next.is_empty() || next == here {
                        break;
                    }
                    here = next;
                    n += 1;
                }
                out
            }
        }
    }
}

fn check_refs(e: &Expr, rules: &HashMap<String, Expr>) {
    match e {
        Expr::Rule(name) => assert!(rules.contains_key(name), "undefined rule {name}"),
        Expr::Seq(items) | Expr::Alt(items) => items.iter().for_each(|i| check_refs(i, rules)),
        Expr::Repeat(item, ..) => check_refs(item, rules),
        _ => {}
    }
}

// ---- the grammar's promises ---------------------------------------------------

fn tool(name: &str, parameters: Value) -> Tool {
    Tool {
        name: name.into(),
        description: None,
        parameters: Some(parameters),
        strict: false,
        unlisted: false,
    }
}

fn weather() -> Tool {
    tool(
        "GetWeather",
        json!({"type": "object", "properties": {
            "location": {"type": "string"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer"}},
            "required": ["location"]}),
    )
}

fn grammar_of(tools: Vec<Tool>, syntax: Syntax, policy: &Policy) -> (super::Grammar, Grammar) {
    let written = for_tools(&ToolSet::from_tools(tools), syntax, policy)
        .expect("within budget")
        .expect("a grammar");
    let parsed = Grammar::parse(&written.gbnf);
    (written, parsed)
}

/// A call as the instructions show it, in `syntax`.
fn rendered(syntax: Syntax, name: &str, args: &Value) -> String {
    let mut out = String::new();
    match syntax {
        Syntax::Bracket => {
            out.push_str("[Looking it up]");
            let mut call = String::new();
            syntax.render_call(name, args, &mut call);
            out.push_str(call.split_once(']').unwrap().1);
        }
        _ => syntax.render_call(name, args, &mut out),
    }
    out
}

/// What the parser reads from `text`: calls (name, arguments) and whether
/// any block was invalid.
fn parsed(text: &str, syntax: Syntax, tools: &ToolSet) -> (Vec<(String, Value)>, bool) {
    let options = ParserOptions {
        syntax,
        ..ParserOptions::default()
    };
    let mut parser = Parser::new(tools.names(), options);
    let mut events = Vec::new();
    parser.feed(text, &mut events);
    parser.finish(&mut events);
    let mut calls = Vec::new();
    let mut invalid = false;
    for event in events {
        match event {
            Event::Call(c) => calls.push((c.name, Value::Object(c.arguments))),
            Event::Invalid(_) => invalid = true,
            Event::Text(_) => {}
        }
    }
    (calls, invalid)
}

#[test]
fn text_is_free_but_for_the_openers_and_calls_are_whole() {
    for syntax in [
        Syntax::Tag,
        Syntax::ToolCall,
        Syntax::Bracket,
        Syntax::Python,
    ] {
        let (written, g) = grammar_of(vec![weather()], syntax, &Policy::default());
        assert!(written.lazy);
        let call = rendered(
            syntax,
            "GetWeather",
            &json!({"location": "Paris", "unit": "celsius"}),
        );
        for text in [
            String::new(),
            "Plain text, with <b>markup</b>, [brackets], {braces} and émoji ☀.".to_owned(),
            format!("Let me check.\n{call}"),
            format!("{call}\n{call}"),
            format!("First.\n{call}\nThen.\n{call}\nDone."),
        ] {
            assert!(g.accepts(&text), "{syntax:?} refused: {text}");
        }
        let bad = rendered(syntax, "GetWeather", &json!({"unit": "celsius"}));
        assert!(
            !g.accepts(&bad),
            "{syntax:?}: a required argument is missing: {bad}"
        );
        let bad = rendered(syntax, "GetWeather", &json!({"location": 3}));
        assert!(!g.accepts(&bad), "{syntax:?}: a wrong type: {bad}");
        let bad = rendered(
            syntax,
            "GetWeather",
            &json!({"location": "Oslo", "unit": "kelvin"}),
        );
        assert!(!g.accepts(&bad), "{syntax:?}: not in the enum: {bad}");
        // An opener the call rule does not finish.
        for broken in [
            "<GetWeather>\nhello",
            "<tool_call name=\"GetWeather\">oops",
            "[x]{\"nope\": 1}",
            "[GetWeather(oops)]",
            "[GetWeather(location=Paris)]",
        ] {
            if broken.contains(&written.triggers[0]) {
                assert!(!g.accepts(broken), "{syntax:?}: {broken}");
            }
        }
    }
}

/// A call to a tool no one declared is text under the lazy grammar (and to
/// the parser), never forced into a declared tool's call; the triggers end
/// with a declared name.
#[test]
fn a_call_to_an_undeclared_tool_stays_text() {
    let tools = ToolSet::from_tools(vec![weather()]);
    for (syntax, trigger, other) in [
        (
            Syntax::ToolCall,
            "<tool_call name=\"GetWeather\"",
            "<tool_call name=\"GetTime\">\n{\"zone\": \"UTC\"}\n</tool_call>",
        ),
        (
            Syntax::Bracket,
            "]{\"name\": \"GetWeather\"",
            "[Calling GetTime]{\"name\": \"GetTime\", \"arguments\": {\"zone\": \"UTC\"}}",
        ),
        (
            Syntax::Tag,
            "<GetWeather>",
            "<GetTime>\n```json\n{\"zone\": \"UTC\"}\n```\n</GetTime>",
        ),
        (Syntax::Python, "[GetWeather(", "[GetTime(zone=\"UTC\")]"),
    ] {
        let (written, g) = grammar_of(vec![weather()], syntax, &Policy::default());
        assert_eq!(written.triggers, [trigger], "{syntax:?}");
        assert!(g.accepts(other), "{syntax:?}: {other}");
        let (calls, invalid) = parsed(other, syntax, &tools);
        assert!(calls.is_empty() && !invalid, "{syntax:?}: {calls:?}");
    }
}

#[test]
fn required_and_named_choices_are_calls_only_and_one_call_when_not_parallel() {
    let required = Policy {
        choice: Choice::Required,
        ..Policy::default()
    };
    let (written, g) = grammar_of(vec![weather()], Syntax::ToolCall, &required);
    assert!(!written.lazy);
    let call = rendered(Syntax::ToolCall, "GetWeather", &json!({"location": "Oslo"}));
    assert!(g.accepts(&call));
    assert!(g.accepts(&format!("{call}\n{call}\n")));
    assert!(!g.accepts("I would rather talk."));
    let single = Policy {
        parallel: false,
        ..Policy::default()
    };
    let (_, g) = grammar_of(vec![weather()], Syntax::Tag, &single);
    let call = rendered(Syntax::Tag, "GetWeather", &json!({"location": "Oslo"}));
    assert!(g.accepts(&format!("Sure.\n{call}\nok")));
    assert!(!g.accepts(&format!("{call}\n{call}")));
}

#[test]
fn names_and_keys_are_escaped_and_every_tool_has_its_call() {
    let odd = tool(
        "say\"it",
        json!({"type": "object", "properties": {"a\"b\\c": {"type": "string", "enum": ["x\"y", "z]"]}},
            "required": ["a\"b\\c"]}),
    );
    let tools = vec![
        odd,
        weather(),
        tool("noop", json!({"type": "object", "properties": {}})),
    ];
    for syntax in [
        Syntax::Tag,
        Syntax::ToolCall,
        Syntax::Bracket,
        Syntax::Python,
    ] {
        let (_, g) = grammar_of(tools.clone(), syntax, &Policy::default());
        let call = rendered(syntax, "say\"it", &json!({"a\"b\\c": "x\"y"}));
        assert!(g.accepts(&call), "{syntax:?}: {call}");
        assert!(
            g.accepts(&rendered(syntax, "noop", &json!({}))),
            "{syntax:?}"
        );
    }
}

/// What the grammar admits as a call, the parser reads as that call.
#[test]
fn the_parser_reads_back_what_the_grammar_admits() {
    let tools = ToolSet::from_tools(vec![weather()]);
    let args = json!({"location": "Paris", "unit": "celsius", "days": 2});
    for syntax in [
        Syntax::Tag,
        Syntax::ToolCall,
        Syntax::Bracket,
        Syntax::Python,
    ] {
        let (_, g) = grammar_of(vec![weather()], syntax, &Policy::default());
        let text = format!("Checking.\n{}", rendered(syntax, "GetWeather", &args));
        assert!(g.accepts(&text));
        let (calls, invalid) = parsed(&text, syntax, &tools);
        assert!(!invalid, "{syntax:?}");
        assert_eq!(
            calls,
            vec![("GetWeather".to_owned(), args.clone())],
            "{syntax:?}"
        );
    }
}

// ---- schemas and values ------------------------------------------------------

/// A schema of the subset the grammar models exactly.
fn schema(depth: u32) -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        Just(json!({"type": "string"})),
        Just(json!({"type": "integer"})),
        Just(json!({"type": "number"})),
        Just(json!({"type": "boolean"})),
        Just(json!({"type": "null"})),
        Just(json!({"type": ["string", "null"]})),
        prop::collection::vec("[a-z\"\\\\ ]{1,6}", 1..4)
            .prop_map(|v| json!({"type": "string", "enum": v})),
        Just(json!({"enum": [1, "two", true, null]})),
    ];
    if depth == 0 {
        return leaf.boxed();
    }
    prop_oneof![
        2 => leaf,
        1 => schema(depth - 1).prop_map(|items| json!({"type": "array", "items": items})),
        1 => (prop::collection::btree_map("[a-z_\"]{1,5}", schema(depth - 1), 1..5), any::<u8>())
            .prop_map(|(props, mask)| {
                let required: Vec<&String> = props.keys().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, k)| k).collect();
                json!({"type": "object", "properties": props, "required": required, "additionalProperties": false})
            }),
    ]
    .boxed()
}

/// A value `schema` accepts, from `seed`.
fn valid(schema: &Value, seed: &mut u64) -> Value {
    fn step(seed: &mut u64) -> u64 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *seed >> 33
    }
    let mut next = || step(seed);
    if let Some(Value::Array(values)) = schema.get("enum") {
        return values[next() as usize % values.len()].clone();
    }
    let kind = match &schema["type"] {
        Value::Array(kinds) => kinds[next() as usize % kinds.len()]
            .as_str()
            .unwrap()
            .to_owned(),
        kind => kind.as_str().unwrap().to_owned(),
    };
    match kind.as_str() {
        "string" => {
            let pool = [
                "",
                "a",
                "Paris \"quoted\"",
                "back\\slash",
                "line\nbreak",
                "tab\t",
                "é☀",
                "\u{1}ctl",
                "\u{7f}del",
            ];
            json!(pool[next() as usize % pool.len()])
        }
        "integer" => json!(next() as i64 - (1 << 30)),
        "number" => {
            let pool = [0.5, -2.25, 1e300, 3.0, -1e-7, 12345.678];
            json!(pool[next() as usize % pool.len()])
        }
        "boolean" => json!(next().is_multiple_of(2)),
        "null" => Value::Null,
        "array" => Value::Array(
            (0..next() % 3)
                .map(|_| valid(&schema["items"], seed))
                .collect(),
        ),
        "object" => {
            let required: Vec<&str> = schema["required"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect();
            let mut out = Map::new();
            for (k, sub) in schema["properties"].as_object().unwrap() {
                if required.contains(&k.as_str()) || step(seed).is_multiple_of(2) {
                    out.insert(k.clone(), valid(sub, seed));
                }
            }
            Value::Object(out)
        }
        other => panic!("{other}"),
    }
}

/// A value `schema` rejects, when one can be made from `seed`.
fn invalid(schema: &Value, seed: &mut u64) -> Option<Value> {
    let mut v = valid(schema, seed);
    let object = schema["type"] == "object";
    if object {
        let required = schema["required"].as_array().unwrap();
        if let Some(first) = required.first() {
            v.as_object_mut().unwrap().remove(first.as_str().unwrap());
            return Some(v);
        }
        v.as_object_mut()
            .unwrap()
            .insert("not declared".into(), json!(1));
        return Some(v);
    }
    let wrong = match &schema["type"] {
        Value::String(k) if k == "string" => json!(12),
        Value::String(k) if k == "integer" || k == "number" => json!("12"),
        Value::String(k) if k == "boolean" => json!("true"),
        Value::String(k) if k == "null" => json!(0),
        Value::String(k) if k == "array" => json!({"a": 1}),
        _ if schema.get("enum").is_some() => json!("not one of them"),
        _ => json!({"x": [1]}),
    };
    Some(wrong)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Over generated schemas: every value `jsonschema` accepts is admitted
    /// (compact and pretty-printed, as tool_call and bracket calls write
    /// it), every value it rejects is refused.
    #[test]
    fn the_grammar_admits_exactly_the_values_jsonschema_accepts(
        properties in prop::collection::btree_map("[a-z]{1,4}", schema(2), 1..4),
        mask in any::<u8>(),
        seed in any::<u64>(),
    ) {
        let required: Vec<&String> = properties.keys().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, k)| k).collect();
        let params = json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false});
        let validator = jsonschema::validator_for(&params).unwrap();
        let mut rules = Rules::default();
        schema::add_value(&mut rules, &mut schema::Shared::default(), "root", &params);
        let g = Grammar::parse(&rules.text());
        let mut seed = seed;
        for _ in 0..4 {
            let good = valid(&params, &mut seed);
            prop_assert!(validator.is_valid(&good), "{good}");
            for text in [good.to_string(), serde_json::to_string_pretty(&good).unwrap()] {
                prop_assert!(g.accepts(&text), "refused a valid value {text}\n{}", rules.text());
            }
            if let Some(bad) = invalid(&params, &mut seed) {
                prop_assert!(!validator.is_valid(&bad), "{bad}");
                prop_assert!(!g.accepts(&bad.to_string()), "admitted an invalid value {bad}\n{}", rules.text());
            }
        }
    }
}

/// Applied lazily, llama.cpp feeds the grammar from the trigger's first
/// character on: the grammar must read every answer from there too.
#[test]
fn the_grammar_reads_an_answer_from_its_trigger_on() {
    for syntax in [
        Syntax::Tag,
        Syntax::ToolCall,
        Syntax::Bracket,
        Syntax::Python,
    ] {
        for parallel in [true, false] {
            let policy = Policy {
                parallel,
                ..Policy::default()
            };
            let (written, g) = grammar_of(vec![weather()], syntax, &policy);
            let call = rendered(syntax, "GetWeather", &json!({"location": "Paris"}));
            let mut answers = vec![format!("Let me look.\n{call}\nThat is all.")];
            if parallel {
                answers.push(format!("Two: {call}\n{call}"));
            }
            for answer in answers {
                assert!(g.accepts(&answer), "{syntax:?}: {answer}");
                let at = written
                    .triggers
                    .iter()
                    .filter_map(|t| answer.find(t.as_str()))
                    .min()
                    .expect("a trigger");
                assert!(
                    g.accepts(&answer[at..]),
                    "{syntax:?} from the trigger: {}",
                    &answer[at..]
                );
            }
        }
    }
}

/// The parser reads an object right after a bracket call as the next call:
/// the grammar holds it to a schema, or refuses it.
#[test]
fn after_a_bracket_call_an_object_is_a_valid_call_or_nothing() {
    let (_, g) = grammar_of(vec![weather()], Syntax::Bracket, &Policy::default());
    let call = rendered(Syntax::Bracket, "GetWeather", &json!({"location": "Paris"}));
    let next = r#"{"name": "GetWeather", "arguments": {"location": "Rome"}}"#;
    for sep in ["", "\n", ", ", " ,\n "] {
        assert!(g.accepts(&format!("{call}{sep}{next} Done.")), "{sep:?}");
        assert!(
            !g.accepts(&format!(
                "{call}{sep}{{\"name\": \"GetWeather\", \"arguments\": {{}}}}"
            )),
            "{sep:?}"
        );
        assert!(!g.accepts(&format!("{call}{sep}{{\"x\": 1}}")), "{sep:?}");
    }
    assert!(g.accepts(&format!("{call}\n\nThe weather is {{sunny}}.")));
    let single = Policy {
        parallel: false,
        ..Policy::default()
    };
    let (_, g) = grammar_of(vec![weather()], Syntax::Bracket, &single);
    assert!(g.accepts(&format!("{call} Done.")));
    assert!(!g.accepts(&format!("{call}\n{next}")));
}

/// A tag-style block holds one argument object and then closes (a model
/// allowed more repeats the object until its tokens run out); several
/// calls are several blocks, which the parser reads as such. After a
/// block, an object is refused rather than lost to text.
#[test]
fn tag_blocks_close_after_one_object_and_no_object_follows_a_call() {
    let tools = ToolSet::from_tools(vec![weather()]);
    for syntax in [Syntax::Tag, Syntax::ToolCall] {
        let (_, g) = grammar_of(vec![weather()], syntax, &Policy::default());
        let call = rendered(syntax, "GetWeather", &json!({"location": "Paris"}));
        let rome = rendered(syntax, "GetWeather", &json!({"location": "Rome"}));
        let in_one = call.replacen("\"Paris\"\n}", "\"Paris\"\n}\n{\"location\": \"Rome\"}", 1);
        assert!(!g.accepts(&in_one), "{syntax:?}: {in_one}");
        let blocks = format!("{call}\n{rome}");
        assert!(g.accepts(&blocks), "{syntax:?}: {blocks}");
        let (calls, invalid) = parsed(&blocks, syntax, &tools);
        assert!(!invalid);
        assert_eq!(calls.len(), 2, "{syntax:?}: {calls:?}");
        assert!(
            !g.accepts(&format!("{call}\n{{\"location\": \"Rome\"}}")),
            "{syntax:?}"
        );
        assert!(g.accepts(&format!("{call}\nChecking {{x}}.")), "{syntax:?}");
        let single = Policy {
            parallel: false,
            ..Policy::default()
        };
        let (_, g) = grammar_of(vec![weather()], syntax, &single);
        assert!(!g.accepts(&blocks), "{syntax:?}: one call only");
    }
}

/// The fence is optional in a tag-style block, as the parser reads it: a
/// model that fences its arguments (or does not) is not pushed elsewhere.
#[test]
fn tag_blocks_take_their_arguments_fenced_or_not() {
    let tools = ToolSet::from_tools(vec![weather()]);
    let args = r#"{"location": "Paris"}"#;
    for (syntax, text) in [
        (
            Syntax::ToolCall,
            format!("<tool_call name=\"GetWeather\">\n```json\n{args}\n```\n</tool_call>"),
        ),
        (
            Syntax::ToolCall,
            format!("<tool_call name=\"GetWeather\">{args}</tool_call>"),
        ),
        (
            Syntax::ToolCall,
            format!("<tool_call name=\"GetWeather\">\n{args}\n```\n</tool_call>"),
        ),
        (Syntax::Tag, format!("<GetWeather>{args}</GetWeather>")),
        (
            Syntax::Tag,
            format!("<GetWeather>\n```\n{args}\n```\n</GetWeather>"),
        ),
    ] {
        let (_, g) = grammar_of(vec![weather()], syntax, &Policy::default());
        assert!(g.accepts(&text), "{syntax:?}: {text}");
        let (calls, invalid) = parsed(&text, syntax, &tools);
        assert!(
            !invalid && calls.len() == 1,
            "{syntax:?}: {text}: {calls:?}"
        );
    }
}

// ---- hostile schemas -----------------------------------------------------------

/// The issue's 1 KB request: each level's `type` names `object` four times,
/// twelve levels deep. Written once per distinct subschema, it is a handful
/// of rules, and the values it admits are still the schema's.
fn type_bomb(levels: usize, repeats: usize) -> Value {
    let mut n = json!({"type": "string"});
    for _ in 0..levels {
        n = json!({"type": vec!["object"; repeats], "properties": {"a": n}});
    }
    n
}

#[test]
fn repeated_types_and_shared_subschemas_are_written_once() {
    let tools = vec![tool("d", type_bomb(12, 4))];
    let (written, g) = grammar_of(tools, Syntax::Tag, &Policy::default());
    let lines = written.gbnf.lines().count();
    assert!(lines < 120, "{lines} rules:\n{}", written.gbnf);
    let mut value = json!("deep");
    for _ in 0..12 {
        value = json!({"a": value});
    }
    // Written compactly (pretty-printed, twelve levels indent past the
    // grammar's bounded whitespace).
    let call = |args: &Value| format!("<d>\n{args}\n</d>");
    assert!(g.accepts(&call(&value)));
    assert!(!g.accepts(&call(&json!({"b": 1}))));
    assert!(!g.accepts(&call(&json!({"a": {"a": 1}}))));

    // Two tools with equal parameters share one rule for them.
    let params =
        json!({"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]});
    let (written, g) = grammar_of(
        vec![tool("one", params.clone()), tool("two", params)],
        Syntax::ToolCall,
        &Policy::default(),
    );
    assert!(!written.gbnf.contains("args-1 ::="), "{}", written.gbnf);
    for name in ["one", "two"] {
        assert!(g.accepts(&rendered(Syntax::ToolCall, name, &json!({"x": 3}))));
        assert!(!g.accepts(&rendered(Syntax::ToolCall, name, &json!({"x": "3"}))));
    }
}

#[test]
fn a_grammar_over_its_budget_is_refused_naming_the_tool() {
    // Every property distinct: no sharing helps, so the nodes add up.
    let properties: Map<String, Value> = (0..2_000)
        .map(|i| {
            (
                format!("p{i}"),
                json!({"type": "string", "enum": [format!("v{i}")]}),
            )
        })
        .collect();
    let big = json!({"type": "object", "properties": properties});
    let tools = ToolSet::from_tools(vec![weather(), tool("big", big)]);
    let budget = Budget {
        nodes: 1_000,
        ..Budget::DEFAULT
    };
    let err = within(&tools, Syntax::Tag, &Policy::default(), budget).expect_err("over");
    assert_eq!(err.param(), Some("tools"));
    let message = err.to_string();
    assert!(
        message.contains("'big'") && message.contains("1000 schema nodes"),
        "{message}"
    );
    for (budget, limit) in [
        (
            Budget {
                rules: 500,
                ..Budget::DEFAULT
            },
            "500 rules",
        ),
        (
            Budget {
                bytes: 20_000,
                ..Budget::DEFAULT
            },
            "20000 bytes",
        ),
    ] {
        let err = within(&tools, Syntax::Tag, &Policy::default(), budget).expect_err(limit);
        assert!(err.to_string().contains(limit), "{err}");
    }
    // The default budget takes it.
    assert!(within(&tools, Syntax::Tag, &Policy::default(), Budget::DEFAULT).is_ok());
}

/// A declared name or key with the characters older llama.cpp parsers
/// refuse escaped (`-`, `^` in a class): the recognizer above panics on
/// any escape outside their set, so every grammar the tests read is held
/// to it.
#[test]
fn escapes_are_the_ones_every_llama_cpp_release_reads() {
    let odd = tool(
        "get-weather",
        json!({"type": "object", "properties": {"a-b^c": {"type": "string", "enum": ["x-y^z", "[q]"]}},
            "required": ["a-b^c"]}),
    );
    for syntax in [
        Syntax::Tag,
        Syntax::ToolCall,
        Syntax::Bracket,
        Syntax::Python,
    ] {
        let (written, g) = grammar_of(vec![odd.clone(), weather()], syntax, &Policy::default());
        let chars: Vec<char> = written.gbnf.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            if chars[i] == '\\' {
                assert!(
                    "xuUtrn\\\"[]".contains(chars[i + 1]),
                    "{syntax:?}: \\{} in\n{}",
                    chars[i + 1],
                    written.gbnf
                );
                i += 1;
            }
            i += 1;
        }
        let call = rendered(syntax, "get-weather", &json!({"a-b^c": "x-y^z"}));
        assert!(g.accepts(&format!("Sure.\n{call}")), "{syntax:?}");
        // Text may hold the name, just not the opener.
        assert!(g.accepts("get-weather is a tool ^-^"), "{syntax:?}");
    }
}

/// A schema an attacker might write: deep, with repeated and varied `type`
/// arrays, `anyOf` lists, arrays of the same, and subtrees repeated.
fn hostile(depth: u32) -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        Just(json!({"type": "string"})),
        Just(json!({"type": ["integer", "integer", "null"]})),
        Just(json!({"enum": ["a-b", "^", "]", "\\"]})),
        Just(json!(true)),
    ];
    leaf.prop_recursive(depth, 256, 6, |inner| {
        prop_oneof![
            (inner.clone(), 1usize..8).prop_map(|(n, k)| json!({
                "type": vec!["object"; k], "properties": {"a": n.clone(), "b": n}, "required": ["a"]
            })),
            (inner.clone(), 1usize..6).prop_map(|(n, k)| json!({
                "type": ["array", "object", "array"], "items": n.clone(),
                "properties": {"x": n.clone()}, "anyOf": vec![n; k]
            })),
            prop::collection::vec(inner.clone(), 1..5).prop_map(|options| json!({"anyOf": options})),
            inner.prop_map(|n| json!({"type": "array", "items": {"type": ["object", "object"], "properties": {"i": n}}})),
        ]
    })
    .boxed()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Whatever the schema, the grammar is written within the budget or
    /// refused, and its text grows at most linearly with the schema's.
    #[test]
    fn hostile_schemas_cost_at_most_their_size(schema in hostile(10), syntax_at in 0usize..4) {
        let syntax = [Syntax::Tag, Syntax::ToolCall, Syntax::Bracket, Syntax::Python][syntax_at];
        let params = json!({"type": "object", "properties": {"p": schema}});
        let input = params.to_string().len();
        let tools = ToolSet::from_tools(vec![tool("t", params)]);
        match for_tools(&tools, syntax, &Policy::default()) {
            Ok(Some(written)) => {
                prop_assert!(written.gbnf.len() <= Budget::DEFAULT.bytes);
                prop_assert!(
                    written.gbnf.len() <= 40 * input + 4_096,
                    "{} bytes of grammar for {input} of schema", written.gbnf.len()
                );
                Grammar::parse(&written.gbnf);
            }
            Ok(None) => prop_assert!(false, "no grammar"),
            Err(err) => prop_assert!(err.to_string().contains("'t'"), "{err}"),
        }
    }
}

// ---- the python syntax ----------------------------------------------------------

/// A list holds every call of a reply (one, unless parallel); text around
/// it is free, `[` included, and after `tool_choice: "required"` the
/// answer is one list.
#[test]
fn python_calls_are_one_list_of_keyword_calls() {
    let tools = ToolSet::from_tools(vec![weather()]);
    let (written, g) = grammar_of(vec![weather()], Syntax::Python, &Policy::default());
    assert!(written.lazy);
    assert_eq!(written.triggers, ["[GetWeather("]);
    let two =
        r#"[GetWeather(location="Paris", unit="celsius"), GetWeather(location="Rome", days=2)]"#;
    for text in [
        format!("Both.\n{two}\nDone [1]."),
        "See [1] and [GetWeather] or [x](y).".to_owned(),
        r#"[GetWeather(location="a\"b\\c\u0001")]"#.to_owned(),
    ] {
        assert!(g.accepts(&text), "refused: {text}");
    }
    let (calls, invalid) = parsed(two, Syntax::Python, &tools);
    assert!(!invalid);
    assert_eq!(calls.len(), 2, "{calls:?}");
    for bad in [
        r#"[GetWeather(location=Paris)]"#,
        r#"[GetWeather("Paris")]"#,
        r#"[GetWeather(location="Paris", unit="kelvin")]"#,
        r#"[GetWeather(location="Paris", days="2")]"#,
        r#"[GetWeather(location="Paris", days=true)]"#,
        r#"[GetWeather(unit="celsius")]"#,
        r#"[GetWeather(location="Paris", extra=1)]"#,
        r#"[GetWeather(location="Paris") GetWeather(location="Rome")]"#,
        r#"[GetWeather(location="a\/b")]"#,
    ] {
        assert!(!g.accepts(bad), "admitted: {bad}");
    }
    let single = Policy {
        parallel: false,
        ..Policy::default()
    };
    let (_, g) = grammar_of(vec![weather()], Syntax::Python, &single);
    assert!(g.accepts(r#"Sure. [GetWeather(location="Paris")] ok"#));
    assert!(!g.accepts(two));
    let required = Policy {
        choice: Choice::Required,
        ..Policy::default()
    };
    let (written, g) = grammar_of(vec![weather()], Syntax::Python, &required);
    assert!(!written.lazy);
    assert!(g.accepts(two));
    assert!(!g.accepts(&format!("Sure. {two}")));
    assert!(!g.accepts(&format!("{two}\n{two}")));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// The python syntax's keyword arguments over generated schemas: every
    /// value `jsonschema` accepts, written as the syntax writes a call, is
    /// admitted; every value it rejects is refused.
    #[test]
    fn python_keyword_arguments_admit_exactly_what_jsonschema_accepts(
        properties in prop::collection::btree_map("[a-z]{1,4}|[a-z]-[a-z]", schema(2), 1..4),
        mask in any::<u8>(),
        seed in any::<u64>(),
    ) {
        let required: Vec<&String> = properties.keys().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, k)| k).collect();
        let params = json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false});
        let validator = jsonschema::validator_for(&params).unwrap();
        let mut rules = Rules::default();
        let args = schema::add_kwargs(&mut rules, &mut schema::Shared::python(), "args", &params);
        rules.add("root", format!(r#""t(" {args} ")""#));
        let g = Grammar::parse(&rules.text());
        let mut seed = seed;
        let call = |value: &Value| {
            let mut out = String::new();
            crate::natural::syntax::python::write_call("t", value, &mut out);
            out
        };
        for _ in 0..4 {
            let good = valid(&params, &mut seed);
            prop_assert!(validator.is_valid(&good), "{good}");
            prop_assert!(g.accepts(&call(&good)), "refused a valid value {}\n{}", call(&good), rules.text());
            if let Some(bad) = invalid(&params, &mut seed) {
                prop_assert!(!validator.is_valid(&bad), "{bad}");
                prop_assert!(!g.accepts(&call(&bad)), "admitted an invalid value {}\n{}", call(&bad), rules.text());
            }
        }
    }
}
