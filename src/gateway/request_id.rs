//! `x-request-id`: the client's when it is short and plain, else one made
//! here (128 random bits, 32 hex digits); echoed on the response, named on
//! the request's log line and server span. Done in the handler, not by
//! tower-http's request-id layers: those cost a tower service around every
//! connection, an extensions map and six header-map operations per request,
//! 12 % of a passthrough request's instructions (callgrind, see the notes of
//! the commit that moved it here).

use http::{HeaderMap, HeaderValue};

use crate::headers::REQUEST_ID;

/// The longest request id a client may choose.
const MAX_ID: usize = 128;

/// The request's id: the client's, or a new one.
pub fn of(headers: &HeaderMap) -> HeaderValue {
    match headers.get(&REQUEST_ID) {
        Some(id) if usable(id) => id.clone(),
        _ => make(),
    }
}

/// Puts the request's id on its response. An upstream's own id (OpenAI
/// sends one) is kept beside it as `x-upstream-request-id`: the client's
/// echo and the provider's reference both reach the client.
pub fn tag<B>(response: &mut http::Response<B>, id: HeaderValue) {
    let headers = response.headers_mut();
    if let Some(upstream) = headers.insert(REQUEST_ID, id)
        && Some(&upstream) != headers.get(&REQUEST_ID)
    {
        headers.insert(UPSTREAM_REQUEST_ID, upstream);
    }
}

/// Where an upstream's own `x-request-id` goes on the response.
pub const UPSTREAM_REQUEST_ID: http::HeaderName =
    http::HeaderName::from_static("x-upstream-request-id");

fn usable(id: &HeaderValue) -> bool {
    (1..=MAX_ID).contains(&id.len())
        && id
            .as_bytes()
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:/+=".contains(b))
}

fn make() -> HeaderValue {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bits: u128 = rand::random();
    let mut id = [0u8; 32];
    for (i, digit) in id.iter_mut().enumerate() {
        *digit = HEX[(bits >> (124 - 4 * i)) as usize & 0xF];
    }
    // Hex digits are always a valid header value.
    HeaderValue::from_bytes(&id).unwrap_or(HeaderValue::from_static("0"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(id: &str) -> HeaderValue {
        let mut headers = HeaderMap::new();
        headers.insert(REQUEST_ID, HeaderValue::from_str(id).unwrap());
        of(&headers)
    }

    #[test]
    fn only_plain_short_ids_are_kept_and_others_are_made() {
        assert_eq!(with("req-1:abc/2="), "req-1:abc/2=");
        assert_eq!(with(&"a".repeat(MAX_ID)), "a".repeat(MAX_ID).as_str());
        for odd in [&"a".repeat(MAX_ID + 1), "a b", "a\"b"] {
            let made = with(odd);
            assert_eq!(made.len(), 32, "{odd}");
            assert!(made.as_bytes().iter().all(u8::is_ascii_hexdigit));
        }
        assert_ne!(of(&HeaderMap::new()), of(&HeaderMap::new()));
    }

    #[test]
    fn an_upstreams_own_id_is_kept_beside_ours() {
        let mut response = http::Response::new(());
        response
            .headers_mut()
            .insert(REQUEST_ID, HeaderValue::from_static("req_upstream"));
        tag(&mut response, HeaderValue::from_static("ours"));
        assert_eq!(response.headers()[REQUEST_ID], "ours");
        assert_eq!(response.headers()[UPSTREAM_REQUEST_ID], "req_upstream");
        let mut plain = http::Response::new(());
        tag(&mut plain, HeaderValue::from_static("ours"));
        assert!(!plain.headers().contains_key(UPSTREAM_REQUEST_ID));
    }
}
