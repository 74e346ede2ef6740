//! Compiles tenant, scope, expiration and [`Filter`] expressions to SQLite `WHERE` clauses.
//! Every value is a bound parameter; metadata keys are validated and bound as JSON paths.
//! Each condition is made two-valued (never NULL), so `NOT` is an exact complement.

use crate::filter::{Condition, Field, Filter, Operand, Operator, Scalar};
use crate::store::ScopedQuery;

/// A value bound to a `?` placeholder.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Bind {
    Text(String),
    Real(f64),
    Integer(i64),
}

/// SQL text with its parameters in placeholder order.
#[derive(Debug, Default)]
pub(crate) struct Clause {
    pub sql: String,
    pub binds: Vec<Bind>,
}

impl Clause {
    fn push(&mut self, sql: &str) {
        self.sql.push_str(sql);
    }

    fn bind(&mut self, bind: Bind) {
        self.sql.push('?');
        self.binds.push(bind);
    }
}

/// Builds the `WHERE` body for `query`: tenant, scope, expiration, then the filter.
pub(crate) fn where_clause(query: &ScopedQuery) -> Clause {
    let mut clause = Clause::default();
    clause.push("tenant = ");
    clause.bind(Bind::Text(query.tenant.clone()));
    for (column, value) in query.scope.pairs() {
        clause.push(&format!(" and {column} = "));
        clause.bind(Bind::Text(value.to_owned()));
    }
    if !query.show_expired {
        clause.push(" and (expiration_date is null or expiration_date >= ");
        clause.bind(Bind::Text(query.today.format("%Y-%m-%d").to_string()));
        clause.push(")");
    }
    if let Some(filter) = &query.filter {
        clause.push(" and ");
        compile(filter, &mut clause);
    }
    clause
}

fn compile(filter: &Filter, clause: &mut Clause) {
    match filter {
        Filter::And(parts) | Filter::Or(parts) if parts.is_empty() => {
            clause.push(if matches!(filter, Filter::And(_)) { "1" } else { "0" });
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
            clause.push(", 0)");
        }
    }
}

fn condition_sql(condition: &Condition, clause: &mut Clause) {
    match (&condition.op, &condition.value) {
        (Operator::Ne, Operand::One(value)) => {
            clause.push("not coalesce(");
            equals(&condition.field, value, clause);
            clause.push(", 0)");
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
                equals(&condition.field, value, clause);
            }
            clause.push("), 0)");
        }
        (Operator::Eq, Operand::One(value)) => equals(&condition.field, value, clause),
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
            let insensitive = condition.op == Operator::IContains;
            clause.push("(");
            let value_sql = text_value(&condition.field, clause);
            let (open, close) = if insensitive { ("lower(", ")") } else { ("", "") };
            clause.push(&format!(" and instr({open}{value_sql}{close}, {open}"));
            clause.bind(Bind::Text(needle.clone()));
            clause.push(&format!("{close}) > 0)"));
        }
        (Operator::Exists, _) => {
            if let Field::Metadata(key) = &condition.field {
                clause.push("json_type(metadata, ");
                clause.bind(Bind::Text(json_path(key)));
                clause.push(") is not null");
            } else {
                clause.push("0");
            }
        }
        // The parser never builds other shapes; an impossible one matches nothing.
        _ => clause.push("0"),
    }
}

/// Pushes a type guard for a text value of `field` and returns the SQL expression of that value.
fn text_value(field: &Field, clause: &mut Clause) -> String {
    match field {
        Field::Text(text) => {
            clause.push(&format!("{} is not null", text.column()));
            text.column().to_owned()
        }
        Field::Time(time) => {
            clause.push("0");
            time.column().to_owned()
        }
        Field::Metadata(key) => {
            let path = json_path(key);
            clause.push("json_type(metadata, ");
            clause.bind(Bind::Text(path.clone()));
            clause.push(") = 'text'");
            // The path is bound twice, as two parameters.
            clause.binds.push(Bind::Text(path));
            "json_extract(metadata, ?)".to_owned()
        }
    }
}

fn equals(field: &Field, value: &Scalar, clause: &mut Clause) {
    compare(field, "=", value, clause);
}

fn compare(field: &Field, symbol: &str, value: &Scalar, clause: &mut Clause) {
    match (field, value) {
        (Field::Text(text), Scalar::Text(text_value)) => {
            clause.push(&format!("{} {symbol} ", text.column()));
            clause.bind(Bind::Text(text_value.clone()));
        }
        (Field::Time(time), Scalar::Time(at)) => {
            clause.push(&format!("{} {symbol} ", time.column()));
            clause.bind(Bind::Integer(at.timestamp_micros()));
        }
        (Field::Metadata(key), scalar) => {
            let path = json_path(key);
            clause.push("(json_type(metadata, ");
            clause.bind(Bind::Text(path.clone()));
            match scalar {
                Scalar::Text(text) => {
                    clause.push(") = 'text' and json_extract(metadata, ");
                    clause.bind(Bind::Text(path));
                    clause.push(&format!(") {symbol} "));
                    clause.bind(Bind::Text(text.clone()));
                }
                Scalar::Number(number) => {
                    clause.push(") in ('integer', 'real') and json_extract(metadata, ");
                    clause.bind(Bind::Text(path));
                    clause.push(&format!(") {symbol} "));
                    clause.bind(Bind::Real(*number));
                }
                Scalar::Bool(flag) => {
                    // json_type tells true from false (and from 1/0); equality only.
                    clause.push(") = ");
                    clause.bind(Bind::Text(if *flag { "true" } else { "false" }.to_owned()));
                }
                Scalar::Time(at) => {
                    clause.push(") = 'text' and json_extract(metadata, ");
                    clause.bind(Bind::Text(path));
                    clause.push(&format!(") {symbol} "));
                    clause.bind(Bind::Text(at.to_rfc3339()));
                }
            }
            clause.push(")");
        }
        // Type mismatches are rejected by the parser; match nothing if one slips through.
        _ => clause.push("0"),
    }
}

/// Returns the JSON path of a top-level metadata key. Keys are validated to `[A-Za-z0-9_.-]`, and
/// quoting keeps a dotted key one key rather than a nested path.
fn json_path(key: &str) -> String {
    format!("$.\"{key}\"")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::filter::parse_filter;

    #[test]
    fn placeholders_match_binds() {
        for filter in [
            json!({"a": 1}),
            json!({"a": {"contains": "x"}, "user_id": {"icontains": "B"}}),
            json!({"OR": [{"a": {"in": [1, "x", true]}}, {"NOT": {"b": "*"}}]}),
            json!({"created_at": {"gte": "2024-01-01"}, "c": {"nin": ["p", "q"]}}),
        ] {
            let query = ScopedQuery {
                tenant: "t".into(),
                scope: crate::scope::Scope::new(Some("u"), None, None).expect("scope"),
                filter: Some(parse_filter(&filter).expect("parse")),
                show_expired: false,
                today: chrono::NaiveDate::from_ymd_opt(2026, 1, 1).expect("date"),
            };
            let clause = where_clause(&query);
            assert_eq!(clause.sql.matches('?').count(), clause.binds.len(), "{}", clause.sql);
            assert!(!clause.sql.contains("'x'"), "values are never inlined: {}", clause.sql);
        }
    }
}
