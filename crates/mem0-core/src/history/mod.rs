//! The history volume: one SQLite file holding the `history` of every memory change (this
//! file), the conversation buffer (`buffer.rs`), the request log (`request_log.rs`) and the API
//! keys ([`crate::api_keys`]); tenant and scope on every row.

mod buffer;
mod request_log;

pub use self::buffer::session_under;
pub use self::request_log::{RequestLog, RequestLogEntry};

use std::path::Path;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::{Row, SqlitePool};
use uuid::Uuid;

use crate::api_keys::ApiKeys;
use crate::error::{Error, Result};
use crate::scope::Scope;
use crate::store::{JournalEntry, WriteTurns};
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

/// The SQLite history volume.
#[derive(Debug, Clone)]
pub struct HistoryStore {
    pool: SqlitePool,
    turns: WriteTurns,
}

impl HistoryStore {
    /// Opens (creating if needed) the history database at `path`.
    ///
    /// # Errors
    /// [`Error::StoreUnavailable`] when it cannot be opened.
    pub async fn open(path: &Path) -> Result<Self> {
        let pool = crate::store::open_sqlite(path, &MIGRATOR).await?;
        Ok(Self { pool, turns: WriteTurns::default() })
    }

    /// Returns the API key store, which lives in the same volume.
    pub fn api_keys(&self) -> ApiKeys {
        ApiKeys::new(self.pool.clone())
    }

    /// Returns the request log, which lives in the same volume.
    pub fn request_log(&self) -> RequestLog {
        RequestLog::new(self.pool.clone(), self.turns.clone())
    }

    /// Delivers history entries and buffered conversation messages in one transaction, then
    /// trims each session's buffer to its newest [`BUFFER_KEEP`] messages. Idempotent: entries
    /// and messages already delivered (same ids) are left as they are.
    ///
    /// # Errors
    /// [`Error::StoreUnavailable`]; nothing is written then.
    pub async fn deliver(&self, records: &[HistoryRecord], buffered: &[BufferedMessages]) -> Result<()> {
        let mut transaction = self.turns.begin(&self.pool).await?;
        for record in records {
            sqlx::query(
                "insert or ignore into history (id, tenant, memory_id, user_id, agent_id, run_id, old_memory, \
                 new_memory, event, created_at, updated_at, is_deleted, actor_id, role) \
                 values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            )
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
            .execute(&mut *transaction)
            .await?;
        }
        if !buffered.is_empty() {
            let forgotten = Utc::now() - chrono::Duration::days(BATCH_MARKER_DAYS);
            sqlx::query("delete from message_batches where delivered_at < ?")
                .bind(forgotten.timestamp_micros())
                .execute(&mut *transaction)
                .await?;
        }
        for buffered in buffered.iter().filter(|buffered| !buffered.messages.is_empty()) {
            let first_delivery = sqlx::query("insert or ignore into message_batches (id, delivered_at) values (?, ?)")
                .bind(buffered.id.to_string())
                .bind(Utc::now().timestamp_micros())
                .execute(&mut *transaction)
                .await?
                .rows_affected()
                == 1;
            if !first_delivery {
                continue;
            }
            // seq continues after the session's last message, so order survives equal timestamps.
            let last: Option<i64> =
                sqlx::query_scalar("select max(seq) from messages where tenant = ? and session_scope = ?")
                    .bind(&buffered.tenant)
                    .bind(&buffered.session)
                    .fetch_one(&mut *transaction)
                    .await?;
            let mut seq = last.unwrap_or(0);
            for (index, message) in buffered.messages.iter().enumerate() {
                seq += 1;
                sqlx::query(
                    "insert or ignore into messages (id, tenant, session_scope, role, content, name, created_at, seq) \
                     values (?, ?, ?, ?, ?, ?, ?, ?)",
                )
                .bind(format!("{}:{index}", buffered.id))
                .bind(&buffered.tenant)
                .bind(&buffered.session)
                .bind(&message.role)
                .bind(&message.content)
                .bind(&message.name)
                .bind(buffered.at.timestamp_micros())
                .bind(seq)
                .execute(&mut *transaction)
                .await?;
            }
            sqlx::query(
                "delete from messages where tenant = ? and session_scope = ? and seq <= \
                 (select seq from messages where tenant = ? and session_scope = ? order by seq desc limit 1 offset ?)",
            )
            .bind(&buffered.tenant)
            .bind(&buffered.session)
            .bind(&buffered.tenant)
            .bind(&buffered.session)
            .bind(BUFFER_KEEP as i64)
            .execute(&mut *transaction)
            .await?;
        }
        transaction.commit().await?;
        Ok(())
    }

    /// Returns the entries of one memory of `tenant`, oldest first.
    ///
    /// # Errors
    /// [`Error::StoreUnavailable`].
    pub async fn for_memory(&self, tenant: &str, memory_id: Uuid) -> Result<Vec<HistoryRecord>> {
        let rows = sqlx::query(
            "select id, tenant, memory_id, user_id, agent_id, run_id, old_memory, new_memory, event, created_at, \
             updated_at, is_deleted, actor_id, role from history where tenant = ? and memory_id = ? \
             order by created_at, id",
        )
        .bind(tenant)
        .bind(memory_id.to_string())
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
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
            })
            .collect()
    }

    /// Deletes history and messages of `tenant`, or of every tenant when `None`.
    ///
    /// # Errors
    /// [`Error::StoreUnavailable`].
    pub async fn reset(&self, tenant: Option<&str>) -> Result<()> {
        let mut transaction = self.turns.begin(&self.pool).await?;
        for table in ["history", "messages"] {
            match tenant {
                Some(tenant) => {
                    sqlx::query(&format!("delete from {table} where tenant = ?"))
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

    /// Checks the history database answers.
    ///
    /// # Errors
    /// [`Error::StoreUnavailable`].
    pub async fn ping(&self) -> Result<()> {
        sqlx::query_scalar::<_, i64>("select 1").fetch_one(&self.pool).await?;
        Ok(())
    }
}
