//! The audit trail: who read or changed which memory, when, through which credential, and every
//! write-policy decision. One row per memory touched (a search with ten hits is ten rows), beside
//! the history; never the memory's text or the query. The service reports events to an
//! [`AuditSink`] (the server's batched writer); [`AuditLog`] stores and reads them.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::Row;
use uuid::Uuid;

use super::db::{in_transaction, insert_rows, on_pool, Db, ROWS_PER_INSERT};
use crate::error::Result;
use crate::scope::Caller;

/// What happened to a memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum AuditAction {
    /// Read by id (`GET /memories/{id}`).
    Get,
    /// Returned in a page of a listing.
    List,
    /// Returned by a search.
    SearchHit,
    /// Its change history was read.
    History,
    /// Created (verbatim, extracted or procedural).
    Add,
    /// Its text, metadata or expiration changed.
    Update,
    /// Deleted, alone or with its scope.
    Delete,
    /// Every memory of the tenant (or of every tenant) was deleted; no memory id.
    Reset,
    /// The write policy redacted part of a text before it was stored; `detail` names the kinds.
    PolicyRedact,
    /// The write policy refused a text; `detail` names the rule and the field. Nothing of the
    /// call was stored.
    PolicyReject,
    /// Written to an export file (`GET /export`).
    Export,
    /// Stored by an import (`POST /import`).
    Import,
}

impl AuditAction {
    /// Every action, in the order of the enum.
    pub const ALL: [Self; 12] = [
        Self::Get,
        Self::List,
        Self::SearchHit,
        Self::History,
        Self::Add,
        Self::Update,
        Self::Delete,
        Self::Reset,
        Self::PolicyRedact,
        Self::PolicyReject,
        Self::Export,
        Self::Import,
    ];

    /// The stored and serialised name (`search_hit`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Get => "get",
            Self::List => "list",
            Self::SearchHit => "search_hit",
            Self::History => "history",
            Self::Add => "add",
            Self::Update => "update",
            Self::Delete => "delete",
            Self::Reset => "reset",
            Self::PolicyRedact => "policy_redact",
            Self::PolicyReject => "policy_reject",
            Self::Export => "export",
            Self::Import => "import",
        }
    }

    /// The action named `name`, if there is one.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|action| action.as_str() == name)
    }
}

impl fmt::Display for AuditAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One event as the service reports it; the sink adds the time and the request.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEvent {
    /// The caller's tenant.
    pub tenant: String,
    /// The credential (`key:<id>`, `jwt:<sub>`, `admin`, `local`).
    pub principal_id: String,
    /// What happened.
    pub action: AuditAction,
    /// The memory, for every action but `reset` and policy decisions.
    pub memory_id: Option<Uuid>,
    /// Rule and field of a policy decision; never user text.
    pub detail: Option<String>,
}

impl AuditEvent {
    /// An event of `caller` about `memory_id`.
    pub fn of(caller: &Caller, action: AuditAction, memory_id: Option<Uuid>, detail: Option<String>) -> Self {
        Self { tenant: caller.tenant.clone(), principal_id: caller.principal_id.clone(), action, memory_id, detail }
    }
}

/// Where the service reports audit events. `record` is called on the request path: it must not
/// wait (queue the events and write them elsewhere).
pub trait AuditSink: Send + Sync + fmt::Debug {
    /// Takes the events of one operation.
    fn record(&self, events: Vec<AuditEvent>);
}

/// One stored audit entry.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditEntry {
    /// Row id (increasing; 0 before it is stored).
    pub id: i64,
    /// When it happened.
    pub at: DateTime<Utc>,
    /// The caller's tenant.
    pub tenant: String,
    /// The credential used (`key:<id>`, `jwt:<sub>`, `admin`, `local`).
    pub principal_id: String,
    /// What happened.
    pub action: AuditAction,
    /// The memory concerned (absent for `reset` and policy decisions).
    pub memory_id: Option<String>,
    /// The request (`X-Request-Id`), to find the request log entry and the server's logs.
    pub request_id: Option<String>,
    /// Rule and field of a policy decision.
    pub detail: Option<String>,
}

/// Which entries to read: the tenant's (every tenant's when `None`), newest first.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AuditQuery {
    /// Only this tenant's entries; `None` for every tenant.
    pub tenant: Option<String>,
    /// Only entries of these credentials.
    pub principals: Option<Vec<String>>,
    /// Only entries about this memory.
    pub memory_id: Option<Uuid>,
    /// Only these actions.
    pub actions: Option<Vec<AuditAction>>,
    /// Only entries at or after this time.
    pub since: Option<DateTime<Utc>>,
    /// Only entries before this time.
    pub until: Option<DateTime<Utc>>,
    /// Only entries older than this entry id (the previous page's `next`).
    pub before: Option<i64>,
    /// Most entries returned.
    pub limit: usize,
}

/// The audit trail, beside the history.
#[derive(Debug, Clone)]
pub struct AuditLog {
    db: Db,
}

impl AuditLog {
    pub(super) fn new(db: Db) -> Self {
        Self { db }
    }

    /// Appends entries in one transaction.
    ///
    /// # Errors
    /// [`crate::Error::StoreUnavailable`].
    pub async fn append(&self, entries: &[AuditEntry]) -> Result<()> {
        in_transaction!(&self.db, |transaction, sql| {
            for chunk in entries.chunks(ROWS_PER_INSERT) {
                let statement = sql(&insert_rows(
                    "insert into audit_log (at, tenant, principal_id, action, memory_id, request_id, detail) values",
                    7,
                    chunk.len(),
                ));
                // Full chunks reuse one prepared statement; the odd-sized last one is not cached.
                let mut insert = sqlx::query(&statement).persistent(chunk.len() == ROWS_PER_INSERT);
                for entry in chunk {
                    insert = insert
                        .bind(entry.at.timestamp_micros())
                        .bind(&entry.tenant)
                        .bind(&entry.principal_id)
                        .bind(entry.action.as_str())
                        .bind(&entry.memory_id)
                        .bind(&entry.request_id)
                        .bind(&entry.detail);
                }
                insert.execute(&mut *transaction).await?;
            }
        });
        Ok(())
    }

    /// Returns the entries `query` asks for, newest first.
    ///
    /// # Errors
    /// [`crate::Error::StoreUnavailable`].
    pub async fn query(&self, query: &AuditQuery) -> Result<Vec<AuditEntry>> {
        let mut conditions = vec!["id < ?".to_owned()];
        if query.tenant.is_some() {
            conditions.push("tenant = ?".to_owned());
        }
        match &query.principals {
            Some(list) if list.is_empty() => return Ok(Vec::new()),
            Some(list) => conditions.push(format!("principal_id in ({})", vec!["?"; list.len()].join(", "))),
            None => {}
        }
        if query.memory_id.is_some() {
            conditions.push("memory_id = ?".to_owned());
        }
        match &query.actions {
            Some(list) if list.is_empty() => return Ok(Vec::new()),
            Some(list) => conditions.push(format!("action in ({})", vec!["?"; list.len()].join(", "))),
            None => {}
        }
        if query.since.is_some() {
            conditions.push("at >= ?".to_owned());
        }
        if query.until.is_some() {
            conditions.push("at < ?".to_owned());
        }
        let statement = format!(
            "select id, at, tenant, principal_id, action, memory_id, request_id, detail from audit_log where {} \
             order by id desc limit ?",
            conditions.join(" and ")
        );
        let entries = on_pool!(&self.db, |pool, sql| {
            let statement = sql(&statement);
            let mut bound = sqlx::query(&statement).bind(query.before.unwrap_or(i64::MAX));
            if let Some(tenant) = &query.tenant {
                bound = bound.bind(tenant);
            }
            for principal in query.principals.iter().flatten() {
                bound = bound.bind(principal);
            }
            if let Some(memory_id) = query.memory_id {
                bound = bound.bind(memory_id.to_string());
            }
            for action in query.actions.iter().flatten() {
                bound = bound.bind(action.as_str());
            }
            if let Some(since) = query.since {
                bound = bound.bind(since.timestamp_micros());
            }
            if let Some(until) = query.until {
                bound = bound.bind(until.timestamp_micros());
            }
            let rows = bound.bind(i64::try_from(query.limit).unwrap_or(i64::MAX)).fetch_all(pool).await?;
            rows.iter()
                .map(|row| {
                    let action: String = row.try_get("action")?;
                    Ok(AuditEntry {
                        id: row.try_get("id")?,
                        at: DateTime::from_timestamp_micros(row.try_get("at")?).unwrap_or_default(),
                        tenant: row.try_get("tenant")?,
                        principal_id: row.try_get("principal_id")?,
                        action: AuditAction::parse(&action)
                            .ok_or_else(|| sqlx::Error::Decode(format!("unknown audit action {action:?}").into()))?,
                        memory_id: row.try_get("memory_id")?,
                        request_id: row.try_get("request_id")?,
                        detail: row.try_get("detail")?,
                    })
                })
                .collect::<std::result::Result<Vec<_>, sqlx::Error>>()?
        });
        Ok(entries)
    }

    /// Deletes entries older than `cutoff`; returns how many.
    ///
    /// # Errors
    /// [`crate::Error::StoreUnavailable`].
    pub async fn prune(&self, cutoff: DateTime<Utc>) -> Result<u64> {
        let deleted = on_pool!(&self.db, |pool, sql| {
            sqlx::query(&sql("delete from audit_log where at < ?"))
                .bind(cutoff.timestamp_micros())
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(deleted)
    }
}
