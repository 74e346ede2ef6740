//! The database behind the history: the SQLite history volume, or the Postgres database of the
//! store (`memory.history.provider`). Both hold the same tables with the same column types (ids
//! as text, times as microseconds), so each statement is written once, with `?` placeholders,
//! and the macros below compile the code around it for each database.

use sqlx::{PgPool, SqlitePool};

use crate::store::WriteTurns;

/// Which database holds the history.
#[derive(Debug, Clone)]
pub(crate) enum Db {
    /// The SQLite history volume; writers take turns ([`WriteTurns`]).
    Sqlite {
        /// Its pool.
        pool: SqlitePool,
        /// Its writers' turns.
        turns: WriteTurns,
    },
    /// The Postgres database of the pgvector store.
    Postgres(PgPool),
}

impl Db {
    /// True for Postgres (for the few expressions the dialects spell differently).
    pub(crate) fn is_postgres(&self) -> bool {
        matches!(self, Self::Postgres(_))
    }
}

/// A statement for SQLite: written with `?` placeholders already.
pub(crate) fn plain(statement: &str) -> String {
    statement.to_owned()
}

/// A statement for Postgres: each `?` becomes `$1`, `$2`… in order. (The statements of the
/// history have no `?` inside string literals.)
pub(crate) fn numbered(statement: &str) -> String {
    let mut out = String::with_capacity(statement.len() + 16);
    let mut next = 0;
    for character in statement.chars() {
        if character == '?' {
            next += 1;
            out.push('$');
            out.push_str(&next.to_string());
        } else {
            out.push(character);
        }
    }
    out
}

/// Rows per multi-row insert of the logs: one statement per this many rows (7 columns × 200 =
/// 1,400 parameters, far below either database's limit) instead of one per row, which cost
/// the writer ~80 µs per audit row on SQLite and a round trip per row on Postgres.
pub(crate) const ROWS_PER_INSERT: usize = 200;

/// `head` (`insert into t (a, b) values`) followed by `rows` groups of `columns` placeholders.
pub(crate) fn insert_rows(head: &str, columns: usize, rows: usize) -> String {
    let group = format!("({})", vec!["?"; columns].join(", "));
    format!("{head} {}", vec![group.as_str(); rows].join(", "))
}

/// A time as stored in the queue tables (jobs, webhook deliveries): microseconds since the epoch.
pub(crate) fn micros(at: chrono::DateTime<chrono::Utc>) -> i64 {
    at.timestamp_micros()
}

/// A stored time read back ([`micros`]).
pub(crate) fn time(value: Option<i64>) -> crate::error::Result<Option<chrono::DateTime<chrono::Utc>>> {
    value
        .map(|micros| {
            chrono::DateTime::from_timestamp_micros(micros)
                .ok_or_else(|| crate::error::Error::Internal(format!("bad stored time {micros}")))
        })
        .transpose()
}

/// `$body` with `$pool` bound to the pool of `$db` and `$sql` to the function putting a statement
/// in its dialect: one body, compiled for each database.
macro_rules! on_pool {
    ($db:expr, |$pool:ident, $sql:ident| $body:block) => {
        match $db {
            $crate::history::db::Db::Sqlite { pool: $pool, .. } => {
                let $sql = $crate::history::db::plain;
                $body
            }
            $crate::history::db::Db::Postgres($pool) => {
                let $sql = $crate::history::db::numbered;
                $body
            }
        }
    };
}

/// `$body` inside a write transaction `$tx` of `$db` (SQLite: in this file's turn), committed when
/// the body returns; an error (`?`) in the body rolls it back.
macro_rules! in_transaction {
    ($db:expr, |$tx:ident, $sql:ident| $body:block) => {
        match $db {
            $crate::history::db::Db::Sqlite { pool, turns } => {
                let $sql = $crate::history::db::plain;
                let mut $tx = turns.begin(pool).await?;
                let out = $body;
                $tx.commit().await?;
                out
            }
            $crate::history::db::Db::Postgres(pool) => {
                let $sql = $crate::history::db::numbered;
                let mut $tx = pool.begin().await?;
                let out = $body;
                $tx.commit().await?;
                out
            }
        }
    };
}

pub(crate) use {in_transaction, on_pool};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_numbered_in_order() {
        assert_eq!(
            numbered("select a from t where b = ? and c in (?, ?)"),
            "select a from t where b = $1 and c in ($2, $3)"
        );
        assert_eq!(numbered("select 1"), "select 1");
        assert_eq!(plain("x = ?"), "x = ?");
    }

    #[test]
    fn multi_row_inserts_have_a_group_per_row() {
        assert_eq!(
            insert_rows("insert into t (a, b) values", 2, 3),
            "insert into t (a, b) values (?, ?), (?, ?), (?, ?)"
        );
        assert_eq!(numbered(&insert_rows("insert into t (a) values", 1, 2)), "insert into t (a) values ($1), ($2)");
    }
}
