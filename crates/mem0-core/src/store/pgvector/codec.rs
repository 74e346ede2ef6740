//! How memory rows are stored in Postgres: typed columns, `jsonb` metadata, `vector` embeddings;
//! and the text format of `COPY` for bulk loads.

use pgvector::Vector;
use sqlx::postgres::PgRow;
use sqlx::Row;
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::scope::Scope;
use crate::store::doc_len;
use crate::store::{provenance, state};
use crate::types::{MemoryRecord, Metadata};

/// Appends one row of `COPY ... (format text)` for `record`, columns as in [`COLUMNS`].
pub(super) fn copy_row(out: &mut String, record: &MemoryRecord) {
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
    let fields: [Option<String>; 30] = [
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
        Some(record.provenance.source_type.as_str().to_owned()),
        record.provenance.source_actor.clone(),
        record.provenance.source_app.clone(),
        record.provenance.evidence_ref.clone(),
        Some(record.provenance.stored_confidence().to_string()),
        record.state.state_key.clone(),
        Some(record.state.status.as_str().to_owned()),
        record.state.superseded_by.map(|id| id.to_string()),
        record.state.valid_to.map(|at| at.to_rfc3339()),
        record.state.event_time.map(|at| at.to_rfc3339()),
    ];
    for (index, field) in fields.iter().enumerate() {
        if index > 0 {
            out.push('\t');
        }
        optional(out, field.as_deref());
    }
    out.push('\n');
}

pub(super) fn row_to_record(row: &PgRow) -> Result<MemoryRecord> {
    row_to_record_with(row, None)
}

/// A row's record, with `embedding` when given (the row need not have that column then).
pub(super) fn row_to_record_with(row: &PgRow, embedding: Option<Vec<f32>>) -> Result<MemoryRecord> {
    let metadata: serde_json::Value = row.try_get("metadata")?;
    let serde_json::Value::Object(metadata) = metadata else {
        return Err(Error::Internal("stored metadata is not an object".into()));
    };
    let embedding = match embedding {
        Some(embedding) => embedding,
        None => row.try_get::<Vector, _>("embedding")?.to_vec(),
    };
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
        embedding: embedding.into(),
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
            row.try_get("superseded_by")?,
            row.try_get("valid_to")?,
            row.try_get("event_time")?,
        )?,
    })
}
