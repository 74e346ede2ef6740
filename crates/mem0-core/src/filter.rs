//! The filter language of search and list (Mem0's, extended): field conditions with typed
//! operators, combined with `AND` / `OR` / `NOT` nested to any depth (bounded).
//!
//! A parsed [`Filter`] is store-agnostic; each store compiles it to SQL with bound parameters.
//! Filters only ever narrow the request's scope: stores AND them with tenant and scope.

use chrono::{DateTime, NaiveDate, Utc};
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::scope::validate_scope_id;

/// Deepest nesting of `AND`/`OR`/`NOT` accepted.
pub const MAX_FILTER_DEPTH: usize = 16;
/// Most conditions one filter may hold.
pub const MAX_FILTER_CONDITIONS: usize = 256;
/// Most values one `in`/`nin` list may hold.
pub const MAX_IN_VALUES: usize = 256;
/// Longest metadata key, in bytes.
pub const MAX_KEY_LEN: usize = 64;

/// A boolean expression over memory fields.
#[derive(Debug, Clone, PartialEq)]
pub enum Filter {
    /// All must hold (an empty list holds).
    And(Vec<Filter>),
    /// At least one must hold.
    Or(Vec<Filter>),
    /// Must not hold.
    Not(Box<Filter>),
    /// One field condition.
    Condition(Condition),
}

/// `field op value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    /// What is compared.
    pub field: Field,
    /// How.
    pub op: Operator,
    /// With what.
    pub value: Operand,
}

/// A filterable field: a typed column or a caller metadata key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    /// A text attribute stored in its own column.
    Text(TextField),
    /// A timestamp stored in its own column.
    Time(TimeField),
    /// A number stored in its own column.
    Number(NumberField),
    /// A caller metadata key (validated: `[A-Za-z0-9_.-]{1,64}`).
    Metadata(String),
}

/// Text columns that can be filtered on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextField {
    /// `user_id`.
    UserId,
    /// `agent_id`.
    AgentId,
    /// `run_id`.
    RunId,
    /// `actor_id`.
    ActorId,
    /// `role`.
    Role,
    /// `attributed_to`.
    AttributedTo,
    /// `memory_type`.
    MemoryType,
    /// `hash`.
    Hash,
    /// `source_type`.
    SourceType,
    /// `source_actor`.
    SourceActor,
    /// `source_app`.
    SourceApp,
    /// `evidence_ref`.
    EvidenceRef,
    /// `state_key`.
    StateKey,
    /// `status`.
    Status,
}

impl TextField {
    /// Returns the column name.
    pub fn column(self) -> &'static str {
        match self {
            Self::UserId => "user_id",
            Self::AgentId => "agent_id",
            Self::RunId => "run_id",
            Self::ActorId => "actor_id",
            Self::Role => "role",
            Self::AttributedTo => "attributed_to",
            Self::MemoryType => "memory_type",
            Self::Hash => "hash",
            Self::SourceType => "source_type",
            Self::SourceActor => "source_actor",
            Self::SourceApp => "source_app",
            Self::EvidenceRef => "evidence_ref",
            Self::StateKey => "state_key",
            Self::Status => "status",
        }
    }
}

/// Number columns that can be filtered on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NumberField {
    /// `confidence`.
    Confidence,
}

impl NumberField {
    /// Returns the column name.
    pub fn column(self) -> &'static str {
        match self {
            Self::Confidence => "confidence",
        }
    }
}

/// Timestamp columns that can be filtered on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeField {
    /// `created_at`.
    CreatedAt,
    /// `updated_at`.
    UpdatedAt,
    /// `event_time`: when what the memory says took effect, else its observation time
    /// (`created_at`).
    EventTime,
    /// `valid_to`: when a superseded value stopped being true.
    ValidTo,
}

impl TimeField {
    /// Returns the column name.
    pub fn column(self) -> &'static str {
        match self {
            Self::CreatedAt => "created_at",
            Self::UpdatedAt => "updated_at",
            Self::EventTime => "coalesce(event_time, created_at)",
            Self::ValidTo => "valid_to",
        }
    }
}

/// Comparison operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    /// Equal (same type and value).
    Eq,
    /// Not equal; also holds when the key is missing.
    Ne,
    /// Greater than.
    Gt,
    /// Greater than or equal.
    Gte,
    /// Less than.
    Lt,
    /// Less than or equal.
    Lte,
    /// Equal to one of a list.
    In,
    /// Equal to none of a list; also holds when the key is missing.
    Nin,
    /// Text contains a substring (case-sensitive).
    Contains,
    /// Text contains a substring (ASCII case-insensitive).
    IContains,
    /// The metadata key exists (`"*"`).
    Exists,
}

impl Operator {
    fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "eq" => Self::Eq,
            "ne" => Self::Ne,
            "gt" => Self::Gt,
            "gte" => Self::Gte,
            "lt" => Self::Lt,
            "lte" => Self::Lte,
            "in" => Self::In,
            "nin" => Self::Nin,
            "contains" => Self::Contains,
            "icontains" => Self::IContains,
            _ => return None,
        })
    }
}

/// A typed comparison value.
#[derive(Debug, Clone, PartialEq)]
pub enum Scalar {
    /// Text.
    Text(String),
    /// Any JSON number (compared numerically).
    Number(f64),
    /// `true` / `false` (compared as booleans, never as text).
    Bool(bool),
    /// A point in time (for `created_at` / `updated_at`).
    Time(DateTime<Utc>),
}

/// The right-hand side of a condition.
#[derive(Debug, Clone, PartialEq)]
pub enum Operand {
    /// One value.
    One(Scalar),
    /// A list, for `in` / `nin`.
    Many(Vec<Scalar>),
    /// No value, for `exists`.
    None,
}

/// The scope ids named at the top level of a filter, pulled out so the caller's scope can be built
/// from them (Mem0 expects scope ids inside `filters` for search and list).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopLevelScope {
    /// `user_id` given as a plain string at the top level.
    pub user_id: Option<String>,
    /// `agent_id` given as a plain string at the top level.
    pub agent_id: Option<String>,
    /// `run_id` given as a plain string at the top level.
    pub run_id: Option<String>,
}

/// Parses a filter object. Plain top-level string values of `user_id`, `agent_id` and `run_id` are
/// returned separately as scope ids; everything else becomes the filter expression.
///
/// # Errors
/// [`Error::Validation`] (field `filters`, naming the key) or [`Error::UnsupportedOperator`].
pub fn parse_filters(value: &Value) -> Result<(TopLevelScope, Option<Filter>)> {
    crate::text::reject_nul_in_json("filters", value)?;
    let Value::Object(object) = value else {
        return Err(Error::validation("filters", "must be a JSON object"));
    };
    let mut scope = TopLevelScope::default();
    let mut rest = Map::new();
    for (key, value) in object {
        match (key.as_str(), value) {
            ("user_id", Value::String(id)) => scope.user_id = Some(validate_scope_id("user_id", id)?),
            ("agent_id", Value::String(id)) => scope.agent_id = Some(validate_scope_id("agent_id", id)?),
            ("run_id", Value::String(id)) => scope.run_id = Some(validate_scope_id("run_id", id)?),
            _ => {
                rest.insert(key.clone(), value.clone());
            }
        }
    }
    if rest.is_empty() {
        return Ok((scope, None));
    }
    let mut budget = MAX_FILTER_CONDITIONS;
    let filter = parse_object(&rest, 0, &mut budget)?;
    Ok((scope, Some(filter)))
}

/// Parses a filter object with no special treatment of scope keys.
///
/// # Errors
/// As [`parse_filters`].
pub fn parse_filter(value: &Value) -> Result<Filter> {
    crate::text::reject_nul_in_json("filters", value)?;
    let Value::Object(object) = value else {
        return Err(Error::validation("filters", "must be a JSON object"));
    };
    let mut budget = MAX_FILTER_CONDITIONS;
    parse_object(object, 0, &mut budget)
}

fn parse_object(object: &Map<String, Value>, depth: usize, budget: &mut usize) -> Result<Filter> {
    if depth > MAX_FILTER_DEPTH {
        return Err(Error::validation("filters", format!("nested deeper than {MAX_FILTER_DEPTH} levels")));
    }
    if object.is_empty() {
        return Err(Error::validation("filters", "an empty object is not a condition"));
    }
    let mut parts = Vec::with_capacity(object.len());
    for (key, value) in object {
        let part = match key.as_str() {
            "AND" | "$and" => Filter::And(parse_list(key, value, depth, budget)?),
            "OR" | "$or" => Filter::Or(parse_list(key, value, depth, budget)?),
            "NOT" | "$not" => {
                let items = match value {
                    Value::Object(inner) => vec![parse_object(inner, depth + 1, budget)?],
                    _ => parse_list(key, value, depth, budget)?,
                };
                // NOT [a, b] means none of them holds.
                let inner = if items.len() == 1 {
                    items.into_iter().next().unwrap_or(Filter::And(vec![]))
                } else {
                    Filter::Or(items)
                };
                Filter::Not(Box::new(inner))
            }
            _ => parse_field(key, value, budget)?,
        };
        parts.push(part);
    }
    Ok(if parts.len() == 1 { parts.into_iter().next().unwrap_or(Filter::And(vec![])) } else { Filter::And(parts) })
}

fn parse_list(key: &str, value: &Value, depth: usize, budget: &mut usize) -> Result<Vec<Filter>> {
    let Value::Array(items) = value else {
        return Err(Error::validation("filters", format!("`{key}` must be a list of conditions")));
    };
    if items.is_empty() {
        return Err(Error::validation("filters", format!("`{key}` must not be empty")));
    }
    items
        .iter()
        .map(|item| match item {
            Value::Object(inner) => parse_object(inner, depth + 1, budget),
            _ => Err(Error::validation("filters", format!("every item of `{key}` must be an object"))),
        })
        .collect()
}

fn parse_field(key: &str, value: &Value, budget: &mut usize) -> Result<Filter> {
    let field = parse_field_name(key)?;
    let conditions: Vec<Condition> = match value {
        Value::Object(ops) => {
            if ops.is_empty() {
                return Err(Error::validation("filters", format!("`{key}` has an empty operator object")));
            }
            ops.iter()
                .map(|(op_name, operand)| {
                    let op = Operator::parse(op_name)
                        .ok_or_else(|| Error::UnsupportedOperator { operator: op_name.clone() })?;
                    build_condition(key, &field, op, operand)
                })
                .collect::<Result<_>>()?
        }
        Value::String(star) if star == "*" => vec![build_condition(key, &field, Operator::Exists, value)?],
        Value::Array(_) => vec![build_condition(key, &field, Operator::In, value)?],
        _ => vec![build_condition(key, &field, Operator::Eq, value)?],
    };
    if conditions.len() > *budget {
        return Err(Error::validation("filters", format!("more than {MAX_FILTER_CONDITIONS} conditions")));
    }
    *budget -= conditions.len();
    let mut parts: Vec<Filter> = conditions.into_iter().map(Filter::Condition).collect();
    Ok(if parts.len() == 1 { parts.remove(0) } else { Filter::And(parts) })
}

fn parse_field_name(key: &str) -> Result<Field> {
    Ok(match key {
        "user_id" => Field::Text(TextField::UserId),
        "agent_id" => Field::Text(TextField::AgentId),
        "run_id" => Field::Text(TextField::RunId),
        "actor_id" => Field::Text(TextField::ActorId),
        "role" => Field::Text(TextField::Role),
        "attributed_to" => Field::Text(TextField::AttributedTo),
        "memory_type" => Field::Text(TextField::MemoryType),
        "hash" => Field::Text(TextField::Hash),
        "source_type" => Field::Text(TextField::SourceType),
        "source_actor" => Field::Text(TextField::SourceActor),
        "source_app" => Field::Text(TextField::SourceApp),
        "evidence_ref" => Field::Text(TextField::EvidenceRef),
        "state_key" => Field::Text(TextField::StateKey),
        "status" => Field::Text(TextField::Status),
        "confidence" => Field::Number(NumberField::Confidence),
        "created_at" => Field::Time(TimeField::CreatedAt),
        "updated_at" => Field::Time(TimeField::UpdatedAt),
        "event_time" => Field::Time(TimeField::EventTime),
        "valid_to" => Field::Time(TimeField::ValidTo),
        _ => {
            validate_metadata_key(key)?;
            Field::Metadata(key.to_owned())
        }
    })
}

/// Checks a metadata key used in a filter: `[A-Za-z0-9_.-]{1,64}`.
///
/// # Errors
/// [`Error::Validation`] naming the key.
pub fn validate_metadata_key(key: &str) -> Result<()> {
    let valid = !key.is_empty()
        && key.len() <= MAX_KEY_LEN
        && key.bytes().all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'.' | b'-'));
    if valid {
        Ok(())
    } else {
        let shown: String = key.chars().take(MAX_KEY_LEN).collect();
        Err(Error::validation(
            "filters",
            format!("invalid key `{shown}`: keys are 1-{MAX_KEY_LEN} characters of A-Z a-z 0-9 _ . -"),
        ))
    }
}

fn build_condition(key: &str, field: &Field, op: Operator, operand: &Value) -> Result<Condition> {
    let invalid = |message: String| Error::validation("filters", format!("`{key}`: {message}"));
    let value = match op {
        Operator::Exists => {
            if !matches!(field, Field::Metadata(_) | Field::Text(_)) {
                return Err(invalid("`*` (has a value) applies to metadata keys and text fields".into()));
            }
            Operand::None
        }
        Operator::In | Operator::Nin => {
            let Value::Array(items) = operand else {
                return Err(invalid("`in`/`nin` need a list".into()));
            };
            if items.is_empty() || items.len() > MAX_IN_VALUES {
                return Err(invalid(format!("`in`/`nin` lists hold 1 to {MAX_IN_VALUES} values")));
            }
            Operand::Many(items.iter().map(|item| scalar(field, item).map_err(&invalid)).collect::<Result<_>>()?)
        }
        Operator::Contains | Operator::IContains => match operand {
            Value::String(text) if matches!(field, Field::Text(_) | Field::Metadata(_)) => {
                Operand::One(Scalar::Text(text.clone()))
            }
            _ => return Err(invalid("`contains`/`icontains` need a string and a text field".into())),
        },
        Operator::Gt | Operator::Gte | Operator::Lt | Operator::Lte => {
            let value = scalar(field, operand).map_err(&invalid)?;
            if matches!(value, Scalar::Bool(_)) {
                return Err(invalid("booleans cannot be ordered".into()));
            }
            Operand::One(value)
        }
        Operator::Eq | Operator::Ne => Operand::One(scalar(field, operand).map_err(&invalid)?),
    };
    Ok(Condition { field: field.clone(), op, value })
}

fn scalar(field: &Field, value: &Value) -> std::result::Result<Scalar, String> {
    match (field, value) {
        (Field::Time(_), Value::String(text)) => parse_time(text).map(Scalar::Time),
        (Field::Time(_), _) => Err("timestamps are compared with RFC 3339 strings or YYYY-MM-DD dates".into()),
        (Field::Text(_), Value::String(text)) => {
            if text == "*" {
                Err("`*` is not a valid value here".into())
            } else {
                Ok(Scalar::Text(text.clone()))
            }
        }
        (Field::Text(_), _) => Err("this field holds text; compare it with a string".into()),
        (Field::Number(_), Value::Number(number)) => number
            .as_f64()
            .filter(|number| number.is_finite())
            .map(Scalar::Number)
            .ok_or_else(|| "number out of range".to_owned()),
        (Field::Number(_), _) => Err("this field holds a number; compare it with a number".into()),
        (Field::Metadata(_), Value::String(text)) => Ok(Scalar::Text(text.clone())),
        (Field::Metadata(_), Value::Bool(flag)) => Ok(Scalar::Bool(*flag)),
        (Field::Metadata(_), Value::Number(number)) => number
            .as_f64()
            .filter(|number| number.is_finite())
            .map(Scalar::Number)
            .ok_or_else(|| "number out of range".to_owned()),
        (Field::Metadata(_), Value::Null) => Err("null is not a comparable value".into()),
        (Field::Metadata(_), _) => Err("values are strings, numbers or booleans".into()),
    }
}

fn parse_time(text: &str) -> std::result::Result<DateTime<Utc>, String> {
    if let Ok(time) = DateTime::parse_from_rfc3339(text) {
        return Ok(time.with_timezone(&Utc));
    }
    NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .ok()
        .and_then(|date| date.and_hms_opt(0, 0, 0))
        .map(|time| time.and_utc())
        .ok_or_else(|| format!("`{text}` is not an RFC 3339 timestamp or YYYY-MM-DD date"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn cond(key: &str, op: Operator, value: Operand) -> Filter {
        Filter::Condition(Condition { field: parse_field_name(key).expect("field"), op, value })
    }

    #[test]
    fn plain_values_are_equality_and_lists_are_in() {
        let filter = parse_filter(&json!({"topic": "food"})).expect("parse");
        assert_eq!(filter, cond("topic", Operator::Eq, Operand::One(Scalar::Text("food".into()))));
        let filter = parse_filter(&json!({"n": [1, 2]})).expect("parse");
        assert_eq!(filter, cond("n", Operator::In, Operand::Many(vec![Scalar::Number(1.0), Scalar::Number(2.0)])));
    }

    #[test]
    fn values_keep_their_types() {
        let filter = parse_filter(&json!({"flag": true, "count": {"gte": 3}})).expect("parse");
        let Filter::And(parts) = filter else { panic!("and") };
        assert!(parts.contains(&cond("flag", Operator::Eq, Operand::One(Scalar::Bool(true)))));
        assert!(parts.contains(&cond("count", Operator::Gte, Operand::One(Scalar::Number(3.0)))));
    }

    #[test]
    fn scope_keys_at_top_level_become_the_scope() {
        let (scope, filter) = parse_filters(&json!({"user_id": "alice", "topic": "x"})).expect("parse");
        assert_eq!(scope.user_id.as_deref(), Some("alice"));
        assert!(matches!(filter, Some(Filter::Condition(_))));
        let (scope, filter) = parse_filters(&json!({"user_id": "alice"})).expect("parse");
        assert_eq!(scope.user_id.as_deref(), Some("alice"));
        assert!(filter.is_none());
    }

    #[test]
    fn logic_nests_to_any_depth_within_bounds() {
        let nested = json!({"AND": [{"OR": [{"a": 1}, {"NOT": [{"b": {"in": ["x", "y"]}}]}]}, {"c": "*"}]});
        let filter = parse_filter(&nested).expect("parse");
        let Filter::And(parts) = filter else { panic!("and") };
        assert!(matches!(&parts[0], Filter::Or(inner) if matches!(inner[1], Filter::Not(_))));
        let mut deep = json!({"k": 1});
        for _ in 0..=MAX_FILTER_DEPTH {
            deep = json!({"AND": [deep]});
        }
        assert!(parse_filter(&deep).is_err());
    }

    #[test]
    fn unknown_operator_is_named() {
        let error = parse_filter(&json!({"a": {"$gt": 1}})).expect_err("unknown op");
        assert!(matches!(error, Error::UnsupportedOperator { ref operator } if operator == "$gt"));
    }

    #[test]
    fn rejects_bad_keys_and_values() {
        for bad in [
            json!({"a b": 1}),
            json!({"x'; drop table memories; --": 1}),
            json!({"": 1}),
            json!({"user_id": "*"}),
            json!({"user_id": {"eq": "*"}}),
            json!({"user_id": 3}),
            json!({"a": {"in": "x"}}),
            json!({"a": {"in": []}}),
            json!({"a": {"gt": true}}),
            json!({"a": null}),
            json!({"a": {}}),
            json!({"OR": []}),
            json!({"OR": [1]}),
            json!({"created_at": {"gt": "yesterday"}}),
            json!({"created_at": "*"}),
            json!({"confidence": "high"}),
            json!({"confidence": {"contains": "9"}}),
            json!({"confidence": "*"}),
            json!({"source_type": 1}),
        ] {
            let (_, filter) = match parse_filters(&bad) {
                Err(_) => continue,
                Ok(parsed) => parsed,
            };
            panic!("{bad} parsed to {filter:?}");
        }
        assert!(parse_filter(&json!({(("k").repeat(65)): 1})).is_err());
    }

    #[test]
    fn condition_budget_is_enforced() {
        let many: Vec<Value> = (0..=MAX_FILTER_CONDITIONS).map(|index| json!({"k": index})).collect();
        assert!(parse_filter(&json!({"OR": many})).is_err());
    }

    #[test]
    fn times_accept_rfc3339_and_dates() {
        let filter = parse_filter(&json!({"created_at": {"gte": "2024-01-02", "lt": "2024-02-01T00:00:00+02:00"}}))
            .expect("parse");
        let Filter::And(parts) = filter else { panic!("and") };
        assert_eq!(parts.len(), 2);
    }
}
