//! One compiler from a [`ScopedQuery`] (tenant, scope, expiration and the [`Filter`] language) to
//! a SQL `WHERE` body, for every SQL store. What differs between SQL dialects (placeholders,
//! boolean literals, how dates and times are bound, JSON access to metadata, substring search,
//! collation) sits behind [`Dialect`]; the tree walk and the semantics are written once:
//! - every value is a bound parameter, never inlined; metadata keys are validated by the parser
//!   and bound too;
//! - comparisons are typed: a number matches only a JSON number, text only JSON text, a boolean
//!   only a JSON boolean (equality only);
//! - every condition is two-valued (`coalesce(…, false)`), so `NOT` is an exact complement and
//!   `ne`/`nin` match memories without the key.
//!
//! The shared conformance suite (`tests/store_conformance.rs`) checks that both stores return the
//! same memories for the same filters.

use chrono::{DateTime, NaiveDate, Utc};

use crate::filter::{Condition, Field, Filter, Operand, Operator, Scalar};
use crate::store::ScopedQuery;

/// A value bound to a placeholder.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Bind {
    Text(String),
    Float(f64),
    Integer(i64),
    Time(DateTime<Utc>),
    Date(NaiveDate),
    Uuid(uuid::Uuid),
}

/// The JSON types a metadata value is checked against before it is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JsonKind {
    Text,
    Number,
}

/// What a SQL dialect writes differently.
pub(crate) trait Dialect {
    /// The placeholder of the `index`-th (1-based) parameter of a statement.
    fn placeholder(&self, index: usize) -> String;
    /// The literal of a boolean.
    fn literal(&self, value: bool) -> &'static str;
    /// How a day is bound (expiration dates).
    fn date(&self, date: NaiveDate) -> Bind;
    /// How a point in time is bound (`created_at`, `updated_at`).
    fn time(&self, at: DateTime<Utc>) -> Bind;
    /// What follows a text comparison (a collation making order byte order).
    fn text_collation(&self) -> &'static str;
    /// The bound form of a metadata key.
    fn metadata_key(&self, key: &str) -> Bind;
    /// SQL that is true when the metadata value under the key bound at `key` has `kind`.
    fn metadata_is(&self, key: &str, kind: JsonKind) -> String;
    /// SQL that is true when the metadata value under the key bound at `key` is the JSON boolean
    /// bound at `flag` (bound with [`Dialect::boolean`]).
    fn metadata_is_boolean(&self, key: &str, flag: &str) -> String;
    /// How a boolean compared with metadata is bound.
    fn boolean(&self, flag: bool) -> Bind;
    /// SQL of the metadata value under the key bound at `key`, as `kind`.
    fn metadata_value(&self, key: &str, kind: JsonKind) -> String;
    /// SQL that is true when the metadata has the key bound at `key`.
    fn metadata_has(&self, key: &str) -> String;
    /// SQL that is true when `haystack` contains `needle` (both SQL expressions).
    fn contains(&self, haystack: &str, needle: &str) -> String;
}

/// SQLite: `?` placeholders, 0/1, dates as text, times as microseconds, JSON1 functions with a
/// quoted JSON path per key, `instr`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Sqlite;

impl Dialect for Sqlite {
    fn placeholder(&self, _index: usize) -> String {
        "?".to_owned()
    }
    fn literal(&self, value: bool) -> &'static str {
        if value {
            "1"
        } else {
            "0"
        }
    }
    fn date(&self, date: NaiveDate) -> Bind {
        Bind::Text(date.format("%Y-%m-%d").to_string())
    }
    fn time(&self, at: DateTime<Utc>) -> Bind {
        Bind::Integer(at.timestamp_micros())
    }
    fn text_collation(&self) -> &'static str {
        ""
    }
    fn metadata_key(&self, key: &str) -> Bind {
        // Quoting keeps a dotted key one key rather than a nested path.
        Bind::Text(format!("$.\"{key}\""))
    }
    fn metadata_is(&self, key: &str, kind: JsonKind) -> String {
        match kind {
            JsonKind::Text => format!("json_type(metadata, {key}) = 'text'"),
            JsonKind::Number => format!("json_type(metadata, {key}) in ('integer', 'real')"),
        }
    }
    fn metadata_is_boolean(&self, key: &str, flag: &str) -> String {
        // json_type tells true from false (and from 1/0).
        format!("json_type(metadata, {key}) = {flag}")
    }
    fn boolean(&self, flag: bool) -> Bind {
        Bind::Text(if flag { "true" } else { "false" }.to_owned())
    }
    fn metadata_value(&self, key: &str, _kind: JsonKind) -> String {
        format!("json_extract(metadata, {key})")
    }
    fn metadata_has(&self, key: &str) -> String {
        format!("json_type(metadata, {key}) is not null")
    }
    fn contains(&self, haystack: &str, needle: &str) -> String {
        format!("instr({haystack}, {needle}) > 0")
    }
}

/// Postgres: `$n` placeholders, typed dates and times, `jsonb` operators, `strpos`, byte-order
/// collation for text (like SQLite's BINARY).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Postgres;

impl Dialect for Postgres {
    fn placeholder(&self, index: usize) -> String {
        format!("${index}")
    }
    fn literal(&self, value: bool) -> &'static str {
        if value {
            "true"
        } else {
            "false"
        }
    }
    fn date(&self, date: NaiveDate) -> Bind {
        Bind::Date(date)
    }
    fn time(&self, at: DateTime<Utc>) -> Bind {
        Bind::Time(at)
    }
    fn text_collation(&self) -> &'static str {
        " collate \"C\""
    }
    fn metadata_key(&self, key: &str) -> Bind {
        Bind::Text(key.to_owned())
    }
    fn metadata_is(&self, key: &str, kind: JsonKind) -> String {
        match kind {
            JsonKind::Text => format!("jsonb_typeof(metadata -> {key}) = 'string'"),
            JsonKind::Number => format!("jsonb_typeof(metadata -> {key}) = 'number'"),
        }
    }
    fn metadata_is_boolean(&self, key: &str, flag: &str) -> String {
        format!("jsonb_typeof(metadata -> {key}) = 'boolean' and (metadata ->> {key}) = {flag}")
    }
    fn boolean(&self, flag: bool) -> Bind {
        Bind::Text(flag.to_string())
    }
    fn metadata_value(&self, key: &str, kind: JsonKind) -> String {
        match kind {
            JsonKind::Text => format!("(metadata ->> {key})"),
            JsonKind::Number => format!("(metadata ->> {key})::float8"),
        }
    }
    fn metadata_has(&self, key: &str) -> String {
        format!("metadata ? {key}")
    }
    fn contains(&self, haystack: &str, needle: &str) -> String {
        format!("strpos({haystack}, {needle}) > 0")
    }
}

/// SQL text with its parameters in placeholder order; placeholders are numbered from `first`.
#[derive(Debug)]
pub(crate) struct Clause<D: Dialect> {
    pub sql: String,
    pub binds: Vec<Bind>,
    first: usize,
    dialect: D,
}

impl<D: Dialect> Clause<D> {
    /// An empty clause whose first placeholder is number `first`.
    pub fn starting_at(dialect: D, first: usize) -> Self {
        Self { sql: String::new(), binds: Vec::new(), first, dialect }
    }

    fn push(&mut self, sql: &str) {
        self.sql.push_str(sql);
    }

    /// Records `bind` and returns its placeholder (not yet written to the SQL).
    fn parameter(&mut self, bind: Bind) -> String {
        self.binds.push(bind);
        self.dialect.placeholder(self.first + self.binds.len() - 1)
    }

    /// Appends a placeholder for `bind`.
    pub fn bind(&mut self, bind: Bind) {
        let placeholder = self.parameter(bind);
        self.sql.push_str(&placeholder);
    }

    /// The SQL and its binds.
    pub fn into_parts(self) -> (String, Vec<Bind>) {
        (self.sql, self.binds)
    }

    /// The number of the next placeholder.
    pub fn next_index(&self) -> usize {
        self.first + self.binds.len()
    }
}

/// Builds the `WHERE` body for `query` (tenant, scope, expiration, then the filter), placeholders
/// numbered from `first`.
pub(crate) fn where_clause<D: Dialect>(dialect: D, query: &ScopedQuery, first: usize) -> Clause<D> {
    let mut clause = Clause::starting_at(dialect, first);
    clause.push("tenant = ");
    clause.bind(Bind::Text(query.tenant.clone()));
    for (column, value) in query.scope.pairs() {
        clause.push(&format!(" and {column} = "));
        clause.bind(Bind::Text(value.to_owned()));
    }
    if !query.include_superseded {
        clause.push(" and status not in ('superseded', 'retired')");
    }
    if !query.show_expired {
        clause.push(" and (expiration_date is null or expiration_date >= ");
        let today = clause.dialect.date(query.today);
        clause.bind(today);
        clause.push(")");
    }
    if let Some(filter) = &query.filter {
        clause.push(" and ");
        compile(filter, &mut clause);
    }
    clause
}

fn compile<D: Dialect>(filter: &Filter, clause: &mut Clause<D>) {
    match filter {
        Filter::And(parts) | Filter::Or(parts) if parts.is_empty() => {
            let literal = clause.dialect.literal(matches!(filter, Filter::And(_)));
            clause.push(literal);
        }
        Filter::And(parts) | Filter::Or(parts) => {
            let joiner = if matches!(filter, Filter::And(_)) { " and " } else { " or " };
            clause.push("(");
            for (index, part) in parts.iter().enumerate() {
                if index > 0 {
                    clause.push(joiner);
                }
                compile(part, clause);
            }
            clause.push(")");
        }
        Filter::Not(inner) => {
            clause.push("(not ");
            compile(inner, clause);
            clause.push(")");
        }
        Filter::Condition(condition) => {
            clause.push("coalesce(");
            condition_sql(condition, clause);
            let never = clause.dialect.literal(false);
            clause.push(&format!(", {never})"));
        }
    }
}

fn condition_sql<D: Dialect>(condition: &Condition, clause: &mut Clause<D>) {
    let never = clause.dialect.literal(false);
    match (&condition.op, &condition.value) {
        (Operator::Ne, Operand::One(value)) => {
            clause.push("not coalesce(");
            compare(&condition.field, "=", value, clause);
            clause.push(&format!(", {never})"));
        }
        (Operator::In | Operator::Nin, Operand::Many(values)) => {
            if condition.op == Operator::Nin {
                clause.push("not ");
            }
            clause.push("coalesce((");
            for (index, value) in values.iter().enumerate() {
                if index > 0 {
                    clause.push(" or ");
                }
                compare(&condition.field, "=", value, clause);
            }
            clause.push(&format!("), {never})"));
        }
        (Operator::Eq, Operand::One(value)) => compare(&condition.field, "=", value, clause),
        (Operator::Gt | Operator::Gte | Operator::Lt | Operator::Lte, Operand::One(value)) => {
            let symbol = match condition.op {
                Operator::Gt => ">",
                Operator::Gte => ">=",
                Operator::Lt => "<",
                _ => "<=",
            };
            compare(&condition.field, symbol, value, clause);
        }
        (Operator::Contains | Operator::IContains, Operand::One(Scalar::Text(needle))) => {
            let (guard, value) = match &condition.field {
                Field::Text(text) => (format!("{} is not null", text.column()), text.column().to_owned()),
                Field::Metadata(key) => {
                    let bound = clause.dialect.metadata_key(key);
                    let guard_key = clause.parameter(bound.clone());
                    let guard = clause.dialect.metadata_is(&guard_key, JsonKind::Text);
                    let value_key = clause.parameter(bound);
                    (guard, clause.dialect.metadata_value(&value_key, JsonKind::Text))
                }
                Field::Time(_) | Field::Number(_) => {
                    clause.push(never);
                    return;
                }
            };
            let needle = clause.parameter(Bind::Text(needle.clone()));
            let (haystack, needle) = if condition.op == Operator::IContains {
                (format!("lower({value})"), format!("lower({needle})"))
            } else {
                (value, needle)
            };
            let contains = clause.dialect.contains(&haystack, &needle);
            clause.push(&format!("({guard} and {contains})"));
        }
        (Operator::Exists, _) => match &condition.field {
            Field::Metadata(key) => {
                let bound = clause.dialect.metadata_key(key);
                let key = clause.parameter(bound);
                let has = clause.dialect.metadata_has(&key);
                clause.push(&has);
            }
            Field::Text(text) => clause.push(&format!("{} is not null", text.column())),
            Field::Time(_) | Field::Number(_) => clause.push(never),
        },
        // The parser never builds other shapes; an impossible one matches nothing.
        _ => clause.push(never),
    }
}

/// Placeholders are taken in the order they appear in the SQL, so each is created right where it
/// is written.
fn compare<D: Dialect>(field: &Field, symbol: &str, value: &Scalar, clause: &mut Clause<D>) {
    let never = clause.dialect.literal(false);
    match (field, value) {
        (Field::Text(text), Scalar::Text(text_value)) => {
            clause.push(&format!("{} {symbol} ", text.column()));
            clause.bind(Bind::Text(text_value.clone()));
            let collation = clause.dialect.text_collation();
            clause.push(collation);
        }
        (Field::Time(time), Scalar::Time(at)) => {
            clause.push(&format!("{} {symbol} ", time.column()));
            let at = clause.dialect.time(*at);
            clause.bind(at);
        }
        (Field::Number(number), Scalar::Number(value)) => {
            clause.push(&format!("{} {symbol} ", number.column()));
            clause.bind(Bind::Float(*value));
        }
        (Field::Metadata(key), scalar) => {
            let bound = clause.dialect.metadata_key(key);
            if let Scalar::Bool(flag) = scalar {
                // Booleans compare for equality only.
                let key = clause.parameter(bound);
                let flag_bind = clause.dialect.boolean(*flag);
                let flag = clause.parameter(flag_bind);
                let test = clause.dialect.metadata_is_boolean(&key, &flag);
                // Postgres names the key twice in this test; SQLite once. Keep the binds in
                // placeholder order for `?` dialects: the SQLite form has exactly two.
                clause.push(&format!("({test})"));
                return;
            }
            let (kind, operand, collation) = match scalar {
                Scalar::Text(text) => (JsonKind::Text, Bind::Text(text.clone()), clause.dialect.text_collation()),
                Scalar::Number(number) => (JsonKind::Number, Bind::Float(*number), ""),
                Scalar::Time(at) => (JsonKind::Text, Bind::Text(at.to_rfc3339()), ""),
                Scalar::Bool(_) => unreachable!("handled above"),
            };
            let guard_key = clause.parameter(bound.clone());
            let guard = clause.dialect.metadata_is(&guard_key, kind);
            let value_key = clause.parameter(bound);
            let value = clause.dialect.metadata_value(&value_key, kind);
            let operand = clause.parameter(operand);
            clause.push(&format!("({guard} and {value} {symbol} {operand}{collation})"));
        }
        // Type mismatches are rejected by the parser; match nothing if one slips through.
        _ => clause.push(never),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::filter::parse_filter;

    fn query(filter: serde_json::Value) -> ScopedQuery {
        ScopedQuery {
            tenant: "t".into(),
            scope: crate::scope::Scope::new(Some("u"), None, None).expect("scope"),
            filter: Some(parse_filter(&filter).expect("parse")),
            show_expired: false,
            today: NaiveDate::from_ymd_opt(2026, 1, 1).expect("date"),
            include_superseded: false,
            fresh_since: None,
        }
    }

    fn filters() -> Vec<serde_json::Value> {
        vec![
            json!({"a": 1}),
            json!({"a": true, "b": {"ne": false}}),
            json!({"a": {"contains": "x"}, "user_id": {"icontains": "B"}}),
            json!({"OR": [{"a": {"in": [1, "x'", true]}}, {"NOT": {"b": "*"}}], "c": {"icontains": "Q"}}),
            json!({"created_at": {"gte": "2024-01-01"}, "c": {"nin": ["p", "q"]}}),
        ]
    }

    #[test]
    fn sqlite_placeholders_match_binds_and_values_are_never_inlined() {
        for filter in filters() {
            let clause = where_clause(Sqlite, &query(filter), 1);
            assert_eq!(clause.sql.matches('?').count(), clause.binds.len(), "{}", clause.sql);
            assert!(!clause.sql.contains("'x") && !clause.sql.contains("'p'"), "{}", clause.sql);
        }
    }

    #[test]
    fn postgres_placeholders_are_numbered_in_order() {
        for filter in filters() {
            let clause = where_clause(Postgres, &query(filter), 2);
            let placeholders: Vec<usize> = clause
                .sql
                .split('$')
                .skip(1)
                .filter_map(|rest| rest.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
                .collect();
            let mut distinct = placeholders.clone();
            distinct.sort_unstable();
            distinct.dedup();
            assert_eq!(distinct, (2..clause.next_index()).collect::<Vec<_>>(), "{}", clause.sql);
            assert!(!clause.sql.contains("x'"), "{}", clause.sql);
        }
    }
}
