//! Server-sent events framing, as OpenAI and vLLM send it: every frame is `data: <json>\n\n`, the
//! stream ends with `data: [DONE]\n\n`; no `event:` names, no empty `data:` lines, no comments.

use serde::Serialize;

/// The last frame of every stream.
pub const DONE: &str = "data: [DONE]\n\n";

/// One `data:` frame holding `value` serialised as one line of JSON.
pub fn frame<T: Serialize>(value: &T) -> String {
    // serde_json escapes newlines inside strings, so the JSON is one line.
    let json = serde_json::to_string(value).unwrap_or_else(|e| {
        format!(r#"{{"error":{{"message":"unserialisable chunk: {e}","type":"server_error","param":null,"code":"internal_error"}}}}"#)
    });
    format!("data: {json}\n\n")
}

/// A frame from JSON text that is already serialised (an error body).
pub fn frame_raw(json: &str) -> String {
    format!("data: {json}\n\n")
}

/// The content type of an event stream.
pub const CONTENT_TYPE: &str = "text/event-stream";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_single_data_lines_ending_with_a_blank_line() {
        let f = frame(&serde_json::json!({"text": "two\nlines"}));
        assert_eq!(f, "data: {\"text\":\"two\\nlines\"}\n\n");
        assert_eq!(f.matches('\n').count(), 2);
        assert!(f.starts_with("data: {"));
        assert_eq!(DONE, "data: [DONE]\n\n");
        let e = crate::error::ApiError::internal("boom");
        let f = frame_raw(&e.body());
        assert!(f.starts_with("data: {\"error\":{"));
        assert!(f.ends_with("}}\n\n"));
    }
}
