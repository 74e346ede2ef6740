//! The production vector store: Postgres with pgvector. Typed, indexed columns for tenant, scope
//! ids and timestamps, caller metadata as `jsonb`, embeddings as `vector(d)` with an HNSW cosine
//! index. Scoped search returns a full, exact top-k: small scopes are ranked exactly (the HNSW
//! index is bypassed), large ones use the index with pgvector 0.8 iterative scans so a filter can
//! never starve the result (Mem0 filters after an approximate search and returns short pages).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use pgvector::Vector;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::{Postgres, Row};
use uuid::Uuid;

mod codec;
mod import;
mod index_source;
mod write;

use self::codec::{row_to_record, row_to_record_with};
pub use self::import::ImportReport;
use self::index_source::PgSource;
use self::write::apply_in;
use super::cache::Cache;
use super::index::{Candidate, ScopeIndexes, Slot};
use super::sql::{where_clause, Bind, Postgres as Pg};
use super::AccessLog;
use super::{cap_matched, EntityIndex, Journal, KeywordIndex, MemoryRows, VectorIndex};
use super::{
    Applied, Cursor, EntityCandidates, EntityHit, EntityProbe, JournalEntry, KeywordCandidates, KeywordStats, Page,
    ScopeKind, ScopeSummary, ScopedQuery, ScoredRecord, WriteSet,
};
use crate::decay::MemoryRead;
use crate::error::{Error, Result};
use crate::retrieval::{Bm25, EntityScores};
use crate::types::MemoryRecord;
use std::collections::HashMap;

/// The migrations of the Postgres store (top-level `migrations/`).
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations");

/// Scopes with at most this many rows are ranked exactly, without the HNSW index.
pub const DEFAULT_EXACT_SEARCH_MAX_ROWS: i64 = 20_000;

pub(super) const COLUMNS: &str =
    "id, tenant, user_id, agent_id, run_id, memory, hash, metadata, created_at, updated_at, \
                       expiration_date, attributed_to, role, actor_id, memory_type, linked_memory_ids, entities, \
                       text_lemmatized, doc_len, embedding, source_type, source_actor, source_app, evidence_ref, \
                       confidence, state_key, status, superseded_by, valid_to, event_time";

/// [`COLUMNS`] without the embedding.
static COLUMNS_BUT_EMBEDDING: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| COLUMNS.replace(" embedding,", ""));

/// Settings of the Postgres store.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PgVectorConfig {
    /// Connection URL (env `DATABASE_URL` fills it when empty).
    #[serde(default)]
    pub url: Option<secrecy::SecretString>,
    /// Most pooled connections.
    #[serde(default = "default_max_connections")]
    pub max_connections: u32,
    /// How long a request waits for a connection before `store_unavailable`.
    #[serde(default = "default_acquire_timeout")]
    pub acquire_timeout_secs: u64,
    /// Apply migrations at startup.
    #[serde(default = "default_true")]
    pub run_migrations: bool,
    /// Scopes up to this size are ranked exactly.
    #[serde(default = "default_exact_max")]
    pub exact_search_max_rows: i64,
    /// Lowest `hnsw.ef_search` of HNSW searches (4 × top_k is used when larger, at most 1000):
    /// higher finds more of the true top-k in large scopes, at some latency.
    #[serde(default = "default_ef_search")]
    pub hnsw_ef_search: usize,
    /// `hnsw.max_scan_tuples` of iterative scans: how far a filtered HNSW search may walk before
    /// it gives up (scopes that are a small share of a big table need more).
    #[serde(default = "default_max_scan_tuples")]
    pub hnsw_max_scan_tuples: u64,
    /// Most memories the in-process search indexes hold together (the scopes searched last; a
    /// scope larger than this or than `exact_search_max_rows` is searched in SQL); 0 turns them
    /// off. About 1.6 KB each with 384-dimension embeddings.
    #[serde(default = "default_index_max_memories")]
    pub index_max_memories: usize,
    /// Memory rows kept in memory for reads by id (the candidates hybrid search scores), each
    /// used only while the row in the database is still that version; 0 turns it off.
    #[serde(default = "default_record_cache_entries")]
    pub record_cache_entries: usize,
}

fn default_record_cache_entries() -> usize {
    20_000
}

fn default_index_max_memories() -> usize {
    DEFAULT_INDEX_MAX_MEMORIES
}

/// Default of [`PgVectorConfig::index_max_memories`].
pub const DEFAULT_INDEX_MAX_MEMORIES: usize = 100_000;

fn default_ef_search() -> usize {
    100
}
fn default_max_scan_tuples() -> u64 {
    20_000
}

fn default_max_connections() -> u32 {
    10
}
fn default_acquire_timeout() -> u64 {
    5
}
fn default_true() -> bool {
    true
}
fn default_exact_max() -> i64 {
    DEFAULT_EXACT_SEARCH_MAX_ROWS
}

impl Default for PgVectorConfig {
    fn default() -> Self {
        Self {
            url: None,
            max_connections: default_max_connections(),
            acquire_timeout_secs: default_acquire_timeout(),
            run_migrations: true,
            exact_search_max_rows: default_exact_max(),
            hnsw_ef_search: default_ef_search(),
            hnsw_max_scan_tuples: default_max_scan_tuples(),
            index_max_memories: default_index_max_memories(),
            record_cache_entries: default_record_cache_entries(),
        }
    }
}

/// The Postgres + pgvector [`VectorStore`].
#[derive(Debug, Clone)]
pub struct PgVectorStore {
    pool: PgPool,
    exact_search_max_rows: i64,
    ef_search: usize,
    max_scan_tuples: u64,
    /// Per-scope search indexes fed by `memory_changes` (see `store/index.rs`).
    indexes: Arc<ScopeIndexes<PgSource>>,
    /// Rows by id with their version (`xmin`): used only where the row still has that version.
    records: Arc<Cache<(u64, Arc<MemoryRecord>)>>,
}

type PgQuery<'q> = sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments>;

pub(super) fn bind_all<'q>(mut query: PgQuery<'q>, binds: &'q [Bind]) -> PgQuery<'q> {
    for bind in binds {
        query = match bind {
            Bind::Text(text) => query.bind(text.as_str()),
            Bind::Float(number) => query.bind(*number),
            Bind::Time(at) => query.bind(*at),
            Bind::Date(date) => query.bind(*date),
            Bind::Uuid(id) => query.bind(*id),
            Bind::Integer(number) => query.bind(*number),
        };
    }
    query
}

/// The pool's check on every connection coming back: is its session outside any transaction?
///
/// A `begin()` whose future is dropped while `BEGIN` is in flight (a client that disconnects, a
/// timeout) leaves the session inside a transaction sqlx does not know about (sqlx 0.8.6 and
/// 0.9.0, launchbadge/sqlx#4393); handed to the next borrower, its statements would run inside
/// it, and after one error every query on the connection would fail with 25P02. A transaction
/// takes its `transaction_timestamp()` from the `statement_timestamp()` of its first command, so
/// outside a transaction block the two are equal and inside one they differ. That holds for one
/// simple-protocol query (one `Query` message); over the extended protocol a statement not yet
/// prepared would start its implicit transaction at `Parse` and restamp the statement at `Bind`,
/// which looks like a stale transaction on every fresh connection. A session in an aborted
/// transaction fails the query instead. Either way such a connection is closed, not reused.
async fn outside_transaction(connection: &mut sqlx::PgConnection) -> Result<bool, sqlx::Error> {
    // A query string without arguments goes out as one simple-protocol `Query` message.
    let row =
        sqlx::Executor::fetch_one(&mut *connection, "select (statement_timestamp() = transaction_timestamp())::int4")
            .await?;
    let outside = row.try_get::<i32, _>(0)? == 1;
    if !outside {
        tracing::warn!("closing a postgres connection returned inside a stale transaction");
    }
    Ok(outside)
}

impl PgVectorStore {
    /// Connects (lazily: the server starts, and `/ready` reports, while Postgres is down) and,
    /// when configured, applies the migrations.
    ///
    /// # Errors
    /// [`Error::Config`] for a bad URL; [`Error::StoreUnavailable`] when migrations cannot run.
    pub async fn connect(url: &str, config: &PgVectorConfig) -> Result<Self> {
        let pool = PgPoolOptions::new()
            .max_connections(config.max_connections.max(1))
            .acquire_timeout(Duration::from_secs(config.acquire_timeout_secs.max(1)))
            .after_release(|connection, _| Box::pin(async move { outside_transaction(connection).await }))
            .connect_lazy(url)
            .map_err(|error| Error::Config(format!("invalid postgres url: {error}")))?;
        let scope_max = usize::try_from(config.exact_search_max_rows).unwrap_or(0);
        let indexes =
            Arc::new(ScopeIndexes::with_scope_max(config.index_max_memories, scope_max, PgSource::new(pool.clone())));
        let store = Self {
            pool,
            indexes,
            records: Arc::new(Cache::new(config.record_cache_entries)),
            exact_search_max_rows: config.exact_search_max_rows,
            ef_search: config.hnsw_ef_search,
            max_scan_tuples: config.hnsw_max_scan_tuples,
        };
        if config.run_migrations {
            store.migrate().await?;
        }
        Ok(store)
    }

    /// Applies pending migrations.
    ///
    /// # Errors
    /// [`Error::StoreUnavailable`] with the migration error.
    pub async fn migrate(&self) -> Result<()> {
        MIGRATOR.run(&self.pool).await.map_err(|error| Error::StoreUnavailable(format!("migrations failed: {error}")))
    }

    /// Returns the pool (for tests and tools).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Prunes the scope indexes' change feed now (servers do it once a minute): changes older
    /// than 10 minutes of transactions that ended before every open one began. Returns how many
    /// went.
    ///
    /// # Errors
    /// [`Error::StoreUnavailable`] when Postgres cannot be reached.
    pub async fn prune_change_feed(&self) -> Result<u64> {
        index_source::prune(&self.pool).await
    }
}

#[async_trait]
impl MemoryRows for PgVectorStore {
    async fn apply(&self, write: &WriteSet) -> Result<Applied> {
        let mut transaction = self.pool.begin().await?;
        let applied = apply_in(&mut transaction, write).await?;
        transaction.commit().await?;
        self.indexes.source().prune_now_and_then();
        Ok(applied)
    }

    async fn get(&self, tenant: &str, id: Uuid) -> Result<Option<MemoryRecord>> {
        let row = sqlx::query(&format!("select {COLUMNS} from memories where tenant = $1 and id = $2"))
            .bind(tenant)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(row_to_record).transpose()
    }

    /// One statement when the row cache and the indexes are off; else as [`Self::shared_many`].
    async fn get_many(&self, tenant: &str, ids: &[Uuid]) -> Result<Vec<MemoryRecord>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        if !self.records.enabled() && !self.indexes.enabled() {
            let statement = format!("select {COLUMNS} from memories where tenant = $1 and id = any($2)");
            let rows = sqlx::query(&statement).bind(tenant).bind(ids).fetch_all(&self.pool).await?;
            return rows.iter().map(row_to_record).collect();
        }
        Ok(self.shared_many(tenant, ids).await?.into_iter().map(Arc::unwrap_or_clone).collect())
    }

    /// From the scope's index where one is held: rows at the versions it holds come from the row
    /// cache without a round trip to learn their versions.
    async fn get_candidates(&self, query: &ScopedQuery, ids: &[Uuid]) -> Result<Vec<Arc<MemoryRecord>>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        match self.indexes.fresh_if_held(query).await? {
            Some(slot) => self.rows_as_indexed(&query.tenant, &slot, ids).await,
            None => self.shared_many(&query.tenant, ids).await,
        }
    }

    async fn list(&self, query: &ScopedQuery, after: Option<Cursor>, page_size: usize) -> Result<Page> {
        let (mut sql, mut binds) = where_clause(Pg, query, 1).into_parts();
        if let Some(cursor) = after {
            let next = binds.len() + 1;
            sql.push_str(&format!(" and (created_at, id) < (${next}, ${})", next + 1));
            binds.push(Bind::Time(cursor.created_at));
            binds.push(Bind::Uuid(cursor.id));
        }
        let fetch = page_size + 1;
        let statement =
            format!("select {COLUMNS} from memories where {sql} order by created_at desc, id desc limit {fetch}");
        let rows = bind_all(sqlx::query(&statement), &binds).fetch_all(&self.pool).await?;
        Ok(Page::from_fetched(rows.iter().map(row_to_record).collect::<Result<Vec<_>>>()?, page_size))
    }

    async fn list_at(&self, query: &ScopedQuery, offset: usize, limit: usize) -> Result<Vec<MemoryRecord>> {
        let (sql, binds) = where_clause(Pg, query, 1).into_parts();
        let statement = format!(
            "select {COLUMNS} from memories where {sql} order by created_at desc, id desc limit {limit} offset {offset}"
        );
        let rows = bind_all(sqlx::query(&statement), &binds).fetch_all(&self.pool).await?;
        rows.iter().map(row_to_record).collect()
    }

    async fn count(&self, query: &ScopedQuery) -> Result<u64> {
        let (sql, binds) = where_clause(Pg, query, 1).into_parts();
        let statement = format!("select count(*) as total from memories where {sql}");
        let row = bind_all(sqlx::query(&statement), &binds).fetch_one(&self.pool).await?;
        let total: i64 = row.try_get("total")?;
        Ok(u64::try_from(total).unwrap_or_default())
    }

    async fn scopes(
        &self,
        tenant: &str,
        kind: ScopeKind,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<ScopeSummary>> {
        let column = kind.column();
        let statement = format!(
            "select {column} as scope_id, count(*) as total, min(created_at) as first, max(updated_at) as last \
             from memories where tenant = $1 and {column} is not null and {column} > $2 collate \"C\" \
             group by {column} order by {column} collate \"C\" limit $3"
        );
        let rows = sqlx::query(&statement)
            .bind(tenant)
            .bind(after.unwrap_or(""))
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| {
                let total: i64 = row.try_get("total")?;
                let first: DateTime<Utc> = row.try_get("first")?;
                let last: DateTime<Utc> = row.try_get("last")?;
                Ok(ScopeSummary {
                    kind,
                    id: row.try_get("scope_id")?,
                    total_memories: u64::try_from(total).unwrap_or_default(),
                    created_at: first,
                    updated_at: last,
                })
            })
            .collect()
    }

    async fn reset(&self, tenant: Option<&str>) -> Result<()> {
        let mut transaction = self.pool.begin().await?;
        for table in ["memories", "memories_entities", "history_journal"] {
            match tenant {
                Some(tenant) => {
                    sqlx::query(&format!("delete from {table} where tenant = $1"))
                        .bind(tenant)
                        .execute(&mut *transaction)
                        .await?
                }
                None => sqlx::query(&format!("delete from {table}")).execute(&mut *transaction).await?,
            };
        }
        transaction.commit().await?;
        self.indexes.clear();
        self.records.clear();
        Ok(())
    }

    async fn unanalysed(&self, after: Option<Uuid>, limit: usize) -> Result<Vec<MemoryRecord>> {
        let rows =
            sqlx::query(&format!("select {COLUMNS} from memories where doc_len = 0 and id > $1 order by id limit $2"))
                .bind(after.unwrap_or(Uuid::nil()))
                .bind(i64::try_from(limit).unwrap_or(i64::MAX))
                .fetch_all(&self.pool)
                .await?;
        rows.iter().map(row_to_record).collect()
    }

    async fn ping(&self) -> Result<()> {
        sqlx::query_scalar::<_, i32>("select 1").fetch_one(&self.pool).await?;
        Ok(())
    }

    fn backend(&self) -> &'static str {
        "pgvector"
    }

    fn pool_status(&self) -> crate::metrics::PoolStatus {
        crate::metrics::PoolStatus::of(&self.pool)
    }
}

#[async_trait]
impl AccessLog for PgVectorStore {
    async fn record_reads(&self, reads: &[MemoryRead]) -> Result<()> {
        let grouped = crate::store::grouped_reads(reads);
        if grouped.is_empty() {
            return Ok(());
        }
        let tenants: Vec<&str> = grouped.iter().map(|(tenant, ..)| tenant.as_str()).collect();
        let ids: Vec<Uuid> = grouped.iter().map(|(_, id, ..)| *id).collect();
        let times: Vec<DateTime<Utc>> = grouped.iter().map(|(_, _, at, _)| *at).collect();
        let counts: Vec<i64> = grouped.iter().map(|(.., count)| *count).collect();
        // One row per memory (grouped above: an upsert may not touch a row twice); reads of
        // memories deleted meanwhile join nothing.
        sqlx::query(
            "insert into memory_reads (memory_id, tenant, last_read_at, reads) \
             select m.id, m.tenant, r.at, r.n from unnest($1::uuid[], $2::text[], $3::timestamptz[], $4::int8[]) \
             as r(id, tenant, at, n) join memories m on m.id = r.id and m.tenant = r.tenant \
             on conflict (memory_id) do update set \
             last_read_at = greatest(memory_reads.last_read_at, excluded.last_read_at), \
             reads = memory_reads.reads + excluded.reads",
        )
        .bind(&ids)
        .bind(&tenants)
        .bind(&times)
        .bind(&counts)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn last_reads(&self, tenant: &str, ids: &[Uuid]) -> Result<HashMap<Uuid, DateTime<Utc>>> {
        let rows =
            sqlx::query("select memory_id, last_read_at from memory_reads where tenant = $1 and memory_id = any($2)")
                .bind(tenant)
                .bind(ids)
                .fetch_all(&self.pool)
                .await?;
        rows.iter().map(|row| Ok((row.try_get(0)?, row.try_get(1)?))).collect()
    }
}

#[async_trait]
impl Journal for PgVectorStore {
    async fn journal(&self, before: DateTime<Utc>, limit: usize) -> Result<Vec<JournalEntry>> {
        let rows = sqlx::query(
            "select id, tenant, memory_id, created_at, payload from history_journal where created_at < $1 \
             order by created_at, id limit $2",
        )
        .bind(before)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(JournalEntry {
                    id: row.try_get("id")?,
                    tenant: row.try_get("tenant")?,
                    memory_id: row.try_get("memory_id")?,
                    created_at: row.try_get("created_at")?,
                    payload: row.try_get("payload")?,
                })
            })
            .collect()
    }

    async fn settle(&self, ids: &[Uuid]) -> Result<()> {
        if !ids.is_empty() {
            sqlx::query("delete from history_journal where id = any($1)").bind(ids).execute(&self.pool).await?;
        }
        Ok(())
    }
}

#[async_trait]
impl VectorIndex for PgVectorStore {
    async fn ensure_dimension(&self, dimension: usize, model_id: &str) -> Result<()> {
        let wanted = i32::try_from(dimension).map_err(|_| Error::Config(format!("dimension {dimension} too large")))?;
        let mut transaction = self.pool.begin().await?;
        // One server at a time fixes the dimension.
        sqlx::query("select pg_advisory_xact_lock(7262101)").execute(&mut *transaction).await?;
        let stored: i32 = sqlx::query_scalar(
            "select atttypmod from pg_attribute where attrelid = 'memories'::regclass and attname = 'embedding'",
        )
        .fetch_one(&mut *transaction)
        .await?;
        if stored > 0 {
            if stored != wanted {
                let model: Option<String> =
                    sqlx::query_scalar("select value from store_meta where key = 'embedding_model'")
                        .fetch_optional(&mut *transaction)
                        .await?;
                return Err(Error::Config(format!(
                    "the postgres table memories has vector({stored}) embeddings (model {}) but the configured \
                     embedder {model_id} produces {dimension} dimensions; use the original embedder or a new database",
                    model.unwrap_or_else(|| "unknown".to_owned())
                )));
            }
            return Ok(());
        }
        for table in ["memories", "memories_entities"] {
            sqlx::query(&format!("alter table {table} alter column embedding type vector({wanted})"))
                .execute(&mut *transaction)
                .await?;
        }
        // A new type brings the type's storage back (`external`); keep embeddings in the row (see
        // migrations/0013_embedding_storage.sql).
        sqlx::query("alter table memories alter column embedding set storage main").execute(&mut *transaction).await?;
        sqlx::query(
            "create index if not exists memories_embedding_hnsw on memories using hnsw (embedding vector_cosine_ops)",
        )
        .execute(&mut *transaction)
        .await?;
        sqlx::query(
            "insert into store_meta (key, value) values ('embedding_dimension', $1), ('embedding_model', $2) \
             on conflict (key) do update set value = excluded.value",
        )
        .bind(dimension.to_string())
        .bind(model_id)
        .execute(&mut *transaction)
        .await?;
        transaction.commit().await?;
        Ok(())
    }

    async fn search(
        &self,
        query: &ScopedQuery,
        vector: &[f32],
        limit: usize,
        threshold: f32,
    ) -> Result<Vec<ScoredRecord>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        if query.filter.is_none() {
            if let Some(slot) = self.indexes.fresh(query).await? {
                if let Some(best) = slot.dense(query, vector, limit, threshold, None) {
                    let ids: Vec<Uuid> = best.iter().map(|candidate| candidate.id).collect();
                    let records = self.rows_as_indexed(&query.tenant, &slot, &ids).await?;
                    return Ok(scored(best, records));
                }
            }
        }
        self.search_in_sql(query, vector, limit, threshold).await
    }
}

impl PgVectorStore {
    /// The rows of `ids` in `tenant`, shared with the row cache: from the cache where it holds
    /// their current version (the tuple's `xmin`, read first in one small statement); the others
    /// are read and cached, their embeddings from the scope indexes where those hold that version
    /// (384 floats a row are most of what a row costs to send and decode), else read whole.
    async fn shared_many(&self, tenant: &str, ids: &[Uuid]) -> Result<Vec<Arc<MemoryRecord>>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        if !self.records.enabled() {
            return self.read_rows(tenant, ids, Vec::new()).await;
        }
        let versions: Vec<(Uuid, i64)> =
            sqlx::query_as("select id, xmin::text::int8 from memories where tenant = $1 and id = any($2)")
                .bind(tenant)
                .bind(ids)
                .fetch_all(&self.pool)
                .await?;
        let current: Vec<Uuid> = versions.iter().map(|(id, _)| *id).collect();
        let (cached, _) = self.records.get_many(&current);
        let cached: HashMap<Uuid, (u64, Arc<MemoryRecord>)> = cached.into_iter().collect();
        let mut records = Vec::with_capacity(versions.len());
        let mut stale = Vec::new();
        for (id, version) in &versions {
            match cached.get(id) {
                Some((held, record)) if i64::try_from(*held).ok() == Some(*version) => {
                    records.push(Arc::clone(record));
                }
                _ => stale.push(*id),
            }
        }
        if stale.is_empty() {
            return Ok(records);
        }
        self.read_rows(tenant, &stale, records).await
    }

    /// Rows of `ids` (appended to `records`) read with their version and cached: embeddings from
    /// the scope indexes where they hold that version, else the rows read whole.
    async fn read_rows(
        &self,
        tenant: &str,
        ids: &[Uuid],
        mut records: Vec<Arc<MemoryRecord>>,
    ) -> Result<Vec<Arc<MemoryRecord>>> {
        let generation = self.records.generation();
        let mut loaded = Vec::with_capacity(ids.len());
        let mut whole = Vec::new();
        if self.indexes.enabled() {
            let statement = format!(
                "select {}, xmin::text::int8 as row_version from memories where tenant = $1 and id = any($2)",
                *COLUMNS_BUT_EMBEDDING
            );
            let rows = sqlx::query(&statement).bind(tenant).bind(ids).fetch_all(&self.pool).await?;
            let read = rows
                .iter()
                .map(|row| Ok((row.try_get("id")?, u64::try_from(row.try_get::<i64, _>("row_version")?).unwrap_or(0))))
                .collect::<Result<Vec<(Uuid, u64)>>>()?;
            let mut vectors = self.indexes.vectors_of(tenant, &read);
            for (row, (id, version)) in rows.iter().zip(&read) {
                match vectors.remove(id) {
                    Some(embedding) => loaded.push((*version, Arc::new(row_to_record_with(row, Some(embedding))?))),
                    None => whole.push(*id),
                }
            }
        } else {
            whole = ids.to_vec();
        }
        if !whole.is_empty() {
            let statement = format!(
                "select {COLUMNS}, xmin::text::int8 as row_version from memories where tenant = $1 and id = any($2)"
            );
            for row in sqlx::query(&statement).bind(tenant).bind(&whole).fetch_all(&self.pool).await? {
                let version = u64::try_from(row.try_get::<i64, _>("row_version")?).unwrap_or(0);
                loaded.push((version, Arc::new(row_to_record(&row)?)));
            }
        }
        let fill: Vec<(Uuid, (u64, Arc<MemoryRecord>))> =
            loaded.iter().map(|(version, record)| (record.id, (*version, Arc::clone(record)))).collect();
        self.records.fill(&fill, generation);
        records.extend(loaded.into_iter().map(|(_, record)| record));
        Ok(records)
    }

    /// The rows of `ids` as `slot`'s index (up to date for the caller) knows them: from the row
    /// cache where it holds the version the index holds, else read (a newer version read is as
    /// good); ids the index does not hold are read as [`Self::shared_many`] does.
    async fn rows_as_indexed(&self, tenant: &str, slot: &Slot, ids: &[Uuid]) -> Result<Vec<Arc<MemoryRecord>>> {
        let versions = slot.versions_of(ids);
        let (cached, _) = self.records.get_many(ids);
        let cached: HashMap<Uuid, (u64, Arc<MemoryRecord>)> = cached.into_iter().collect();
        let mut records = Vec::with_capacity(ids.len());
        let (mut stale, mut unknown) = (Vec::new(), Vec::new());
        for (id, version) in ids.iter().zip(versions) {
            match (version, cached.get(id)) {
                (Some(version), Some((held, record))) if *held == version => records.push(Arc::clone(record)),
                (Some(_), _) => stale.push(*id),
                (None, _) => unknown.push(*id),
            }
        }
        if !stale.is_empty() {
            records = self.read_rows(tenant, &stale, records).await?;
        }
        if !unknown.is_empty() {
            records.extend(self.shared_many(tenant, &unknown).await?);
        }
        Ok(records)
    }

    /// Dense search in the database: exact for small scopes, HNSW for large ones.
    async fn search_in_sql(
        &self,
        query: &ScopedQuery,
        vector: &[f32],
        limit: usize,
        threshold: f32,
    ) -> Result<Vec<ScoredRecord>> {
        let clause = where_clause(Pg, query, 2);
        let limit_placeholder = format!("${}", clause.next_index());
        let (sql, binds) = clause.into_parts();
        let mut transaction = self.pool.begin().await?;
        // Plan with the actual scope values: a generic plan sees "one of a few users" and picks a
        // sequential scan, 50 ms instead of 1 ms for a small scope in a big table.
        sqlx::query("set local plan_cache_mode = force_custom_plan").execute(&mut *transaction).await?;
        let count_statement = format!("select count(*) from (select 1 from memories where {sql} limit $1) as scoped");
        let scoped: i64 = bind_all(sqlx::query(&count_statement).bind(self.exact_search_max_rows + 1), &binds)
            .fetch_one(&mut *transaction)
            .await?
            .try_get(0)?;
        let limit_i64 = i64::try_from(limit).unwrap_or(i64::MAX);
        let order = if scoped <= self.exact_search_max_rows {
            // `+ 0` hides the expression from the planner: an exact ranking of the scope's rows.
            "(embedding <=> $1) + 0"
        } else {
            // The HNSW index with iterative scans: it keeps scanning until enough rows pass the filter.
            sqlx::query("set local hnsw.iterative_scan = relaxed_order").execute(&mut *transaction).await?;
            let ef_search = (limit * 4).max(self.ef_search).clamp(10, 1000);
            sqlx::query(&format!("set local hnsw.ef_search = {ef_search}")).execute(&mut *transaction).await?;
            sqlx::query(&format!("set local hnsw.max_scan_tuples = {}", self.max_scan_tuples.max(1)))
                .execute(&mut *transaction)
                .await?;
            "embedding <=> $1"
        };
        let statement = format!(
            "select {COLUMNS}, embedding <=> $1 as distance from memories where {sql} order by {order} limit {limit_placeholder}"
        );
        let rows = bind_all(sqlx::query(&statement).bind(Vector::from(vector.to_vec())), &binds)
            .bind(limit_i64)
            .fetch_all(&mut *transaction)
            .await?;
        transaction.commit().await?;
        let mut scored = rows
            .iter()
            .map(|row| {
                let distance: f64 = row.try_get("distance")?;
                Ok(ScoredRecord {
                    record: Arc::new(row_to_record(row)?),
                    score: (1.0 - distance).clamp(0.0, 1.0) as f32,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        // Relaxed iterative scans may return rows slightly out of order.
        scored.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.record.id.cmp(&b.record.id)));
        scored.retain(|hit| hit.score >= threshold);
        Ok(scored)
    }
}

#[async_trait]
impl KeywordIndex for PgVectorStore {
    async fn keyword_candidates(
        &self,
        query: &ScopedQuery,
        terms: &[String],
        limit: usize,
    ) -> Result<KeywordCandidates> {
        if query.filter.is_none() {
            if let Some(slot) = self.indexes.fresh(query).await? {
                if let Some(found) = slot.keywords(query, terms, limit) {
                    return Ok(found);
                }
            }
        }
        // The scope's statistics and each term's document frequency in one statement; each term
        // is one range of `keyword_postings_term` (tenant, term, user_id), index only.
        let clause = where_clause(Pg, &query.scope_only(), 1);
        let terms_at = clause.next_index();
        let (scope_sql, scope_binds) = clause.into_parts();
        let statement = format!(
            "select s.docs, s.total, p.term, p.n from \
             (select coalesce(sum(docs), 0)::int8 as docs, coalesce(sum(total_len), 0)::int8 as total \
              from keyword_stats where {scope_sql}) as s \
             left join (select term, count(*)::int8 as n from keyword_postings \
              where {scope_sql} and term = any(${terms_at}::text[]) group by term) as p on true"
        );
        let rows = bind_all(sqlx::query(&statement), &scope_binds).bind(terms).fetch_all(&self.pool).await?;
        let mut stats = KeywordStats::default();
        for row in &rows {
            let docs: i64 = row.try_get(0)?;
            let total: i64 = row.try_get(1)?;
            stats.doc_count = u64::try_from(docs).unwrap_or(0);
            stats.avg_doc_len = if docs > 0 { total as f64 / docs as f64 } else { 0.0 };
            if let (Some(term), Some(count)) = (row.try_get::<Option<String>, _>(2)?, row.try_get::<Option<i64>, _>(3)?)
            {
                stats.document_frequency.insert(term, u64::try_from(count).unwrap_or(0));
            }
        }
        if stats.doc_count == 0 || terms.is_empty() {
            return Ok(KeywordCandidates { stats, top: Vec::new() });
        }
        if limit == 0 || stats.document_frequency.is_empty() {
            return Ok(KeywordCandidates { stats, top: Vec::new() });
        }
        // BM25 summed in the database over the postings of the visible memories.
        let (weights, base, per_length) = Bm25::new(&stats, terms).sql_weights();
        let clause = where_clause(Pg, &query.without_filter(), 1);
        let at = clause.next_index();
        let (visible_sql, visible_binds) = clause.into_parts();
        let (filtered, filter_binds, limit_at) = match &query.filter {
            // A metadata filter is checked on the memory row itself.
            Some(_) => {
                let clause = where_clause(Pg, query, at + 4);
                let limit_at = clause.next_index();
                let (sql, binds) = clause.into_parts();
                (
                    format!(" and exists (select 1 from memories where memories.id = p.memory_id and {sql})"),
                    binds,
                    limit_at,
                )
            }
            None => (String::new(), Vec::new(), at + 4),
        };
        let statement = format!(
            "select p.memory_id, sum(w.weight * p.tf / (p.tf + ${base_at} + ${length_at} * p.doc_len)) as score \
             from keyword_postings p join unnest(${terms_at}::text[], ${weights_at}::float8[]) as w(term, weight) \
             on w.term = p.term where {visible_sql} and p.term = any(${terms_at}::text[]){filtered} \
             group by p.memory_id order by score desc, p.memory_id limit ${limit_at}",
            terms_at = at,
            weights_at = at + 1,
            base_at = at + 2,
            length_at = at + 3,
        );
        let (names, values): (Vec<String>, Vec<f64>) = weights.into_iter().unzip();
        let fetch =
            bind_all(sqlx::query(&statement), &visible_binds).bind(&names).bind(&values).bind(base).bind(per_length);
        let rows =
            bind_all(fetch, &filter_binds).bind(i64::try_from(limit).unwrap_or(i64::MAX)).fetch_all(&self.pool).await?;
        let top = rows.iter().map(|row| Ok((row.try_get(0)?, row.try_get(1)?))).collect::<Result<Vec<_>>>()?;
        Ok(KeywordCandidates { stats, top })
    }
}

/// The candidates of `best` (best first) with their rows among `records` and their scores; one
/// without a row (deleted since the index saw it) is left out.
fn scored(best: Vec<Candidate>, records: Vec<Arc<MemoryRecord>>) -> Vec<ScoredRecord> {
    let mut by_id: HashMap<Uuid, Arc<MemoryRecord>> = records.into_iter().map(|record| (record.id, record)).collect();
    best.into_iter()
        .filter_map(|candidate| {
            by_id.remove(&candidate.id).map(|record| ScoredRecord { record, score: candidate.score })
        })
        .collect()
}

/// Matched entity rows as parallel arrays for `unnest`: entity ids, probes.
fn matched_arrays(matched: &[(String, Vec<usize>)]) -> Result<(Vec<Uuid>, Vec<i32>)> {
    let mut ids = Vec::new();
    let mut probes = Vec::new();
    for (id, matching) in matched {
        let id = Uuid::parse_str(id).map_err(|error| Error::Internal(format!("entity id {id}: {error}")))?;
        for probe in matching {
            ids.push(id);
            probes.push(i32::try_from(*probe).unwrap_or(i32::MAX));
        }
    }
    Ok((ids, probes))
}

#[async_trait]
impl EntityIndex for PgVectorStore {
    async fn entity_candidates(
        &self,
        query: &ScopedQuery,
        probes: &[EntityProbe],
        threshold: f32,
        limit: usize,
    ) -> Result<EntityCandidates> {
        let mut found = EntityCandidates { linked: vec![0; probes.len()], ..EntityCandidates::default() };
        if probes.is_empty() {
            return Ok(found);
        }
        if query.filter.is_none() {
            if let Some(slot) = self.indexes.fresh(query).await? {
                if let Some(found) = slot.entities(query, probes, threshold, limit) {
                    return Ok(found);
                }
            }
        }
        // Every probe's matching entity rows of the scope in one statement.
        let pairs = query.scope.pairs();
        let scope: String =
            pairs.iter().enumerate().map(|(index, (column, _))| format!(" and e.{column} = ${}", 5 + index)).collect();
        let statement = format!(
            "select e.id, (p.ord - 1)::int4 from unnest($2::text[], $3::vector[]) with ordinality as p(name, embedding, ord) \
             join memories_entities e on e.tenant = $1 {scope} \
             and (e.normalized = p.name or (e.embedding <=> p.embedding) <= $4)"
        );
        let names: Vec<&str> = probes.iter().map(|probe| probe.normalized.as_str()).collect();
        let vectors: Vec<Vector> = probes.iter().map(|probe| Vector::from(probe.embedding.clone())).collect();
        let mut fetch =
            sqlx::query(&statement).bind(&query.tenant).bind(&names).bind(&vectors).bind(1.0 - f64::from(threshold));
        for (_, value) in &pairs {
            fetch = fetch.bind(*value);
        }
        let mut matching: Vec<(Uuid, Vec<usize>)> = Vec::new();
        for row in fetch.fetch_all(&self.pool).await? {
            let id: Uuid = row.try_get(0)?;
            let Ok(index) = usize::try_from(row.try_get::<i32, _>(1)?) else { continue };
            match matching.iter_mut().find(|(known, _)| *known == id) {
                Some((_, indexes)) => indexes.push(index),
                None => matching.push((id, vec![index])),
            }
        }
        for (_, indexes) in &mut matching {
            indexes.sort_unstable();
        }
        let mut matching: Vec<(String, Vec<usize>)> =
            matching.into_iter().map(|(id, indexes)| (id.to_string(), indexes)).collect();
        cap_matched(&mut matching);
        if matching.is_empty() {
            return Ok(found);
        }
        found.matched = matching;
        let (entity_ids, probe_ids) = matched_arrays(&found.matched)?;
        // Entity rows are per scope: their links are the scope's memories. With the scope's size.
        let (scope_sql, scope_binds) = where_clause(Pg, &query.scope_only(), 3).into_parts();
        let statement = format!(
            "select m.probe, count(distinct l.memory_id)::int8, \
             (select coalesce(sum(docs), 0)::int8 from keyword_stats where {scope_sql}) \
             from unnest($1::uuid[], $2::int4[]) as m(entity_id, probe) \
             join memory_entity_links l on l.entity_id = m.entity_id group by m.probe"
        );
        let rows = bind_all(sqlx::query(&statement).bind(&entity_ids).bind(&probe_ids), &scope_binds)
            .fetch_all(&self.pool)
            .await?;
        let mut doc_count = 0;
        for row in rows {
            let probe: i32 = row.try_get(0)?;
            let count: i64 = row.try_get(1)?;
            doc_count = u64::try_from(row.try_get::<i64, _>(2)?).unwrap_or(0);
            if let Some(slot) = usize::try_from(probe).ok().and_then(|probe| found.linked.get_mut(probe)) {
                *slot = u64::try_from(count).unwrap_or(0);
            }
        }
        if limit == 0 {
            return Ok(found);
        }
        let weights = EntityScores::weights(&found.linked, doc_count);
        let probe_weights: Vec<f64> = probe_ids
            .iter()
            .map(|probe| usize::try_from(*probe).ok().and_then(|p| weights.get(p)).copied().unwrap_or(0.0))
            .collect();
        // Ranked by the summed weights of the links (a memory linked to two rows one probe matches
        // counts that probe twice here, once in its score). With a metadata filter each link is
        // checked on its memory row; otherwise only expiration and supersession can hide a memory
        // of the scope, checked afterwards on a few more rows than needed.
        let (join, filter_binds, limit_at) = match &query.filter {
            Some(_) => {
                let clause = where_clause(Pg, query, 4);
                let limit_at = clause.next_index();
                let (sql, binds) = clause.into_parts();
                (format!(" join memories on memories.id = l.memory_id where {sql}"), binds, limit_at)
            }
            None => (String::new(), Vec::new(), 4),
        };
        let statement = format!(
            "select l.memory_id, sum(m.weight) as score, array_agg(m.probe) \
             from unnest($1::uuid[], $2::int4[], $3::float8[]) as m(entity_id, probe, weight) \
             join memory_entity_links l on l.entity_id = m.entity_id{join} \
             group by l.memory_id order by score desc, l.memory_id desc limit ${limit_at}"
        );
        let check_live = query.filter.is_none() && (!query.show_expired || !query.include_superseded);
        // Without the check one pass; with it, passes of 2, 8, 32… × limit until enough live
        // memories are found or the links are exhausted.
        let mut fetch_limit = if check_live { limit * 2 } else { limit };
        let ranked = loop {
            let fetch = sqlx::query(&statement).bind(&entity_ids).bind(&probe_ids).bind(&probe_weights);
            let rows = bind_all(fetch, &filter_binds)
                .bind(i64::try_from(fetch_limit).unwrap_or(i64::MAX))
                .fetch_all(&self.pool)
                .await?;
            let mut ranked: Vec<(Uuid, Vec<i32>)> =
                rows.iter().map(|row| Ok((row.try_get(0)?, row.try_get(2)?))).collect::<Result<Vec<_>>>()?;
            let exhausted = ranked.len() < fetch_limit;
            if check_live && !ranked.is_empty() {
                let ids: Vec<Uuid> = ranked.iter().map(|(id, _)| *id).collect();
                let live: std::collections::HashSet<Uuid> = sqlx::query_scalar(
                    "select id from memories where id = any($1::uuid[]) and tenant = $2 \
                     and ($3::date is null or expiration_date is null or expiration_date >= $3) \
                     and ($4 or status not in ('superseded', 'retired'))",
                )
                .bind(&ids)
                .bind(&query.tenant)
                .bind((!query.show_expired).then_some(query.today))
                .bind(query.include_superseded)
                .fetch_all(&self.pool)
                .await?
                .into_iter()
                .collect();
                ranked.retain(|(id, _)| live.contains(id));
            }
            if !check_live || ranked.len() >= limit || exhausted {
                ranked.truncate(limit);
                break ranked;
            }
            fetch_limit = fetch_limit.saturating_mul(4);
        };
        for (memory_id, mut probes) in ranked {
            probes.sort_unstable();
            probes.dedup();
            found.hits.extend(
                probes
                    .into_iter()
                    .filter_map(|probe| usize::try_from(probe).ok().map(|probe| EntityHit { memory_id, probe })),
            );
        }
        Ok(found)
    }

    async fn entity_links(
        &self,
        query: &ScopedQuery,
        matched: &[(String, Vec<usize>)],
        memory_ids: &[Uuid],
    ) -> Result<Vec<EntityHit>> {
        if matched.is_empty() || memory_ids.is_empty() {
            return Ok(Vec::new());
        }
        // The index holds every link of the scope (a filter narrows memories, not links).
        if let Some(slot) = self.indexes.fresh(query).await? {
            if let Some(hits) = slot.links_of(matched, memory_ids) {
                return Ok(hits);
            }
        }
        let (entity_ids, probe_ids) = matched_arrays(matched)?;
        let rows = sqlx::query(
            "select l.memory_id, m.probe from unnest($1::uuid[], $2::int4[]) as m(entity_id, probe) \
             join memory_entity_links l on l.entity_id = m.entity_id where l.memory_id = any($3::uuid[])",
        )
        .bind(&entity_ids)
        .bind(&probe_ids)
        .bind(memory_ids)
        .fetch_all(&self.pool)
        .await?;
        let mut hits = Vec::new();
        for row in rows {
            let probe: i32 = row.try_get(1)?;
            if let Ok(probe) = usize::try_from(probe) {
                hits.push(EntityHit { memory_id: row.try_get(0)?, probe });
            }
        }
        Ok(hits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_but_embedding_are_the_columns_less_one() {
        let all: Vec<&str> = COLUMNS.split(',').map(str::trim).collect();
        let without: Vec<&str> = COLUMNS_BUT_EMBEDDING.split(',').map(str::trim).collect();
        assert_eq!(without, all.into_iter().filter(|column| *column != "embedding").collect::<Vec<_>>());
    }
}
