//! The records the core stores and returns: memories, history events and their output shapes.

use chrono::{DateTime, NaiveDate, Utc};
use md5::{Digest, Md5};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::scope::Scope;

/// Caller metadata: flat JSON object of caller-chosen keys.
pub type Metadata = Map<String, Value>;

/// A memory as stored: text, owner, promoted attributes, caller metadata and its embedding.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryRecord {
    /// Row id.
    pub id: Uuid,
    /// Owning tenant (from the caller, never from the request body).
    pub tenant: String,
    /// Owning scope, immutable after creation.
    pub scope: Scope,
    /// The memory text.
    pub memory: String,
    /// md5 hex digest of `memory`.
    pub hash: String,
    /// Caller metadata, without reserved keys.
    pub metadata: Metadata,
    /// Creation time (or the caller-supplied observation time).
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
    /// Last day on which the memory is visible; hidden from search and list after it.
    pub expiration_date: Option<NaiveDate>,
    /// `user` or `assistant`, when extraction attributed the fact.
    pub attributed_to: Option<String>,
    /// Role of the message a verbatim memory came from.
    pub role: Option<String>,
    /// Name of the actor that said it (message `name`).
    pub actor_id: Option<String>,
    /// `procedural_memory` for procedural summaries.
    pub memory_type: Option<String>,
    /// Existing memories the extraction linked this fact to (related, updated or corrected).
    pub linked_memory_ids: Vec<Uuid>,
    /// Named things the fact mentions (people, places, products…).
    pub entities: Vec<String>,
    /// `memory` analysed for keyword search ([`crate::analysis::lemmatize`]): terms joined by spaces.
    pub text_lemmatized: String,
    /// Unit-length embedding of `memory`.
    pub embedding: Vec<f32>,
}

impl MemoryRecord {
    /// A new memory of `tenant` and `scope` saying `text`, created (and last changed) at `at`:
    /// a fresh id, the md5 hash and the analysed text computed, no metadata, expiration,
    /// attribution, role, actor, type, links or entities (set those with struct update syntax).
    pub fn new(tenant: impl Into<String>, scope: Scope, text: String, embedding: Vec<f32>, at: DateTime<Utc>) -> Self {
        Self {
            id: Uuid::now_v7(),
            tenant: tenant.into(),
            scope,
            hash: memory_hash(&text),
            text_lemmatized: crate::analysis::lemmatize(&text),
            memory: text,
            metadata: Metadata::new(),
            created_at: at,
            updated_at: at,
            expiration_date: None,
            attributed_to: None,
            role: None,
            actor_id: None,
            memory_type: None,
            linked_memory_ids: Vec::new(),
            entities: Vec::new(),
            embedding,
        }
    }

    /// Returns true when the memory has expired on `today` (a memory expiring today is still visible).
    pub fn is_expired(&self, today: NaiveDate) -> bool {
        self.expiration_date.is_some_and(|date| date < today)
    }
}

/// Returns the md5 hex digest of a memory text.
pub fn memory_hash(text: &str) -> String {
    let digest = Md5::digest(text.as_bytes());
    digest.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// A memory as returned to callers (the shape of Mem0's memory items), without its embedding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = MemoryResponse))]
pub struct MemoryItem {
    /// Memory id.
    pub id: Uuid,
    /// The memory text.
    pub memory: String,
    /// md5 of the text.
    pub hash: String,
    /// Caller metadata, `null` when empty.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub metadata: Option<Metadata>,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
    /// Owning user.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// Owning agent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// Owning run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// Actor that said it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actor_id: Option<String>,
    /// Role of the source message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// Who the fact is attributed to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attributed_to: Option<String>,
    /// Expiration date (YYYY-MM-DD).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expiration_date: Option<NaiveDate>,
    /// `procedural_memory` for procedural summaries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_type: Option<String>,
    /// Existing memories the extraction linked this fact to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub linked_memory_ids: Vec<Uuid>,
    /// Named things the fact mentions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entities: Vec<String>,
    /// Similarity score, on search results only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score: Option<f32>,
    /// Relevance from the reranker (search with `rerank`); results are ordered by it then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerank_score: Option<f32>,
    /// How the score was made (search with `explain`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explain: Option<crate::retrieval::ScoreExplanation>,
}

impl From<MemoryRecord> for MemoryItem {
    fn from(record: MemoryRecord) -> Self {
        Self {
            id: record.id,
            memory: record.memory,
            hash: record.hash,
            metadata: (!record.metadata.is_empty()).then_some(record.metadata),
            created_at: record.created_at,
            updated_at: record.updated_at,
            user_id: record.scope.user_id,
            agent_id: record.scope.agent_id,
            run_id: record.scope.run_id,
            actor_id: record.actor_id,
            role: record.role,
            attributed_to: record.attributed_to,
            expiration_date: record.expiration_date,
            memory_type: record.memory_type,
            linked_memory_ids: record.linked_memory_ids,
            entities: record.entities,
            score: None,
            rerank_score: None,
            explain: None,
        }
    }
}

/// The kind of change a history entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "UPPERCASE")]
pub enum HistoryEvent {
    /// The memory was created.
    Add,
    /// Its text, metadata or expiration changed.
    Update,
    /// It was deleted.
    Delete,
}

impl HistoryEvent {
    /// Returns the stored form (`ADD`, `UPDATE`, `DELETE`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Add => "ADD",
            Self::Update => "UPDATE",
            Self::Delete => "DELETE",
        }
    }

    /// Parses the stored form.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "ADD" => Some(Self::Add),
            "UPDATE" => Some(Self::Update),
            "DELETE" => Some(Self::Delete),
            _ => None,
        }
    }
}

/// One change to a memory (the shape of Mem0's history entries), as stored and as returned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = HistoryResponse))]
pub struct HistoryRecord {
    /// Entry id.
    pub id: Uuid,
    /// The memory it is about.
    pub memory_id: Uuid,
    /// Text before the change (`null` for ADD).
    pub old_memory: Option<String>,
    /// Text after the change (`null` for DELETE).
    pub new_memory: Option<String>,
    /// What happened.
    pub event: HistoryEvent,
    /// When the change happened.
    pub created_at: DateTime<Utc>,
    /// The memory's `updated_at` after the change.
    pub updated_at: Option<DateTime<Utc>>,
    /// True for DELETE.
    pub is_deleted: bool,
    /// Actor of the memory.
    pub actor_id: Option<String>,
    /// Role of the memory's source message.
    pub role: Option<String>,
    /// Owning tenant, for access checks after the memory is gone; not serialised.
    #[serde(skip)]
    pub tenant: String,
    /// Owning scope, for access checks after the memory is gone; not serialised.
    #[serde(skip)]
    pub scope: Scope,
}

impl HistoryRecord {
    /// Builds the entry for `event` on `record`, happening at `at`.
    pub fn for_event(record: &MemoryRecord, event: HistoryEvent, old: Option<String>, at: DateTime<Utc>) -> Self {
        let new_memory = (event != HistoryEvent::Delete).then(|| record.memory.clone());
        Self {
            id: Uuid::now_v7(),
            memory_id: record.id,
            old_memory: old,
            new_memory,
            event,
            created_at: at,
            updated_at: Some(if event == HistoryEvent::Delete { at } else { record.updated_at }),
            is_deleted: event == HistoryEvent::Delete,
            actor_id: record.actor_id.clone(),
            role: record.role.clone(),
            tenant: record.tenant.clone(),
            scope: record.scope.clone(),
        }
    }
}

/// A conversation message given to `add`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// `user`, `assistant` or `system`.
    pub role: String,
    /// The text.
    pub content: String,
    /// Optional speaker name (becomes `actor_id`).
    pub name: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_md5_hex() {
        assert_eq!(memory_hash("hello"), "5d41402abc4b2a76b9719d911017c592");
    }

    #[test]
    fn expiring_today_is_still_visible() {
        let today = NaiveDate::from_ymd_opt(2026, 11, 30).expect("date");
        let mut record = MemoryRecord {
            id: Uuid::nil(),
            tenant: "t".into(),
            scope: Scope::default(),
            memory: "m".into(),
            hash: memory_hash("m"),
            metadata: Metadata::new(),
            created_at: Utc::now(),
            updated_at: Utc::now(),
            expiration_date: Some(today),
            attributed_to: None,
            role: None,
            actor_id: None,
            memory_type: None,
            linked_memory_ids: Vec::new(),
            entities: Vec::new(),
            text_lemmatized: String::new(),
            embedding: vec![],
        };
        assert!(!record.is_expired(today));
        record.expiration_date = today.pred_opt();
        assert!(record.is_expired(today));
    }
}
