//! Writing SSE frames the way OpenAI clients require (conformance rule 1):
//! `data: <json>\n\n`, no `event:` or `id:` lines, keep-alives only as
//! comments, and exactly `data: [DONE]\n\n` at the end.

use bytes::{BufMut, BytesMut};
use serde::Serialize;

pub const DONE: &[u8] = b"data: [DONE]\n\n";
pub const KEEP_ALIVE: &[u8] = b": keep-alive\n\n";

/// Appends `data: <json>\n\n` for `value`.
pub fn write_json<T: Serialize + ?Sized>(out: &mut BytesMut, value: &T) {
    out.put_slice(b"data: ");
    let mut writer = out.writer();
    // Serializing plain data into memory cannot fail.
    let _ = serde_json::to_writer(&mut writer, value);
    let out = writer.into_inner();
    out.put_slice(b"\n\n");
}

/// An error after the stream started (conformance rule 15): an error
/// event, then `[DONE]`.
pub fn write_error<T: Serialize + ?Sized>(out: &mut BytesMut, error: &T) {
    write_json(out, error);
    out.extend_from_slice(DONE);
}

/// Appends `data: <before><value><after>\n\n`: a payload whose middle is
/// rewritten and the rest copied as it came.
pub fn write_spliced<T: Serialize + ?Sized>(
    out: &mut BytesMut,
    before: &[u8],
    value: &T,
    after: &[u8],
) {
    out.put_slice(b"data: ");
    out.put_slice(before);
    let mut writer = out.writer();
    // Serializing plain data into memory cannot fail.
    let _ = serde_json::to_writer(&mut writer, value);
    let out = writer.into_inner();
    out.put_slice(after);
    out.put_slice(b"\n\n");
}

/// Appends `data: <raw>\n\n` for an already-serialized payload.
pub fn write_raw(out: &mut BytesMut, raw: &[u8]) {
    out.reserve(raw.len() + 8);
    out.put_slice(b"data: ");
    out.put_slice(raw);
    out.put_slice(b"\n\n");
}
