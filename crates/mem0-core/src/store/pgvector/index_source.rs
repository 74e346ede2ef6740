//! The Postgres store's side of the scope indexes (`store/index.rs`): the change feed is the
//! `memory_changes` table, which triggers fill in the writing transaction whichever server wrote
//! (migrations/0017_memory_changes.sql), and positions in it are transaction ids.
//!
//! Position `p` means "every transaction with an id below `p` has ended": an index loaded or
//! patched under a snapshot whose xmin is `p` holds every change of those transactions, and the
//! changes it may lack are of transactions `p` or later, which the feed holds under their id.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::NaiveDate;
use pgvector::Vector;
use sqlx::{PgPool, Row};
use uuid::Uuid;

use super::bind_all;
use crate::error::Result;
use crate::scope::Scope;
use crate::store::index::{attach_links, within, Change, IndexSource, Loaded, ScopeEntities};
use crate::store::sql::{where_clause, Postgres as Pg};
use crate::store::ScopedQuery;

/// How long changes stay in the feed: an index not searched for longer is rebuilt.
const KEEP_CHANGES: &str = "10 minutes";
/// How often one server prunes the feed.
const PRUNE_EVERY: Duration = Duration::from_secs(60);

/// Most changes read in one look: an index further behind is rebuilt.
const CHANGES_MAX: usize = 16_384;

/// The snapshot's xmin: every transaction below it has ended.
const XMIN: &str = "pg_snapshot_xmin(pg_current_snapshot())::text::int8";

/// The pool, and when this server last pruned the feed.
#[derive(Debug)]
pub(super) struct PgSource {
    pool: PgPool,
    pruned: Mutex<Option<Instant>>,
    /// A prune is running (none other starts meanwhile).
    pruning: Arc<AtomicBool>,
}

impl PgSource {
    pub(super) fn new(pool: PgPool) -> Self {
        Self { pool, pruned: Mutex::new(None), pruning: Arc::default() }
    }

    /// Deletes the feed's old rows (in the background, at most every [`PRUNE_EVERY`]) and moves
    /// the horizon past them. Called on writes and searches, so that a server with indexing
    /// turned off still keeps the table small.
    pub(super) fn prune_now_and_then(&self) {
        {
            let mut pruned = self.pruned.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if pruned.is_some_and(|at| at.elapsed() < PRUNE_EVERY) {
                return;
            }
            *pruned = Some(Instant::now());
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        if self.pruning.swap(true, Ordering::AcqRel) {
            return;
        }
        let (pool, pruning) = (self.pool.clone(), Arc::clone(&self.pruning));
        runtime.spawn(async move {
            if let Err(error) = prune(&pool).await {
                tracing::warn!(%error, "pruning the scope index change feed failed; retried in a minute");
            }
            pruning.store(false, Ordering::Release);
        });
    }
}

/// One statement: the horizon moves to just past the newest transaction whose changes are gone.
///
/// Only changes of transactions below the snapshot's xmin go: a transaction left open somewhere
/// on the cluster holds xmin back, and with it the positions of fresh indexes; pruning past it
/// would send every index to a rebuild on every search until that transaction ends.
pub(super) async fn prune(pool: &PgPool) -> Result<u64> {
    let statement = format!(
        "with gone as (delete from memory_changes where recorded_at < clock_timestamp() - interval '{KEEP_CHANGES}' \
         and xid < {XMIN} returning xid), moved as (update memory_changes_horizon set xid = greatest(xid, \
         coalesce((select max(xid) + 1 from gone), 0)) returning 1) \
         select count(*)::int8 from gone"
    );
    let removed: i64 = sqlx::query_scalar(&statement).fetch_one(pool).await?;
    Ok(u64::try_from(removed).unwrap_or(0))
}

#[async_trait]
impl IndexSource for PgSource {
    /// Other servers write too: only the table can tell.
    fn unchanged_since(&self, _as_of: u64) -> bool {
        false
    }

    /// One statement: its snapshot's xmin, the horizon, and the tenant's changes from `as_of` on.
    async fn changes_since(&self, as_of: u64, tenant: &str) -> Result<Option<(u64, Vec<Change>)>> {
        self.prune_now_and_then();
        let from = i64::try_from(as_of).unwrap_or(i64::MAX);
        let statement = format!(
            "select s.xmin, h.xid, c.id, c.user_id, c.agent_id, c.run_id from (select {XMIN} as xmin) as s \
             cross join memory_changes_horizon as h \
             left join memory_changes as c on c.tenant = $1 and c.xid >= $2 limit {}",
            CHANGES_MAX + 1
        );
        let rows = sqlx::query(&statement).bind(tenant).bind(from).fetch_all(&self.pool).await?;
        let Some(first) = rows.first() else { return Ok(None) };
        if rows.len() > CHANGES_MAX {
            return Ok(None);
        }
        let next: i64 = first.try_get(0)?;
        let horizon: i64 = first.try_get(1)?;
        if from < horizon {
            return Ok(None);
        }
        let mut changes = Vec::new();
        for row in &rows {
            let Some(id) = row.try_get::<Option<Uuid>, _>(2)? else { continue };
            changes.push(Change {
                tenant: Some(tenant.to_owned()),
                id,
                scope: Some(Scope { user_id: row.try_get(3)?, agent_id: row.try_get(4)?, run_id: row.try_get(5)? }),
            });
        }
        Ok(Some((u64::try_from(next).unwrap_or(0), changes)))
    }

    /// From the statistics the triggers keep.
    async fn scope_size(&self, query: &ScopedQuery) -> Result<usize> {
        let (sql, binds) = where_clause(Pg, &query.scope_only(), 1).into_parts();
        let statement = format!("select coalesce(sum(docs), 0)::int8 from keyword_stats where {sql}");
        let docs: i64 = bind_all(sqlx::query(&statement), &binds).fetch_one(&self.pool).await?.try_get(0)?;
        Ok(usize::try_from(docs).unwrap_or(usize::MAX))
    }

    /// In one repeatable-read transaction, whose first statement takes the snapshot.
    async fn load_scope(&self, query: &ScopedQuery) -> Result<(u64, Vec<Loaded>, ScopeEntities)> {
        let mut transaction = read_snapshot(&self.pool).await?;
        let as_of: i64 = sqlx::query_scalar(&format!("select {XMIN}")).fetch_one(&mut *transaction).await?;
        let (sql, binds) = where_clause(Pg, &query.scope_only(), 1).into_parts();
        let statement = format!("select {LOADED_COLUMNS} from memories where {sql}");
        let mut rows = Vec::new();
        for row in bind_all(sqlx::query(&statement), &binds).fetch_all(&mut *transaction).await? {
            rows.push(loaded(&row)?.0);
        }
        let statement = format!(
            "select l.memory_id, l.entity_id from memory_entity_links l \
             where l.memory_id in (select id from memories where {sql})"
        );
        let links = link_pairs(&bind_all(sqlx::query(&statement), &binds).fetch_all(&mut *transaction).await?)?;
        let entities = scope_entities(&mut transaction, query).await?;
        transaction.commit().await?;
        attach_links(&mut rows, links);
        Ok((u64::try_from(as_of).unwrap_or(0), rows, entities))
    }

    async fn load_ids(&self, query: &ScopedQuery, ids: &[Uuid]) -> Result<(Vec<Loaded>, ScopeEntities)> {
        let mut transaction = read_snapshot(&self.pool).await?;
        let statement = format!("select {LOADED_COLUMNS} from memories where tenant = $1 and id = any($2)");
        let mut rows = Vec::new();
        for row in sqlx::query(&statement).bind(&query.tenant).bind(ids).fetch_all(&mut *transaction).await? {
            let (row, scope) = loaded(&row)?;
            if within(&scope, &query.scope) {
                rows.push(row);
            }
        }
        let links = link_pairs(
            &sqlx::query("select memory_id, entity_id from memory_entity_links where memory_id = any($1)")
                .bind(ids)
                .fetch_all(&mut *transaction)
                .await?,
        )?;
        let entities = scope_entities(&mut transaction, query).await?;
        transaction.commit().await?;
        attach_links(&mut rows, links);
        Ok((rows, entities))
    }
}

/// A read-only transaction whose statements all see one snapshot (taken by the first).
async fn read_snapshot(pool: &PgPool) -> Result<sqlx::Transaction<'static, sqlx::Postgres>> {
    let mut transaction = pool.begin().await?;
    sqlx::query("set transaction isolation level repeatable read, read only").execute(&mut *transaction).await?;
    Ok(transaction)
}

/// (memory id, entity id) pairs of `memory_entity_links` rows.
fn link_pairs(rows: &[sqlx::postgres::PgRow]) -> Result<Vec<(Uuid, String)>> {
    rows.iter().map(|row| Ok((row.try_get(0)?, row.try_get::<Uuid, _>(1)?.to_string()))).collect()
}

/// The entity rows under the query's scope ids (every row whose ids include them).
async fn scope_entities(executor: &mut sqlx::PgConnection, query: &ScopedQuery) -> Result<ScopeEntities> {
    let pairs = query.scope.pairs();
    let scope: String =
        pairs.iter().enumerate().map(|(index, (column, _))| format!(" and {column} = ${}", 2 + index)).collect();
    let statement = format!("select id, normalized, embedding from memories_entities where tenant = $1{scope}");
    let mut fetch = sqlx::query(&statement).bind(&query.tenant);
    for (_, value) in &pairs {
        fetch = fetch.bind(*value);
    }
    fetch
        .fetch_all(&mut *executor)
        .await?
        .iter()
        .map(|row| {
            let embedding: Vector = row.try_get(2)?;
            Ok((row.try_get::<Uuid, _>(0)?.to_string(), row.try_get(1)?, embedding.to_vec()))
        })
        .collect()
}

/// With the tuple's version (`xmin`), which `get_many` compares to take embeddings from here.
const LOADED_COLUMNS: &str =
    "id, user_id, agent_id, run_id, expiration_date, status, doc_len, text_lemmatized, embedding, \
     xmin::text::int8";

/// Decodes a row of [`LOADED_COLUMNS`], with its scope.
fn loaded(row: &sqlx::postgres::PgRow) -> Result<(Loaded, Scope)> {
    let status: String = row.try_get(5)?;
    let doc_len: i32 = row.try_get(6)?;
    let embedding: Vector = row.try_get(8)?;
    let scope = Scope { user_id: row.try_get(1)?, agent_id: row.try_get(2)?, run_id: row.try_get(3)? };
    Ok((
        Loaded {
            id: row.try_get(0)?,
            expiration: row.try_get::<Option<NaiveDate>, _>(4)?,
            hidden: matches!(status.as_str(), "superseded" | "retired"),
            doc_len: u32::try_from(doc_len).unwrap_or(0),
            text_lemmatized: row.try_get(7)?,
            embedding: embedding.to_vec(),
            links: Vec::new(),
            version: u64::try_from(row.try_get::<i64, _>(9)?).unwrap_or(0),
        },
        scope,
    ))
}
