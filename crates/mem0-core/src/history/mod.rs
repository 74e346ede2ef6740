//! The history: the `history` of every memory change (this file), the conversation buffer
//! (`buffer.rs`), the request log (`request_log.rs`), the audit trail (`audit.rs`), the API keys
//! ([`crate::api_keys`]) and the runtime configuration (`settings.rs`); tenant on every row. They live in the SQLite
//! history volume, or in the Postgres database of the store (`db.rs`).

mod audit;
mod buffer;
pub(crate) mod db;
mod idempotency;
mod jobs;
mod request_log;
mod settings;
mod usage;
mod webhooks;

pub use self::audit::{AuditAction, AuditEntry, AuditEvent, AuditLog, AuditQuery, AuditSink};
pub use self::buffer::session_under;
pub use self::idempotency::{Claim, Idempotency, StoredResponse, IDEMPOTENCY_TTL_HOURS};
pub use self::jobs::{Job, JobStatus, Jobs};
pub use self::request_log::{RequestLog, RequestLogEntry};
pub use self::settings::{read_postgres_setting, StoredSetting};
pub use self::usage::{LlmCall, UsageLog, UsageRow, UsageSink};
pub use self::webhooks::{Attempt, Claimed, Delivery, DeliveryStatus, Event, EventKind, EventSink, Webhook, Webhooks};

use std::path::Path;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::Row;
use uuid::Uuid;

use self::db::{in_transaction, on_pool, Db};
use crate::api_keys::ApiKeys;
use crate::error::{Error, Result};
use crate::scope::Scope;
use crate::store::{JournalEntry, PgVectorStore, WriteTurns};
use crate::types::{HistoryEvent, HistoryRecord, Message};

/// The migrations of the history volume (`migrations/sqlite/history`).
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/sqlite/history");

/// Messages kept per conversation session in the buffer.
pub const BUFFER_KEEP: usize = 50;

/// Days a delivered batch is remembered (a journal entry older than that was long delivered).
const BATCH_MARKER_DAYS: i64 = 30;

/// Conversation messages to buffer for a session (the context of later extractions).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BufferedMessages {
    /// Batch id; message `i` of the batch is stored as `{id}:{i}`, so delivering the batch again
    /// (after a crash) adds nothing.
    pub id: Uuid,
    /// Owning tenant.
    pub tenant: String,
    /// Session key (see [`crate::extraction::session_scope`]).
    pub session: String,
    /// When they were said.
    pub at: DateTime<Utc>,
    /// The messages, in order.
    pub messages: Vec<Message>,
}

/// What a journal entry carries to the history volume (see [`crate::store::JournalEntry`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Pending {
    /// A history entry, with the tenant and scope its record does not serialise.
    History {
        /// The entry.
        record: Box<HistoryRecord>,
        /// Its tenant.
        tenant: String,
        /// Its scope.
        scope: Scope,
    },
    /// Buffered conversation messages.
    Messages {
        /// The batch.
        batch: BufferedMessages,
    },
}

impl Pending {
    /// The journal entry carrying this, written at `at`.
    ///
    /// # Errors
    /// [`Error::Internal`] when it cannot be serialised.
    pub fn to_entry(&self, at: DateTime<Utc>) -> Result<JournalEntry> {
        let payload = serde_json::to_value(self).map_err(|error| Error::Internal(format!("journal entry: {error}")))?;
        Ok(match self {
            Self::History { record, tenant, .. } => JournalEntry {
                id: record.id,
                tenant: tenant.clone(),
                memory_id: Some(record.memory_id),
                created_at: at,
                payload,
            },
            Self::Messages { batch } => {
                JournalEntry { id: batch.id, tenant: batch.tenant.clone(), memory_id: None, created_at: at, payload }
            }
        })
    }

    /// Reads what a journal entry carries.
    ///
    /// # Errors
    /// [`Error::Internal`] for a payload this version cannot read.
    pub fn from_entry(entry: &JournalEntry) -> Result<Self> {
        let mut pending: Self = serde_json::from_value(entry.payload.clone())
            .map_err(|error| Error::Internal(format!("journal entry {}: {error}", entry.id)))?;
        if let Self::History { record, tenant, scope } = &mut pending {
            record.tenant.clone_from(tenant);
            record.scope = scope.clone();
        }
        Ok(pending)
    }
}

/// Delivers history entries and buffered messages on `conn`, inside the caller's transaction
/// (see [`HistoryStore::deliver`]); one body for each database. `$lock` serialises deliveries
/// to one session where the database does not already (SQLite writers take turns).
macro_rules! deliver_fn {
    ($name:ident, $conn:ty, $sql:path, $lock:expr) => {
        pub(crate) async fn $name(
            conn: &mut $conn,
            records: &[HistoryRecord],
            buffered: &[BufferedMessages],
        ) -> Result<()> {
            let sql = $sql;
            let session_lock: Option<&str> = $lock;
            for record in records {
                sqlx::query(&sql(
                    "insert into history (id, tenant, memory_id, user_id, agent_id, run_id, old_memory, \
                     new_memory, event, created_at, updated_at, is_deleted, actor_id, role) \
                     values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) on conflict do nothing",
                ))
                .bind(record.id.to_string())
                .bind(&record.tenant)
                .bind(record.memory_id.to_string())
                .bind(&record.scope.user_id)
                .bind(&record.scope.agent_id)
                .bind(&record.scope.run_id)
                .bind(&record.old_memory)
                .bind(&record.new_memory)
                .bind(record.event.as_str())
                .bind(record.created_at.timestamp_micros())
                .bind(record.updated_at.map(|at| at.timestamp_micros()))
                .bind(record.is_deleted)
                .bind(&record.actor_id)
                .bind(&record.role)
                .execute(&mut *conn)
                .await?;
            }
            if !buffered.is_empty() {
                let forgotten = Utc::now() - chrono::Duration::days(BATCH_MARKER_DAYS);
                sqlx::query(&sql("delete from message_batches where delivered_at < ?"))
                    .bind(forgotten.timestamp_micros())
                    .execute(&mut *conn)
                    .await?;
            }
            for buffered in buffered.iter().filter(|buffered| !buffered.messages.is_empty()) {
                if let Some(lock) = session_lock {
                    sqlx::query(lock).bind(format!("{}\n{}", buffered.tenant, buffered.session)).execute(&mut *conn).await?;
                }
                let first_delivery =
                    sqlx::query(&sql("insert into message_batches (id, delivered_at) values (?, ?) on conflict do nothing"))
                        .bind(buffered.id.to_string())
                        .bind(Utc::now().timestamp_micros())
                        .execute(&mut *conn)
                        .await?
                        .rows_affected()
                        == 1;
                if !first_delivery {
                    continue;
                }
                // seq continues after the session's last message, so order survives equal timestamps.
                let last: Option<i64> =
                    sqlx::query_scalar(&sql("select max(seq) from messages where tenant = ? and session_scope = ?"))
                        .bind(&buffered.tenant)
                        .bind(&buffered.session)
                        .fetch_one(&mut *conn)
                        .await?;
                let mut seq = last.unwrap_or(0);
                for (index, message) in buffered.messages.iter().enumerate() {
                    seq += 1;
                    sqlx::query(&sql(
                        "insert into messages (id, tenant, session_scope, role, content, name, created_at, seq) \
                         values (?, ?, ?, ?, ?, ?, ?, ?) on conflict do nothing",
                    ))
                    .bind(format!("{}:{index}", buffered.id))
                    .bind(&buffered.tenant)
                    .bind(&buffered.session)
                    .bind(&message.role)
                    .bind(&message.content)
                    .bind(&message.name)
                    .bind(buffered.at.timestamp_micros())
                    .bind(seq)
                    .execute(&mut *conn)
                    .await?;
                }
                sqlx::query(&sql(
                    "delete from messages where tenant = ? and session_scope = ? and seq <= \
                     (select seq from messages where tenant = ? and session_scope = ? order by seq desc limit 1 offset ?)",
                ))
                .bind(&buffered.tenant)
                .bind(&buffered.session)
                .bind(&buffered.tenant)
                .bind(&buffered.session)
                .bind(BUFFER_KEEP as i64)
                .execute(&mut *conn)
                .await?;
            }
            Ok(())
        }
    };
}

deliver_fn!(deliver_sqlite, sqlx::SqliteConnection, db::plain, None);
// Two replicas buffering turns of one session at once would otherwise both continue after the
// same last `seq`.
deliver_fn!(
    deliver_postgres,
    sqlx::PgConnection,
    db::numbered,
    Some("select pg_advisory_xact_lock(hashtextextended($1, 0))")
);

/// The history: in the SQLite history volume, or in the Postgres database of the store
/// (`memory.history.provider`).
#[derive(Debug, Clone)]
pub struct HistoryStore {
    db: Db,
}

impl HistoryStore {
    /// Opens (creating if needed) the SQLite history volume at `path`.
    ///
    /// # Errors
    /// [`Error::StoreUnavailable`] when it cannot be opened.
    pub async fn open(path: &Path) -> Result<Self> {
        let pool = crate::store::open_sqlite(path, &MIGRATOR).await?;
        Ok(Self { db: Db::Sqlite { pool, turns: WriteTurns::default() } })
    }

    /// The history in the database of `store` (its migrations create the tables): memory writes
    /// then commit their history in their own transaction, and every replica on the database
    /// shares history, buffer, API keys, request log and runtime configuration.
    pub fn in_postgres(store: &PgVectorStore) -> Self {
        Self { db: Db::Postgres(store.pool().clone()) }
    }

    /// True when the history lives in the store's Postgres database: a write hands its history
    /// to the store, which commits it with the change ([`crate::store::WriteSet::history`]).
    pub fn in_store(&self) -> bool {
        matches!(self.db, Db::Postgres(_))
    }

    /// The pool of the SQLite history volume; `None` when the history shares the store's pool.
    pub fn pool_status(&self) -> Option<crate::metrics::PoolStatus> {
        match &self.db {
            Db::Sqlite { pool, .. } => Some(crate::metrics::PoolStatus::of(pool)),
            Db::Postgres(_) => None,
        }
    }

    /// Returns the API key store, which lives in the same database.
    pub fn api_keys(&self) -> ApiKeys {
        ApiKeys::new(self.db.clone())
    }

    /// Returns the request log, which lives in the same database.
    pub fn request_log(&self) -> RequestLog {
        RequestLog::new(self.db.clone())
    }

    /// Returns the audit trail.
    pub fn audit_log(&self) -> AuditLog {
        AuditLog::new(self.db.clone())
    }

    /// Returns the LLM token counters.
    pub fn usage_log(&self) -> UsageLog {
        UsageLog::new(self.db.clone())
    }

    /// Delivers history entries and buffered conversation messages in one transaction, then
    /// trims each session's buffer to its newest [`BUFFER_KEEP`] messages. Idempotent: entries
    /// and messages already delivered (same ids) are left as they are.
    ///
    /// # Errors
    /// [`Error::StoreUnavailable`]; nothing is written then.
    pub async fn deliver(&self, records: &[HistoryRecord], buffered: &[BufferedMessages]) -> Result<()> {
        match &self.db {
            Db::Sqlite { pool, turns } => {
                let mut transaction = turns.begin(pool).await?;
                deliver_sqlite(&mut transaction, records, buffered).await?;
                transaction.commit().await
            }
            Db::Postgres(pool) => {
                let mut transaction = pool.begin().await?;
                deliver_postgres(&mut transaction, records, buffered).await?;
                Ok(transaction.commit().await?)
            }
        }
    }

    /// Returns the entries of one memory of `tenant`, oldest first.
    ///
    /// # Errors
    /// [`Error::StoreUnavailable`].
    pub async fn for_memory(&self, tenant: &str, memory_id: Uuid) -> Result<Vec<HistoryRecord>> {
        const SELECT: &str = "select id, tenant, memory_id, user_id, agent_id, run_id, old_memory, new_memory, event, \
             created_at, updated_at, is_deleted, actor_id, role from history where tenant = ? and memory_id = ? \
             order by created_at, id";
        on_pool!(&self.db, |pool, sql| {
            let rows = sqlx::query(&sql(SELECT)).bind(tenant).bind(memory_id.to_string()).fetch_all(pool).await?;
            rows.iter().map(|row| history_row(row, memory_id)).collect()
        })
    }

    /// Returns the entries of the memories `memory_ids` of `tenant`, oldest first per memory
    /// (memories without entries are left out): one query per 500 ids.
    ///
    /// # Errors
    /// [`Error::StoreUnavailable`].
    pub async fn for_memories(
        &self,
        tenant: &str,
        memory_ids: &[Uuid],
    ) -> Result<std::collections::HashMap<Uuid, Vec<HistoryRecord>>> {
        const CHUNK: usize = 500;
        let mut found: std::collections::HashMap<Uuid, Vec<HistoryRecord>> = std::collections::HashMap::new();
        for chunk in memory_ids.chunks(CHUNK) {
            let placeholders = vec!["?"; chunk.len()].join(", ");
            let select = format!(
                "select id, tenant, memory_id, user_id, agent_id, run_id, old_memory, new_memory, event, \
                 created_at, updated_at, is_deleted, actor_id, role from history where tenant = ? and memory_id in \
                 ({placeholders}) order by created_at, id"
            );
            on_pool!(&self.db, |pool, sql| {
                let statement = sql(&select);
                let mut query = sqlx::query(&statement).bind(tenant);
                for id in chunk {
                    query = query.bind(id.to_string());
                }
                for row in query.fetch_all(pool).await? {
                    let memory_id: String = row.try_get("memory_id")?;
                    let memory_id = Uuid::parse_str(&memory_id)
                        .map_err(|_| Error::Internal(format!("history row: bad memory id {memory_id}")))?;
                    found.entry(memory_id).or_default().push(history_row(&row, memory_id)?);
                }
            });
        }
        Ok(found)
    }

    /// Deletes history, messages, queued adds and webhook deliveries (which carry memories'
    /// texts) of `tenant`, or of every tenant when `None`; webhooks stay.
    ///
    /// # Errors
    /// [`Error::StoreUnavailable`].
    pub async fn reset(&self, tenant: Option<&str>) -> Result<()> {
        in_transaction!(&self.db, |transaction, sql| {
            for table in ["history", "messages", "jobs", "webhook_deliveries"] {
                match tenant {
                    Some(tenant) => {
                        sqlx::query(&sql(&format!("delete from {table} where tenant = ?")))
                            .bind(tenant)
                            .execute(&mut *transaction)
                            .await?
                    }
                    None => sqlx::query(&format!("delete from {table}")).execute(&mut *transaction).await?,
                };
            }
        });
        Ok(())
    }

    /// Checks the history database answers.
    ///
    /// # Errors
    /// [`Error::StoreUnavailable`].
    pub async fn ping(&self) -> Result<()> {
        on_pool!(&self.db, |pool, _sql| {
            sqlx::query("select 1").execute(pool).await?;
        });
        Ok(())
    }
}

/// A history entry of `memory_id` from its row (either database).
fn history_row<R: Row>(row: &R, memory_id: Uuid) -> Result<HistoryRecord>
where
    for<'c> &'c str: sqlx::ColumnIndex<R>,
    String: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    Option<String>: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    i64: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    Option<i64>: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    bool: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    let id: String = row.try_get("id")?;
    let event: String = row.try_get("event")?;
    let created_at: i64 = row.try_get("created_at")?;
    let updated_at: Option<i64> = row.try_get("updated_at")?;
    let bad = |what: &str| Error::Internal(format!("history row {id}: bad {what}"));
    Ok(HistoryRecord {
        id: Uuid::parse_str(&id).map_err(|_| bad("id"))?,
        memory_id,
        old_memory: row.try_get("old_memory")?,
        new_memory: row.try_get("new_memory")?,
        event: HistoryEvent::parse(&event).ok_or_else(|| bad("event"))?,
        created_at: DateTime::from_timestamp_micros(created_at).ok_or_else(|| bad("created_at"))?,
        updated_at: updated_at
            .map(|at| DateTime::from_timestamp_micros(at).ok_or_else(|| bad("updated_at")))
            .transpose()?,
        is_deleted: row.try_get("is_deleted")?,
        actor_id: row.try_get("actor_id")?,
        role: row.try_get("role")?,
        tenant: row.try_get("tenant")?,
        scope: Scope {
            user_id: row.try_get("user_id")?,
            agent_id: row.try_get("agent_id")?,
            run_id: row.try_get("run_id")?,
        },
    })
}
