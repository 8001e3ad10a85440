//! Bracket syntax: `[short description]{"name": "Tool", "arguments": {...}}`.
//!
//! The description is always shown to the user, call or not, so it is never
//! held back: the parser only remembers (in [`Desc`]) that the text it just
//! released was a plausible `[description]`. A `{` *immediately* after the
//! `]` starts a [`JsonBlock`](crate::natural::parser::json_call::JsonBlock)
//! that holds the JSON object until it closes and decides what it is; a
//! call's `raw` is the JSON only. JSON that breaks is cut just before the
//! offending byte, which is then parsed as text.

/// Longest accepted description, in bytes; longer bracketed text is prose.
pub(crate) const MAX_DESC: usize = 200;

/// What the text released so far says about a possible description.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Desc {
    /// Not inside brackets.
    #[default]
    Outside,
    /// After a `[`, with this many description bytes so far.
    Inside(usize),
    /// Right after the `]` of a description.
    Closed,
    /// After a call's JSON object: spaces, line breaks and a comma may come
    /// before the next call's object, as models write several calls after
    /// one description (`[…]{…}{…}`, or one object a line).
    AfterCall,
}
