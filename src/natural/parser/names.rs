//! The set of declared tool names and cheap prefix matching against it.
//!
//! Opening tags are checked on every `<` in the prose, so matching must reject
//! the common case (a `<` not followed by the first byte of any name) with one
//! table lookup.

/// Declared tool names, sorted and deduplicated.
#[derive(Debug, Clone)]
pub(crate) struct ToolNames {
    names: Vec<String>,
    first: [bool; 256],
    /// The length of the longest name.
    longest: usize,
}

/// How a byte string relates to the declared names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NameMatch {
    /// No declared name starts with these bytes (followed by the terminator).
    No,
    /// The bytes are a proper prefix of `name + terminator` for some name.
    Partial,
    /// `name + terminator` is a prefix of the bytes; `len` is the name length.
    Full { index: usize, len: usize },
}

impl ToolNames {
    /// Keeps only names that can appear inside a tag: non-empty and free of
    /// `<`, `>`, quotes, backticks and whitespace. Such names could never be
    /// written unambiguously, and excluding them keeps the opener grammar simple
    /// (a held opener then contains no second `<`).
    pub(crate) fn new<I, S>(names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut list: Vec<String> = names
            .into_iter()
            .map(|s| s.as_ref().to_owned())
            .filter(|n| {
                !n.is_empty()
                    && !n.bytes().any(|b| {
                        matches!(b, b'<' | b'>' | b'"' | b'\'' | b'`' | b'[' | b']')
                            || b.is_ascii_whitespace()
                    })
            })
            .collect();
        list.sort();
        list.dedup();
        let mut first = [false; 256];
        for n in &list {
            if let Some(&b) = n.as_bytes().first() {
                first[usize::from(b)] = true;
            }
        }
        let longest = list.iter().map(String::len).max().unwrap_or(0);
        ToolNames {
            names: list,
            first,
            longest,
        }
    }

    pub(crate) fn get(&self, index: usize) -> Option<&str> {
        self.names.get(index).map(String::as_str)
    }

    pub(crate) fn contains(&self, name: &str) -> bool {
        self.names
            .binary_search_by(|n| n.as_str().cmp(name))
            .is_ok()
    }

    pub(crate) fn longest(&self) -> usize {
        self.longest
    }

    /// Matches `bytes` against `name + terminator` for every declared name.
    pub(crate) fn match_prefix(&self, bytes: &[u8], terminator: u8) -> NameMatch {
        let Some(&b0) = bytes.first() else {
            return if self.names.is_empty() {
                NameMatch::No
            } else {
                NameMatch::Partial
            };
        };
        if !self.first[usize::from(b0)] {
            return NameMatch::No;
        }
        // Names never contain a terminator (see `new`), so `bytes` can only
        // fully match the one name before its first terminator; otherwise it
        // matches partially when some name starts with it. Both are binary
        // searches in the sorted list: O(log n) however many tools there are.
        // Only the first `longest + 1` bytes can matter: look no further, or
        // prose without a terminator would be scanned to its end on every `<`.
        let window = &bytes[..bytes.len().min(self.longest + 1)];
        if let Some(end) = window.iter().position(|&b| b == terminator) {
            let candidate = &bytes[..end];
            return match self.names.binary_search_by(|n| n.as_bytes().cmp(candidate)) {
                Ok(index) => NameMatch::Full { index, len: end },
                Err(_) => NameMatch::No,
            };
        }
        if bytes.len() > self.longest {
            return NameMatch::No;
        }
        let at = self.names.partition_point(|n| n.as_bytes() < bytes);
        match self.names.get(at) {
            Some(name) if name.as_bytes().starts_with(bytes) => NameMatch::Partial,
            _ => NameMatch::No,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_and_matches() {
        let names = ToolNames::new(["GetWeather", "Get", "bad name", "", "a<b"]);
        assert!(names.contains("Get"));
        assert!(!names.contains("bad name"));
        assert_eq!(names.match_prefix(b"Ge", b'>'), NameMatch::Partial);
        assert_eq!(
            names.match_prefix(b"Get>", b'>'),
            NameMatch::Full { index: 0, len: 3 }
        );
        assert_eq!(names.match_prefix(b"GetW", b'>'), NameMatch::Partial);
        assert_eq!(names.match_prefix(b"GetX", b'>'), NameMatch::No);
        assert_eq!(names.match_prefix(b"x", b'>'), NameMatch::No);
        assert_eq!(names.match_prefix(b"", b'>'), NameMatch::Partial);
        assert_eq!(
            ToolNames::new(Vec::<String>::new()).match_prefix(b"", b'>'),
            NameMatch::No
        );
    }
}
