//! Who reads the transcripts: a key's view of them.

use std::sync::Arc;

/// Who reads the transcripts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Viewer {
    /// An admin key: every tenant's chats.
    Admin,
    /// A client key (or, without `[server.auth]`, anyone): this tenant's.
    Tenant(Arc<str>),
}

impl Viewer {
    /// Whether a chat of `owner`'s is this viewer's to see.
    pub fn sees(&self, owner: &str) -> bool {
        match self {
            Viewer::Admin => true,
            Viewer::Tenant(name) => **name == *owner,
        }
    }
}
