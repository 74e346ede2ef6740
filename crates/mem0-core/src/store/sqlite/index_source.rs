//! The embedded store's side of the scope indexes (`store/index.rs`): an in-process change log
//! (this process is the file's only writer) and the reads that build and patch an index.

use std::collections::VecDeque;
use std::sync::Mutex;

use async_trait::async_trait;
use chrono::NaiveDate;
use sqlx::{Row, SqlitePool};
use uuid::Uuid;

use super::codec::decode_embedding;
use super::write::scope_entities;
use super::{bind_all, parse_id, FETCH_CHUNK};
use crate::error::{Error, Result};
use crate::scope::Scope;
use crate::store::index::{attach_links, within, Change, IndexSource, Loaded, ScopeEntities};
use crate::store::sql::{where_clause, Sqlite};
use crate::store::ScopedQuery;

/// Changes kept for indexes to catch up with; an index further behind is rebuilt.
const LOG_CAPACITY: usize = 16_384;

#[derive(Debug, Default)]
struct ChangeLog {
    /// Sequence number the next change gets.
    next: u64,
    entries: VecDeque<(u64, Change)>,
}

/// The file's pool and the log of the changes its writes made.
#[derive(Debug)]
pub(super) struct SqliteSource {
    pool: SqlitePool,
    log: Mutex<ChangeLog>,
}

impl SqliteSource {
    pub(super) fn new(pool: SqlitePool) -> Self {
        Self { pool, log: Mutex::default() }
    }

    fn log(&self) -> std::sync::MutexGuard<'_, ChangeLog> {
        self.log.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Logs the memories a write changed. Called after its commit, whatever the commit answered.
    pub(super) fn record(&self, changes: impl IntoIterator<Item = Change>) {
        let mut log = self.log();
        for change in changes {
            let seq = log.next;
            log.entries.push_back((seq, change));
            log.next += 1;
        }
        while log.entries.len() > LOG_CAPACITY {
            log.entries.pop_front();
        }
    }
}

#[async_trait]
impl IndexSource for SqliteSource {
    fn unchanged_since(&self, as_of: u64) -> bool {
        self.log().next == as_of
    }

    async fn changes_since(&self, as_of: u64, tenant: &str) -> Result<Option<(u64, Vec<Change>)>> {
        let log = self.log();
        if log.entries.front().is_some_and(|(oldest, _)| *oldest > as_of) {
            return Ok(None);
        }
        let changes = log
            .entries
            .iter()
            .skip_while(|(seq, _)| *seq < as_of)
            .map(|(_, change)| change)
            .filter(|change| change.tenant.as_deref().is_none_or(|known| known == tenant))
            .cloned()
            .collect();
        Ok(Some((log.next, changes)))
    }

    /// From the statistics the triggers keep.
    async fn scope_size(&self, query: &ScopedQuery) -> Result<usize> {
        let (sql, binds) = where_clause(Sqlite, &query.scope_only(), 1).into_parts();
        let statement = format!("select coalesce(sum(docs), 0) from keyword_stats where {sql}");
        let docs: i64 = bind_all(sqlx::query(&statement), &binds).fetch_one(&self.pool).await?.try_get(0)?;
        Ok(usize::try_from(docs).unwrap_or(usize::MAX))
    }

    /// In one read transaction.
    async fn load_scope(&self, query: &ScopedQuery) -> Result<(u64, Vec<Loaded>, ScopeEntities)> {
        // Taken first: a write logged meanwhile is patched in again later, never missed.
        let as_of = self.log().next;
        let (sql, binds) = where_clause(Sqlite, &query.scope_only(), 1).into_parts();
        let mut transaction = self.pool.begin().await?;
        let statement = format!("select {LOADED_COLUMNS} from memories where {sql}");
        let mut rows = Vec::new();
        for row in bind_all(sqlx::query(&statement), &binds).fetch_all(&mut *transaction).await? {
            rows.push(loaded(&row)?.0);
        }
        let statement = format!(
            "select memory_id, entity_id from memory_entity_links where memory_id in (select id from memories where {sql})"
        );
        let links = bind_all(sqlx::query(&statement), &binds)
            .fetch_all(&mut *transaction)
            .await?
            .iter()
            .map(|row| Ok((parse_id(row.try_get(0)?)?, row.try_get(1)?)))
            .collect::<Result<Vec<(Uuid, String)>>>()?;
        let entities = scope_entities(&mut transaction, &query.tenant, &query.scope, false).await?;
        transaction.commit().await?;
        attach_links(&mut rows, links);
        Ok((as_of, rows, entities))
    }

    async fn load_ids(&self, query: &ScopedQuery, ids: &[Uuid]) -> Result<(Vec<Loaded>, ScopeEntities)> {
        let mut transaction = self.pool.begin().await?;
        let mut rows = Vec::new();
        let mut links = Vec::new();
        for chunk in ids.chunks(FETCH_CHUNK) {
            let placeholders = vec!["?"; chunk.len()].join(", ");
            let statement =
                format!("select {LOADED_COLUMNS} from memories where +tenant = ? and id in ({placeholders})");
            let mut fetch = sqlx::query(&statement).bind(&query.tenant);
            for id in chunk {
                fetch = fetch.bind(id.to_string());
            }
            for row in fetch.fetch_all(&mut *transaction).await? {
                let (row, scope) = loaded(&row)?;
                if within(&scope, &query.scope) {
                    rows.push(row);
                }
            }
            let statement =
                format!("select memory_id, entity_id from memory_entity_links where memory_id in ({placeholders})");
            let mut fetch = sqlx::query_as::<_, (String, String)>(&statement);
            for id in chunk {
                fetch = fetch.bind(id.to_string());
            }
            for (memory_id, entity_id) in fetch.fetch_all(&mut *transaction).await? {
                links.push((parse_id(&memory_id)?, entity_id));
            }
        }
        let entities = scope_entities(&mut transaction, &query.tenant, &query.scope, false).await?;
        transaction.commit().await?;
        attach_links(&mut rows, links);
        Ok((rows, entities))
    }
}

const LOADED_COLUMNS: &str =
    "id, user_id, agent_id, run_id, expiration_date, status, doc_len, text_lemmatized, embedding";

/// Decodes a row of [`LOADED_COLUMNS`], with its scope.
fn loaded(row: &sqlx::sqlite::SqliteRow) -> Result<(Loaded, Scope)> {
    let id: String = row.try_get(0)?;
    let expiration: Option<String> = row.try_get(4)?;
    let status: String = row.try_get(5)?;
    let doc_len: i64 = row.try_get(6)?;
    let bytes: &[u8] = row.try_get(8)?;
    let scope = Scope { user_id: row.try_get(1)?, agent_id: row.try_get(2)?, run_id: row.try_get(3)? };
    Ok((
        Loaded {
            id: parse_id(&id)?,
            expiration: expiration
                .map(|date| NaiveDate::parse_from_str(&date, "%Y-%m-%d"))
                .transpose()
                .map_err(|error| Error::Internal(format!("stored expiration of {id}: {error}")))?,
            hidden: matches!(status.as_str(), "superseded" | "retired"),
            doc_len: u32::try_from(doc_len).unwrap_or(0),
            text_lemmatized: row.try_get(7)?,
            embedding: decode_embedding(bytes),
            links: Vec::new(),
            version: 0,
        },
        scope,
    ))
}
