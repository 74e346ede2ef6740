//! What the memory service takes and gives: requests and outcomes of its operations.

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::filter::Filter;
use crate::providers::llm::TokenUsage;
use crate::scope::Scope;
use crate::types::{HistoryEvent, MemoryItem, Message, Metadata, Provenance, SourceType};

/// The provenance a caller may give its memories; the rest (`source_app`) comes from the
/// credential. Unset fields get defaults: the source type by path (a verbatim message by its role,
/// an extracted fact or summary `agent_inferred`), the actor from the message's `name`, the
/// evidence of extracted facts from their buffered messages, the confidence from the model
/// (extraction) or the source type.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SourceInput {
    /// What kind of source said it.
    pub source_type: Option<SourceType>,
    /// Who said it.
    pub source_actor: Option<String>,
    /// A reference to the evidence (message, document, ticket id).
    pub evidence_ref: Option<String>,
    /// 0 to 1.
    pub confidence: Option<f32>,
}

impl SourceInput {
    /// The provenance of a memory stored by `caller`, given the path's defaults.
    pub(crate) fn provenance(
        &self,
        caller: &crate::scope::Caller,
        default_type: SourceType,
        default_actor: Option<&str>,
        default_evidence: Option<&str>,
        default_confidence: Option<f32>,
    ) -> Provenance {
        let source_type = self.source_type.unwrap_or(default_type);
        Provenance {
            source_type,
            source_actor: self.source_actor.clone().or_else(|| default_actor.map(str::to_owned)),
            source_app: Some(caller.principal_id.clone()),
            evidence_ref: self.evidence_ref.clone().or_else(|| default_evidence.map(str::to_owned)),
            confidence: self.confidence.or(default_confidence).unwrap_or_else(|| source_type.default_confidence()),
        }
    }

    /// True when no field is set.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Checks the caller's values: confidence within 0–1, names and references short and without
    /// U+0000.
    pub(crate) fn validate(&self) -> crate::error::Result<()> {
        use crate::error::Error;
        if let Some(confidence) = self.confidence {
            if !(0.0..=1.0).contains(&confidence) {
                return Err(Error::validation("confidence", "must be between 0 and 1"));
            }
        }
        for (field, value) in [("source_actor", &self.source_actor), ("evidence_ref", &self.evidence_ref)] {
            if let Some(value) = value {
                crate::text::reject_nul(field, value)?;
                if value.trim().is_empty() {
                    return Err(Error::validation(field, "cannot be empty"));
                }
                if value.len() > super::limits::MAX_NAME_BYTES {
                    return Err(Error::validation(field, format!("at most {} bytes", super::limits::MAX_NAME_BYTES)));
                }
            }
        }
        Ok(())
    }
}

/// Input of [`Memory::add`].
#[derive(Debug, Clone, Default)]
pub struct AddRequest {
    /// Owner of the new memories.
    pub scope: Scope,
    /// The conversation.
    pub messages: Vec<Message>,
    /// Caller metadata stored with every new memory.
    pub metadata: Metadata,
    /// Last day the memories are visible.
    pub expiration_date: Option<NaiveDate>,
    /// Extract facts with the LLM (true) or store each message verbatim (false).
    pub infer: bool,
    /// `procedural_memory` or none.
    pub memory_type: Option<String>,
    /// Per-call extraction instructions (LLM path).
    pub prompt: Option<String>,
    /// When the conversation happened (backfilling); defaults to now.
    pub timestamp: Option<DateTime<Utc>>,
    /// Provenance the caller gives the new memories.
    pub source: SourceInput,
    /// The state key the new memories are values of (see [`crate::state`]).
    pub state_key: Option<String>,
    /// When what they say took effect (else `timestamp`, the observation time, orders them).
    pub event_time: Option<DateTime<Utc>>,
    /// Derive the new memories' ids from this (a queued job's id): memory `i` of the call gets
    /// [`derived_memory_id`]`(seed, i)`, so a run repeated after a crash can tell whether the
    /// first one was stored, and cannot store it twice.
    pub ids_from: Option<Uuid>,
}

/// Most memories one add can create (the largest number of messages or facts of a call).
pub const MAX_MEMORIES_PER_ADD: usize = 256;

/// The id of the `index`-th memory an add with [`AddRequest::ids_from`] `seed` creates.
pub fn derived_memory_id(seed: Uuid, index: usize) -> Uuid {
    Uuid::new_v5(&seed, &(index as u64).to_be_bytes())
}

impl AddRequest {
    /// The state of a new memory of this call: the caller's key and event time (else those the
    /// model gave the fact); the resolver sets the status in the write transaction.
    pub(crate) fn state(
        &self,
        proposed: Option<&str>,
        proposed_time: Option<DateTime<Utc>>,
    ) -> crate::types::StateInfo {
        crate::types::StateInfo {
            state_key: self.state_key.clone().or_else(|| proposed.map(str::to_owned)),
            event_time: self.event_time.or(proposed_time),
            ..crate::types::StateInfo::default()
        }
    }
}

/// One memory created by [`Memory::add`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = AddedMemoryResponse))]
pub struct AddedMemory {
    /// New memory id.
    pub id: Uuid,
    /// Its text.
    pub memory: String,
    /// Always `ADD`: the pipeline never rewrites existing memories.
    pub event: HistoryEvent,
    /// Speaker name of the source message (verbatim path).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actor_id: Option<String>,
    /// Role of the source message (verbatim path).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
}

/// What [`Memory::add`] did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AddOutcome {
    /// The memories created.
    pub results: Vec<AddedMemory>,
    /// Things the caller should know although the call succeeded (e.g. an unreadable model reply).
    pub warnings: Vec<String>,
    /// Tokens the LLM call used, when there was one.
    pub usage: Option<TokenUsage>,
}

/// How fact extraction builds its prompt.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ExtractionSettings {
    /// Instructions added to every extraction prompt (a call's `prompt` replaces them).
    #[serde(default)]
    pub custom_instructions: Option<String>,
    /// Buffered earlier messages of the same session shown as context.
    #[serde(default = "default_context_messages")]
    pub context_messages: usize,
    /// Nearest existing memories shown (for dedup and linking).
    #[serde(default = "default_existing_memories")]
    pub existing_memories: usize,
}

fn default_context_messages() -> usize {
    10
}

fn default_existing_memories() -> usize {
    10
}

impl ExtractionSettings {
    /// Checks the values; `prefix` names the section in messages (`memory.extraction`).
    ///
    /// # Errors
    /// A message naming the bad key.
    pub fn validate(&self, prefix: &str) -> Result<(), String> {
        use crate::providers::http::check_range;
        check_range(&format!("{prefix}.context_messages"), self.context_messages, 0, 50)?;
        check_range(&format!("{prefix}.existing_memories"), self.existing_memories, 0, 50)?;
        if self.custom_instructions.as_ref().is_some_and(|text| text.len() > 8192) {
            return Err(format!("{prefix}.custom_instructions must be at most 8192 bytes"));
        }
        Ok(())
    }
}

impl Default for ExtractionSettings {
    fn default() -> Self {
        Self {
            custom_instructions: None,
            context_messages: default_context_messages(),
            existing_memories: default_existing_memories(),
        }
    }
}

/// Input of [`Memory::list`].
#[derive(Debug, Clone)]
pub struct ListRequest {
    /// Whose memories; empty only for admins listing their whole tenant.
    pub scope: Scope,
    /// Further conditions.
    pub filter: Option<Filter>,
    /// Rows per page, 1..=1000.
    pub page_size: usize,
    /// Token from the previous page's `next`.
    pub cursor: Option<String>,
    /// Include expired memories.
    pub show_expired: bool,
    /// Include `superseded` and `retired` memories.
    pub include_superseded: bool,
}

/// One page of [`Memory::list`].
#[derive(Debug, Clone)]
pub struct ListPage {
    /// Memories, newest first.
    pub items: Vec<MemoryItem>,
    /// Token for the next page, when there is one.
    pub next: Option<String>,
}

/// One numbered page of [`Memory::list_numbered`].
#[derive(Debug, Clone)]
pub struct NumberedPage {
    /// Memories, newest first.
    pub items: Vec<MemoryItem>,
    /// How many memories match, on every page.
    pub count: u64,
}

/// Input of [`Memory::search`].
#[derive(Debug, Clone)]
pub struct SearchRequest {
    /// Whose memories.
    pub scope: Scope,
    /// Further conditions.
    pub filter: Option<Filter>,
    /// What to look for.
    pub query: String,
    /// Most results, 1..=1000.
    pub top_k: usize,
    /// Lowest similarity returned, in [0, 1].
    pub threshold: f32,
    /// Include expired memories.
    pub show_expired: bool,
    /// Include `superseded` and `retired` memories.
    pub include_superseded: bool,
    /// Read the query's temporal intent ([`crate::temporal`]) and apply it.
    pub temporal: bool,
    /// The time relative expressions in the query are read against (default: now).
    pub reference_time: Option<DateTime<Utc>>,
    /// Apply decay by use ([`crate::decay`]); `None`: as configured for the tenant.
    pub decay: Option<bool>,
    /// Which retrievers produce candidates.
    pub mode: SearchMode,
    /// Return each result's score components.
    pub explain: bool,
    /// Reorder the best candidates with the configured reranker.
    pub rerank: bool,
}

/// Which retrievers produce search candidates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SearchMode {
    /// Dense, BM25 and entity candidates, fused.
    #[default]
    Hybrid,
    /// Embedding similarity only.
    Dense,
    /// BM25 only.
    Keyword,
}

/// What [`Memory::search`] found.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SearchOutcome {
    /// Best first.
    pub results: Vec<MemoryItem>,
    /// Things the caller should know (e.g. a reranker that failed and was skipped).
    pub warnings: Vec<String>,
    /// What the query said about time, when it said something and `temporal` was on.
    pub temporal: Option<crate::temporal::TemporalIntent>,
}

/// Input of [`Memory::update`]; at least one field must be present.
#[derive(Debug, Clone, Default)]
pub struct UpdateRequest {
    /// New text (re-embedded).
    pub text: Option<String>,
    /// Keys merged into the metadata.
    pub metadata: Option<Metadata>,
    /// `Some(None)` clears the expiration, `Some(Some(d))` sets it.
    pub expiration_date: Option<Option<NaiveDate>>,
    /// Provenance to change (`source_type`, `source_actor`, `evidence_ref`, `confidence`); the
    /// credential of the update becomes `source_app` when any is given.
    pub source: SourceInput,
    /// `Some(Some(key))` sets the state key, `Some(None)` clears it.
    pub state_key: Option<Option<String>>,
    /// `pinned` or `retired` (set by a person), or `active` to hand the memory back to the
    /// resolver; `superseded` and `conflict` are the resolver's.
    pub status: Option<crate::types::MemoryStatus>,
    /// `Some(Some(time))` sets the event time, `Some(None)` clears it.
    pub event_time: Option<Option<DateTime<Utc>>>,
}
