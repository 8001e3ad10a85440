//! The names gateway tools are offered under: what models accept as a
//! function name (`^[A-Za-z0-9_-]{1,64}$`, OpenAI's rule), made from an MCP
//! server's own tool names and the server's `prefix`. Pure.

pub use crate::config::vocabulary::tool_names::{MAX_LEN, allowed, is_valid, is_valid_fragment};

/// The name an MCP tool is offered under: `prefix` + the tool's name with
/// every other character replaced by `_`. A result over 64 bytes keeps its
/// first 55 bytes and ends with `_` and 8 hex digits of a hash of the raw
/// name, so it stays unique and the same across restarts.
pub fn qualify(prefix: &str, raw: &str) -> String {
    let mut name = String::with_capacity(prefix.len() + raw.len());
    name.push_str(prefix);
    // One `_` per replaced character, so the name is ASCII and cut anywhere.
    name.extend(raw.chars().map(|c| {
        if c.is_ascii() && allowed(c as u8) {
            c
        } else {
            '_'
        }
    }));
    if name.is_empty() {
        name.push('_');
    }
    if name.len() > MAX_LEN {
        let hash = fnv1a(format!("{prefix}{raw}").as_bytes());
        name.truncate(MAX_LEN - 9);
        name.push_str(&format!("_{:08x}", hash as u32));
    }
    name
}

/// FNV-1a: a stable hash (std's hasher is seeded per process).
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validity() {
        for ok in ["a", "get_current_time", "get-sum", "X9", &"a".repeat(64)] {
            assert!(is_valid(ok), "{ok}");
        }
        for bad in ["", "a b", "a.b", "héllo", "a'b", "a[b]", &"a".repeat(65)] {
            assert!(!is_valid(bad), "{bad}");
        }
    }

    #[test]
    fn qualify_table() {
        let cases = [
            ("", "get_current_time", "get_current_time"),
            ("time_", "get_current_time", "time_get_current_time"),
            ("", "get-sum", "get-sum"),
            ("", "files.read", "files_read"),
            ("", "météo", "m_t_o"),
            ("", "", "_"),
        ];
        for (prefix, raw, want) in cases {
            assert_eq!(qualify(prefix, raw), want, "{prefix:?} {raw:?}");
        }
    }

    #[test]
    fn long_names_are_cut_with_a_stable_hash() {
        let raw = "x".repeat(100);
        let a = qualify("p_", &raw);
        assert_eq!(a.len(), MAX_LEN);
        assert!(is_valid(&a), "{a}");
        assert_eq!(a, qualify("p_", &raw), "stable");
        let b = qualify("p_", &format!("{raw}y"));
        assert_ne!(a, b, "different raw names stay different");
        assert_eq!(&a[..55], &b[..55]);
    }
}
