//! Free text that never contains one of some words (a syntax's openers):
//! a regular language, written as one GBNF rule per state of the automaton
//! that reads the text and knows how much of a word it has just seen (the
//! words' trie, with each state's fallback to the longest suffix that is
//! still a word's start, as Aho and Corasick build it). A character that
//! would complete a word has no way on: the model can write an opener only
//! where the grammar's call rule takes it.
//!
//! The rules are linear in the words' length: a state's rule names only the
//! characters that lead somewhere from it or from a state on its fallback
//! chain (every other character leads back to the start), never the whole
//! alphabet.

use std::collections::BTreeMap;

use super::gbnf::{self, Rules};

/// Adds the rules of text free of every word in `words` (none empty);
/// returns the rule to start from (`{prefix}-0`). Text may end in any
/// state: a word's first characters at the end are text.
pub fn add_text_without(rules: &mut Rules, prefix: &str, words: &[Vec<char>]) -> String {
    let trie = Trie::new(words);
    for state in 0..trie.nodes.len() {
        if trie.nodes[state].word {
            continue;
        }
        rules.add(
            state_name(prefix, state),
            trie.state_body(prefix, state, &[]),
        );
    }
    state_name(prefix, 0)
}

/// After [`add_text_without`] with the same `prefix` and `words`: adds the
/// rule of such text that does not begin with one of `first_not`;
/// returns its name (`{prefix}-start`).
pub fn add_text_not_starting_with(
    rules: &mut Rules,
    prefix: &str,
    words: &[Vec<char>],
    first_not: &[char],
) -> String {
    let trie = Trie::new(words);
    let name = format!("{prefix}-start");
    rules.add(&name, trie.state_body(prefix, 0, first_not));
    name
}

fn state_name(prefix: &str, state: usize) -> String {
    format!("{prefix}-{state}")
}

#[derive(Debug, Default, Clone)]
struct Node {
    next: BTreeMap<char, usize>,
    /// The longest proper suffix of this prefix that is a prefix of a word.
    fail: usize,
    /// A whole word ends here (or a shorter word ends inside it).
    word: bool,
}

struct Trie {
    nodes: Vec<Node>,
}

impl Trie {
    fn new(words: &[Vec<char>]) -> Trie {
        let mut nodes = vec![Node::default()];
        for word in words {
            let mut at = 0;
            for &c in word {
                at = match nodes[at].next.get(&c) {
                    Some(&n) => n,
                    None => {
                        nodes.push(Node::default());
                        let n = nodes.len() - 1;
                        nodes[at].next.insert(c, n);
                        n
                    }
                };
            }
            nodes[at].word = true;
        }
        // Fallbacks, breadth first.
        let mut queue: std::collections::VecDeque<usize> =
            nodes[0].next.values().copied().collect();
        while let Some(at) = queue.pop_front() {
            let children: Vec<(char, usize)> =
                nodes[at].next.iter().map(|(&c, &n)| (c, n)).collect();
            for (c, child) in children {
                let mut f = nodes[at].fail;
                let fail = loop {
                    if let Some(&n) = nodes[f].next.get(&c)
                        && n != child
                    {
                        break n;
                    }
                    if f == 0 {
                        break 0;
                    }
                    f = nodes[f].fail;
                };
                nodes[child].fail = fail;
                if nodes[fail].word {
                    nodes[child].word = true;
                }
                queue.push_back(child);
            }
        }
        Trie { nodes }
    }

    /// The rule body of text read from `state` on: one character (never
    /// one of `excluded`, never one completing a word) and the state it
    /// leads to, or nothing.
    fn state_body(&self, prefix: &str, state: usize, excluded: &[char]) -> String {
        // Characters leaving the root-fallback path, by where they lead:
        // only those some state on the fallback chain reads (any other
        // character leads to the start).
        let mut explicit: BTreeMap<char, Option<usize>> = BTreeMap::new();
        let mut on_chain = state;
        loop {
            for &c in self.nodes[on_chain].next.keys() {
                explicit.entry(c).or_insert_with(|| {
                    let next = self.step(state, c);
                    (!self.nodes[next].word).then_some(next)
                });
            }
            if on_chain == 0 {
                break;
            }
            on_chain = self.nodes[on_chain].fail;
        }
        let mut others: Vec<char> = explicit.keys().copied().collect();
        others.extend(excluded.iter().filter(|c| !explicit.contains_key(c)));
        let mut alternatives = vec![format!(
            "{} {}",
            gbnf::class(&others, true),
            state_name(prefix, 0)
        )];
        // Grouped by target state, so a state's rule stays short.
        let mut by_target: BTreeMap<usize, Vec<char>> = BTreeMap::new();
        for (c, target) in explicit {
            if let Some(t) = target
                && !excluded.contains(&c)
            {
                by_target.entry(t).or_default().push(c);
            }
        }
        for (target, chars) in by_target {
            alternatives.push(format!(
                "{} {}",
                gbnf::class(&chars, false),
                state_name(prefix, target)
            ));
        }
        format!("({})?", alternatives.join(" | "))
    }

    /// Where reading `c` in `state` leads.
    fn step(&self, mut state: usize, c: char) -> usize {
        loop {
            if let Some(&n) = self.nodes[state].next.get(&c) {
                return n;
            }
            if state == 0 {
                return 0;
            }
            state = self.nodes[state].fail;
        }
    }
}
