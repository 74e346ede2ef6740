//! The embedded vector store: one SQLite file (WAL) with typed, indexed columns for tenant, scope ids
//! and timestamps, metadata as JSON, embeddings as little-endian f32 blobs, and exact cosine search
//! over the scope-filtered rows.
//!
//! Search asks SQLite for the ids that pass tenant, scope, expiration and filter in one aggregate
//! row, and scores them against embeddings held in a bounded in-process cache (filled from the
//! blobs on first use, kept current by this store's own writes). Reading every blob row by row on
//! each query costs ~6 µs a row through the driver, ten times the cosine arithmetic. The cache
//! assumes this process is the only writer of the file, which is how the embedded store is used.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::path::Path;
use std::str::FromStr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow, SqliteSynchronous};
use sqlx::{Row, SqlitePool};
use uuid::Uuid;

use super::sqlite_filter::{where_clause, Bind, Clause};
use super::{
    cosine, doc_len, term_frequencies, Applied, Cursor, EntityHit, EntityLink, EntityProbe, JournalEntry,
    KeywordPostings, Page, Posting, ScopeKind, ScopeSummary, ScopedQuery, ScoredRecord, VectorStore, WriteSet,
};
use crate::error::{Error, Result};
use crate::scope::Scope;
use crate::types::{MemoryRecord, Metadata};

const SCHEMA: &str = r"
create table if not exists store_meta (
    key text primary key,
    value text not null
);
create table if not exists memories (
    id text primary key,
    tenant text not null,
    user_id text,
    agent_id text,
    run_id text,
    memory text not null,
    hash text not null,
    metadata text not null default '{}',
    created_at integer not null,
    updated_at integer not null,
    expiration_date text,
    attributed_to text,
    role text,
    actor_id text,
    memory_type text,
    linked_memory_ids text not null default '[]',
    entities text not null default '[]',
    text_lemmatized text not null default '',
    doc_len integer not null default 0,
    embedding blob not null
);
create index if not exists memories_user on memories (tenant, user_id, created_at desc, id desc, expiration_date);
create index if not exists memories_agent on memories (tenant, agent_id, created_at desc, id desc, expiration_date);
create index if not exists memories_run on memories (tenant, run_id, created_at desc, id desc, expiration_date);
create index if not exists memories_created on memories (tenant, created_at desc, id desc, expiration_date);
create index if not exists memories_hash on memories (tenant, hash);
create table if not exists memory_terms (
    tenant text not null,
    term text not null,
    memory_id text not null references memories (id) on delete cascade,
    tf integer not null,
    primary key (tenant, term, memory_id)
) without rowid;
create index if not exists memory_terms_memory on memory_terms (memory_id);
create table if not exists memories_entities (
    id text primary key,
    tenant text not null,
    user_id text,
    agent_id text,
    run_id text,
    entity text not null,
    normalized text not null default '',
    entity_type text not null,
    embedding blob not null
);
create index if not exists memories_entities_scope on memories_entities (tenant, user_id, agent_id, run_id);
create table if not exists memory_entity_links (
    memory_id text not null references memories (id) on delete cascade,
    entity_id text not null references memories_entities (id) on delete cascade,
    primary key (memory_id, entity_id)
) without rowid;
create index if not exists memory_entity_links_entity on memory_entity_links (entity_id);
create table if not exists history_journal (
    id text primary key,
    tenant text not null,
    memory_id text,
    created_at integer not null,
    payload text not null
);
create index if not exists history_journal_created on history_journal (created_at, id);
";

/// Indexes on columns that older databases get from [`add_missing_columns`]. Entity rows are
/// unique per (tenant, scope, normalised name); duplicates an older version could leave behind
/// are merged into the oldest row first.
const LATE_INDEXES: &str = "
create index if not exists memories_entities_name on memories_entities (tenant, normalized);
insert or ignore into memory_entity_links (memory_id, entity_id)
    select l.memory_id, k.keep from memory_entity_links l join (
        select e.id, (select min(o.id) from memories_entities o where o.tenant = e.tenant
            and ifnull(o.user_id, '') = ifnull(e.user_id, '') and ifnull(o.agent_id, '') = ifnull(e.agent_id, '')
            and ifnull(o.run_id, '') = ifnull(e.run_id, '') and o.normalized = e.normalized) as keep
        from memories_entities e where e.normalized <> ''
    ) k on k.id = l.entity_id where k.keep <> k.id;
delete from memories_entities where normalized <> '' and id <> (select min(o.id) from memories_entities o
    where o.tenant = memories_entities.tenant and ifnull(o.user_id, '') = ifnull(memories_entities.user_id, '')
    and ifnull(o.agent_id, '') = ifnull(memories_entities.agent_id, '')
    and ifnull(o.run_id, '') = ifnull(memories_entities.run_id, '') and o.normalized = memories_entities.normalized);
create unique index if not exists memories_entities_unique on memories_entities
    (tenant, ifnull(user_id, ''), ifnull(agent_id, ''), ifnull(run_id, ''), normalized) where normalized <> '';
";

const COLUMNS: &str = "id, tenant, user_id, agent_id, run_id, memory, hash, metadata, created_at, updated_at, \
                       expiration_date, attributed_to, role, actor_id, memory_type, linked_memory_ids, entities, \
                       text_lemmatized, doc_len, embedding";

/// Default number of embeddings kept in memory (about 150 MB at 384 dimensions).
pub const DEFAULT_VECTOR_CACHE_ENTRIES: usize = 100_000;

/// Most ids fetched in one `in (...)` list.
const FETCH_CHUNK: usize = 500;

/// An embedding shared between the cache and a running search.
type SharedVector = (Uuid, Arc<[f32]>);

/// Embeddings by memory id; bounded, never a source of truth.
#[derive(Debug, Default)]
struct VectorCache {
    vectors: RwLock<HashMap<Uuid, Arc<[f32]>>>,
    capacity: usize,
}

impl VectorCache {
    fn get_many(&self, ids: &[Uuid]) -> (Vec<SharedVector>, Vec<Uuid>) {
        let vectors = self.vectors.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut found = Vec::with_capacity(ids.len());
        let mut missing = Vec::new();
        for id in ids {
            match vectors.get(id) {
                Some(vector) => found.push((*id, Arc::clone(vector))),
                None => missing.push(*id),
            }
        }
        (found, missing)
    }

    /// Stores vectors read from the database, never replacing a newer one written meanwhile.
    fn fill(&self, loaded: &[SharedVector]) {
        let mut vectors = self.vectors.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        for (id, vector) in loaded {
            if vectors.len() >= self.capacity {
                break;
            }
            vectors.entry(*id).or_insert_with(|| Arc::clone(vector));
        }
    }

    /// Records vectors this store has just written.
    fn put(&self, records: &[MemoryRecord]) {
        let mut vectors = self.vectors.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        for record in records {
            if vectors.len() < self.capacity || vectors.contains_key(&record.id) {
                vectors.insert(record.id, Arc::from(record.embedding.as_slice()));
            }
        }
    }

    fn remove(&self, ids: impl IntoIterator<Item = Uuid>) {
        let mut vectors = self.vectors.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        for id in ids {
            vectors.remove(&id);
        }
    }

    fn clear(&self) {
        self.vectors.write().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
    }
}

/// The embedded [`VectorStore`] on one SQLite file.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
    cache: Arc<VectorCache>,
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` with the default vector cache size.
    ///
    /// # Errors
    /// [`Error::StoreUnavailable`] when the file cannot be opened or created.
    pub async fn open(path: &Path) -> Result<Self> {
        Self::open_with_cache(path, DEFAULT_VECTOR_CACHE_ENTRIES).await
    }

    /// Opens (creating if needed) the database at `path`, keeping at most `cache_entries`
    /// embeddings in memory for search.
    ///
    /// # Errors
    /// [`Error::StoreUnavailable`] when the file cannot be opened or created.
    pub async fn open_with_cache(path: &Path, cache_entries: usize) -> Result<Self> {
        let pool = open_sqlite(path, SCHEMA).await?;
        add_missing_columns(&pool).await?;
        let cache = Arc::new(VectorCache { vectors: RwLock::default(), capacity: cache_entries });
        Ok(Self { pool, cache })
    }

    /// Returns the embeddings of `ids`, from the cache or else from the database.
    /// (`+tenant` in the id-list queries keeps SQLite's planner on the primary key: with a plain
    /// `tenant = ?` it walks the tenant's whole index instead, 25 ms at 10k rows.)
    async fn vectors(&self, tenant: &str, ids: &[Uuid]) -> Result<Vec<SharedVector>> {
        let (mut found, missing) = self.cache.get_many(ids);
        for chunk in missing.chunks(FETCH_CHUNK) {
            let placeholders = vec!["?"; chunk.len()].join(", ");
            let statement = format!("select id, embedding from memories where +tenant = ? and id in ({placeholders})");
            let mut fetch = sqlx::query(&statement).bind(tenant);
            for id in chunk {
                fetch = fetch.bind(id.to_string());
            }
            let mut loaded = Vec::with_capacity(chunk.len());
            for row in fetch.fetch_all(&self.pool).await? {
                let id: String = row.try_get("id")?;
                let bytes: &[u8] = row.try_get("embedding")?;
                let id = Uuid::parse_str(&id).map_err(|error| Error::Internal(format!("stored id {id}: {error}")))?;
                loaded.push((id, Arc::from(decode_embedding(bytes))));
            }
            self.cache.fill(&loaded);
            found.extend(loaded);
        }
        Ok(found)
    }
}

/// Write transactions start with `BEGIN IMMEDIATE`: a deferred transaction that reads first and
/// then writes fails at once with SQLITE_BUSY when another writer got there in between (the busy
/// timeout does not apply to that upgrade); an immediate one waits for the write lock instead.
///
/// Opens (creating if needed) a SQLite database in WAL mode with a small pool and applies `schema`.
/// Shared by the embedded store and the history volume.
///
/// # Errors
/// [`Error::StoreUnavailable`] when the file or its directory cannot be opened or created.
pub(crate) async fn open_sqlite(path: &Path, schema: &str) -> Result<SqlitePool> {
    if let Some(parent) = path.parent().filter(|parent| !parent.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|error| {
            Error::StoreUnavailable(format!("cannot create directory {}: {error}", parent.display()))
        })?;
    }
    let options = SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(Duration::from_secs(5))
        .foreign_keys(true);
    let pool = SqlitePoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(5))
        .connect_with(options)
        .await?;
    sqlx::raw_sql(schema).execute(&pool).await?;
    Ok(pool)
}

/// Columns added after the first release, created on databases that predate them.
const ADDED_COLUMNS: [(&str, &str, &str); 5] = [
    ("memories", "linked_memory_ids", "text not null default '[]'"),
    ("memories", "entities", "text not null default '[]'"),
    ("memories", "text_lemmatized", "text not null default ''"),
    ("memories", "doc_len", "integer not null default 0"),
    ("memories_entities", "normalized", "text not null default ''"),
];

async fn add_missing_columns(pool: &SqlitePool) -> Result<()> {
    for (table, name, definition) in ADDED_COLUMNS {
        let present: Vec<String> =
            sqlx::query_scalar(&format!("select name from pragma_table_info('{table}')")).fetch_all(pool).await?;
        if !present.iter().any(|column| column == name) {
            sqlx::raw_sql(&format!("alter table {table} add column {name} {definition}")).execute(pool).await?;
        }
    }
    sqlx::raw_sql(LATE_INDEXES).execute(pool).await?;
    Ok(())
}

/// Entity ids linked to any of `ids` (read before the memories are deleted).
async fn linked_entities(executor: &mut sqlx::SqliteConnection, ids: &[String]) -> Result<Vec<String>> {
    let mut entities = Vec::new();
    for chunk in ids.chunks(FETCH_CHUNK) {
        let placeholders = vec!["?"; chunk.len()].join(", ");
        let statement =
            format!("select distinct entity_id from memory_entity_links where memory_id in ({placeholders})");
        let mut query = sqlx::query_scalar::<_, String>(&statement);
        for id in chunk {
            query = query.bind(id);
        }
        entities.extend(query.fetch_all(&mut *executor).await?);
    }
    Ok(entities)
}

/// Removes those of `entity_ids` that no memory links to any more.
async fn remove_orphan_entities(executor: &mut sqlx::SqliteConnection, entity_ids: &[String]) -> Result<()> {
    for chunk in entity_ids.chunks(FETCH_CHUNK) {
        let placeholders = vec!["?"; chunk.len()].join(", ");
        let statement = format!(
            "delete from memories_entities where id in ({placeholders}) \
             and not exists (select 1 from memory_entity_links l where l.entity_id = memories_entities.id)"
        );
        let mut query = sqlx::query(&statement);
        for id in chunk {
            query = query.bind(id);
        }
        query.execute(&mut *executor).await?;
    }
    Ok(())
}

/// Entity rows of a scope: (id, normalised name, embedding).
type ScopeEntities = Vec<(String, String, Vec<f32>)>;

/// Entity rows of `scope`: with `exact`, rows of exactly these ids (absent ones absent, as
/// entities are stored per scope); otherwise every row under the present ids (as searches read).
async fn scope_entities(
    executor: &mut sqlx::SqliteConnection,
    tenant: &str,
    scope: &Scope,
    exact: bool,
) -> Result<ScopeEntities> {
    let mut statement = "select id, normalized, embedding from memories_entities where tenant = ?".to_owned();
    let columns = [("user_id", &scope.user_id), ("agent_id", &scope.agent_id), ("run_id", &scope.run_id)];
    for (column, value) in columns {
        match value {
            Some(_) => statement.push_str(&format!(" and {column} = ?")),
            None if exact => statement.push_str(&format!(" and {column} is null")),
            None => {}
        }
    }
    let mut query = sqlx::query(&statement).bind(tenant);
    for value in columns.iter().filter_map(|(_, value)| value.as_ref()) {
        query = query.bind(value);
    }
    query
        .fetch_all(&mut *executor)
        .await?
        .iter()
        .map(|row| {
            let bytes: &[u8] = row.try_get(2)?;
            Ok((row.try_get(0)?, row.try_get(1)?, decode_embedding(bytes)))
        })
        .collect()
}

fn bind_all<'q>(
    mut query: sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>>,
    binds: &'q [Bind],
) -> sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>> {
    for bind in binds {
        query = match bind {
            Bind::Text(text) => query.bind(text.as_str()),
            Bind::Real(number) => query.bind(*number),
            Bind::Integer(number) => query.bind(*number),
        };
    }
    query
}

fn encode_embedding(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|value| value.to_le_bytes()).collect()
}

fn decode_embedding(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|chunk| f32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]])).collect()
}

fn micros(time: DateTime<Utc>) -> i64 {
    time.timestamp_micros()
}

fn from_micros(value: i64) -> Result<DateTime<Utc>> {
    DateTime::from_timestamp_micros(value)
        .ok_or_else(|| Error::Internal(format!("stored timestamp {value} out of range")))
}

fn row_to_record(row: &SqliteRow) -> Result<MemoryRecord> {
    let id: String = row.try_get("id")?;
    let metadata: String = row.try_get("metadata")?;
    let expiration: Option<String> = row.try_get("expiration_date")?;
    let embedding: Vec<u8> = row.try_get("embedding")?;
    let linked: String = row.try_get("linked_memory_ids")?;
    let text_lemmatized: String = row.try_get("text_lemmatized")?;
    let entities: String = row.try_get("entities")?;
    Ok(MemoryRecord {
        id: Uuid::parse_str(&id).map_err(|error| Error::Internal(format!("stored id {id}: {error}")))?,
        tenant: row.try_get("tenant")?,
        scope: Scope {
            user_id: row.try_get("user_id")?,
            agent_id: row.try_get("agent_id")?,
            run_id: row.try_get("run_id")?,
        },
        memory: row.try_get("memory")?,
        hash: row.try_get("hash")?,
        metadata: serde_json::from_str::<Metadata>(&metadata)
            .map_err(|error| Error::Internal(format!("stored metadata of {id}: {error}")))?,
        created_at: from_micros(row.try_get("created_at")?)?,
        updated_at: from_micros(row.try_get("updated_at")?)?,
        expiration_date: expiration
            .map(|date| NaiveDate::parse_from_str(&date, "%Y-%m-%d"))
            .transpose()
            .map_err(|error| Error::Internal(format!("stored expiration of {id}: {error}")))?,
        attributed_to: row.try_get("attributed_to")?,
        role: row.try_get("role")?,
        actor_id: row.try_get("actor_id")?,
        memory_type: row.try_get("memory_type")?,
        linked_memory_ids: serde_json::from_str(&linked)
            .map_err(|error| Error::Internal(format!("stored linked_memory_ids of {id}: {error}")))?,
        entities: serde_json::from_str(&entities)
            .map_err(|error| Error::Internal(format!("stored entities of {id}: {error}")))?,
        text_lemmatized,
        embedding: decode_embedding(&embedding),
    })
}

async fn insert_one(executor: &mut sqlx::SqliteConnection, record: &MemoryRecord) -> Result<()> {
    let metadata = serde_json::Value::Object(record.metadata.clone()).to_string();
    sqlx::query(&format!(
        "insert into memories ({COLUMNS}) values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    ))
    .bind(record.id.to_string())
    .bind(&record.tenant)
    .bind(&record.scope.user_id)
    .bind(&record.scope.agent_id)
    .bind(&record.scope.run_id)
    .bind(&record.memory)
    .bind(&record.hash)
    .bind(metadata)
    .bind(micros(record.created_at))
    .bind(micros(record.updated_at))
    .bind(record.expiration_date.map(|date| date.format("%Y-%m-%d").to_string()))
    .bind(&record.attributed_to)
    .bind(&record.role)
    .bind(&record.actor_id)
    .bind(&record.memory_type)
    .bind(serde_json::to_string(&record.linked_memory_ids).unwrap_or_else(|_| "[]".to_owned()))
    .bind(serde_json::to_string(&record.entities).unwrap_or_else(|_| "[]".to_owned()))
    .bind(&record.text_lemmatized)
    .bind(doc_len(&record.text_lemmatized))
    .bind(encode_embedding(&record.embedding))
    .execute(&mut *executor)
    .await?;
    write_terms(executor, record).await
}

/// Writes the keyword-index rows of a record (after removing any old ones).
async fn write_terms(executor: &mut sqlx::SqliteConnection, record: &MemoryRecord) -> Result<()> {
    sqlx::query("delete from memory_terms where memory_id = ?")
        .bind(record.id.to_string())
        .execute(&mut *executor)
        .await?;
    let terms = term_frequencies(&record.text_lemmatized);
    // 4 parameters a row; SQLite allows 32766 per statement.
    for chunk in terms.chunks(500) {
        let rows = vec!["(?, ?, ?, ?)"; chunk.len()].join(", ");
        let statement = format!("insert into memory_terms (tenant, term, memory_id, tf) values {rows}");
        let mut insert = sqlx::query(&statement);
        for (term, tf) in chunk {
            insert = insert.bind(&record.tenant).bind(term).bind(record.id.to_string()).bind(i64::from(*tf));
        }
        insert.execute(&mut *executor).await?;
    }
    Ok(())
}

/// Applies a write inside an open transaction (see [`WriteSet`] for the order).
async fn apply_in(executor: &mut sqlx::SqliteConnection, write: &WriteSet) -> Result<Applied> {
    let mut applied = Applied::default();
    let touched: Vec<String> = write.relink.iter().chain(&write.delete).map(Uuid::to_string).collect();
    applied.previous_links = load_links(executor, &touched).await?;
    let mut orphan_candidates = linked_entities(executor, &touched).await?;
    for chunk in write.delete.chunks(FETCH_CHUNK) {
        let placeholders = vec!["?"; chunk.len()].join(", ");
        let statement =
            format!("delete from memories where +tenant = ? and id in ({placeholders}) returning {COLUMNS}");
        let mut delete = sqlx::query(&statement).bind(&write.tenant);
        for id in chunk {
            delete = delete.bind(id.to_string());
        }
        for row in delete.fetch_all(&mut *executor).await? {
            applied.deleted.push(row_to_record(&row)?);
        }
    }
    applied.missing =
        write.delete.iter().filter(|id| !applied.deleted.iter().any(|record| record.id == **id)).copied().collect();
    if let (Some(missing), false) = (applied.missing.first(), write.skip_missing) {
        return Err(Error::MemoryNotFound { id: missing.to_string() });
    }
    for record in &write.update {
        let previous = sqlx::query(&format!("select {COLUMNS} from memories where tenant = ? and id = ?"))
            .bind(&record.tenant)
            .bind(record.id.to_string())
            .fetch_optional(&mut *executor)
            .await?
            .ok_or_else(|| Error::MemoryNotFound { id: record.id.to_string() })?;
        applied.replaced.push(row_to_record(&previous)?);
        update_one(executor, record).await?;
    }
    for record in &write.insert {
        insert_one(executor, record).await?;
    }
    for chunk in touched.chunks(FETCH_CHUNK) {
        let placeholders = vec!["?"; chunk.len()].join(", ");
        let statement = format!("delete from memory_entity_links where memory_id in ({placeholders})");
        let mut unlink = sqlx::query(&statement);
        for id in chunk {
            unlink = unlink.bind(id);
        }
        unlink.execute(&mut *executor).await?;
    }
    add_links(executor, &write.links, write.merge_threshold).await?;
    orphan_candidates.sort();
    orphan_candidates.dedup();
    remove_orphan_entities(executor, &orphan_candidates).await?;
    for entry in &write.journal {
        if entry.memory_id.is_some_and(|id| applied.missing.contains(&id)) {
            continue;
        }
        sqlx::query("insert into history_journal (id, tenant, memory_id, created_at, payload) values (?, ?, ?, ?, ?)")
            .bind(entry.id.to_string())
            .bind(&entry.tenant)
            .bind(entry.memory_id.map(|id| id.to_string()))
            .bind(micros(entry.created_at))
            .bind(entry.payload.to_string())
            .execute(&mut *executor)
            .await?;
    }
    settle_in(executor, &write.settle).await?;
    Ok(applied)
}

async fn settle_in(executor: &mut sqlx::SqliteConnection, ids: &[Uuid]) -> Result<()> {
    for chunk in ids.chunks(FETCH_CHUNK) {
        let placeholders = vec!["?"; chunk.len()].join(", ");
        let statement = format!("delete from history_journal where id in ({placeholders})");
        let mut settle = sqlx::query(&statement);
        for id in chunk {
            settle = settle.bind(id.to_string());
        }
        settle.execute(&mut *executor).await?;
    }
    Ok(())
}

async fn update_one(executor: &mut sqlx::SqliteConnection, record: &MemoryRecord) -> Result<()> {
    let metadata = serde_json::Value::Object(record.metadata.clone()).to_string();
    sqlx::query(
        "update memories set memory = ?, hash = ?, metadata = ?, created_at = ?, updated_at = ?, \
         expiration_date = ?, text_lemmatized = ?, doc_len = ?, entities = ?, embedding = ? \
         where tenant = ? and id = ?",
    )
    .bind(&record.memory)
    .bind(&record.hash)
    .bind(metadata)
    .bind(micros(record.created_at))
    .bind(micros(record.updated_at))
    .bind(record.expiration_date.map(|date| date.format("%Y-%m-%d").to_string()))
    .bind(&record.text_lemmatized)
    .bind(doc_len(&record.text_lemmatized))
    .bind(serde_json::to_string(&record.entities).unwrap_or_else(|_| "[]".to_owned()))
    .bind(encode_embedding(&record.embedding))
    .bind(&record.tenant)
    .bind(record.id.to_string())
    .execute(&mut *executor)
    .await?;
    write_terms(executor, record).await
}

/// The entity links of `memory_ids` with everything needed to link them again.
async fn load_links(executor: &mut sqlx::SqliteConnection, memory_ids: &[String]) -> Result<Vec<EntityLink>> {
    let mut links = Vec::new();
    for chunk in memory_ids.chunks(FETCH_CHUNK) {
        let placeholders = vec!["?"; chunk.len()].join(", ");
        let statement = format!(
            "select l.memory_id, e.tenant, e.user_id, e.agent_id, e.run_id, e.entity, e.normalized, e.entity_type, \
             e.embedding from memory_entity_links l join memories_entities e on e.id = l.entity_id \
             where l.memory_id in ({placeholders})"
        );
        let mut query = sqlx::query(&statement);
        for id in chunk {
            query = query.bind(id);
        }
        for row in query.fetch_all(&mut *executor).await? {
            let memory_id: String = row.try_get(0)?;
            let bytes: &[u8] = row.try_get(8)?;
            links.push(EntityLink {
                memory_id: Uuid::parse_str(&memory_id)
                    .map_err(|error| Error::Internal(format!("stored id {memory_id}: {error}")))?,
                tenant: row.try_get(1)?,
                scope: Scope { user_id: row.try_get(2)?, agent_id: row.try_get(3)?, run_id: row.try_get(4)? },
                name: row.try_get(5)?,
                normalized: row.try_get(6)?,
                kind: row.try_get(7)?,
                embedding: decode_embedding(bytes),
            });
        }
    }
    Ok(links)
}

/// Links memories to the entity rows of their scope: the row with the same normalised name, else
/// the most similar one at or above `merge_threshold`, else a new row. Writers are serialised by
/// `BEGIN IMMEDIATE`, so reading the scope's rows and inserting is race-free; the unique index on
/// (tenant, scope, normalised name) holds anyway.
async fn add_links(executor: &mut sqlx::SqliteConnection, links: &[EntityLink], merge_threshold: f32) -> Result<()> {
    // Entity rows of each scope, loaded once per write.
    let mut loaded: HashMap<(String, Scope), ScopeEntities> = HashMap::new();
    for link in links {
        let key = (link.tenant.clone(), link.scope.clone());
        if !loaded.contains_key(&key) {
            let rows = scope_entities(executor, &link.tenant, &link.scope, true).await?;
            loaded.insert(key.clone(), rows);
        }
        let rows = loaded.get_mut(&key).ok_or_else(|| Error::Internal("entity cache".into()))?;
        let same_name = rows.iter().find(|(_, normalized, _)| *normalized == link.normalized).map(|row| row.0.clone());
        let similar = || {
            rows.iter()
                .map(|(id, _, embedding)| (id, cosine(embedding, &link.embedding)))
                .filter(|(_, similarity)| *similarity >= merge_threshold)
                .max_by(|a, b| a.1.total_cmp(&b.1))
                .map(|(id, _)| id.clone())
        };
        let entity_id = match same_name.or_else(similar) {
            Some(id) => id,
            None => {
                let id = Uuid::now_v7().to_string();
                sqlx::query(
                    "insert into memories_entities (id, tenant, user_id, agent_id, run_id, entity, normalized, \
                     entity_type, embedding) values (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                )
                .bind(&id)
                .bind(&link.tenant)
                .bind(&link.scope.user_id)
                .bind(&link.scope.agent_id)
                .bind(&link.scope.run_id)
                .bind(&link.name)
                .bind(&link.normalized)
                .bind(&link.kind)
                .bind(encode_embedding(&link.embedding))
                .execute(&mut *executor)
                .await?;
                rows.push((id.clone(), link.normalized.clone(), link.embedding.clone()));
                id
            }
        };
        sqlx::query("insert or ignore into memory_entity_links (memory_id, entity_id) values (?, ?)")
            .bind(link.memory_id.to_string())
            .bind(&entity_id)
            .execute(&mut *executor)
            .await?;
    }
    Ok(())
}

/// Min-heap entry keeping the best `limit` candidates.
struct Candidate {
    score: f32,
    id: Uuid,
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Candidate {}
impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Candidate {
    // Reversed so that BinaryHeap's top is the weakest candidate; ties keep the smaller id.
    fn cmp(&self, other: &Self) -> Ordering {
        other.score.total_cmp(&self.score).then_with(|| self.id.cmp(&other.id))
    }
}

#[async_trait]
impl VectorStore for SqliteStore {
    async fn ensure_dimension(&self, dimension: usize, model_id: &str) -> Result<()> {
        let stored: Option<String> =
            sqlx::query_scalar("select value from store_meta where key = 'embedding_dimension'")
                .fetch_optional(&self.pool)
                .await?;
        match stored {
            Some(stored) if stored != dimension.to_string() => {
                let model: Option<String> =
                    sqlx::query_scalar("select value from store_meta where key = 'embedding_model'")
                        .fetch_optional(&self.pool)
                        .await?;
                Err(Error::Config(format!(
                    "the embedded store holds {stored}-dimensional embeddings (model {}) but the configured embedder \
                     {model_id} produces {dimension} dimensions; use the original embedder or a new data directory",
                    model.unwrap_or_else(|| "unknown".to_owned())
                )))
            }
            Some(_) => Ok(()),
            None => {
                let mut transaction = self.pool.begin_with("BEGIN IMMEDIATE").await?;
                sqlx::query(
                    "insert into store_meta (key, value) values ('embedding_dimension', ?), ('embedding_model', ?)",
                )
                .bind(dimension.to_string())
                .bind(model_id)
                .execute(&mut *transaction)
                .await?;
                transaction.commit().await?;
                Ok(())
            }
        }
    }

    async fn apply(&self, write: &WriteSet) -> Result<Applied> {
        let mut transaction = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let applied = apply_in(&mut transaction, write).await?;
        transaction.commit().await?;
        self.cache.remove(applied.deleted.iter().map(|record| record.id));
        self.cache.put(&write.update);
        self.cache.put(&write.insert);
        Ok(applied)
    }

    async fn journal(&self, before: DateTime<Utc>, limit: usize) -> Result<Vec<JournalEntry>> {
        let rows = sqlx::query(
            "select id, tenant, memory_id, created_at, payload from history_journal where created_at < ? \
             order by created_at, id limit ?",
        )
        .bind(micros(before))
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let id: String = row.try_get("id")?;
                let memory_id: Option<String> = row.try_get("memory_id")?;
                let payload: String = row.try_get("payload")?;
                let bad = |what: &str| Error::Internal(format!("journal entry {id}: bad {what}"));
                Ok(JournalEntry {
                    id: Uuid::parse_str(&id).map_err(|_| bad("id"))?,
                    tenant: row.try_get("tenant")?,
                    memory_id: memory_id.map(|id| Uuid::parse_str(&id)).transpose().map_err(|_| bad("memory id"))?,
                    created_at: from_micros(row.try_get("created_at")?)?,
                    payload: serde_json::from_str(&payload).map_err(|_| bad("payload"))?,
                })
            })
            .collect()
    }

    async fn settle(&self, ids: &[Uuid]) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let mut transaction = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        settle_in(&mut transaction, ids).await?;
        transaction.commit().await?;
        Ok(())
    }

    async fn get(&self, tenant: &str, id: Uuid) -> Result<Option<MemoryRecord>> {
        let row = sqlx::query(&format!("select {COLUMNS} from memories where tenant = ? and id = ?"))
            .bind(tenant)
            .bind(id.to_string())
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(row_to_record).transpose()
    }

    async fn delete_matching(&self, query: &ScopedQuery) -> Result<Vec<MemoryRecord>> {
        let query = ScopedQuery { show_expired: true, ..query.clone() };
        let Clause { sql, binds } = where_clause(&query);
        let statement = format!("delete from memories where {sql} returning {COLUMNS}");
        let mut transaction = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let linked = format!(
            "select distinct entity_id from memory_entity_links where memory_id in (select id from memories where {sql})"
        );
        let entities: Vec<String> = bind_all(sqlx::query(&linked), &binds)
            .fetch_all(&mut *transaction)
            .await?
            .iter()
            .map(|row| row.try_get(0))
            .collect::<Result<_, _>>()?;
        let rows = bind_all(sqlx::query(&statement), &binds).fetch_all(&mut *transaction).await?;
        let records = rows.iter().map(row_to_record).collect::<Result<Vec<_>>>()?;
        remove_orphan_entities(&mut transaction, &entities).await?;
        transaction.commit().await?;
        self.cache.remove(records.iter().map(|record| record.id));
        Ok(records)
    }

    async fn entity_memories(
        &self,
        query: &ScopedQuery,
        probes: &[EntityProbe],
        threshold: f32,
    ) -> Result<Vec<EntityHit>> {
        if probes.is_empty() {
            return Ok(Vec::new());
        }
        let mut connection = self.pool.acquire().await?;
        let rows = scope_entities(&mut connection, &query.tenant, &query.scope, false).await?;
        let mut probes_of: HashMap<String, Vec<usize>> = HashMap::new();
        for (id, normalized, embedding) in &rows {
            for (index, probe) in probes.iter().enumerate() {
                if *normalized == probe.normalized || cosine(embedding, &probe.embedding) >= threshold {
                    probes_of.entry(id.clone()).or_default().push(index);
                }
            }
        }
        if probes_of.is_empty() {
            return Ok(Vec::new());
        }
        let Clause { sql, binds } = where_clause(query);
        let entity_ids: Vec<&String> = probes_of.keys().collect();
        let mut hits = Vec::new();
        for chunk in entity_ids.chunks(FETCH_CHUNK) {
            let placeholders = vec!["?"; chunk.len()].join(", ");
            let statement = format!(
                "select memory_id, entity_id from memory_entity_links where entity_id in ({placeholders}) \
                 and memory_id in (select id from memories where {sql})"
            );
            let mut fetch = sqlx::query(&statement);
            for id in chunk {
                fetch = fetch.bind(id.as_str());
            }
            for row in bind_all(fetch, &binds).fetch_all(&mut *connection).await? {
                let memory_id: String = row.try_get(0)?;
                let entity_id: String = row.try_get(1)?;
                let memory_id = Uuid::parse_str(&memory_id)
                    .map_err(|error| Error::Internal(format!("stored id {memory_id}: {error}")))?;
                for probe in probes_of.get(&entity_id).into_iter().flatten() {
                    hits.push(EntityHit { memory_id, probe: *probe });
                }
            }
        }
        Ok(hits)
    }

    async fn get_many(&self, tenant: &str, ids: &[Uuid]) -> Result<Vec<MemoryRecord>> {
        let mut records = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(FETCH_CHUNK) {
            let placeholders = vec!["?"; chunk.len()].join(", ");
            let statement = format!("select {COLUMNS} from memories where +tenant = ? and id in ({placeholders})");
            let mut fetch = sqlx::query(&statement).bind(tenant);
            for id in chunk {
                fetch = fetch.bind(id.to_string());
            }
            for row in fetch.fetch_all(&self.pool).await? {
                records.push(row_to_record(&row)?);
            }
        }
        Ok(records)
    }

    async fn keyword_postings(&self, query: &ScopedQuery, terms: &[String]) -> Result<KeywordPostings> {
        let Clause { sql, binds } = where_clause(query);
        let stats = format!("select count(*), coalesce(avg(doc_len), 0.0) from memories where {sql}");
        let row = bind_all(sqlx::query(&stats), &binds).fetch_one(&self.pool).await?;
        let doc_count: i64 = row.try_get(0)?;
        let avg_doc_len: f64 = row.try_get(1)?;
        if doc_count == 0 || terms.is_empty() {
            return Ok(KeywordPostings {
                doc_count: u64::try_from(doc_count).unwrap_or(0),
                avg_doc_len,
                postings: Vec::new(),
            });
        }
        // The scope's rows are joined by primary key to the postings of each term.
        let placeholders = vec!["?"; terms.len()].join(", ");
        let statement = format!(
            "select t.memory_id, t.term, t.tf, m.doc_len from memory_terms t \
             join (select id, doc_len from memories where {sql}) m on m.id = t.memory_id \
             where t.tenant = ? and t.term in ({placeholders})"
        );
        let mut fetch = bind_all(sqlx::query(&statement), &binds).bind(&query.tenant);
        for term in terms {
            fetch = fetch.bind(term);
        }
        let postings = fetch
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|row| {
                let id: String = row.try_get(0)?;
                let tf: i64 = row.try_get(2)?;
                let doc_len: i64 = row.try_get(3)?;
                Ok(Posting {
                    id: Uuid::parse_str(&id).map_err(|error| Error::Internal(format!("stored id {id}: {error}")))?,
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
        let Clause { sql, binds } = where_clause(query);
        // One row holding every matching id: the driver's per-row cost is paid once.
        let statement = format!("select coalesce(json_group_array(id), '[]') from memories where {sql}");
        let ids_json: String = bind_all(sqlx::query(&statement), &binds).fetch_one(&self.pool).await?.try_get(0)?;
        let ids: Vec<Uuid> = serde_json::from_str::<Vec<String>>(&ids_json)
            .map_err(|error| Error::Internal(format!("id list: {error}")))?
            .iter()
            .filter_map(|id| Uuid::parse_str(id).ok())
            .collect();
        let vectors = self.vectors(&query.tenant, &ids).await?;
        let mut heap = BinaryHeap::with_capacity(limit + 1);
        for (id, stored) in &vectors {
            if stored.len() != vector.len() {
                continue;
            }
            let dot: f32 = stored.iter().zip(vector).map(|(a, b)| a * b).sum();
            // Vectors are unit length, so the dot product is the cosine; clip to [0, 1] like Mem0.
            let score = dot.clamp(0.0, 1.0);
            if score < threshold {
                continue;
            }
            heap.push(Candidate { score, id: *id });
            if heap.len() > limit {
                heap.pop();
            }
        }
        let best = heap.into_sorted_vec();
        if best.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<Uuid> = best.iter().map(|candidate| candidate.id).collect();
        let mut by_id: HashMap<Uuid, MemoryRecord> =
            self.get_many(&query.tenant, &ids).await?.into_iter().map(|record| (record.id, record)).collect();
        // A row deleted between the two reads is simply left out.
        Ok(best
            .into_iter()
            .filter_map(|candidate| {
                by_id.remove(&candidate.id).map(|record| ScoredRecord { record, score: candidate.score })
            })
            .collect())
    }

    async fn list(&self, query: &ScopedQuery, after: Option<Cursor>, page_size: usize) -> Result<Page> {
        let Clause { mut sql, mut binds } = where_clause(query);
        if let Some(cursor) = after {
            sql.push_str(" and (created_at < ? or (created_at = ? and id < ?))");
            binds.push(Bind::Integer(micros(cursor.created_at)));
            binds.push(Bind::Integer(micros(cursor.created_at)));
            binds.push(Bind::Text(cursor.id.to_string()));
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
             from memories where tenant = ? and {column} is not null and {column} > ? \
             group by {column} order by {column} limit ?"
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
                Ok(ScopeSummary {
                    kind,
                    id: row.try_get("scope_id")?,
                    total_memories: u64::try_from(total).unwrap_or_default(),
                    created_at: from_micros(row.try_get("first")?)?,
                    updated_at: from_micros(row.try_get("last")?)?,
                })
            })
            .collect()
    }

    async fn reset(&self, tenant: Option<&str>) -> Result<()> {
        let mut transaction = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        match tenant {
            Some(tenant) => {
                sqlx::query("delete from memory_terms where tenant = ?")
                    .bind(tenant)
                    .execute(&mut *transaction)
                    .await?;
                sqlx::query("delete from memories where tenant = ?").bind(tenant).execute(&mut *transaction).await?;
                sqlx::query("delete from memories_entities where tenant = ?")
                    .bind(tenant)
                    .execute(&mut *transaction)
                    .await?;
                sqlx::query("delete from history_journal where tenant = ?")
                    .bind(tenant)
                    .execute(&mut *transaction)
                    .await?;
            }
            None => {
                sqlx::query("delete from memory_terms").execute(&mut *transaction).await?;
                sqlx::query("delete from memories").execute(&mut *transaction).await?;
                sqlx::query("delete from memories_entities").execute(&mut *transaction).await?;
                sqlx::query("delete from history_journal").execute(&mut *transaction).await?;
            }
        }
        transaction.commit().await?;
        // Other tenants' entries stay valid, but a reset is rare: start afresh.
        self.cache.clear();
        Ok(())
    }

    async fn unanalysed(&self, after: Option<Uuid>, limit: usize) -> Result<Vec<MemoryRecord>> {
        let rows =
            sqlx::query(&format!("select {COLUMNS} from memories where doc_len = 0 and id > ? order by id limit ?"))
                .bind(after.map(|id| id.to_string()).unwrap_or_default())
                .bind(i64::try_from(limit).unwrap_or(i64::MAX))
                .fetch_all(&self.pool)
                .await?;
        rows.iter().map(row_to_record).collect()
    }

    async fn ping(&self) -> Result<()> {
        sqlx::query_scalar::<_, i64>("select 1").fetch_one(&self.pool).await?;
        Ok(())
    }
}
