//! Reading the client's request body with a bound, and finding (and if need
//! be replacing) its `model` without re-serializing anything else: a request
//! that no transform touches is forwarded byte for byte. The same look at a
//! JSON body refuses a `stream` or `stream_options` of the wrong type.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::HeaderMap;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use http_body::Body;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::body::BoxError;
use crate::error::GatewayError;

/// Request body bytes held across every request of the process, with a
/// bound: a client that opens many slow uploads cannot make the gateway hold
/// more than `max` bytes of bodies at once.
#[derive(Debug)]
pub struct BufferBudget {
    used: AtomicUsize,
    max: AtomicUsize,
}

impl BufferBudget {
    /// `None`: no bound.
    pub fn new(max: Option<usize>) -> Self {
        BufferBudget {
            used: AtomicUsize::new(0),
            max: AtomicUsize::new(max.unwrap_or(usize::MAX)),
        }
    }

    /// A reload may change the bound; bytes already held stay counted.
    pub fn set_max(&self, max: Option<usize>) {
        self.max.store(max.unwrap_or(usize::MAX), Ordering::Relaxed);
    }

    /// Bytes held now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    fn take(&self, n: usize) -> bool {
        let max = self.max.load(Ordering::Relaxed);
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|&total| total <= max)
            })
            .is_ok()
    }
}

/// Bytes of one request counted against a [`BufferBudget`], given back on drop.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<BufferBudget>,
    bytes: usize,
}

impl Reservation {
    /// Nothing held yet from `budget`.
    pub fn new(budget: Arc<BufferBudget>) -> Self {
        Reservation { budget, bytes: 0 }
    }

    fn grow(&mut self, n: usize) -> Result<(), GatewayError> {
        if !self.budget.take(n) {
            return Err(GatewayError::BufferFull);
        }
        self.bytes += n;
        Ok(())
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// Reads the whole body, refusing more than `limit` bytes with 413, a body
/// not received within `deadline` with 408, and bytes beyond what `held`'s
/// budget has left with 503. The bytes stay counted in `held` until it drops.
pub async fn read_body<B>(
    headers: &HeaderMap,
    body: B,
    limit: usize,
    deadline: Duration,
    held: &mut Reservation,
) -> Result<Bytes, GatewayError>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(GatewayError::PayloadTooLarge { limit });
    }
    let read = async {
        let mut body = std::pin::pin!(Limited::new(body, limit));
        let mut parts: Vec<Bytes> = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| {
                if e.is::<LengthLimitError>() {
                    GatewayError::PayloadTooLarge { limit }
                } else {
                    GatewayError::bad_request(format!("could not read the request body: {e}"), None)
                }
            })?;
            if let Ok(data) = frame.into_data() {
                held.grow(data.len())?;
                parts.push(data);
            }
        }
        Ok(match parts.len() {
            0 => Bytes::new(),
            1 => parts.pop().unwrap_or_default(),
            _ => Bytes::from(parts.concat()),
        })
    };
    tokio::time::timeout(deadline, read)
        .await
        .unwrap_or(Err(GatewayError::BodyTimeout {
            secs: deadline.as_secs_f64(),
        }))
}

/// Where the model name sits in the body, so it can be replaced in place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelField {
    /// The model the request names.
    pub name: String,
    /// Byte range of the value to replace (JSON: the quoted string; multipart: the raw text).
    span: Range<usize>,
    json: bool,
}

/// The fields of a JSON body toolgate looks at before deciding anything.
#[derive(Deserialize)]
struct Peek<'a> {
    #[serde(borrow, default)]
    model: Option<&'a RawValue>,
    #[serde(borrow, default)]
    stream: Option<&'a RawValue>,
    #[serde(borrow, default)]
    stream_options: Option<&'a RawValue>,
}

/// The member of `stream_options` toolgate reads.
#[derive(Deserialize)]
struct PeekStreamOptions<'a> {
    #[serde(borrow, default)]
    include_usage: Option<&'a RawValue>,
}

/// Finds the `model` of a JSON or multipart body. `Ok(None)`: the body has none.
///
/// A JSON body's `stream` and `stream_options` are checked on the way
/// ([`check_stream`]): every later part, and the upstream, then reads the
/// same answer to "does it stream, and with usage?".
pub fn find_model(headers: &HeaderMap, body: &[u8]) -> Result<Option<ModelField>, GatewayError> {
    let content_type = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if let Some(boundary) = multipart_boundary(content_type) {
        return multipart_model(body, boundary);
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let peek: Peek<'_> = serde_json::from_slice(body).map_err(|e| {
        // Servers read a repeated key differently (the first, the last):
        // the model the key's policy allowed must be the one that runs, and
        // a stream toolgate asked usage for the one the upstream sends.
        if let Some(field) = repeated_field(&e, &["model", "stream", "stream_options"]) {
            return repeated(field);
        }
        GatewayError::bad_request(format!("The request body is not valid JSON: {e}"), None)
    })?;
    check_stream(&peek)?;
    let Some(raw) = peek.model else {
        return Ok(None);
    };
    let name: String = serde_json::from_str(raw.get())
        .map_err(|_| GatewayError::bad_request("`model` must be a string", Some("model")))?;
    // `raw` borrows from `body`: its offset is the value's position.
    let start = raw.get().as_ptr() as usize - body.as_ptr() as usize;
    Ok(Some(ModelField {
        name,
        span: start..start + raw.get().len(),
        json: true,
    }))
}

/// Refuses a `stream` that is not a boolean and a `stream_options` that is
/// not an object (or whose `include_usage` is not a boolean); `null` is
/// absent. That is how every OpenAI API that has them types them, and
/// Anthropic's `stream` too. A lax server reads `"stream": 1` as a stream
/// where toolgate reads none, and a tenant whose limits count tokens would
/// then be streamed an answer without the usage toolgate asks for on its
/// streams (`upstream::usage_asked`), and be charged an estimate.
fn check_stream(peek: &Peek<'_>) -> Result<(), GatewayError> {
    let boolean =
        |raw: Option<&RawValue>| raw.is_none_or(|raw| matches!(raw.get(), "true" | "false"));
    if !boolean(peek.stream) {
        return Err(GatewayError::bad_request(
            "`stream` must be a boolean",
            Some("stream"),
        ));
    }
    let Some(options) = peek.stream_options else {
        return Ok(());
    };
    let not_object = || {
        GatewayError::bad_request(
            "`stream_options` must be an object (or null)",
            Some("stream_options"),
        )
    };
    if !options.get().starts_with('{') {
        return Err(not_object());
    }
    let options: PeekStreamOptions<'_> = serde_json::from_str(options.get()).map_err(|e| {
        match repeated_field(&e, &["include_usage"]) {
            Some(_) => repeated("stream_options.include_usage"),
            None => not_object(),
        }
    })?;
    if !boolean(options.include_usage) {
        return Err(GatewayError::bad_request(
            "`stream_options.include_usage` must be a boolean",
            Some("stream_options.include_usage"),
        ));
    }
    Ok(())
}

/// Which of `fields` serde found twice, when that is the error.
fn repeated_field<'f>(e: &serde_json::Error, fields: &[&'f str]) -> Option<&'f str> {
    let text = e.to_string();
    fields
        .iter()
        .find(|field| text.starts_with(&format!("duplicate field `{field}`")))
        .copied()
}

/// Returns `body` with the model value replaced by `model`; nothing else changes.
pub fn replace_model(body: &[u8], field: &ModelField, model: &str) -> Bytes {
    let replacement = if field.json {
        serde_json::to_string(model).unwrap_or_default()
    } else {
        model.to_owned()
    };
    let mut out = Vec::with_capacity(body.len() + replacement.len());
    out.extend_from_slice(&body[..field.span.start]);
    out.extend_from_slice(replacement.as_bytes());
    out.extend_from_slice(&body[field.span.end..]);
    Bytes::from(out)
}

fn multipart_boundary(content_type: &str) -> Option<&str> {
    let (mime, params) = content_type.split_once(';')?;
    if !mime.trim().eq_ignore_ascii_case("multipart/form-data") {
        return None;
    }
    params.split(';').find_map(|p| {
        let (k, v) = p.split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("boundary")
            .then(|| v.trim().trim_matches('"'))
    })
}

fn repeated(field: &str) -> GatewayError {
    GatewayError::bad_request(
        format!("`{field}` is given more than once; send it once"),
        Some(field),
    )
}

/// The `model` form field of a multipart body (audio transcription uploads).
/// A part is the `model` field when its `Content-Disposition` names it so,
/// quoted or not, in any case of `name` (as the servers behind toolgate
/// read it); a second one is refused.
fn multipart_model(body: &[u8], boundary: &str) -> Result<Option<ModelField>, GatewayError> {
    let delimiter = format!("--{boundary}");
    let finder = memchr::memmem::Finder::new(delimiter.as_bytes());
    let mut positions = finder.find_iter(body).peekable();
    let mut found: Option<ModelField> = None;
    while let Some(start) = positions.next() {
        let end = positions.peek().copied().unwrap_or(body.len());
        let part = &body[start + delimiter.len()..end];
        let Some(header_end) = memchr::memmem::find(part, b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&part[..header_end]);
        let is_model = head.lines().any(|line| {
            line.split_once(':').is_some_and(|(name, value)| {
                name.trim().eq_ignore_ascii_case("content-disposition")
                    && form_name(value).is_some_and(|n| n == "model")
            })
        });
        if !is_model {
            continue;
        }
        if found.is_some() {
            return Err(repeated("model"));
        }
        let value_start = start + delimiter.len() + header_end + 4;
        let Some(value_end) = end
            .checked_sub(2)
            .filter(|&e| e >= value_start && &body[e..end] == b"\r\n")
        else {
            continue;
        };
        let name = std::str::from_utf8(&body[value_start..value_end])
            .map_err(|_| GatewayError::bad_request("`model` must be UTF-8 text", Some("model")))?
            .to_owned();
        found = Some(ModelField {
            name,
            span: value_start..value_end,
            json: false,
        });
    }
    Ok(found)
}

/// The `name` parameter of a `Content-Disposition: form-data; …` value
/// (RFC 7578 §4.2): quoted (with `\"` escapes) or a bare token, `name*`
/// (RFC 5987, `utf-8''…`) too; `filename` is another parameter.
fn form_name(value: &str) -> Option<String> {
    let mut rest = value.split_once(';')?.1;
    loop {
        let (key, after) = rest.split_once('=')?;
        let key = key.trim().to_ascii_lowercase();
        let after = after.trim_start();
        let (text, next) = if let Some(quoted) = after.strip_prefix('"') {
            let mut text = String::new();
            let mut chars = quoted.char_indices();
            let mut close = None;
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, escaped)) = chars.next() {
                            text.push(escaped);
                        }
                    }
                    '"' => {
                        close = Some(i);
                        break;
                    }
                    c => text.push(c),
                }
            }
            let close = close?;
            let tail = &quoted[close + 1..];
            (text, tail.split_once(';').map_or("", |(_, t)| t))
        } else {
            let (text, tail) = after.split_once(';').unwrap_or((after, ""));
            (text.trim().to_owned(), tail)
        };
        match key.as_str() {
            "name" => return Some(text),
            "name*" => {
                let encoded = text.rsplit_once('\'').map_or(text.as_str(), |(_, v)| v);
                return Some(
                    percent_encoding::percent_decode_str(encoded)
                        .decode_utf8_lossy()
                        .into_owned(),
                );
            }
            _ => {}
        }
        if next.is_empty() {
            return None;
        }
        rest = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json_headers() -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(CONTENT_TYPE, "application/json".parse().unwrap());
        h
    }

    #[test]
    fn json_model_is_replaced_in_place() {
        let body = br#"{ "messages" : [], "model" :  "local/llama\u0033" , "x": 1}"#;
        let f = find_model(&json_headers(), body).unwrap().unwrap();
        assert_eq!(f.name, "local/llama3");
        let out = replace_model(body, &f, "llama3");
        assert_eq!(
            &out[..],
            br#"{ "messages" : [], "model" :  "llama3" , "x": 1}"#
        );
    }

    #[test]
    fn invalid_json_and_non_string_model_are_400() {
        assert!(find_model(&json_headers(), b"{\"model\": ").is_err());
        assert!(find_model(&json_headers(), b"\xff\xfe").is_err());
        let e = find_model(&json_headers(), br#"{"model": 3}"#).unwrap_err();
        assert_eq!(e.to_json()["error"]["param"], "model");
        assert_eq!(find_model(&json_headers(), b"{}").unwrap(), None);
        assert_eq!(find_model(&json_headers(), b"").unwrap(), None);
    }

    #[test]
    fn a_repeated_model_is_refused_however_it_is_written() {
        let mut h = HeaderMap::new();
        h.insert(
            CONTENT_TYPE,
            "multipart/form-data; boundary=XyZ".parse().unwrap(),
        );
        let part = |disposition: &str, value: &str| {
            format!("--XyZ\r\nContent-Disposition: {disposition}\r\n\r\n{value}\r\n")
        };
        for second in [
            "form-data; name=\"model\"",
            "form-data; name=model",
            "FORM-DATA; NAME=\"model\"",
            "form-data; name*=utf-8''%6Dodel",
        ] {
            let body = format!(
                "{}{}--XyZ--\r\n",
                part("form-data; name=\"model\"", "plain-cheap"),
                part(second, "plain-EXPENSIVE")
            );
            let e = find_model(&h, body.as_bytes()).unwrap_err();
            assert_eq!(e.to_json()["error"]["param"], "model", "{second}");
            assert!(e.to_string().contains("more than once"), "{e}");
        }
        // `filename="model"` names a file, not the field.
        let body = format!(
            "{}{}--XyZ--\r\n",
            part("form-data; name=\"file\"; filename=\"model\"", "RIFF"),
            part("form-data; name=model", "whisper-1")
        );
        assert_eq!(
            find_model(&h, body.as_bytes()).unwrap().unwrap().name,
            "whisper-1"
        );
        // And in JSON.
        let e = find_model(&json_headers(), br#"{"model": "a", "model": "b"}"#).unwrap_err();
        assert!(e.to_string().contains("more than once"), "{e}");
    }

    #[test]
    fn stream_and_stream_options_of_the_wrong_type_are_400_naming_them() {
        let param = |body: &str| {
            let e = find_model(&json_headers(), body.as_bytes()).unwrap_err();
            assert_eq!(e.status(), http::StatusCode::BAD_REQUEST, "{body}");
            let error = &e.to_json()["error"];
            assert_eq!(error["type"], "invalid_request_error", "{body}");
            error["param"].as_str().unwrap().to_owned()
        };
        for stream in ["1", "0", r#""true""#, "[]", "{}"] {
            let body = format!(r#"{{"model":"m","stream":{stream}}}"#);
            assert_eq!(param(&body), "stream");
        }
        for options in ["true", "1", r#""include_usage""#, "[]"] {
            let body = format!(r#"{{"model":"m","stream":true,"stream_options":{options}}}"#);
            assert_eq!(param(&body), "stream_options");
        }
        for usage in ["1", r#""true""#, "{}"] {
            let body = format!(
                r#"{{"model":"m","stream":true,"stream_options":{{"include_usage":{usage}}}}}"#
            );
            assert_eq!(param(&body), "stream_options.include_usage");
        }
        // A repeated key: servers disagree on which one counts.
        assert_eq!(
            param(r#"{"model":"m","stream":false,"stream":true}"#),
            "stream"
        );
        assert_eq!(
            param(r#"{"model":"m","stream":true,"stream_options":null,"stream_options":{}}"#),
            "stream_options"
        );
        assert_eq!(
            param(
                r#"{"model":"m","stream":true,"stream_options":{"include_usage":false,"include_usage":true}}"#
            ),
            "stream_options.include_usage"
        );
        // What every API accepts, `null` as absent.
        for fine in [
            r#"{"model":"m","stream":true}"#,
            r#"{"model":"m","stream":false,"stream_options":null}"#,
            r#"{"model":"m","stream":null}"#,
            r#"{"model":"m","stream": true ,"stream_options":{}}"#,
            r#"{"model":"m","stream":true,"stream_options":{"include_usage":null,"x":[1]}}"#,
            r#"{"model":"m","stream":true,"stream_options":{ "include_usage" : false }}"#,
        ] {
            let f = find_model(&json_headers(), fine.as_bytes());
            assert_eq!(f.unwrap().unwrap().name, "m", "{fine}");
        }
    }

    #[test]
    fn multipart_model_is_found_and_replaced() {
        let mut h = HeaderMap::new();
        h.insert(
            CONTENT_TYPE,
            "multipart/form-data; boundary=XyZ".parse().unwrap(),
        );
        let body = b"--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\nRIFF..\r\n--XyZ\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nlocal/whisper-1\r\n--XyZ--\r\n";
        let f = find_model(&h, body).unwrap().unwrap();
        assert_eq!(f.name, "local/whisper-1");
        let out = replace_model(body, &f, "whisper-1");
        assert!(memchr::memmem::find(&out, b"\r\n\r\nwhisper-1\r\n--XyZ--").is_some());
    }
}
