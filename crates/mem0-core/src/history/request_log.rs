//! The request log: one row per handled request (method, route template, status, latency,
//! principal, tenant) beside the history; written in batches by the server, read by admins.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::Row;

use super::db::{in_transaction, insert_rows, on_pool, Db, ROWS_PER_INSERT};
use crate::error::Result;

/// One handled request, as kept in the request log.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = RequestEntry))]
pub struct RequestLogEntry {
    /// Row id (increasing; 0 before it is stored).
    pub id: i64,
    /// When the request finished.
    pub at: DateTime<Utc>,
    /// HTTP method.
    pub method: String,
    /// Route template (`/memories/{memory_id}`), never the raw path.
    pub route: String,
    /// Response status.
    pub status: u16,
    /// Handling time in milliseconds.
    pub latency_ms: f64,
    /// Who called (`key:<id>`, `jwt:<sub>`, `admin`, `local`), when known.
    pub principal_id: Option<String>,
    /// The caller's tenant, when known.
    pub tenant: Option<String>,
}

/// The request log, beside the history.
#[derive(Debug, Clone)]
pub struct RequestLog {
    db: Db,
}

impl RequestLog {
    pub(super) fn new(db: Db) -> Self {
        Self { db }
    }

    /// Appends request log entries in one transaction.
    ///
    /// # Errors
    /// [`Error::StoreUnavailable`].
    pub async fn append(&self, entries: &[RequestLogEntry]) -> Result<()> {
        in_transaction!(&self.db, |transaction, sql| {
            for chunk in entries.chunks(ROWS_PER_INSERT) {
                let statement = sql(&insert_rows(
                    "insert into request_log (at, method, route, status, latency_ms, principal_id, tenant) values",
                    7,
                    chunk.len(),
                ));
                let mut insert = sqlx::query(&statement).persistent(chunk.len() == ROWS_PER_INSERT);
                for entry in chunk {
                    insert = insert
                        .bind(entry.at.timestamp_micros())
                        .bind(&entry.method)
                        .bind(&entry.route)
                        .bind(i64::from(entry.status))
                        .bind(entry.latency_ms)
                        .bind(&entry.principal_id)
                        .bind(&entry.tenant);
                }
                insert.execute(&mut *transaction).await?;
            }
        });
        Ok(())
    }

    /// Returns up to `limit` request log entries, newest first, older than `before` (an entry id),
    /// of `tenant` or of every tenant when `None`, and only of `principals` when given.
    ///
    /// # Errors
    /// [`Error::StoreUnavailable`].
    pub async fn recent(
        &self,
        tenant: Option<&str>,
        principals: Option<&[String]>,
        before: Option<i64>,
        limit: usize,
    ) -> Result<Vec<RequestLogEntry>> {
        let principal_filter = match principals {
            Some([]) => return Ok(Vec::new()),
            Some(list) => format!(" and principal_id in ({})", vec!["?"; list.len()].join(", ")),
            None => String::new(),
        };
        let statement = format!(
            "select id, at, method, route, status, latency_ms, principal_id, tenant from request_log \
             where (cast(? as text) is null or tenant = ?) and id < ?{principal_filter} order by id desc limit ?"
        );
        on_pool!(&self.db, |pool, sql| {
            let statement = sql(&statement);
            let mut query = sqlx::query(&statement).bind(tenant).bind(tenant).bind(before.unwrap_or(i64::MAX));
            for principal in principals.unwrap_or_default() {
                query = query.bind(principal);
            }
            let rows = query.bind(i64::try_from(limit).unwrap_or(i64::MAX)).fetch_all(pool).await?;
            rows.iter()
                .map(|row| {
                    let status: i64 = row.try_get("status")?;
                    Ok(RequestLogEntry {
                        id: row.try_get("id")?,
                        at: DateTime::from_timestamp_micros(row.try_get("at")?).unwrap_or_default(),
                        method: row.try_get("method")?,
                        route: row.try_get("route")?,
                        status: u16::try_from(status).unwrap_or_default(),
                        latency_ms: row.try_get("latency_ms")?,
                        principal_id: row.try_get("principal_id")?,
                        tenant: row.try_get("tenant")?,
                    })
                })
                .collect()
        })
    }

    /// Deletes request log entries older than `cutoff`; returns how many.
    ///
    /// # Errors
    /// [`Error::StoreUnavailable`].
    pub async fn prune(&self, cutoff: DateTime<Utc>) -> Result<u64> {
        let deleted = on_pool!(&self.db, |pool, sql| {
            sqlx::query(&sql("delete from request_log where at < ?"))
                .bind(cutoff.timestamp_micros())
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(deleted)
    }
}
