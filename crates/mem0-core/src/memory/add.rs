//! Adding memories: verbatim messages (`infer=false`), facts extracted by the LLM (`infer=true`)
//! and procedural summaries, each validated, embedded and then written all or nothing.

use std::collections::{HashMap, HashSet};

use chrono::SubsecRound;
use tracing::{debug, info, instrument, warn, Instrument as _};
use uuid::Uuid;

use super::limits::{
    sanitize_metadata, stored_now, truncate_to_bytes, MAX_MESSAGES, MAX_NAME_BYTES, MAX_PAGE_SIZE, MAX_TEXT_BYTES,
};
use super::requests::{derived_memory_id, MAX_MEMORIES_PER_ADD};
use super::writes::WriteWith;
use super::{AddOutcome, AddRequest, AddedMemory, Memory};
use crate::entities;
use crate::error::{Error, ProviderError, ProviderErrorKind, Result};
use crate::extraction::{self, ExtractedFact, ExtractionInput, PromptMessage};
use crate::filter::{Condition, Field, Filter, Operand, Operator, Scalar, TextField};
use crate::history::{AuditAction, BufferedMessages};
use crate::providers::llm::{ChatMessage, Llm, LlmRequest, LlmResponse};
use crate::scope::{Caller, Role, Scope};
use crate::store::EntityLink;
use crate::text;
use crate::types::{memory_hash, HistoryEvent, MemoryRecord, Message, Metadata, SourceType};

impl Memory {
    /// Stores memories from a conversation: verbatim (`infer=false`), as facts extracted by the
    /// LLM (`infer=true`), or as one procedural summary (`memory_type = procedural_memory`).
    ///
    /// # Errors
    /// Validation, scope, store and provider errors; on any error nothing is stored.
    #[instrument(skip_all, fields(tenant = %caller.tenant, infer = request.infer, messages = request.messages.len()))]
    pub async fn add(&self, caller: &Caller, request: AddRequest) -> Result<AddOutcome> {
        let metadata = self.check_add(caller, &request)?;
        let outcome = if request.memory_type.is_some() {
            self.add_procedural(caller, request, metadata).await?
        } else if request.infer {
            self.add_inferred(caller, request, metadata).await?
        } else {
            self.add_verbatim(caller, request, metadata).await?
        };
        self.audit(caller, AuditAction::Add, outcome.results.iter().map(|added| added.id));
        Ok(outcome)
    }

    /// Checks an add before it runs (or is queued): the caller's role and scope, and every field;
    /// an add that needs an LLM when none is configured is refused here too. Returns the caller
    /// metadata as it will be stored.
    ///
    /// # Errors
    /// Validation, scope and role errors; [`Error::LlmNotConfigured`].
    pub fn check_add(&self, caller: &Caller, request: &AddRequest) -> Result<Metadata> {
        caller.require(Role::Write)?;
        if request.scope.is_empty() {
            return Err(Error::validation("user_id", "at least one of user_id, agent_id or run_id is required"));
        }
        caller.check_scope(&request.scope)?;
        if request.messages.is_empty() {
            return Err(Error::validation("messages", "at least one message is required"));
        }
        if request.messages.len() > MAX_MESSAGES {
            return Err(Error::validation("messages", format!("at most {MAX_MESSAGES} messages per call")));
        }
        if let Some(memory_type) = &request.memory_type {
            if memory_type != "procedural_memory" {
                return Err(Error::validation("memory_type", "the only memory type is `procedural_memory`"));
            }
        }
        for (index, message) in request.messages.iter().enumerate() {
            if !matches!(message.role.as_str(), "user" | "assistant" | "system") {
                return Err(Error::validation(
                    format!("messages[{index}].role"),
                    "must be one of user, assistant, system",
                ));
            }
            if message.content.len() > MAX_TEXT_BYTES {
                return Err(Error::validation(
                    format!("messages[{index}].content"),
                    format!("at most {MAX_TEXT_BYTES} bytes"),
                ));
            }
            text::reject_nul(&format!("messages[{index}].content"), &message.content)?;
            if let Some(name) = &message.name {
                text::reject_nul(&format!("messages[{index}].name"), name)?;
                if name.len() > MAX_NAME_BYTES {
                    return Err(Error::validation(
                        format!("messages[{index}].name"),
                        format!("at most {MAX_NAME_BYTES} bytes"),
                    ));
                }
            }
        }
        if let Some(prompt) = &request.prompt {
            if prompt.len() > MAX_TEXT_BYTES {
                return Err(Error::validation("prompt", format!("at most {MAX_TEXT_BYTES} bytes")));
            }
            text::reject_nul("prompt", prompt)?;
        }
        request.source.validate()?;
        if let Some(key) = &request.state_key {
            crate::state::check_key(key).map_err(|message| Error::validation("state_key", message))?;
        }
        if request.memory_type.is_some() && request.scope.agent_id.is_none() {
            return Err(Error::validation("agent_id", "procedural memory needs an agent_id"));
        }
        if (request.infer || request.memory_type.is_some()) && self.llm.is_none() {
            return Err(Error::LlmNotConfigured);
        }
        sanitize_metadata(request.metadata.clone())
    }

    /// `infer=false`: every non-system message becomes a memory as it is.
    async fn add_verbatim(&self, caller: &Caller, request: AddRequest, metadata: Metadata) -> Result<AddOutcome> {
        let sources: Vec<(usize, &Message)> = request
            .messages
            .iter()
            .enumerate()
            .filter(|(_, message)| message.role != "system" && !message.content.trim().is_empty())
            .collect();
        if sources.is_empty() {
            return Ok(AddOutcome::default());
        }
        let mut warnings = Vec::new();
        let mut texts = Vec::with_capacity(sources.len());
        for (index, message) in &sources {
            let (text, redacted) =
                self.screen(caller, &format!("messages[{index}].content"), message.content.trim())?;
            note_redactions(&mut warnings, &redacted);
            texts.push(text);
        }
        let names: Vec<Vec<String>> = texts.iter().map(|text| entities::names_in(text)).collect();
        let embedded: Vec<String> =
            texts.iter().map(|text| crate::state::embedding_text(request.state_key.as_deref(), text)).collect();
        let (embeddings, name_vectors) = self.embed_with_entities(&embedded, &names).await?;
        let now = stored_now();
        let created_at = request.timestamp.map(|at| at.trunc_subsecs(6)).unwrap_or(now);
        let records: Vec<MemoryRecord> = sources
            .iter()
            .zip(texts)
            .zip(embeddings)
            .zip(names)
            .map(|((((_, message), text), embedding), entities)| MemoryRecord {
                metadata: metadata.clone(),
                expiration_date: request.expiration_date,
                role: Some(message.role.clone()),
                actor_id: message.name.clone(),
                entities,
                provenance: request.source.provenance(
                    caller,
                    if message.role == "assistant" { SourceType::AssistantStated } else { SourceType::UserStated },
                    message.name.as_deref(),
                    None,
                    None,
                ),
                state: request.state(None, None),
                ..MemoryRecord::new(caller.tenant.clone(), request.scope.clone(), text, embedding, created_at)
            })
            .collect();
        let records = seeded(records, request.ids_from);
        let links = entity_links(&records, &name_vectors, "proper");
        self.write_new(caller, &records, &links, WriteWith::default(), now).await?;
        Ok(AddOutcome { results: added(records), warnings, usage: None })
    }

    /// `infer=true`: one LLM call turns the new messages (with the session's earlier messages and
    /// the nearest existing memories as context) into facts; new facts are stored, the messages
    /// buffered, all or nothing.
    async fn add_inferred(&self, caller: &Caller, request: AddRequest, metadata: Metadata) -> Result<AddOutcome> {
        let llm = self.llm.clone().ok_or(Error::LlmNotConfigured)?;
        let now = stored_now();
        let observed_at = request.timestamp.map(|at| at.trunc_subsecs(6)).unwrap_or(now);
        // The policy screens what the model is sent and what is buffered, as well as the facts.
        let mut warnings = Vec::new();
        let mut said = Vec::with_capacity(request.messages.len());
        for (index, message) in request.messages.iter().enumerate() {
            let (content, redacted) =
                self.screen(caller, &format!("messages[{index}].content"), message.content.trim())?;
            note_redactions(&mut warnings, &redacted);
            said.push(Message { content, ..message.clone() });
        }
        let new_messages: Vec<PromptMessage> = said
            .iter()
            .filter(|message| !message.content.is_empty())
            .map(|message| PromptMessage {
                role: message.role.clone(),
                name: message.name.clone(),
                content: message.content.clone(),
            })
            .collect();
        if new_messages.is_empty() {
            return Ok(AddOutcome::default());
        }
        let session = extraction::session_scope(&request.scope);
        let (earlier, existing) = self.extraction_context(caller, &request.scope, &session, &new_messages).await?;
        // A memory that is a value of a state key shows the key, so the model reuses it for a newer
        // value of the same thing.
        let existing_texts: Vec<String> = existing
            .iter()
            .map(|record| match &record.state.state_key {
                Some(key) => format!("{{{key}}} {}", record.memory),
                None => record.memory.clone(),
            })
            .collect();
        let custom = request.prompt.as_deref().or(self.extraction.custom_instructions.as_deref());
        let user_prompt = extraction::user_prompt(&ExtractionInput {
            earlier: &earlier,
            existing: &existing_texts,
            new_messages: &new_messages,
            observation_date: observed_at.date_naive(),
            custom_instructions: custom,
        });
        let llm_request = LlmRequest {
            messages: vec![
                ChatMessage::system(extraction::system_prompt(&request.scope)),
                ChatMessage::user(user_prompt),
            ],
            json: true,
        };
        let response = self.complete_counted(caller, llm.as_ref(), &llm_request, "extraction").await?;
        let facts = match extraction::parse_facts(&response.text) {
            Ok(facts) => facts,
            Err(reason) => {
                let preview: String = response.text.chars().take(200).collect();
                warn!(%reason, reply_chars = response.text.chars().count(), %preview, "unreadable extraction reply; nothing stored");
                warnings.push(format!(
                    "the model's reply could not be read as facts ({reason}); nothing was stored, retry the call"
                ));
                return Ok(AddOutcome { results: Vec::new(), warnings, usage: Some(response.usage) });
            }
        };
        let mut kept = self.new_facts(caller, &request.scope, &existing, facts, &mut warnings).await?;
        if kept.len() > MAX_MEMORIES_PER_ADD {
            warnings.push(format!(
                "the model extracted {} facts; the first {MAX_MEMORIES_PER_ADD} were stored",
                kept.len()
            ));
            kept.truncate(MAX_MEMORIES_PER_ADD);
        }
        let buffered = BufferedMessages {
            id: Uuid::now_v7(),
            tenant: caller.tenant.clone(),
            session,
            at: observed_at,
            // Only the newest BUFFER_KEEP of a call: the buffer keeps no more of a session anyway.
            messages: {
                let said: Vec<Message> = said
                    .into_iter()
                    .filter(|message| message.role != "system" && !message.content.is_empty())
                    .collect();
                let skip = said.len().saturating_sub(crate::history::BUFFER_KEEP);
                said.into_iter().skip(skip).collect()
            },
        };
        let names: Vec<Vec<String>> = kept.iter().map(|fact| entities::clean(fact.entities.clone())).collect();
        let evidence = format!("messages:{}", buffered.id);
        let (keys, replaced, rekeyed) = chain_keys(request.state_key.as_deref(), &kept, &existing);
        let embedded: Vec<String> = kept
            .iter()
            .zip(&keys)
            .map(|(fact, key)| crate::state::embedding_text(key.as_deref(), &fact.text))
            .collect();
        let (embeddings, name_vectors) = self.embed_with_entities(&embedded, &names).await?;
        let records: Vec<MemoryRecord> = kept
            .into_iter()
            .zip(embeddings)
            .zip(names)
            .zip(keys.into_iter().zip(replaced))
            .map(|(((fact, embedding), entities), (key, replaced))| MemoryRecord {
                metadata: metadata.clone(),
                expiration_date: request.expiration_date,
                attributed_to: fact.attributed_to.clone(),
                linked_memory_ids: {
                    let mut linked = linked_ids(&fact.linked_ids, &existing);
                    linked.extend(replaced.into_iter().filter(|id| !linked.contains(id)).collect::<Vec<_>>());
                    linked
                },
                entities,
                provenance: request.source.provenance(
                    caller,
                    SourceType::AgentInferred,
                    None,
                    Some(&evidence),
                    fact.confidence,
                ),
                state: request.state(
                    key.as_deref(),
                    fact.event_date.and_then(|date| date.and_hms_opt(0, 0, 0)).map(|time| time.and_utc()),
                ),
                ..MemoryRecord::new(caller.tenant.clone(), request.scope.clone(), fact.text, embedding, observed_at)
            })
            .collect();
        let records = seeded(records, request.ids_from);
        let links = entity_links(&records, &name_vectors, "llm");
        // The same facts added at once (a retry, two replicas) store one memory: the hashes are
        // checked again inside the write transaction.
        let unique_in = self.scoped_query(caller, request.scope.clone(), None, false);
        let with = WriteWith { buffered: Some(buffered), unique_in: Some(unique_in), rekeyed };
        let skipped = self.write_new(caller, &records, &links, with, now).await?;
        let mut records = records;
        records.retain(|record| !skipped.contains(&record.id));
        Ok(AddOutcome { results: added(records), warnings, usage: Some(response.usage) })
    }

    /// What the model sees besides the new messages: the session's earlier buffered messages, and
    /// the nearest live memories of exactly this scope (also what dedup and links refer to).
    async fn extraction_context(
        &self,
        caller: &Caller,
        scope: &Scope,
        session: &str,
        new_messages: &[PromptMessage],
    ) -> Result<(Vec<PromptMessage>, Vec<MemoryRecord>)> {
        let earlier: Vec<PromptMessage> = self
            .history
            .recent_messages(&caller.tenant, session, self.extraction.context_messages)
            .await?
            .into_iter()
            .map(|message| PromptMessage { role: message.role, name: message.name, content: message.content })
            .collect();
        if self.extraction.existing_memories == 0 {
            return Ok((earlier, Vec::new()));
        }
        let query_vector = self.embedder.embed(&extraction::flatten(new_messages)).await?;
        let scope_query = self.scoped_query(caller, scope.clone(), None, false);
        let existing = self
            .store
            .search(&scope_query, &query_vector, self.extraction.existing_memories, 0.0)
            .await?
            .into_iter()
            .map(|scored| std::sync::Arc::unwrap_or_clone(scored.record))
            .collect();
        Ok((earlier, existing))
    }

    /// The facts worth storing: not too long, not repeated in the batch, not already a memory of
    /// the scope (among the nearest ones or anywhere, by hash).
    async fn new_facts(
        &self,
        caller: &Caller,
        scope: &Scope,
        existing: &[MemoryRecord],
        facts: Vec<ExtractedFact>,
        warnings: &mut Vec<String>,
    ) -> Result<Vec<ExtractedFact>> {
        let mut seen: HashSet<String> = existing.iter().map(|record| record.hash.clone()).collect();
        let mut kept = Vec::new();
        for mut fact in facts {
            if fact.text.len() > MAX_TEXT_BYTES {
                warnings.push(format!("a fact longer than {MAX_TEXT_BYTES} bytes was dropped"));
                continue;
            }
            // What the model wrote is checked too; a fact a rule rejects is left out.
            match self.screen(caller, "facts", &fact.text) {
                Ok((text, redacted)) => {
                    note_redactions(warnings, &redacted);
                    fact.text = text;
                }
                Err(Error::PolicyRejected { rule, .. }) => {
                    warnings.push(format!("a fact matching the write policy rule `{rule}` was not stored"));
                    continue;
                }
                Err(error) => return Err(error),
            }
            if seen.insert(memory_hash(&fact.text)) {
                kept.push(fact);
            }
        }
        if !kept.is_empty() {
            let known = self.existing_hashes(caller, scope, kept.iter().map(|fact| memory_hash(&fact.text))).await?;
            kept.retain(|fact| !known.contains(&memory_hash(&fact.text)));
        }
        Ok(kept)
    }

    /// `memory_type = procedural_memory`: one LLM call summarises the agent's run into one memory.
    async fn add_procedural(&self, caller: &Caller, request: AddRequest, metadata: Metadata) -> Result<AddOutcome> {
        let llm = self.llm.clone().ok_or(Error::LlmNotConfigured)?;
        let now = stored_now();
        let observed_at = request.timestamp.map(|at| at.trunc_subsecs(6)).unwrap_or(now);
        let mut warnings = Vec::new();
        let mut transcript = Vec::new();
        for (index, message) in request.messages.iter().enumerate() {
            let (content, redacted) =
                self.screen(caller, &format!("messages[{index}].content"), message.content.trim())?;
            note_redactions(&mut warnings, &redacted);
            if !content.is_empty() {
                transcript.push(format!("{}: {content}", message.role));
            }
        }
        if transcript.is_empty() {
            return Ok(AddOutcome::default());
        }
        let system = request.prompt.clone().unwrap_or_else(|| extraction::PROCEDURAL_PROMPT.to_owned());
        let llm_request = LlmRequest {
            messages: vec![
                ChatMessage::system(system),
                ChatMessage::user(format!(
                    "## Conversation\n{}\n\nWrite the procedural memory of this conversation.",
                    transcript.join("\n")
                )),
            ],
            json: false,
        };
        let response = self.complete_counted(caller, llm.as_ref(), &llm_request, "procedural_memory").await?;
        let summary = extraction::clean_summary(&response.text);
        if summary.is_empty() {
            return Err(ProviderError::new(
                ProviderErrorKind::BadResponse,
                llm.provider(),
                "the model returned an empty summary",
            )
            .into());
        }
        let (summary, redacted) = self.screen(caller, "summary", &truncate_to_bytes(summary, MAX_TEXT_BYTES))?;
        note_redactions(&mut warnings, &redacted);
        let embedding = self.embedder.embed(&summary).await?;
        let record = MemoryRecord {
            metadata,
            expiration_date: request.expiration_date,
            memory_type: Some("procedural_memory".to_owned()),
            provenance: request.source.provenance(caller, SourceType::AgentInferred, None, None, None),
            state: request.state(None, None),
            ..MemoryRecord::new(caller.tenant.clone(), request.scope.clone(), summary, embedding, observed_at)
        };
        let records = seeded(vec![record], request.ids_from);
        self.write_new(caller, &records, &[], WriteWith::default(), now).await?;
        Ok(AddOutcome { results: added(records), warnings, usage: Some(response.usage) })
    }

    /// The memories an add with [`AddRequest::ids_from`] `seed` stored, in the order it created
    /// them (none when it stored nothing or never ran).
    ///
    /// # Errors
    /// Store errors.
    pub async fn added_by(&self, caller: &Caller, seed: Uuid) -> Result<Vec<AddedMemory>> {
        let ids: Vec<Uuid> = (0..MAX_MEMORIES_PER_ADD).map(|index| derived_memory_id(seed, index)).collect();
        let mut found = self.store.get_many(&caller.tenant, &ids).await?;
        found.sort_by_key(|record| ids.iter().position(|id| *id == record.id));
        Ok(added(found))
    }

    /// Hashes among `hashes` that memories of exactly `scope` already have.
    async fn existing_hashes(
        &self,
        caller: &Caller,
        scope: &Scope,
        hashes: impl Iterator<Item = String>,
    ) -> Result<HashSet<String>> {
        let values: Vec<Scalar> = hashes.map(Scalar::Text).collect();
        let filter = Filter::Condition(Condition {
            field: Field::Text(TextField::Hash),
            op: Operator::In,
            value: Operand::Many(values),
        });
        let query = self.scoped_query(caller, scope.clone(), Some(filter), false);
        // A full page: the scope may hold one hash many times (verbatim adds), hiding others.
        let page = self.store.list(&query, None, MAX_PAGE_SIZE).await?;
        Ok(page.records.into_iter().map(|record| record.hash).collect())
    }

    /// Runs one LLM call for `caller`, logs its token usage and reports it for token accounting
    /// (`purpose`: what the call was for).
    async fn complete_counted(
        &self,
        caller: &Caller,
        llm: &dyn Llm,
        request: &LlmRequest,
        purpose: &'static str,
    ) -> Result<LlmResponse> {
        let span = tracing::info_span!("llm", otel.name = %format!("llm {purpose}"), purpose, model = llm.model());
        let response = llm.complete(request).instrument(span).await?;
        info!(
            purpose,
            provider = llm.provider(),
            model = llm.model(),
            prompt_tokens = response.usage.prompt_tokens,
            completion_tokens = response.usage.completion_tokens,
            "llm call"
        );
        self.note_llm_call(&caller.tenant, llm.provider(), llm.model(), purpose, response.usage);
        Ok(response)
    }

    /// Embeds texts and the distinct entity names in one batch call; returns the texts' vectors
    /// in order and the names' vectors by name.
    pub(super) async fn embed_with_entities(
        &self,
        texts: &[String],
        names: &[Vec<String>],
    ) -> Result<(Vec<Vec<f32>>, HashMap<String, Vec<f32>>)> {
        let mut distinct: Vec<String> = Vec::new();
        let mut seen = HashSet::new();
        for name in names.iter().flatten() {
            if seen.insert(name.clone()) {
                distinct.push(name.clone());
            }
        }
        let mut batch: Vec<String> = texts.to_vec();
        batch.extend(distinct.iter().cloned());
        if batch.is_empty() {
            return Ok((Vec::new(), HashMap::new()));
        }
        let mut vectors = self.embedder.embed_batch(&batch).await?;
        if vectors.len() != batch.len() {
            return Err(Error::Internal("embedder returned a wrong number of vectors".into()));
        }
        let name_vectors = vectors.split_off(texts.len());
        Ok((vectors, distinct.into_iter().zip(name_vectors).collect()))
    }
}

/// The entity links of new records, one per (record, entity) with a usable name.
pub(super) fn entity_links(
    records: &[MemoryRecord],
    vectors: &HashMap<String, Vec<f32>>,
    kind: &str,
) -> Vec<EntityLink> {
    records
        .iter()
        .flat_map(|record| {
            record.entities.iter().filter_map(move |name| {
                let normalized = entities::normalize(name);
                let embedding = vectors.get(name)?;
                (!normalized.is_empty()).then(|| EntityLink {
                    memory_id: record.id,
                    tenant: record.tenant.clone(),
                    scope: record.scope.clone(),
                    name: name.clone(),
                    normalized,
                    kind: kind.to_owned(),
                    embedding: embedding.clone(),
                })
            })
        })
        .collect()
}

/// The existing memories a fact's short ids (`"1"`, `"2"`, … as shown to the model) refer to;
/// ids the model made up are ignored.
fn linked_ids(short_ids: &[String], existing: &[MemoryRecord]) -> Vec<Uuid> {
    let mut linked = Vec::new();
    let mut invented = 0usize;
    for short_id in short_ids {
        let index = short_id.trim_matches(|c: char| !c.is_ascii_digit()).parse::<usize>().ok();
        match index.and_then(|index| index.checked_sub(1)).and_then(|index| existing.get(index)) {
            Some(record) if !linked.contains(&record.id) => linked.push(record.id),
            Some(_) => {}
            None => invented += 1,
        }
    }
    if invented > 0 {
        debug!(invented, "ignored linked memory ids the model made up");
    }
    linked
}

/// The state key of each new fact, the existing memories it replaces, and the replaced memories
/// that join its chain. A fact that changes or corrects existing memories (the model's
/// `replaces`) is a newer value of the same thing: it takes the request's key, else the key of a
/// memory it replaces, else its own proposal, else `chain.<id>` of the first memory it replaces;
/// a replaced memory without a key is given the fact's (returned for the write), so the resolver
/// supersedes it like any older value.
fn chain_keys(
    requested: Option<&str>,
    facts: &[ExtractedFact],
    existing: &[MemoryRecord],
) -> (Vec<Option<String>>, Vec<Vec<Uuid>>, Vec<MemoryRecord>) {
    let mut keys = Vec::with_capacity(facts.len());
    let mut replaced_ids = Vec::with_capacity(facts.len());
    let mut rekeyed: Vec<MemoryRecord> = Vec::new();
    for fact in facts {
        let replaced: Vec<&MemoryRecord> = linked_ids(&fact.replaces, existing)
            .into_iter()
            .filter_map(|id| existing.iter().find(|record| record.id == id))
            .collect();
        let key = requested
            .map(str::to_owned)
            .or_else(|| replaced.iter().find_map(|record| record.state.state_key.clone()))
            .or_else(|| fact.state_key.clone())
            .or_else(|| replaced.first().map(|record| crate::state::chain_key(record.id)));
        if let Some(key) = &key {
            for record in &replaced {
                let unkeyed = record.state.state_key.is_none();
                if unkeyed && !rekeyed.iter().any(|joined| joined.id == record.id) {
                    let mut joined = (*record).clone();
                    joined.state.state_key = Some(key.clone());
                    rekeyed.push(joined);
                }
            }
        }
        keys.push(key);
        replaced_ids.push(replaced.iter().map(|record| record.id).collect());
    }
    (keys, replaced_ids, rekeyed)
}

/// The `ADD` events of new records, as the API reports them.
pub(super) fn added(records: Vec<MemoryRecord>) -> Vec<AddedMemory> {
    records
        .into_iter()
        .map(|record| AddedMemory {
            id: record.id,
            memory: record.memory,
            event: HistoryEvent::Add,
            actor_id: record.actor_id,
            role: record.role,
        })
        .collect()
}

/// Says in the call's warnings what the write policy redacted (kinds, never the text).
fn note_redactions(warnings: &mut Vec<String>, redacted: &[String]) {
    if !redacted.is_empty() {
        warnings.push(format!("the write policy redacted: {}", redacted.join(", ")));
    }
}

/// `records` with the ids an add with `ids_from` gives its memories (see
/// [`AddRequest::ids_from`]).
fn seeded(mut records: Vec<MemoryRecord>, ids_from: Option<Uuid>) -> Vec<MemoryRecord> {
    if let Some(seed) = ids_from {
        for (index, record) in records.iter_mut().enumerate() {
            record.id = derived_memory_id(seed, index);
        }
    }
    records
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fact(text: &str, key: Option<&str>, replaces: &[&str]) -> ExtractedFact {
        ExtractedFact {
            text: text.to_owned(),
            attributed_to: None,
            linked_ids: Vec::new(),
            replaces: replaces.iter().map(|id| (*id).to_owned()).collect(),
            entities: Vec::new(),
            confidence: None,
            state_key: key.map(str::to_owned),
            event_date: None,
        }
    }

    fn existing(text: &str, key: Option<&str>) -> MemoryRecord {
        let scope = Scope::new(Some("ann"), None, None).expect("scope");
        let mut record = MemoryRecord::new("t".to_owned(), scope, text.to_owned(), vec![1.0], chrono::Utc::now());
        record.state.state_key = key.map(str::to_owned);
        record
    }

    #[test]
    fn replacing_facts_take_the_key_of_what_they_replace() {
        let known = [existing("User lives in Paris", Some("user.home_city")), existing("User likes Low", None)];
        let facts = [
            // The replaced memory's key wins over the model's new proposal.
            fact("User lives in Rome", Some("user.city"), &["1"]),
            // A replaced memory without a key joins a chain named after it.
            fact("User likes Wilco", None, &["2", "9"]),
            fact("User has a cat", None, &[]),
            fact("User moved to Oslo", Some("user.home_city"), &[]),
        ];
        let (keys, replaced, rekeyed) = chain_keys(None, &facts, &known);
        let chain = crate::state::chain_key(known[1].id);
        assert_eq!(
            keys,
            [Some("user.home_city".to_owned()), Some(chain.clone()), None, Some("user.home_city".to_owned())]
        );
        assert_eq!(replaced, [vec![known[0].id], vec![known[1].id], vec![], vec![]], "made-up ids are ignored");
        assert_eq!(rekeyed.len(), 1);
        assert_eq!((rekeyed[0].id, rekeyed[0].state.state_key.as_deref()), (known[1].id, Some(chain.as_str())));
        assert_eq!(crate::state::embedding_text(Some(&chain), "User likes Wilco"), "User likes Wilco");
        // The request's key is the caller's word.
        let (keys, _, rekeyed) = chain_keys(Some("user.music"), &facts[1..2], &known);
        assert_eq!(
            (keys[0].as_deref(), rekeyed[0].state.state_key.as_deref()),
            (Some("user.music"), Some("user.music"))
        );
    }
}
