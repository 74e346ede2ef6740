//! The embedded vector store: one SQLite file (WAL) with typed, indexed columns for tenant, scope ids
//! and timestamps, metadata as JSON, embeddings as little-endian f32 blobs, and exact cosine search
//! over the scope-filtered rows.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow, SqliteSynchronous};
use sqlx::{Row, SqlitePool};
use uuid::Uuid;

use super::sqlite_filter::{where_clause, Bind, Clause};
use super::{Cursor, Page, ScopedQuery, ScoredRecord, VectorStore};
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
    embedding blob not null
);
create index if not exists memories_user on memories (tenant, user_id, created_at desc, id desc);
create index if not exists memories_agent on memories (tenant, agent_id, created_at desc, id desc);
create index if not exists memories_run on memories (tenant, run_id, created_at desc, id desc);
create index if not exists memories_created on memories (tenant, created_at desc, id desc);
create index if not exists memories_hash on memories (tenant, hash);
create table if not exists memories_entities (
    id text primary key,
    tenant text not null,
    user_id text,
    agent_id text,
    run_id text,
    entity text not null,
    entity_type text not null,
    linked_memory_ids text not null default '[]',
    embedding blob not null
);
create index if not exists memories_entities_scope on memories_entities (tenant, user_id, agent_id, run_id);
";

const COLUMNS: &str = "id, tenant, user_id, agent_id, run_id, memory, hash, metadata, created_at, updated_at, \
                       expiration_date, attributed_to, role, actor_id, memory_type, embedding";

/// The embedded [`VectorStore`] on one SQLite file.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` and applies the schema.
    ///
    /// # Errors
    /// [`Error::StoreUnavailable`] when the file cannot be opened or created.
    pub async fn open(path: &Path) -> Result<Self> {
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
        sqlx::raw_sql(SCHEMA).execute(&pool).await?;
        Ok(Self { pool })
    }
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
        embedding: decode_embedding(&embedding),
    })
}

async fn insert_one(executor: &mut sqlx::SqliteConnection, record: &MemoryRecord) -> Result<()> {
    let metadata = serde_json::Value::Object(record.metadata.clone()).to_string();
    sqlx::query(&format!("insert into memories ({COLUMNS}) values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"))
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
        .bind(encode_embedding(&record.embedding))
        .execute(executor)
        .await?;
    Ok(())
}

/// Min-heap entry keeping the best `limit` candidates.
struct Candidate {
    score: f32,
    id: String,
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
                let mut transaction = self.pool.begin().await?;
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

    async fn insert(&self, records: &[MemoryRecord]) -> Result<()> {
        let mut transaction = self.pool.begin().await?;
        for record in records {
            insert_one(&mut transaction, record).await?;
        }
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

    async fn update(&self, record: &MemoryRecord) -> Result<bool> {
        let metadata = serde_json::Value::Object(record.metadata.clone()).to_string();
        let result = sqlx::query(
            "update memories set memory = ?, hash = ?, metadata = ?, created_at = ?, updated_at = ?, \
             expiration_date = ?, embedding = ? where tenant = ? and id = ?",
        )
        .bind(&record.memory)
        .bind(&record.hash)
        .bind(metadata)
        .bind(micros(record.created_at))
        .bind(micros(record.updated_at))
        .bind(record.expiration_date.map(|date| date.format("%Y-%m-%d").to_string()))
        .bind(encode_embedding(&record.embedding))
        .bind(&record.tenant)
        .bind(record.id.to_string())
        .execute(&self.pool)
        .await?;
        Ok(result.rows_affected() == 1)
    }

    async fn delete(&self, tenant: &str, ids: &[Uuid]) -> Result<u64> {
        let mut transaction = self.pool.begin().await?;
        let mut deleted = 0;
        for id in ids {
            deleted += sqlx::query("delete from memories where tenant = ? and id = ?")
                .bind(tenant)
                .bind(id.to_string())
                .execute(&mut *transaction)
                .await?
                .rows_affected();
        }
        transaction.commit().await?;
        Ok(deleted)
    }

    async fn delete_matching(&self, query: &ScopedQuery) -> Result<Vec<MemoryRecord>> {
        let query = ScopedQuery { show_expired: true, ..query.clone() };
        let Clause { sql, binds } = where_clause(&query);
        let statement = format!("delete from memories where {sql} returning {COLUMNS}");
        let mut transaction = self.pool.begin().await?;
        let rows = bind_all(sqlx::query(&statement), &binds).fetch_all(&mut *transaction).await?;
        let records = rows.iter().map(row_to_record).collect::<Result<Vec<_>>>()?;
        transaction.commit().await?;
        Ok(records)
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
        let statement = format!("select id, embedding from memories where {sql}");
        let rows = bind_all(sqlx::query(&statement), &binds).fetch_all(&self.pool).await?;
        let mut heap = BinaryHeap::with_capacity(limit + 1);
        for row in &rows {
            let bytes: &[u8] = row.try_get("embedding")?;
            if bytes.len() != vector.len() * 4 {
                continue;
            }
            let dot: f32 = bytes
                .chunks_exact(4)
                .zip(vector)
                .map(|(chunk, query)| f32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]) * query)
                .sum();
            // Vectors are unit length, so the dot product is the cosine; clip to [0, 1] like Mem0.
            let score = dot.clamp(0.0, 1.0);
            if score < threshold {
                continue;
            }
            heap.push(Candidate { score, id: row.try_get("id")? });
            if heap.len() > limit {
                heap.pop();
            }
        }
        let best = heap.into_sorted_vec();
        if best.is_empty() {
            return Ok(Vec::new());
        }
        let placeholders = vec!["?"; best.len()].join(", ");
        let statement = format!("select {COLUMNS} from memories where tenant = ? and id in ({placeholders})");
        let mut fetch = sqlx::query(&statement).bind(&query.tenant);
        for candidate in &best {
            fetch = fetch.bind(candidate.id.as_str());
        }
        let mut by_id: HashMap<String, MemoryRecord> = HashMap::with_capacity(best.len());
        for row in fetch.fetch_all(&self.pool).await? {
            let record = row_to_record(&row)?;
            by_id.insert(record.id.to_string(), record);
        }
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
        let mut records = rows.iter().map(row_to_record).collect::<Result<Vec<_>>>()?;
        let next = if records.len() > page_size {
            records.truncate(page_size);
            records.last().map(|last| Cursor { created_at: last.created_at, id: last.id })
        } else {
            None
        };
        Ok(Page { records, next })
    }

    async fn reset(&self, tenant: Option<&str>) -> Result<()> {
        let mut transaction = self.pool.begin().await?;
        match tenant {
            Some(tenant) => {
                sqlx::query("delete from memories where tenant = ?").bind(tenant).execute(&mut *transaction).await?;
                sqlx::query("delete from memories_entities where tenant = ?")
                    .bind(tenant)
                    .execute(&mut *transaction)
                    .await?;
            }
            None => {
                sqlx::query("delete from memories").execute(&mut *transaction).await?;
                sqlx::query("delete from memories_entities").execute(&mut *transaction).await?;
            }
        }
        transaction.commit().await?;
        Ok(())
    }

    async fn ping(&self) -> Result<()> {
        sqlx::query_scalar::<_, i64>("select 1").fetch_one(&self.pool).await?;
        Ok(())
    }
}
