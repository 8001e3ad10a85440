//! Credentials written into a URL (`https://user:secret@host/…`) are taken
//! out of it when the config is read and sent as what they mean for HTTP,
//! an `Authorization: Basic` header (RFC 9110 §11; RFC 7617). The URL kept
//! has no userinfo, so no connection pool, log line or error message that
//! names an address can print the secret.

use base64::Engine;
use http::HeaderValue;

use super::ConfigError;

/// `url` without its userinfo, and the `Basic` header it stood for (marked
/// sensitive), if it had one.
pub fn split(path: &str, url: &str) -> Result<(String, Option<HeaderValue>), ConfigError> {
    let Some(scheme_end) = url.find("://") else {
        return Ok((url.to_owned(), None));
    };
    let start = scheme_end + 3;
    let rest = &url[start..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return Ok((url.to_owned(), None));
    };
    let userinfo = &rest[..at];
    let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
    let decode = |part: &str| {
        percent_encoding::percent_decode_str(part)
            .decode_utf8()
            .map(std::borrow::Cow::into_owned)
            .map_err(|_| ConfigError::new(path, "the URL's credentials are not UTF-8"))
    };
    let credentials = format!("{}:{}", decode(user)?, decode(password)?);
    let encoded = base64::engine::general_purpose::STANDARD.encode(credentials);
    let mut header = HeaderValue::try_from(format!("Basic {encoded}"))
        .map_err(|_| ConfigError::new(path, "the URL's credentials cannot be a header"))?;
    header.set_sensitive(true);
    let mut stripped = String::with_capacity(url.len());
    stripped.push_str(&url[..start]);
    stripped.push_str(&rest[at + 1..]);
    Ok((stripped, Some(header)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_becomes_a_basic_header() {
        let (url, header) = split("k", "https://al%40ice:s3cr%3At@host:8/mcp?x=1").unwrap();
        assert_eq!(url, "https://host:8/mcp?x=1");
        let header = header.unwrap();
        assert!(header.is_sensitive());
        // base64("al@ice:s3cr:t")
        assert_eq!(header, "Basic YWxAaWNlOnMzY3I6dA==");
        let (url, header) = split("k", "http://127.0.0.1/p@q").unwrap();
        assert_eq!((url.as_str(), header), ("http://127.0.0.1/p@q", None));
    }
}
