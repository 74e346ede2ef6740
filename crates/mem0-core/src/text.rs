//! Checks on text that enters the stores. U+0000 is refused everywhere a caller can send text:
//! Postgres cannot store it in `text` or `jsonb` (SQLite can), and both stores must behave the
//! same. Text a model produced has the character removed instead.

use serde_json::Value;

use crate::error::{Error, Result};

/// Fails when `text` contains U+0000.
///
/// # Errors
/// [`Error::Validation`] naming `field`.
pub fn reject_nul(field: &str, text: &str) -> Result<()> {
    if text.contains('\0') {
        return Err(Error::validation(field, "cannot contain the NUL character (U+0000)"));
    }
    Ok(())
}

/// Fails when a key or string value anywhere in `value` contains U+0000.
///
/// # Errors
/// [`Error::Validation`] naming `field`.
pub fn reject_nul_in_json(field: &str, value: &Value) -> Result<()> {
    match value {
        Value::String(text) => reject_nul(field, text),
        Value::Array(items) => items.iter().try_for_each(|item| reject_nul_in_json(field, item)),
        Value::Object(map) => map.iter().try_for_each(|(key, item)| {
            reject_nul(field, key)?;
            reject_nul_in_json(field, item)
        }),
        Value::Null | Value::Bool(_) | Value::Number(_) => Ok(()),
    }
}

/// Removes U+0000 from model output.
pub fn strip_nul(text: &str) -> String {
    if text.contains('\0') {
        text.replace('\0', "")
    } else {
        text.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn nul_is_found_in_text_keys_and_nested_values() {
        assert!(reject_nul("text", "fine").is_ok());
        assert!(matches!(reject_nul("text", "a\0b"), Err(Error::Validation { field, .. }) if field == "text"));
        assert!(reject_nul_in_json("metadata", &json!({"a": [1, "ok", {"b": null}]})).is_ok());
        assert!(reject_nul_in_json("metadata", &json!({"a\u{0}": 1})).is_err());
        assert!(reject_nul_in_json("metadata", &json!({"a": [{"b": "x\u{0}"}]})).is_err());
        assert_eq!(strip_nul("a\0b\0"), "ab");
    }
}
