//! How memory rows are stored in SQLite: timestamps as microseconds, embeddings as little-endian
//! `f32` blobs, lists and metadata as JSON text.

use chrono::{DateTime, NaiveDate, Utc};
use sqlx::sqlite::SqliteRow;
use sqlx::Row;
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::scope::Scope;
use crate::store::{provenance, state};
use crate::types::{MemoryRecord, Metadata};

pub(super) fn encode_embedding(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|value| value.to_le_bytes()).collect()
}

pub(super) fn decode_embedding(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|chunk| f32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]])).collect()
}

pub(super) fn micros(time: DateTime<Utc>) -> i64 {
    time.timestamp_micros()
}

pub(super) fn from_micros(value: i64) -> Result<DateTime<Utc>> {
    DateTime::from_timestamp_micros(value)
        .ok_or_else(|| Error::Internal(format!("stored timestamp {value} out of range")))
}

pub(super) fn row_to_record(row: &SqliteRow) -> Result<MemoryRecord> {
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
        embedding: decode_embedding(&embedding).into(),
        provenance: provenance(
            row.try_get("source_type")?,
            row.try_get("source_actor")?,
            row.try_get("source_app")?,
            row.try_get("evidence_ref")?,
            row.try_get("confidence")?,
        )?,
        state: state(
            row.try_get("state_key")?,
            &row.try_get::<String, _>("status")?,
            row.try_get::<Option<String>, _>("superseded_by")?
                .map(|id| Uuid::parse_str(&id))
                .transpose()
                .map_err(|error| Error::Internal(format!("stored superseded_by of {id}: {error}")))?,
            row.try_get::<Option<i64>, _>("valid_to")?.map(from_micros).transpose()?,
            row.try_get::<Option<i64>, _>("event_time")?.map(from_micros).transpose()?,
        )?,
    })
}
