//! Pure translations between Mem0's platform API and ours: filters, scope ids, paging and the
//! JSON shapes its SDKs read. No I/O here, so every rule is unit-tested below.

use mem0_core::{HistoryRecord, MemoryItem};
use serde_json::{Map, Value};

use crate::error::{ApiError, ErrorCode};

/// A feature of Mem0's API this server does not have: 501 `not_implemented`, naming it.
pub fn unsupported(feature: &str) -> ApiError {
    ApiError::new(
        ErrorCode::NotImplemented,
        format!("not supported by this server: {feature} (see \"Using Mem0's SDKs\" in its README)"),
    )
    .with_details(serde_json::json!({ "feature": feature }))
}

/// Scope ids named by a Mem0 request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ids {
    /// `user_id`.
    pub user_id: Option<String>,
    /// `agent_id`.
    pub agent_id: Option<String>,
    /// `run_id`.
    pub run_id: Option<String>,
}

impl Ids {
    /// `self`, with the ids `other` sets where `self` sets none.
    #[must_use]
    pub fn or(self, other: Ids) -> Self {
        Self {
            user_id: self.user_id.or(other.user_id),
            agent_id: self.agent_id.or(other.agent_id),
            run_id: self.run_id.or(other.run_id),
        }
    }

    /// The core scope of these ids (blank or over-long ids are a 400).
    pub fn scope(&self) -> Result<mem0_core::Scope, ApiError> {
        Ok(mem0_core::Scope::optional(self.user_id.as_deref(), self.agent_id.as_deref(), self.run_id.as_deref())?)
    }

    fn slot(&mut self, key: &str) -> Option<&mut Option<String>> {
        match key {
            "user_id" => Some(&mut self.user_id),
            "agent_id" => Some(&mut self.agent_id),
            "run_id" => Some(&mut self.run_id),
            _ => None,
        }
    }
}

/// The snake_case name of a key the JS SDK may send in camelCase inside `filters` (it converts
/// bodies but passes `filters` through as written).
fn snake_key(key: &str) -> &str {
    match key {
        "userId" => "user_id",
        "agentId" => "agent_id",
        "runId" => "run_id",
        "appId" => "app_id",
        "createdAt" => "created_at",
        "updatedAt" => "updated_at",
        other => other,
    }
}

/// Filter keys of Mem0's grammar that have no counterpart here.
const UNSUPPORTED_FILTER_KEYS: [(&str, &str); 6] = [
    ("app_id", "app_id scopes"),
    ("categories", "filtering by categories"),
    ("keywords", "the keywords filter"),
    ("memory_ids", "the memory_ids filter"),
    ("text", "the text filter"),
    ("timestamp", "the timestamp filter"),
];

/// Reads a Mem0 `filters` object: the scope ids it fixes (plain string values at its top level
/// or as single-key conditions of a top-level `AND`), and the rest rewritten into our filter
/// language (camelCase scope keys renamed, `{"metadata": {k: v}}` spread into `k: v`
/// conditions, which is how metadata keys are filtered here). Keys Mem0 has and we do not are a
/// 501 naming them.
///
/// # Errors
/// 400 when `filters` is not an object; 501 for unsupported keys.
pub fn read_filters(filters: &Value) -> Result<(Ids, Option<Value>), ApiError> {
    let Value::Object(object) = filters else {
        return Err(ApiError::validation("filters", "must be a JSON object"));
    };
    let mut ids = Ids::default();
    let mut rest = rewrite_object(object)?;
    // Plain ids at the top level fix the scope; a wildcard (`"*"`: has any value) stays a
    // condition, inside an AND (at the top level our filters read a plain id as the scope).
    let mut wildcards = Vec::new();
    for key in ["user_id", "agent_id", "run_id"] {
        let Some(Value::String(id)) = rest.get(key).cloned() else { continue };
        rest.remove(key);
        if id == "*" {
            wildcards.push(Value::Object(Map::from_iter([(key.to_owned(), Value::String(id))])));
        } else if let Some(slot) = ids.slot(key) {
            *slot = Some(id);
        }
    }
    // So do single-key conditions `{"user_id": "alice"}` of a top-level AND (Mem0's usual form).
    if let Some(Value::Array(items)) = rest.get_mut("AND") {
        items.retain(|item| {
            let Some((key, Value::String(id))) = single_entry(item) else { return true };
            let Some(slot) = ids.slot(key) else { return true };
            if id == "*" || slot.as_ref().is_some_and(|held| held != id) {
                return true;
            }
            *slot = Some(id.clone());
            false
        });
        if items.is_empty() {
            rest.remove("AND");
        }
    }
    if !wildcards.is_empty() {
        match rest.get_mut("AND") {
            Some(Value::Array(items)) => items.extend(wildcards),
            _ => {
                rest.insert("AND".to_owned(), Value::Array(wildcards));
            }
        }
    }
    Ok((ids, (!rest.is_empty()).then_some(Value::Object(rest))))
}

fn single_entry(value: &Value) -> Option<(&str, &Value)> {
    match value {
        Value::Object(object) if object.len() == 1 => object.iter().next().map(|(key, value)| (key.as_str(), value)),
        _ => None,
    }
}

fn rewrite_object(object: &Map<String, Value>) -> Result<Map<String, Value>, ApiError> {
    let mut out = Map::with_capacity(object.len());
    for (key, value) in object {
        let key = snake_key(key);
        if let Some((_, feature)) = UNSUPPORTED_FILTER_KEYS.iter().find(|(name, _)| *name == key) {
            return Err(unsupported(feature));
        }
        match (key, value) {
            ("AND" | "OR" | "$and" | "$or", Value::Array(items)) => {
                let items = items.iter().map(rewrite_value).collect::<Result<Vec<_>, _>>()?;
                out.insert(key.to_owned(), Value::Array(items));
            }
            ("NOT" | "$not", inner) => {
                out.insert(key.to_owned(), rewrite_value(inner)?);
            }
            ("metadata", Value::Object(conditions)) => {
                for (name, condition) in conditions {
                    out.insert(name.clone(), condition.clone());
                }
            }
            ("metadata", _) => return Err(ApiError::validation("filters.metadata", "must be an object of conditions")),
            _ => {
                out.insert(key.to_owned(), value.clone());
            }
        }
    }
    Ok(out)
}

fn rewrite_value(value: &Value) -> Result<Value, ApiError> {
    match value {
        Value::Object(object) => Ok(Value::Object(rewrite_object(object)?)),
        Value::Array(items) => Ok(Value::Array(items.iter().map(rewrite_value).collect::<Result<_, _>>()?)),
        other => Ok(other.clone()),
    }
}

/// `{"k": v}` conditions for the keys of a request's `metadata` object, ANDed with `filter`.
pub fn with_metadata(filter: Option<Value>, metadata: Option<&Map<String, Value>>) -> Option<Value> {
    let conditions: Vec<Value> = metadata
        .into_iter()
        .flatten()
        .map(|(key, value)| Value::Object(Map::from_iter([(key.clone(), value.clone())])))
        .collect();
    if conditions.is_empty() {
        return filter;
    }
    let mut all: Vec<Value> = filter.into_iter().collect();
    all.extend(conditions);
    Some(serde_json::json!({ "AND": all }))
}

/// A memory as Mem0's API returns it: our fields (a superset) plus the ones its SDKs read that we
/// do not keep — `app_id` (none), `session_id` (the run), `categories` (none), `immutable`
/// (false) — and `metadata` as an object, never null.
pub fn memory(item: MemoryItem) -> Value {
    let mut value = serde_json::to_value(item).unwrap_or_default();
    if let Value::Object(object) = &mut value {
        for key in ["user_id", "agent_id", "run_id", "expiration_date"] {
            object.entry(key).or_insert(Value::Null);
        }
        let run = object.get("run_id").cloned().unwrap_or(Value::Null);
        object.insert("session_id".to_owned(), run);
        object.insert("app_id".to_owned(), Value::Null);
        object.entry("categories").or_insert_with(|| Value::Array(Vec::new()));
        object.insert("immutable".to_owned(), Value::Bool(false));
        if object.get("metadata").is_none_or(Value::is_null) {
            object.insert("metadata".to_owned(), Value::Object(Map::new()));
        }
    }
    value
}

/// Keeps only the `fields` a request asked for (and always `id`).
pub fn project(mut value: Value, fields: Option<&[String]>) -> Value {
    if let (Value::Object(object), Some(fields)) = (&mut value, fields) {
        if !fields.is_empty() {
            object.retain(|key, _| key == "id" || fields.iter().any(|field| field == key));
        }
    }
    value
}

/// A history entry as Mem0's API returns it. `input` (the messages that led to the change) is
/// not kept here, so it is always empty.
pub fn history_entry(record: HistoryRecord) -> Value {
    serde_json::json!({
        "id": record.id,
        "memory_id": record.memory_id,
        "input": [],
        "old_memory": record.old_memory,
        "new_memory": record.new_memory,
        "event": record.event,
        "user_id": record.scope.user_id,
        "agent_id": record.scope.agent_id,
        "run_id": record.scope.run_id,
        "session_id": record.scope.run_id,
        "app_id": null,
        "actor_id": record.actor_id,
        "role": record.role,
        "categories": [],
        "metadata": {},
        "is_deleted": record.is_deleted,
        "created_at": record.created_at,
        "updated_at": record.updated_at.unwrap_or(record.created_at),
    })
}

/// A page number and size from the query string or the body (the query wins, as in Mem0).
///
/// # Errors
/// 400 for a page below 1 or a size outside 1..=1000.
pub fn paging(
    query: (Option<usize>, Option<usize>),
    body: (Option<usize>, Option<usize>),
    default_size: usize,
) -> Result<(usize, usize), ApiError> {
    let page = query.0.or(body.0).unwrap_or(1);
    let size = query.1.or(body.1).unwrap_or(default_size);
    if page == 0 {
        return Err(ApiError::validation("page", "must be 1 or more"));
    }
    if !(1..=mem0_core::memory::MAX_PAGE_SIZE).contains(&size) {
        return Err(ApiError::validation(
            "page_size",
            format!("must be between 1 and {}", mem0_core::memory::MAX_PAGE_SIZE),
        ));
    }
    Ok((page, size))
}

/// The `{count, next, previous, results}` envelope of a numbered page; `next` and `previous` are
/// relative links to `path` (the SDKs do not follow them; a client that does resolves them
/// against the host it called).
pub fn numbered_page(path: &str, page: usize, size: usize, count: u64, results: Vec<Value>) -> Value {
    let link = |page: usize| Value::String(format!("{path}?page={page}&page_size={size}"));
    let shown_through = (page as u64).saturating_mul(size as u64);
    serde_json::json!({
        "count": count,
        "next": if shown_through < count { link(page + 1) } else { Value::Null },
        "previous": if page > 1 { link(page - 1) } else { Value::Null },
        "results": results,
    })
}

/// Mem0's `reference_date`: Unix seconds, `YYYY-MM-DD` or an RFC 3339 time.
///
/// # Errors
/// 400 naming `reference_date`.
pub fn reference_date(value: &Value) -> Result<chrono::DateTime<chrono::Utc>, ApiError> {
    let invalid = || ApiError::validation("reference_date", "expected Unix seconds, YYYY-MM-DD or an RFC 3339 time");
    match value {
        Value::Number(number) => number
            .as_f64()
            .and_then(|seconds| chrono::DateTime::from_timestamp_micros((seconds * 1_000_000.0) as i64))
            .ok_or_else(invalid),
        Value::String(text) => {
            let text = text.trim();
            if let Ok(day) = chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d") {
                return Ok(day.and_hms_opt(0, 0, 0).unwrap_or_default().and_utc());
            }
            chrono::DateTime::parse_from_rfc3339(text)
                .map(|time| time.with_timezone(&chrono::Utc))
                .map_err(|_| invalid())
        }
        _ => Err(invalid()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ids(user: Option<&str>, agent: Option<&str>, run: Option<&str>) -> Ids {
        Ids { user_id: user.map(Into::into), agent_id: agent.map(Into::into), run_id: run.map(Into::into) }
    }

    #[test]
    fn scope_ids_are_taken_from_the_top_level_and_a_top_level_and() {
        let (found, rest) = read_filters(&json!({"user_id": "alice"})).unwrap();
        assert_eq!((found, rest), (ids(Some("alice"), None, None), None));

        let (found, rest) =
            read_filters(&json!({"AND": [{"user_id": "alice"}, {"agentId": "bot"}, {"topic": "food"}]})).unwrap();
        assert_eq!(found, ids(Some("alice"), Some("bot"), None));
        assert_eq!(rest, Some(json!({"AND": [{"topic": "food"}]})));

        // Ids under OR, wildcards and a second value of one kind stay conditions.
        let (found, rest) = read_filters(&json!({"OR": [{"user_id": "a"}, {"user_id": "b"}]})).unwrap();
        assert_eq!(found, Ids::default());
        assert_eq!(rest, Some(json!({"OR": [{"user_id": "a"}, {"user_id": "b"}]})));
        let (found, rest) = read_filters(&json!({"AND": [{"user_id": "a"}, {"user_id": "b"}], "run_id": "*"})).unwrap();
        assert_eq!(found, ids(Some("a"), None, None));
        assert_eq!(rest, Some(json!({"AND": [{"user_id": "b"}, {"run_id": "*"}]})));
        let (found, rest) = read_filters(&json!({"user_id": "a", "agent_id": "*"})).unwrap();
        assert_eq!((found, rest), (ids(Some("a"), None, None), Some(json!({"AND": [{"agent_id": "*"}]}))));
    }

    #[test]
    fn metadata_conditions_are_spread_and_unsupported_keys_named() {
        let (_, rest) = read_filters(&json!({
            "user_id": "alice",
            "metadata": {"topic": "food"},
            "OR": [{"metadata": {"priority": {"gte": 2}}}, {"createdAt": {"gte": "2024-01-01"}}]
        }))
        .unwrap();
        assert_eq!(
            rest,
            Some(json!({"topic": "food", "OR": [{"priority": {"gte": 2}}, {"created_at": {"gte": "2024-01-01"}}]}))
        );
        for (filters, feature) in [
            (json!({"app_id": "shop"}), "app_id scopes"),
            (json!({"AND": [{"user_id": "a"}, {"categories": {"in": ["x"]}}]}), "filtering by categories"),
            (json!({"NOT": {"appId": "x"}}), "app_id scopes"),
        ] {
            let error = read_filters(&filters).unwrap_err();
            assert_eq!(error.status(), axum::http::StatusCode::NOT_IMPLEMENTED, "{filters}");
            assert!(format!("{error:?}").contains(feature), "{error:?}");
        }
        assert_eq!(read_filters(&json!(["user_id"])).unwrap_err().status(), axum::http::StatusCode::BAD_REQUEST);
    }

    #[test]
    fn request_metadata_narrows_the_filter() {
        let meta = json!({"topic": "food"});
        assert_eq!(with_metadata(None, meta.as_object()), Some(json!({"AND": [{"topic": "food"}]})));
        assert_eq!(
            with_metadata(Some(json!({"x": 1})), meta.as_object()),
            Some(json!({"AND": [{"x": 1}, {"topic": "food"}]}))
        );
        assert_eq!(with_metadata(Some(json!({"x": 1})), None), Some(json!({"x": 1})));
    }

    #[test]
    fn pages_link_to_their_neighbours() {
        let page = numbered_page("/v3/memories/", 2, 10, 25, vec![]);
        assert_eq!(page["next"], json!("/v3/memories/?page=3&page_size=10"));
        assert_eq!(page["previous"], json!("/v3/memories/?page=1&page_size=10"));
        let last = numbered_page("/v3/memories/", 3, 10, 25, vec![]);
        assert_eq!(last["next"], Value::Null);
        let only = numbered_page("/v3/memories/", 1, 10, 0, vec![]);
        assert_eq!(
            (only["next"].clone(), only["previous"].clone(), only["count"].clone()),
            (Value::Null, Value::Null, json!(0))
        );
        assert_eq!(paging((Some(2), None), (Some(5), Some(7)), 100).unwrap(), (2, 7));
        assert!(paging((Some(0), None), (None, None), 100).is_err());
        assert!(paging((None, Some(1001)), (None, None), 100).is_err());
    }

    #[test]
    fn reference_dates_in_every_form_mem0_takes() {
        let day = chrono::NaiveDate::from_ymd_opt(2024, 5, 1).unwrap().and_hms_opt(0, 0, 0).unwrap().and_utc();
        assert_eq!(reference_date(&json!("2024-05-01")).unwrap(), day);
        assert_eq!(reference_date(&json!(day.timestamp())).unwrap(), day);
        assert_eq!(reference_date(&json!("2024-05-01T00:00:00Z")).unwrap(), day);
        assert!(reference_date(&json!("May 1st")).is_err());
        assert!(reference_date(&json!(true)).is_err());
    }
}
