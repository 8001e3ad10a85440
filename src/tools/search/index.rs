//! BM25 over a tool list: each tool a document of its name's words
//! (weighted), its description's and its parameters' names; queries and
//! documents go through the same word splitting (snake_case, kebab-case,
//! camelCase, digits) and the same light suffix folding.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use serde_json::Value;

/// BM25's term-frequency saturation.
const K1: f32 = 1.2;
/// BM25's length normalisation.
const B: f32 = 0.75;
/// A word of the name counts as this many words of the description.
const NAME_WEIGHT: f32 = 3.0;
/// A parameter's name counts as this many words of the description.
const PARAMETER_WEIGHT: f32 = 1.5;
/// Added when the query names the tool exactly.
const EXACT_NAME_BONUS: f32 = 10.0;
/// Distinct tool lists whose index is kept.
const CACHED: usize = 8;

/// What is indexed of one tool.
pub struct Document<'a> {
    pub name: &'a str,
    pub description: &'a str,
    /// Its arguments' schema; the names of its properties are indexed.
    pub parameters: Option<&'a Value>,
}

/// The index of one tool list; documents are numbered in list order.
#[derive(Debug)]
pub struct Index {
    /// Term → (document, weighted term frequency).
    postings: HashMap<String, Vec<(u32, f32)>>,
    /// Each document's weighted length.
    lengths: Vec<f32>,
    average: f32,
    /// Each document's name, lowercased, for exact matches.
    names: Vec<String>,
}

impl Index {
    pub fn build<'a>(documents: impl IntoIterator<Item = Document<'a>>) -> Index {
        let mut postings: HashMap<String, Vec<(u32, f32)>> = HashMap::new();
        let mut lengths = Vec::new();
        let mut names = Vec::new();
        let mut counts: HashMap<String, f32> = HashMap::new();
        for (n, doc) in documents.into_iter().enumerate() {
            counts.clear();
            let mut add = |text: &str, weight: f32| {
                for_each_term(text, |term| *counts.entry(term).or_default() += weight);
            };
            add(doc.name, NAME_WEIGHT);
            add(doc.description, 1.0);
            if let Some(Value::Object(properties)) =
                doc.parameters.and_then(|p| p.get("properties"))
            {
                for key in properties.keys() {
                    add(key, PARAMETER_WEIGHT);
                }
            }
            lengths.push(counts.values().sum());
            names.push(doc.name.to_lowercase());
            for (term, tf) in counts.drain() {
                postings.entry(term).or_default().push((n as u32, tf));
            }
        }
        let average = if lengths.is_empty() {
            1.0
        } else {
            (lengths.iter().sum::<f32>() / lengths.len() as f32).max(1.0)
        };
        Index {
            postings,
            lengths,
            average,
            names,
        }
    }

    /// Documents indexed.
    pub fn len(&self) -> usize {
        self.lengths.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lengths.is_empty()
    }

    /// The best `limit` documents for `query`, best first (ties in list
    /// order); only documents that share a term with it, or that it names.
    pub fn search(&self, query: &str, limit: usize) -> Vec<usize> {
        let mut scores: HashMap<u32, f32> = HashMap::new();
        let mut terms = Vec::new();
        for_each_term(query, |t| {
            if !terms.contains(&t) {
                terms.push(t);
            }
        });
        let n = self.len() as f32;
        for term in &terms {
            let Some(list) = self.postings.get(term) else {
                continue;
            };
            let df = list.len() as f32;
            let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
            for &(doc, tf) in list {
                let norm = 1.0 - B + B * self.lengths[doc as usize] / self.average;
                *scores.entry(doc).or_default() += idf * tf * (K1 + 1.0) / (tf + K1 * norm);
            }
        }
        let lowered = query.to_lowercase();
        for word in lowered.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-')) {
            if word.is_empty() {
                continue;
            }
            for (doc, name) in self.names.iter().enumerate() {
                if name == word {
                    *scores.entry(doc as u32).or_default() += EXACT_NAME_BONUS;
                }
            }
        }
        let mut ranked: Vec<(u32, f32)> = scores.into_iter().filter(|&(_, s)| s > 0.0).collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        ranked
            .into_iter()
            .take(limit)
            .map(|(doc, _)| doc as usize)
            .collect()
    }
}

/// Indexes of the tool lists seen last, by a hash of what they index: a
/// list's index is built when the list changes, not per request.
#[derive(Debug, Default)]
pub struct IndexCache {
    entries: Mutex<Vec<(u64, Arc<Index>)>>,
}

impl IndexCache {
    /// The index of `documents`, built now unless the same list was seen.
    pub fn get<'a>(&self, documents: &[Document<'a>]) -> Arc<Index> {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        for doc in documents {
            doc.name.hash(&mut hasher);
            doc.description.hash(&mut hasher);
            if let Some(Value::Object(p)) = doc.parameters.and_then(|p| p.get("properties")) {
                p.keys().for_each(|k| k.hash(&mut hasher));
            }
            0xffu8.hash(&mut hasher);
        }
        let key = hasher.finish();
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(at) = entries.iter().position(|(k, _)| *k == key) {
            let entry = entries.remove(at);
            let index = entry.1.clone();
            entries.push(entry);
            return index;
        }
        drop(entries);
        let index = Arc::new(Index::build(documents.iter().map(|d| Document {
            name: d.name,
            description: d.description,
            parameters: d.parameters,
        })));
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if entries.len() >= CACHED {
            entries.remove(0);
        }
        entries.push((key, index.clone()));
        index
    }
}

/// Words too common in tool descriptions and requests to tell tools apart.
const STOP: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "can", "do", "for", "from", "how", "i", "in",
    "is", "it", "its", "me", "my", "of", "on", "or", "please", "that", "the", "this", "to", "tool",
    "use", "what", "which", "with", "you", "your",
];

/// Calls `f` with each term of `text`: words split at non-alphanumerics and
/// at camelCase and letter-digit boundaries, lowercased, stop words left
/// out, plurals and common verb endings folded.
fn for_each_term(text: &str, mut f: impl FnMut(String)) {
    for word in text.split(|c: char| !c.is_alphanumeric()) {
        let mut start = 0;
        let chars: Vec<(usize, char)> = word.char_indices().collect();
        for i in 1..=chars.len() {
            let boundary = match (chars.get(i - 1), chars.get(i)) {
                (_, None) => true,
                (Some(&(_, a)), Some(&(_, b))) => {
                    (a.is_lowercase() && b.is_uppercase())
                        || (a.is_alphabetic() != b.is_alphabetic())
                        // "HTTPServer": the last capital starts a word.
                        || (a.is_uppercase()
                            && b.is_uppercase()
                            && chars.get(i + 1).is_some_and(|&(_, c)| c.is_lowercase()))
                }
                _ => false,
            };
            if boundary {
                let end = chars.get(i).map_or(word.len(), |&(at, _)| at);
                let piece = word[start..end].to_lowercase();
                start = end;
                if !piece.is_empty() && !STOP.contains(&piece.as_str()) {
                    f(fold(piece));
                }
            }
        }
    }
}

/// Light suffix folding, the same for queries and tools: "forecasts" and
/// "forecast", "searching" and "search", "cities" and "city".
fn fold(mut word: String) -> String {
    let len = word.chars().count();
    if len > 4 && word.ends_with("ies") {
        word.truncate(word.len() - 3);
        word.push('y');
    } else if len > 5 && word.ends_with("ing") {
        word.truncate(word.len() - 3);
    } else if len > 4 && word.ends_with("ed") && !word.ends_with("eed") {
        word.truncate(word.len() - 2);
    } else if len > 3 && word.ends_with('s') && !word.ends_with("ss") && !word.ends_with("us") {
        word.truncate(word.len() - 1);
    }
    word
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn terms(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        for_each_term(text, |t| out.push(t));
        out
    }

    #[test]
    fn words_are_split_and_folded_the_same_way_everywhere() {
        assert_eq!(terms("get_current_weather"), ["get", "current", "weather"]);
        assert_eq!(terms("getCurrentWeather"), ["get", "current", "weather"]);
        assert_eq!(
            terms("HTTPServer2Status"),
            ["http", "server", "2", "status"]
        );
        assert_eq!(
            terms("Searching the cities' forecasts"),
            ["search", "city", "forecast"]
        );
        assert_eq!(terms("the a of"), Vec::<String>::new());
    }

    fn catalog() -> Vec<(String, String, Value)> {
        let mut tools = vec![
            (
                "get_weather".to_owned(),
                "Current weather for a city.".to_owned(),
                json!({"properties": {"city": {}}}),
            ),
            (
                "create_issue".to_owned(),
                "Opens an issue in a repository.".to_owned(),
                json!({"properties": {"repo": {}, "title": {}}}),
            ),
            (
                "send_email".to_owned(),
                "Sends an email message to a recipient.".to_owned(),
                json!({"properties": {"to": {}, "subject": {}}}),
            ),
        ];
        for i in 0..200 {
            tools.push((
                format!("tool_{i}"),
                format!("Does thing number {i} with records."),
                json!({"properties": {"record_id": {}}}),
            ));
        }
        tools
    }

    fn index(tools: &[(String, String, Value)]) -> Index {
        Index::build(tools.iter().map(|(n, d, p)| Document {
            name: n,
            description: d,
            parameters: Some(p),
        }))
    }

    #[test]
    fn the_right_tool_ranks_first() {
        let tools = catalog();
        let index = index(&tools);
        assert_eq!(index.len(), 203);
        let first = |q: &str| tools[index.search(q, 5)[0]].0.clone();
        assert_eq!(first("what's the weather in Paris"), "get_weather");
        assert_eq!(first("open a new issue in the repo"), "create_issue");
        assert_eq!(first("email my boss"), "send_email");
        assert_eq!(first("send_email"), "send_email");
        assert_eq!(first("tool_117"), "tool_117");
        assert!(index.search("zebra", 5).is_empty());
        assert_eq!(index.search("records", 3).len(), 3);
    }

    #[test]
    fn the_cache_builds_once_per_list() {
        let tools = catalog();
        let docs: Vec<Document> = tools
            .iter()
            .map(|(n, d, p)| Document {
                name: n,
                description: d,
                parameters: Some(p),
            })
            .collect();
        let cache = IndexCache::default();
        let a = cache.get(&docs);
        let b = cache.get(&docs);
        assert!(Arc::ptr_eq(&a, &b));
        let c = cache.get(&docs[..10]);
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(c.len(), 10);
        // Bounded: after CACHED other lists, the first is built again.
        for n in 11..11 + CACHED {
            cache.get(&docs[..n]);
        }
        assert_eq!(cache.entries.lock().unwrap().len(), CACHED);
        assert!(!Arc::ptr_eq(&a, &cache.get(&docs)));
    }
}
