//! The production vector store: Postgres with pgvector. Typed, indexed columns for tenant, scope
//! ids and timestamps, caller metadata as `jsonb`, embeddings as `vector(d)` with an HNSW cosine
//! index. Scoped search returns a full, exact top-k: small scopes are ranked exactly (the HNSW
//! index is bypassed), large ones use the index with pgvector 0.8 iterative scans so a filter can
//! never starve the result (Mem0's post-filter bug, spec §17 item 8).

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use pgvector::Vector;
use sqlx::postgres::{PgPool, PgPoolOptions, PgRow};
use sqlx::{Postgres, Row};
use uuid::Uuid;

use super::pg_filter::{where_clause, PgBind, PgClause};
use super::{
    doc_len, Applied, Cursor, EntityHit, EntityLink, EntityProbe, JournalEntry, KeywordPostings, Page, Posting,
    ScopeKind, ScopeSummary, ScopedQuery, ScoredRecord, VectorStore, WriteSet,
};
use crate::error::{Error, Result};
use crate::scope::Scope;
use crate::types::{MemoryRecord, Metadata};

/// The migrations of the Postgres store (top-level `migrations/`).
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations");

/// Scopes with at most this many rows are ranked exactly, without the HNSW index.
pub const DEFAULT_EXACT_SEARCH_MAX_ROWS: i64 = 20_000;

const COLUMNS: &str = "id, tenant, user_id, agent_id, run_id, memory, hash, metadata, created_at, updated_at, \
                       expiration_date, attributed_to, role, actor_id, memory_type, linked_memory_ids, entities, \
                       text_lemmatized, doc_len, embedding";

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
}

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
}

type PgQuery<'q> = sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments>;

fn bind_all<'q>(mut query: PgQuery<'q>, binds: &'q [PgBind]) -> PgQuery<'q> {
    for bind in binds {
        query = match bind {
            PgBind::Text(text) => query.bind(text.as_str()),
            PgBind::Float(number) => query.bind(*number),
            PgBind::Time(at) => query.bind(*at),
            PgBind::Date(date) => query.bind(*date),
            PgBind::Uuid(id) => query.bind(*id),
        };
    }
    query
}

/// Appends one row of `COPY ... (format text)` for `record`, columns as in [`COLUMNS`].
fn copy_row(out: &mut String, record: &MemoryRecord) {
    fn text(out: &mut String, value: &str) {
        for c in value.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                other => out.push(other),
            }
        }
    }
    fn optional(out: &mut String, value: Option<&str>) {
        match value {
            Some(value) => text(out, value),
            None => out.push_str("\\N"),
        }
    }
    let array: String = {
        let items: Vec<String> = record
            .entities
            .iter()
            .map(|entity| format!("\"{}\"", entity.replace('\\', "\\\\").replace('"', "\\\"")))
            .collect();
        format!("{{{}}}", items.join(","))
    };
    let linked: Vec<String> = record.linked_memory_ids.iter().map(Uuid::to_string).collect();
    let vector: Vec<String> = record.embedding.iter().map(f32::to_string).collect();
    let fields: [Option<String>; 20] = [
        Some(record.id.to_string()),
        Some(record.tenant.clone()),
        record.scope.user_id.clone(),
        record.scope.agent_id.clone(),
        record.scope.run_id.clone(),
        Some(record.memory.clone()),
        Some(record.hash.clone()),
        Some(serde_json::Value::Object(record.metadata.clone()).to_string()),
        Some(record.created_at.to_rfc3339()),
        Some(record.updated_at.to_rfc3339()),
        record.expiration_date.map(|date| date.format("%Y-%m-%d").to_string()),
        record.attributed_to.clone(),
        record.role.clone(),
        record.actor_id.clone(),
        record.memory_type.clone(),
        Some(format!("{{{}}}", linked.join(","))),
        Some(array),
        Some(record.text_lemmatized.clone()),
        Some(doc_len(&record.text_lemmatized).to_string()),
        Some(format!("[{}]", vector.join(","))),
    ];
    for (index, field) in fields.iter().enumerate() {
        if index > 0 {
            out.push('\t');
        }
        optional(out, field.as_deref());
    }
    out.push('\n');
}

/// Removes those of `entity_ids` that no memory links to any more.
async fn remove_orphan_entities(executor: &mut sqlx::PgConnection, entity_ids: &[Uuid]) -> Result<()> {
    if entity_ids.is_empty() {
        return Ok(());
    }
    // Lock the candidates first: a concurrent link to one of them holds a key-share lock until it
    // commits, and the delete below (a new statement, so a new snapshot) then sees that link.
    sqlx::query("select id from memories_entities where id = any($1) order by id for update")
        .bind(entity_ids)
        .fetch_all(&mut *executor)
        .await?;
    sqlx::query(
        "delete from memories_entities e where e.id = any($1) \
         and not exists (select 1 from memory_entity_links l where l.entity_id = e.id)",
    )
    .bind(entity_ids)
    .execute(&mut *executor)
    .await?;
    Ok(())
}

/// Applies a write inside an open transaction (see [`WriteSet`] for the order).
async fn apply_in(executor: &mut sqlx::PgConnection, write: &WriteSet) -> Result<Applied> {
    let mut applied = Applied::default();
    let touched: Vec<Uuid> = write.relink.iter().chain(&write.delete).copied().collect();
    if !touched.is_empty() {
        applied.previous_links = load_links(executor, &touched).await?;
    }
    let orphan_candidates: Vec<Uuid> = if touched.is_empty() {
        Vec::new()
    } else {
        sqlx::query_scalar("select distinct entity_id from memory_entity_links where memory_id = any($1)")
            .bind(&touched)
            .fetch_all(&mut *executor)
            .await?
    };
    if !write.delete.is_empty() {
        let rows = sqlx::query(&format!("delete from memories where tenant = $1 and id = any($2) returning {COLUMNS}"))
            .bind(&write.tenant)
            .bind(&write.delete)
            .fetch_all(&mut *executor)
            .await?;
        applied.deleted = rows.iter().map(row_to_record).collect::<Result<Vec<_>>>()?;
    }
    applied.missing =
        write.delete.iter().filter(|id| !applied.deleted.iter().any(|record| record.id == **id)).copied().collect();
    if let (Some(missing), false) = (applied.missing.first(), write.skip_missing) {
        return Err(Error::MemoryNotFound { id: missing.to_string() });
    }
    for record in &write.update {
        let previous = sqlx::query(&format!("select {COLUMNS} from memories where tenant = $1 and id = $2 for update"))
            .bind(&record.tenant)
            .bind(record.id)
            .fetch_optional(&mut *executor)
            .await?
            .ok_or_else(|| Error::MemoryNotFound { id: record.id.to_string() })?;
        applied.replaced.push(row_to_record(&previous)?);
        update_one(executor, record).await?;
    }
    insert_rows(executor, &write.insert).await?;
    if !write.relink.is_empty() {
        sqlx::query("delete from memory_entity_links where memory_id = any($1)")
            .bind(&write.relink)
            .execute(&mut *executor)
            .await?;
    }
    add_links(executor, &write.links, write.merge_threshold).await?;
    remove_orphan_entities(executor, &orphan_candidates).await?;
    for entry in &write.journal {
        if entry.memory_id.is_some_and(|id| applied.missing.contains(&id)) {
            continue;
        }
        sqlx::query(
            "insert into history_journal (id, tenant, memory_id, created_at, payload) values ($1, $2, $3, $4, $5)",
        )
        .bind(entry.id)
        .bind(&entry.tenant)
        .bind(entry.memory_id)
        .bind(entry.created_at)
        .bind(&entry.payload)
        .execute(&mut *executor)
        .await?;
    }
    if !write.settle.is_empty() {
        sqlx::query("delete from history_journal where id = any($1)")
            .bind(&write.settle)
            .execute(&mut *executor)
            .await?;
    }
    Ok(applied)
}

/// Multi-row inserts: one round trip per 500 rows.
async fn insert_rows(executor: &mut sqlx::PgConnection, records: &[MemoryRecord]) -> Result<()> {
    const COLUMN_COUNT: usize = 20;
    for chunk in records.chunks(500) {
        let rows: Vec<String> = (0..chunk.len())
            .map(|row| {
                let placeholders: Vec<String> =
                    (1..=COLUMN_COUNT).map(|column| format!("${}", row * COLUMN_COUNT + column)).collect();
                format!("({})", placeholders.join(", "))
            })
            .collect();
        let statement = format!("insert into memories ({COLUMNS}) values {}", rows.join(", "));
        let mut query = sqlx::query(&statement);
        for record in chunk {
            query = query
                .bind(record.id)
                .bind(&record.tenant)
                .bind(&record.scope.user_id)
                .bind(&record.scope.agent_id)
                .bind(&record.scope.run_id)
                .bind(&record.memory)
                .bind(&record.hash)
                .bind(serde_json::Value::Object(record.metadata.clone()))
                .bind(record.created_at)
                .bind(record.updated_at)
                .bind(record.expiration_date)
                .bind(&record.attributed_to)
                .bind(&record.role)
                .bind(&record.actor_id)
                .bind(&record.memory_type)
                .bind(&record.linked_memory_ids)
                .bind(&record.entities)
                .bind(&record.text_lemmatized)
                .bind(i32::try_from(doc_len(&record.text_lemmatized)).unwrap_or(i32::MAX))
                .bind(Vector::from(record.embedding.clone()));
        }
        query.execute(&mut *executor).await?;
    }
    Ok(())
}

async fn update_one(executor: &mut sqlx::PgConnection, record: &MemoryRecord) -> Result<()> {
    sqlx::query(
        "update memories set memory = $1, hash = $2, metadata = $3, created_at = $4, updated_at = $5, \
         expiration_date = $6, embedding = $7, text_lemmatized = $10, doc_len = $11, entities = $12 \
         where tenant = $8 and id = $9",
    )
    .bind(&record.memory)
    .bind(&record.hash)
    .bind(serde_json::Value::Object(record.metadata.clone()))
    .bind(record.created_at)
    .bind(record.updated_at)
    .bind(record.expiration_date)
    .bind(Vector::from(record.embedding.clone()))
    .bind(&record.tenant)
    .bind(record.id)
    .bind(&record.text_lemmatized)
    .bind(i32::try_from(doc_len(&record.text_lemmatized)).unwrap_or(i32::MAX))
    .bind(&record.entities)
    .execute(&mut *executor)
    .await?;
    Ok(())
}

/// The entity links of `memory_ids` with everything needed to link them again.
async fn load_links(executor: &mut sqlx::PgConnection, memory_ids: &[Uuid]) -> Result<Vec<EntityLink>> {
    let rows = sqlx::query(
        "select l.memory_id, e.tenant, e.user_id, e.agent_id, e.run_id, e.entity, e.normalized, e.entity_type, \
         e.embedding from memory_entity_links l join memories_entities e on e.id = l.entity_id \
         where l.memory_id = any($1)",
    )
    .bind(memory_ids)
    .fetch_all(&mut *executor)
    .await?;
    rows.iter()
        .map(|row| {
            let embedding: Vector = row.try_get(8)?;
            Ok(EntityLink {
                memory_id: row.try_get(0)?,
                tenant: row.try_get(1)?,
                scope: Scope { user_id: row.try_get(2)?, agent_id: row.try_get(3)?, run_id: row.try_get(4)? },
                name: row.try_get(5)?,
                normalized: row.try_get(6)?,
                kind: row.try_get(7)?,
                embedding: embedding.to_vec(),
            })
        })
        .collect()
}

/// Links memories to the entity rows of their scope: the row with the same normalised name, else
/// the most similar one at or above `merge_threshold`, else a new row. New rows are inserted with
/// `on conflict do nothing` against the unique index on (tenant, scope, normalised name), so two
/// writers naming the same new entity at once end up with one row (the loser reads the winner's).
async fn add_links(executor: &mut sqlx::PgConnection, links: &[EntityLink], merge_threshold: f32) -> Result<()> {
    const SCOPE: &str = "tenant = $1 and user_id is not distinct from $2 and agent_id is not distinct from $3 \
                         and run_id is not distinct from $4";
    let same_name_statement =
        format!("select id from memories_entities where {SCOPE} and normalized = $5 limit 1 for key share");
    for link in links {
        let vector = Vector::from(link.embedding.clone());
        let mut entity_id = entity_by_name(executor, &same_name_statement, link).await?;
        if entity_id.is_none() {
            let nearest = sqlx::query(&format!(
                "select id, (embedding <=> $5)::float8 as distance from memories_entities where {SCOPE} \
                 order by embedding <=> $5 limit 1 for key share"
            ))
            .bind(&link.tenant)
            .bind(&link.scope.user_id)
            .bind(&link.scope.agent_id)
            .bind(&link.scope.run_id)
            .bind(&vector)
            .fetch_optional(&mut *executor)
            .await?;
            if let Some(row) = nearest {
                let distance: f64 = row.try_get("distance")?;
                if 1.0 - distance >= f64::from(merge_threshold) {
                    entity_id = Some(row.try_get("id")?);
                }
            }
        }
        if entity_id.is_none() {
            entity_id = sqlx::query_scalar(
                "insert into memories_entities (id, tenant, user_id, agent_id, run_id, entity, normalized, \
                 entity_type, embedding) values ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
                 on conflict (tenant, coalesce(user_id, ''), coalesce(agent_id, ''), coalesce(run_id, ''), normalized) \
                 where normalized <> '' do nothing returning id",
            )
            .bind(Uuid::now_v7())
            .bind(&link.tenant)
            .bind(&link.scope.user_id)
            .bind(&link.scope.agent_id)
            .bind(&link.scope.run_id)
            .bind(&link.name)
            .bind(&link.normalized)
            .bind(&link.kind)
            .bind(&vector)
            .fetch_optional(&mut *executor)
            .await?;
        }
        let entity_id = match entity_id {
            Some(id) => id,
            // A concurrent writer created the row first; it is committed now (the insert waited).
            None => entity_by_name(executor, &same_name_statement, link)
                .await?
                .ok_or_else(|| Error::Internal(format!("entity `{}` neither inserted nor found", link.normalized)))?,
        };
        sqlx::query("insert into memory_entity_links (memory_id, entity_id) values ($1, $2) on conflict do nothing")
            .bind(link.memory_id)
            .bind(entity_id)
            .execute(&mut *executor)
            .await?;
    }
    Ok(())
}

async fn entity_by_name(executor: &mut sqlx::PgConnection, statement: &str, link: &EntityLink) -> Result<Option<Uuid>> {
    Ok(sqlx::query_scalar::<_, Uuid>(statement)
        .bind(&link.tenant)
        .bind(&link.scope.user_id)
        .bind(&link.scope.agent_id)
        .bind(&link.scope.run_id)
        .bind(&link.normalized)
        .fetch_optional(executor)
        .await?)
}

fn row_to_record(row: &PgRow) -> Result<MemoryRecord> {
    let metadata: serde_json::Value = row.try_get("metadata")?;
    let serde_json::Value::Object(metadata) = metadata else {
        return Err(Error::Internal("stored metadata is not an object".into()));
    };
    let embedding: Vector = row.try_get("embedding")?;
    Ok(MemoryRecord {
        id: row.try_get("id")?,
        tenant: row.try_get("tenant")?,
        scope: Scope {
            user_id: row.try_get("user_id")?,
            agent_id: row.try_get("agent_id")?,
            run_id: row.try_get("run_id")?,
        },
        memory: row.try_get("memory")?,
        hash: row.try_get("hash")?,
        metadata: Metadata::from_iter(metadata),
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        expiration_date: row.try_get("expiration_date")?,
        attributed_to: row.try_get("attributed_to")?,
        role: row.try_get("role")?,
        actor_id: row.try_get("actor_id")?,
        memory_type: row.try_get("memory_type")?,
        linked_memory_ids: row.try_get("linked_memory_ids")?,
        entities: row.try_get("entities")?,
        text_lemmatized: row.try_get("text_lemmatized")?,
        embedding: embedding.to_vec(),
    })
}

/// The pool's check on every connection coming back: is its session outside any transaction?
///
/// A `begin()` whose future is dropped while `BEGIN` is in flight (a client that disconnects, a
/// timeout) leaves the session inside a transaction sqlx does not know about (sqlx 0.8.6 and
/// 0.9.0, launchbadge/sqlx#4393); handed to the next borrower, its statements would run inside
/// it, and after one error every query on the connection would fail with 25P02. Outside a
/// transaction block every statement is the first of its own transaction, so its
/// `statement_timestamp()` equals `transaction_timestamp()` (documented); inside one they differ.
/// A session in an aborted transaction fails the query instead. Either way the connection is
/// closed rather than reused.
async fn outside_transaction(connection: &mut sqlx::PgConnection) -> Result<bool, sqlx::Error> {
    let inside: bool = sqlx::query_scalar("select statement_timestamp() <> transaction_timestamp()")
        .fetch_one(&mut *connection)
        .await?;
    if inside {
        tracing::warn!("closing a postgres connection returned inside a stale transaction");
    }
    Ok(!inside)
}

/// What [`PgVectorStore::import`] did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ImportReport {
    /// Rows written.
    pub rows: usize,
    /// Time spent copying rows.
    pub load: Duration,
    /// Time spent building the HNSW index afterwards.
    pub index: Duration,
}

impl PgVectorStore {
    /// Loads many memories with `COPY`, for migrations and benchmarks. The HNSW index is dropped
    /// for the load and built afterwards with `maintenance_work_mem` (e.g. `"2GB"`; the graph
    /// should fit) and parallel workers, which is far faster than maintaining it row by row.
    /// Meanwhile searches still work, ranking exactly. The keyword index (generated terms)
    /// follows; entity links are not created. Rows are committed in batches of 10,000: a failed
    /// import leaves the batches before the failure, and the index is rebuilt either way.
    ///
    /// # Errors
    /// Store errors; the first one stops the load.
    pub async fn import(&self, records: &[MemoryRecord], maintenance_work_mem: &str) -> Result<ImportReport> {
        if maintenance_work_mem.is_empty() || !maintenance_work_mem.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(Error::Config(format!("invalid maintenance_work_mem {maintenance_work_mem}")));
        }
        let mut connection = self.pool.acquire().await?;
        sqlx::query("drop index if exists memories_embedding_hnsw").execute(&mut *connection).await?;
        let started = std::time::Instant::now();
        let mut loaded = Ok(());
        for chunk in records.chunks(10_000) {
            let mut rows = String::with_capacity(chunk.len() * 4096);
            for record in chunk {
                copy_row(&mut rows, record);
            }
            let copied = async {
                let mut copy =
                    connection.copy_in_raw(&format!("copy memories ({COLUMNS}) from stdin (format text)")).await?;
                copy.send(rows.into_bytes()).await?;
                copy.finish().await
            }
            .await;
            if let Err(error) = copied {
                loaded = Err(Error::from(error));
                break;
            }
        }
        let load = started.elapsed();
        let started = std::time::Instant::now();
        // A refused setting must not leave the table without its index: build with the default.
        if let Err(error) =
            sqlx::query(&format!("set maintenance_work_mem = '{maintenance_work_mem}'")).execute(&mut *connection).await
        {
            tracing::warn!(%error, "maintenance_work_mem refused; building the index with the server default");
        }
        sqlx::query(
            "create index if not exists memories_embedding_hnsw on memories using hnsw (embedding vector_cosine_ops)",
        )
        .execute(&mut *connection)
        .await?;
        sqlx::query("reset maintenance_work_mem").execute(&mut *connection).await?;
        sqlx::query("analyze memories").execute(&mut *connection).await?;
        loaded?;
        Ok(ImportReport { rows: records.len(), load, index: started.elapsed() })
    }

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
        let store = Self {
            pool,
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
}

#[async_trait]
impl VectorStore for PgVectorStore {
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

    async fn apply(&self, write: &WriteSet) -> Result<Applied> {
        let mut transaction = self.pool.begin().await?;
        let applied = apply_in(&mut transaction, write).await?;
        transaction.commit().await?;
        Ok(applied)
    }

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

    async fn get(&self, tenant: &str, id: Uuid) -> Result<Option<MemoryRecord>> {
        let row = sqlx::query(&format!("select {COLUMNS} from memories where tenant = $1 and id = $2"))
            .bind(tenant)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(row_to_record).transpose()
    }

    async fn delete_matching(&self, query: &ScopedQuery) -> Result<Vec<MemoryRecord>> {
        let query = ScopedQuery { show_expired: true, ..query.clone() };
        let PgClause { sql, binds, .. } = where_clause(&query, 1);
        let mut transaction = self.pool.begin().await?;
        let linked = format!(
            "select distinct entity_id from memory_entity_links where memory_id in (select id from memories where {sql})"
        );
        let entities: Vec<Uuid> = bind_all(sqlx::query(&linked), &binds)
            .fetch_all(&mut *transaction)
            .await?
            .iter()
            .map(|row| row.try_get(0))
            .collect::<Result<_, _>>()?;
        let statement = format!("delete from memories where {sql} returning {COLUMNS}");
        let rows = bind_all(sqlx::query(&statement), &binds).fetch_all(&mut *transaction).await?;
        let records = rows.iter().map(row_to_record).collect::<Result<Vec<_>>>()?;
        remove_orphan_entities(&mut transaction, &entities).await?;
        transaction.commit().await?;
        Ok(records)
    }

    async fn entity_memories(
        &self,
        query: &ScopedQuery,
        probes: &[EntityProbe],
        threshold: f32,
    ) -> Result<Vec<EntityHit>> {
        let pairs = query.scope.pairs();
        let clause = where_clause(query, 5 + pairs.len());
        let PgClause { sql, binds, .. } = clause;
        let scope: String =
            pairs.iter().enumerate().map(|(index, (column, _))| format!(" and e.{column} = ${}", 5 + index)).collect();
        let statement = format!(
            "select distinct l.memory_id from memories_entities e join memory_entity_links l on l.entity_id = e.id \
             where e.tenant = $1 {scope} and (e.normalized = $2 or (e.embedding <=> $3) <= $4) \
             and l.memory_id in (select id from memories where {sql})"
        );
        let mut hits = Vec::new();
        for (index, probe) in probes.iter().enumerate() {
            let mut fetch = sqlx::query_scalar::<_, Uuid>(&statement)
                .bind(&query.tenant)
                .bind(&probe.normalized)
                .bind(Vector::from(probe.embedding.clone()))
                .bind(1.0 - f64::from(threshold));
            for (_, value) in &pairs {
                fetch = fetch.bind(*value);
            }
            for bind in &binds {
                fetch = match bind {
                    PgBind::Text(text) => fetch.bind(text.as_str()),
                    PgBind::Float(number) => fetch.bind(*number),
                    PgBind::Time(at) => fetch.bind(*at),
                    PgBind::Date(date) => fetch.bind(*date),
                    PgBind::Uuid(id) => fetch.bind(*id),
                };
            }
            hits.extend(
                fetch.fetch_all(&self.pool).await?.into_iter().map(|memory_id| EntityHit { memory_id, probe: index }),
            );
        }
        Ok(hits)
    }

    async fn get_many(&self, tenant: &str, ids: &[Uuid]) -> Result<Vec<MemoryRecord>> {
        let rows = sqlx::query(&format!("select {COLUMNS} from memories where tenant = $1 and id = any($2)"))
            .bind(tenant)
            .bind(ids)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(row_to_record).collect()
    }

    async fn keyword_postings(&self, query: &ScopedQuery, terms: &[String]) -> Result<KeywordPostings> {
        let clause = where_clause(query, 2);
        let PgClause { sql, binds, .. } = clause;
        let mut transaction = self.pool.begin().await?;
        sqlx::query("set local plan_cache_mode = force_custom_plan").execute(&mut *transaction).await?;
        // $1 is unused by the statistics query; binding it keeps one numbering for both.
        let stats = format!(
            "select count(*), coalesce(avg(doc_len), 0)::float8 from memories where {sql} and $1::text[] is not null"
        );
        let row = bind_all(sqlx::query(&stats).bind(terms), &binds).fetch_one(&mut *transaction).await?;
        let doc_count: i64 = row.try_get(0)?;
        let avg_doc_len: f64 = row.try_get(1)?;
        if doc_count == 0 || terms.is_empty() {
            transaction.commit().await?;
            return Ok(KeywordPostings {
                doc_count: u64::try_from(doc_count).unwrap_or(0),
                avg_doc_len,
                postings: Vec::new(),
            });
        }
        // `terms && $1` uses the GIN index on the analysed terms; unnest counts each term's frequency.
        let statement = format!(
            "select id, u.term, count(*)::int8 as tf, doc_len::int8 from memories \
             cross join lateral unnest(terms) as u(term) \
             where {sql} and terms && $1::text[] and u.term = any($1::text[]) \
             group by id, doc_len, u.term"
        );
        let rows = bind_all(sqlx::query(&statement).bind(terms), &binds).fetch_all(&mut *transaction).await?;
        transaction.commit().await?;
        let postings = rows
            .iter()
            .map(|row| {
                let tf: i64 = row.try_get(2)?;
                let doc_len: i64 = row.try_get(3)?;
                Ok(Posting {
                    id: row.try_get(0)?,
                    term: row.try_get(1)?,
                    tf: u32::try_from(tf).unwrap_or(0),
                    doc_len: u32::try_from(doc_len).unwrap_or(0),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(KeywordPostings { doc_count: u64::try_from(doc_count).unwrap_or(0), avg_doc_len, postings })
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
        let clause = where_clause(query, 2);
        let limit_placeholder = format!("${}", clause.next_index());
        let PgClause { sql, binds, .. } = clause;
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
                Ok(ScoredRecord { record: row_to_record(row)?, score: (1.0 - distance).clamp(0.0, 1.0) as f32 })
            })
            .collect::<Result<Vec<_>>>()?;
        // Relaxed iterative scans may return rows slightly out of order.
        scored.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.record.id.cmp(&b.record.id)));
        scored.retain(|hit| hit.score >= threshold);
        Ok(scored)
    }

    async fn list(&self, query: &ScopedQuery, after: Option<Cursor>, page_size: usize) -> Result<Page> {
        let PgClause { mut sql, mut binds, .. } = where_clause(query, 1);
        if let Some(cursor) = after {
            let next = binds.len() + 1;
            sql.push_str(&format!(" and (created_at, id) < (${next}, ${})", next + 1));
            binds.push(PgBind::Time(cursor.created_at));
            binds.push(PgBind::Uuid(cursor.id));
        }
        let fetch = page_size + 1;
        let statement =
            format!("select {COLUMNS} from memories where {sql} order by created_at desc, id desc limit {fetch}");
        let rows = bind_all(sqlx::query(&statement), &binds).fetch_all(&self.pool).await?;
        Ok(Page::from_fetched(rows.iter().map(row_to_record).collect::<Result<Vec<_>>>()?, page_size))
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
}
