//! Header hygiene between client and upstream.

use http::HeaderMap;
use http::header::{self, HeaderName};

/// The request id header: accepted from the client, made when absent
/// (`server::layers`), echoed, logged and put on the trace.
pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Hop-by-hop headers (RFC 9110 section 7.6.1) describe one connection, not the
/// message: a proxy must not forward them. `proxy-connection` and `keep-alive`
/// are the pre-standard spellings still sent by some clients.
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
];

/// Removes hop-by-hop headers, including every header the `Connection` header
/// names (RFC 9110 section 7.6.1: "the intermediary MUST remove ... any header
/// fields listed in the Connection header field"), and `Upgrade`.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Most messages carry none: one pass of cheap name comparisons instead
    // of a hashed removal per name.
    if !headers.keys().any(is_hop_by_hop) {
        return;
    }
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::try_from(name.trim()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
    headers.remove(header::UPGRADE);
}

/// `Connection` names only hop-by-hop headers, so without any of these
/// there is nothing to remove.
fn is_hop_by_hop(name: &HeaderName) -> bool {
    *name == header::UPGRADE || HOP_BY_HOP.contains(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_listed_and_named_headers() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, "close, x-secret-hop".parse().unwrap());
        h.insert("x-secret-hop", "1".parse().unwrap());
        h.insert(header::TRANSFER_ENCODING, "chunked".parse().unwrap());
        h.insert("keep-alive", "timeout=5".parse().unwrap());
        h.insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key(header::CONTENT_TYPE));
    }

    #[test]
    fn each_hop_by_hop_header_alone_is_stripped() {
        for name in HOP_BY_HOP.iter().chain([&header::UPGRADE]) {
            let mut h = HeaderMap::new();
            h.insert(name.clone(), "x".parse().unwrap());
            h.insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
            strip_hop_by_hop(&mut h);
            assert_eq!(h.len(), 1, "{name}");
        }
        // A header named by `Connection` goes too, whatever its case there.
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, "X-Hop".parse().unwrap());
        h.insert("x-hop", "1".parse().unwrap());
        h.insert(header::ACCEPT, "*/*".parse().unwrap());
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key(header::ACCEPT));
    }
}
