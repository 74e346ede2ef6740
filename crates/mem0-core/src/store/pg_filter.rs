//! Compiles tenant, scope, expiration and [`Filter`] expressions to Postgres `WHERE` clauses over
//! typed columns and `jsonb`, with numbered bound parameters. Comparisons are typed (`jsonb_typeof`
//! guards), and every condition is two-valued so `NOT` is an exact complement — the same semantics
//! as the SQLite compiler, checked by the shared conformance suite.

use chrono::{DateTime, NaiveDate, Utc};

use crate::filter::{Condition, Field, Filter, Operand, Operator, Scalar};
use crate::store::ScopedQuery;

/// A value bound to a `$n` placeholder.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum PgBind {
    Text(String),
    Float(f64),
    Time(DateTime<Utc>),
    Date(NaiveDate),
    Uuid(uuid::Uuid),
}

/// SQL text with its parameters; placeholders are numbered from `first`.
#[derive(Debug)]
pub(crate) struct PgClause {
    pub sql: String,
    pub binds: Vec<PgBind>,
    first: usize,
}

impl PgClause {
    pub fn starting_at(first: usize) -> Self {
        Self { sql: String::new(), binds: Vec::new(), first }
    }

    fn push(&mut self, sql: &str) {
        self.sql.push_str(sql);
    }

    /// Appends a placeholder for `bind` and returns its text.
    pub fn bind(&mut self, bind: PgBind) -> String {
        self.binds.push(bind);
        let placeholder = format!("${}", self.first + self.binds.len() - 1);
        self.sql.push_str(&placeholder);
        placeholder
    }

    /// Returns the next placeholder number.
    pub fn next_index(&self) -> usize {
        self.first + self.binds.len()
    }
}

/// Builds the `WHERE` body for `query`, placeholders from `$first`.
pub(crate) fn where_clause(query: &ScopedQuery, first: usize) -> PgClause {
    let mut clause = PgClause::starting_at(first);
    clause.push("tenant = ");
    clause.bind(PgBind::Text(query.tenant.clone()));
    for (column, value) in query.scope.pairs() {
        clause.push(&format!(" and {column} = "));
        clause.bind(PgBind::Text(value.to_owned()));
    }
    if !query.show_expired {
        clause.push(" and (expiration_date is null or expiration_date >= ");
        clause.bind(PgBind::Date(query.today));
        clause.push(")");
    }
    if let Some(filter) = &query.filter {
        clause.push(" and ");
        compile(filter, &mut clause);
    }
    clause
}

fn compile(filter: &Filter, clause: &mut PgClause) {
    match filter {
        Filter::And(parts) | Filter::Or(parts) if parts.is_empty() => {
            clause.push(if matches!(filter, Filter::And(_)) { "true" } else { "false" });
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
            clause.push(", false)");
        }
    }
}

fn condition_sql(condition: &Condition, clause: &mut PgClause) {
    match (&condition.op, &condition.value) {
        (Operator::Ne, Operand::One(value)) => {
            clause.push("not coalesce(");
            compare(&condition.field, "=", value, clause);
            clause.push(", false)");
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
            clause.push("), false)");
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
            let (open, close) = if condition.op == Operator::IContains { ("lower(", ")") } else { ("", "") };
            match &condition.field {
                Field::Text(text) => {
                    clause.push(&format!("strpos({open}{}{close}, {open}", text.column()));
                }
                Field::Metadata(key) => {
                    clause.push("(jsonb_typeof(metadata -> ");
                    let key_placeholder = clause.bind(PgBind::Text(key.clone()));
                    clause
                        .push(&format!(") = 'string' and strpos({open}metadata ->> {key_placeholder}{close}, {open}"));
                }
                Field::Time(_) => {
                    clause.push("false");
                    return;
                }
            }
            clause.bind(PgBind::Text(needle.clone()));
            clause.push(&format!("{close}) > 0"));
            if matches!(condition.field, Field::Metadata(_)) {
                clause.push(")");
            }
        }
        (Operator::Exists, _) => match &condition.field {
            Field::Metadata(key) => {
                clause.push("metadata ? ");
                clause.bind(PgBind::Text(key.clone()));
            }
            _ => clause.push("false"),
        },
        _ => clause.push("false"),
    }
}

fn compare(field: &Field, symbol: &str, value: &Scalar, clause: &mut PgClause) {
    match (field, value) {
        (Field::Text(text), Scalar::Text(text_value)) => {
            clause.push(&format!("{} {symbol} ", text.column()));
            clause.bind(PgBind::Text(text_value.clone()));
            clause.push(" collate \"C\"");
        }
        (Field::Time(time), Scalar::Time(at)) => {
            clause.push(&format!("{} {symbol} ", time.column()));
            clause.bind(PgBind::Time(*at));
        }
        (Field::Metadata(key), scalar) => {
            clause.push("(jsonb_typeof(metadata -> ");
            let key_placeholder = clause.bind(PgBind::Text(key.clone()));
            match scalar {
                Scalar::Text(text) => {
                    clause.push(&format!(") = 'string' and (metadata ->> {key_placeholder}) {symbol} "));
                    clause.bind(PgBind::Text(text.clone()));
                    // Byte order, like SQLite's BINARY collation.
                    clause.push(" collate \"C\"");
                }
                Scalar::Number(number) => {
                    clause.push(&format!(") = 'number' and (metadata ->> {key_placeholder})::float8 {symbol} "));
                    clause.bind(PgBind::Float(*number));
                }
                Scalar::Bool(flag) => {
                    clause.push(") = 'boolean' and (metadata ->> ");
                    clause.push(&format!("{key_placeholder}) = "));
                    clause.bind(PgBind::Text(flag.to_string()));
                }
                Scalar::Time(at) => {
                    clause.push(&format!(") = 'string' and (metadata ->> {key_placeholder}) {symbol} "));
                    clause.bind(PgBind::Text(at.to_rfc3339()));
                }
            }
            clause.push(")");
        }
        _ => clause.push("false"),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::filter::parse_filter;

    #[test]
    fn placeholders_are_numbered_in_order_and_values_never_inlined() {
        let query = ScopedQuery {
            tenant: "t".into(),
            scope: crate::scope::Scope::new(Some("u"), None, None).expect("scope"),
            filter: Some(
                parse_filter(
                    &json!({"OR": [{"a": {"in": [1, "x'", true]}}, {"NOT": {"b": "*"}}], "c": {"icontains": "Q"}}),
                )
                .expect("parse"),
            ),
            show_expired: false,
            today: NaiveDate::from_ymd_opt(2026, 1, 1).expect("date"),
        };
        let clause = where_clause(&query, 2);
        let highest = clause.next_index() - 1;
        for index in 2..=highest {
            assert!(clause.sql.contains(&format!("${index}")), "${index} in {}", clause.sql);
        }
        assert!(!clause.sql.contains("$1 ") && !clause.sql.contains("x'"), "{}", clause.sql);
    }
}
