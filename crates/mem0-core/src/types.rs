//! The records the core stores and returns: memories, history events and their output shapes.

use chrono::{DateTime, NaiveDate, Utc};
use md5::{Digest, Md5};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::scope::Scope;

/// Caller metadata: flat JSON object of caller-chosen keys.
pub type Metadata = Map<String, Value>;

/// Where a memory came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum SourceType {
    /// Said by the user (a verbatim user message).
    UserStated,
    /// Said by the assistant (a verbatim assistant message).
    AssistantStated,
    /// Written by a model from a conversation (`infer=true` facts, procedural summaries).
    AgentInferred,
    /// The output of a tool the agent ran.
    ToolResult,
    /// Checked or written by a person.
    HumanReviewed,
    /// Loaded from another system (and memories stored before provenance existed).
    Imported,
}

impl SourceType {
    /// Every source type, in the order of the enum.
    pub const ALL: [Self; 6] = [
        Self::UserStated,
        Self::AssistantStated,
        Self::AgentInferred,
        Self::ToolResult,
        Self::HumanReviewed,
        Self::Imported,
    ];

    /// The stored and serialised name (`user_stated`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::UserStated => "user_stated",
            Self::AssistantStated => "assistant_stated",
            Self::AgentInferred => "agent_inferred",
            Self::ToolResult => "tool_result",
            Self::HumanReviewed => "human_reviewed",
            Self::Imported => "imported",
        }
    }

    /// The source type named `name`, if there is one.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == name)
    }

    /// The confidence a memory of this source gets when nobody says otherwise: a person's word
    /// over a tool's output over an import over what an assistant or a model wrote.
    pub fn default_confidence(self) -> f32 {
        match self {
            Self::HumanReviewed => 1.0,
            Self::UserStated => 0.9,
            Self::ToolResult => 0.85,
            Self::Imported => 0.8,
            Self::AssistantStated | Self::AgentInferred => 0.7,
        }
    }
}

/// Whether a memory is current truth.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum MemoryStatus {
    /// Current (the default; also every memory without a state key).
    #[default]
    Active,
    /// A newer memory with the same state key and scope replaced it (`superseded_by`,
    /// `valid_to`); hidden from search and listing unless `include_superseded`.
    Superseded,
    /// Another memory with the same state key has the same event time from a different source:
    /// both are kept visible, flagged, ordered by confidence and source.
    Conflict,
    /// Set by a person: current whatever arrives later with the same key.
    Pinned,
    /// Set by a person: no longer true; hidden like a superseded memory.
    Retired,
}

impl MemoryStatus {
    /// Every status, in the order of the enum.
    pub const ALL: [Self; 5] = [Self::Active, Self::Superseded, Self::Conflict, Self::Pinned, Self::Retired];

    /// The stored and serialised name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Superseded => "superseded",
            Self::Conflict => "conflict",
            Self::Pinned => "pinned",
            Self::Retired => "retired",
        }
    }

    /// The status named `name`, if there is one.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|status| status.as_str() == name)
    }

    /// True for the statuses search and listing hide by default.
    pub fn is_hidden(self) -> bool {
        matches!(self, Self::Superseded | Self::Retired)
    }
}

/// Where a memory stands among the memories of its state key (see [`crate::state`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StateInfo {
    /// The attribute the memory is a value of (`user.home_city`), if any.
    pub state_key: Option<String>,
    /// Current, superseded, in conflict, pinned or retired.
    pub status: MemoryStatus,
    /// The memory that replaced it.
    pub superseded_by: Option<Uuid>,
    /// When it stopped being true (the event time of its successor).
    pub valid_to: Option<DateTime<Utc>>,
    /// When what it says happened or began, if known (otherwise its observation time,
    /// `created_at`, orders it).
    pub event_time: Option<DateTime<Utc>>,
}

/// Where a memory came from and how far to trust it: first-class columns, filterable, returned
/// with every memory.
#[derive(Debug, Clone, PartialEq)]
pub struct Provenance {
    /// What kind of source said it.
    pub source_type: SourceType,
    /// Who said it (a person, agent or tool name), as the caller gives it or the message's `name`.
    pub source_actor: Option<String>,
    /// The credential that stored it (`key:<id>`, `jwt:<sub>`, `admin`, `local`): set by the
    /// server from the request's credential, never from the body.
    pub source_app: Option<String>,
    /// The evidence: a caller's reference (a message, document or ticket id) or the buffered
    /// messages an extracted fact came from (`messages:<batch id>`).
    pub evidence_ref: Option<String>,
    /// 0 to 1: the caller's, the model's (extraction), or the source type's default.
    pub confidence: f32,
}

impl Default for Provenance {
    fn default() -> Self {
        Self::of(SourceType::Imported)
    }
}

impl Provenance {
    /// The confidence as stored: a double rounded to four decimals, so that a filter
    /// `{"confidence": {"gte": 0.9}}` holds for a memory of confidence 0.9.
    pub fn stored_confidence(&self) -> f64 {
        (f64::from(self.confidence) * 10_000.0).round() / 10_000.0
    }

    /// Provenance of `source_type` with its default confidence and nothing else known.
    pub fn of(source_type: SourceType) -> Self {
        Self {
            source_type,
            source_actor: None,
            source_app: None,
            evidence_ref: None,
            confidence: source_type.default_confidence(),
        }
    }
}

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
    pub embedding: std::sync::Arc<[f32]>,
    /// Where it came from.
    pub provenance: Provenance,
    /// Its state key and whether it is current.
    pub state: StateInfo,
}

impl MemoryRecord {
    /// A new memory of `tenant` and `scope` saying `text`, created (and last changed) at `at`:
    /// a fresh id, the md5 hash and the analysed text computed, no metadata, expiration,
    /// attribution, role, actor, type, links or entities, provenance `imported` (set those with
    /// struct update syntax).
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
            embedding: embedding.into(),
            provenance: Provenance::default(),
            state: StateInfo::default(),
        }
    }

    /// When what the memory says took effect: its event time, else its observation time.
    pub fn effective_time(&self) -> DateTime<Utc> {
        self.state.event_time.unwrap_or(self.created_at)
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
    /// What kind of source said it.
    pub source_type: SourceType,
    /// Who said it (person, agent or tool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_actor: Option<String>,
    /// The credential that stored it (`key:<id>`, `jwt:<sub>`, `admin`, `local`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_app: Option<String>,
    /// The evidence: a caller's reference, or `messages:<batch id>` for extracted facts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence_ref: Option<String>,
    /// 0 to 1.
    pub confidence: f32,
    /// The attribute this memory is a value of (`user.home_city`), when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_key: Option<String>,
    /// `active`, `superseded`, `conflict`, `pinned` or `retired`.
    pub status: MemoryStatus,
    /// The memory that replaced it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded_by: Option<Uuid>,
    /// When it stopped being true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valid_to: Option<DateTime<Utc>>,
    /// When what it says happened or began (else `created_at`, the observation time, counts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_time: Option<DateTime<Utc>>,
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
            source_type: record.provenance.source_type,
            source_actor: record.provenance.source_actor,
            source_app: record.provenance.source_app,
            evidence_ref: record.provenance.evidence_ref,
            confidence: record.provenance.confidence,
            state_key: record.state.state_key,
            status: record.state.status,
            superseded_by: record.state.superseded_by,
            valid_to: record.state.valid_to,
            event_time: record.state.event_time,
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
            embedding: std::sync::Arc::from([]),
            provenance: Provenance::default(),
            state: StateInfo::default(),
        };
        assert!(!record.is_expired(today));
        record.expiration_date = today.pred_opt();
        assert!(record.is_expired(today));
    }
}
