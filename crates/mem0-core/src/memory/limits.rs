//! The bounds every operation checks, and the checks shared by several operations.

use chrono::{DateTime, SubsecRound, Utc};
use serde_json::Value;
use tracing::warn;

use crate::error::{Error, Result};
use crate::text;
use crate::types::Metadata;

/// Most messages one add call may carry.
pub const MAX_MESSAGES: usize = 100;

/// Longest memory text or message content, in bytes.
pub const MAX_TEXT_BYTES: usize = 32 * 1024;

/// Largest serialised caller metadata, in bytes.
pub const MAX_METADATA_BYTES: usize = 16 * 1024;

/// Longest speaker name (`messages[].name`, stored as `actor_id`), in bytes.
pub const MAX_NAME_BYTES: usize = 256;

/// Longest search query, in bytes.
pub const MAX_QUERY_BYTES: usize = 8 * 1024;

/// Upper bound of `top_k` and `page_size`.
pub const MAX_PAGE_SIZE: usize = 1000;

/// Default `page_size` of listings.
pub const DEFAULT_PAGE_SIZE: usize = 100;

/// Default `top_k` of search.
pub const DEFAULT_TOP_K: usize = 20;

/// Default similarity threshold of search.
pub const DEFAULT_THRESHOLD: f32 = 0.1;

/// Metadata keys the server owns; callers cannot set them through metadata.
pub(crate) const RESERVED_METADATA_KEYS: [&str; 15] = [
    "user_id",
    "agent_id",
    "run_id",
    "actor_id",
    "role",
    "attributed_to",
    "hash",
    "memory",
    "data",
    "id",
    "created_at",
    "updated_at",
    "expiration_date",
    "memory_type",
    "text_lemmatized",
];

pub(crate) fn truncate_to_bytes(mut text: String, limit: usize) -> String {
    if text.len() > limit {
        let mut end = limit;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

/// The current time at the precision the stores keep (microseconds), so what a write returns
/// equals what a later read returns.
pub(crate) fn stored_now() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(6)
}

pub(crate) fn check_bound(field: &str, value: usize) -> Result<()> {
    if (1..=MAX_PAGE_SIZE).contains(&value) {
        Ok(())
    } else {
        Err(Error::validation(field, format!("must be between 1 and {MAX_PAGE_SIZE}")))
    }
}

/// Drops reserved keys (scope ids and server-owned fields) from caller metadata and bounds its size.
pub(crate) fn sanitize_metadata(mut metadata: Metadata) -> Result<Metadata> {
    for (key, value) in &metadata {
        text::reject_nul("metadata", key)?;
        text::reject_nul_in_json("metadata", value)?;
    }
    let dropped: Vec<String> =
        metadata.keys().filter(|key| RESERVED_METADATA_KEYS.contains(&key.as_str())).cloned().collect();
    for key in &dropped {
        metadata.remove(key);
    }
    if !dropped.is_empty() {
        warn!(keys = ?dropped, "dropped reserved keys from caller metadata");
    }
    if let Some(key) = metadata.keys().find(|key| key.is_empty() || key.len() > 256) {
        return Err(Error::validation("metadata", format!("key `{key}` must be 1-256 bytes")));
    }
    check_metadata_size(&metadata)?;
    Ok(metadata)
}

pub(crate) fn check_metadata_size(metadata: &Metadata) -> Result<()> {
    let size = Value::Object(metadata.clone()).to_string().len();
    if size > MAX_METADATA_BYTES {
        return Err(Error::validation("metadata", format!("at most {MAX_METADATA_BYTES} bytes when serialised")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn reserved_metadata_keys_are_dropped() {
        let Value::Object(metadata) = json!({"user_id": "eve", "created_at": "1999", "topic": "food", "role": "x"})
        else {
            panic!("object")
        };
        let clean = sanitize_metadata(metadata).expect("valid");
        assert_eq!(Value::Object(clean), json!({"topic": "food"}));
    }

    #[test]
    fn oversized_metadata_is_rejected() {
        let Value::Object(metadata) = json!({"blob": "x".repeat(MAX_METADATA_BYTES)}) else { panic!("object") };
        assert!(sanitize_metadata(metadata).is_err());
    }

    #[test]
    fn bounds_are_one_to_a_thousand() {
        assert!(check_bound("top_k", 0).is_err());
        assert!(check_bound("top_k", 1).is_ok());
        assert!(check_bound("top_k", 1000).is_ok());
        assert!(check_bound("top_k", 1001).is_err());
    }
}
