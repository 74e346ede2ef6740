//! Export and import: the memories of a scope (or of a whole tenant) as JSON lines, with
//! everything needed to bring them back unchanged: ids, texts, metadata, provenance, state,
//! timestamps, history and (optionally) embeddings.
//!
//! A file is a header line, one line per memory and an end line that counts the memories; a
//! file without its end line was cut short. Import is idempotent by id: a memory whose id is
//! already stored is left as it is (with its history), so an interrupted import is finished by
//! running it again. Embeddings are reused only when the file says they were made by the model
//! in use (same id and dimension); otherwise every text is embedded again. Imported memories
//! keep their ids, timestamps, statuses and history; the chains of their state keys are resolved
//! again in the target (which, for a whole chain, gives the statuses it had).

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};
use tracing::instrument;
use uuid::Uuid;

use super::add::entity_links;
use super::limits::{check_bound, sanitize_metadata, MAX_NAME_BYTES, MAX_TEXT_BYTES};
use super::Memory;
use crate::entities;
use crate::error::{Error, Result};
use crate::history::AuditAction;
use crate::scope::{Caller, Role, Scope};
use crate::store::{Cursor, WriteSet};
use crate::types::{
    memory_hash, HistoryRecord, MemoryRecord, MemoryStatus, Metadata, Provenance, SourceType, StateInfo,
};

/// The `format` of an export's header.
pub const EXPORT_FORMAT: &str = "mem0-rs.export";
/// The version of the format this build writes and the newest it reads.
pub const EXPORT_VERSION: u32 = 1;
/// Most history entries one exported memory may carry on import.
pub const MAX_IMPORTED_HISTORY: usize = 10_000;

/// One line of an export file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ExportLine {
    /// The first line: what the file is and how its embeddings were made.
    Header(ExportHeader),
    /// One memory.
    Memory(Box<ExportedMemory>),
    /// The last line: how many memory lines came before it.
    End(ExportEnd),
}

/// The first line of an export.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportHeader {
    /// Always [`EXPORT_FORMAT`].
    pub format: String,
    /// [`EXPORT_VERSION`] of the writer.
    pub version: u32,
    /// When the export began.
    pub exported_at: DateTime<Utc>,
    /// The embedder that made the embeddings in the file.
    pub embedding_model: String,
    /// Their dimension.
    pub dimension: usize,
    /// Whether memory lines carry `embedding`.
    pub embeddings: bool,
    /// The scope exported (all absent: the whole tenant).
    #[serde(default)]
    pub user_id: Option<String>,
    /// See `user_id`.
    #[serde(default)]
    pub agent_id: Option<String>,
    /// See `user_id`.
    #[serde(default)]
    pub run_id: Option<String>,
}

/// The last line of an export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportEnd {
    /// How many memory lines the file holds.
    pub count: u64,
}

/// One memory as exported: every stored field but the derived ones (keyword analysis), with its
/// history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportedMemory {
    /// Its id (kept on import).
    pub id: Uuid,
    /// Owning user.
    pub user_id: Option<String>,
    /// Owning agent.
    pub agent_id: Option<String>,
    /// Owning run.
    pub run_id: Option<String>,
    /// The text.
    pub memory: String,
    /// md5 hex digest of `memory` (checked on import).
    pub hash: String,
    /// Caller metadata.
    #[serde(default)]
    pub metadata: Metadata,
    /// Creation (or observation) time.
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
    /// Last visible day.
    #[serde(default)]
    pub expiration_date: Option<NaiveDate>,
    /// `user` or `assistant`.
    #[serde(default)]
    pub attributed_to: Option<String>,
    /// Role of the source message.
    #[serde(default)]
    pub role: Option<String>,
    /// Name of the actor that said it.
    #[serde(default)]
    pub actor_id: Option<String>,
    /// `procedural_memory` for procedural summaries.
    #[serde(default)]
    pub memory_type: Option<String>,
    /// Memories the extraction linked it to.
    #[serde(default)]
    pub linked_memory_ids: Vec<Uuid>,
    /// Named things it mentions.
    #[serde(default)]
    pub entities: Vec<String>,
    /// Provenance: what kind of source said it.
    pub source_type: SourceType,
    /// Who said it.
    #[serde(default)]
    pub source_actor: Option<String>,
    /// The credential that stored it.
    #[serde(default)]
    pub source_app: Option<String>,
    /// The evidence.
    #[serde(default)]
    pub evidence_ref: Option<String>,
    /// 0 to 1.
    pub confidence: f32,
    /// Its state key.
    #[serde(default)]
    pub state_key: Option<String>,
    /// Its status among the values of its key.
    #[serde(default)]
    pub status: MemoryStatus,
    /// The memory that replaced it.
    #[serde(default)]
    pub superseded_by: Option<Uuid>,
    /// When it stopped being true.
    #[serde(default)]
    pub valid_to: Option<DateTime<Utc>>,
    /// When what it says happened.
    #[serde(default)]
    pub event_time: Option<DateTime<Utc>>,
    /// Its changes, oldest first.
    #[serde(default)]
    pub history: Vec<HistoryRecord>,
    /// Its embedding (when the export asked for embeddings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embedding: Option<Vec<f32>>,
}

impl ExportedMemory {
    fn of(record: MemoryRecord, history: Vec<HistoryRecord>, with_embedding: bool) -> Self {
        let MemoryRecord {
            id,
            scope,
            memory,
            hash,
            metadata,
            created_at,
            updated_at,
            expiration_date,
            attributed_to,
            role,
            actor_id,
            memory_type,
            linked_memory_ids,
            entities,
            embedding,
            provenance,
            state,
            ..
        } = record;
        Self {
            id,
            user_id: scope.user_id,
            agent_id: scope.agent_id,
            run_id: scope.run_id,
            memory,
            hash,
            metadata,
            created_at,
            updated_at,
            expiration_date,
            attributed_to,
            role,
            actor_id,
            memory_type,
            linked_memory_ids,
            entities,
            source_type: provenance.source_type,
            source_actor: provenance.source_actor,
            source_app: provenance.source_app,
            evidence_ref: provenance.evidence_ref,
            confidence: provenance.confidence,
            state_key: state.state_key,
            status: state.status,
            superseded_by: state.superseded_by,
            valid_to: state.valid_to,
            event_time: state.event_time,
            history,
            embedding: with_embedding.then(|| embedding.to_vec()),
        }
    }

    fn scope(&self) -> Result<Scope> {
        let scope = Scope::optional(self.user_id.as_deref(), self.agent_id.as_deref(), self.run_id.as_deref())?;
        if scope.is_empty() {
            return Err(Error::validation("user_id", "a memory needs a user_id, agent_id or run_id"));
        }
        Ok(scope)
    }

    /// Checks what a stored memory must satisfy; returns its scope and cleaned metadata.
    fn check(&self) -> Result<(Scope, Metadata)> {
        let scope = self.scope()?;
        crate::text::reject_nul("memory", &self.memory)?;
        if self.memory.trim().is_empty() || self.memory.len() > MAX_TEXT_BYTES {
            return Err(Error::validation("memory", format!("must be 1 to {MAX_TEXT_BYTES} bytes")));
        }
        if self.hash != memory_hash(&self.memory) {
            return Err(Error::validation("hash", "is not the md5 digest of `memory`: the line was changed"));
        }
        if !(0.0..=1.0).contains(&self.confidence) {
            return Err(Error::validation("confidence", "must be between 0 and 1"));
        }
        let names = [
            ("attributed_to", &self.attributed_to),
            ("role", &self.role),
            ("actor_id", &self.actor_id),
            ("memory_type", &self.memory_type),
            ("source_actor", &self.source_actor),
            ("source_app", &self.source_app),
            ("evidence_ref", &self.evidence_ref),
        ];
        for (field, value) in names {
            if let Some(value) = value {
                crate::text::reject_nul(field, value)?;
                if value.len() > MAX_NAME_BYTES {
                    return Err(Error::validation(field, format!("at most {MAX_NAME_BYTES} bytes")));
                }
            }
        }
        for name in &self.entities {
            crate::text::reject_nul("entities", name)?;
            if name.len() > MAX_NAME_BYTES {
                return Err(Error::validation("entities", format!("names are at most {MAX_NAME_BYTES} bytes")));
            }
        }
        if let Some(key) = &self.state_key {
            crate::state::check_key(key).map_err(|message| Error::validation("state_key", message))?;
        }
        if self.history.len() > MAX_IMPORTED_HISTORY {
            return Err(Error::validation("history", format!("at most {MAX_IMPORTED_HISTORY} entries")));
        }
        for entry in &self.history {
            if entry.memory_id != self.id {
                return Err(Error::validation("history", "an entry is about another memory"));
            }
            for text in [&entry.old_memory, &entry.new_memory].into_iter().flatten() {
                crate::text::reject_nul("history", text)?;
                if text.len() > MAX_TEXT_BYTES {
                    return Err(Error::validation("history", format!("texts are at most {MAX_TEXT_BYTES} bytes")));
                }
            }
        }
        let metadata = sanitize_metadata(self.metadata.clone())?;
        Ok((scope, metadata))
    }
}

/// What one import batch did.
#[derive(Debug, Default)]
pub struct ImportOutcome {
    /// Memories stored.
    pub imported: Vec<Uuid>,
    /// Memories left alone because the tenant already has them.
    pub existing: Vec<Uuid>,
    /// Lines refused, by line number (their memories were not stored).
    pub failed: Vec<(usize, Option<Uuid>, Error)>,
}

/// One page of an export.
#[derive(Debug)]
pub struct ExportPage {
    /// The memories of the page.
    pub memories: Vec<ExportedMemory>,
    /// Where the next page starts; `None` after the last.
    pub next: Option<String>,
}

impl Memory {
    /// The header of an export of `scope` (empty: the whole tenant).
    pub fn export_header(&self, scope: &Scope, embeddings: bool) -> ExportHeader {
        ExportHeader {
            format: EXPORT_FORMAT.to_owned(),
            version: EXPORT_VERSION,
            exported_at: Utc::now(),
            embedding_model: self.embedder.model_id().to_owned(),
            dimension: self.embedder.dimension(),
            embeddings,
            user_id: scope.user_id.clone(),
            agent_id: scope.agent_id.clone(),
            run_id: scope.run_id.clone(),
        }
    }

    /// One page of the export of `scope`: every memory (expired and superseded ones too),
    /// newest first, with its history. An empty scope exports the whole tenant (admins only).
    ///
    /// # Errors
    /// Validation (cursor, page size), scope errors, store errors.
    #[instrument(skip_all, fields(tenant = %caller.tenant, page_size))]
    pub async fn export_page(
        &self,
        caller: &Caller,
        scope: &Scope,
        cursor: Option<&str>,
        page_size: usize,
        embeddings: bool,
    ) -> Result<ExportPage> {
        caller.require(Role::Read)?;
        if scope.is_empty() {
            caller
                .require(Role::Admin)
                .map_err(|_| Error::Forbidden("exporting a whole tenant needs the admin role".into()))?;
        }
        caller.check_scope(scope)?;
        check_bound("page_size", page_size)?;
        let after = cursor.map(Cursor::decode).transpose()?;
        let mut query = self.scoped_query(caller, scope.clone(), None, true);
        query.include_superseded = true;
        let page = self.store.list(&query, after, page_size).await?;
        let ids: Vec<Uuid> = page.records.iter().map(|record| record.id).collect();
        let mut history = self.history.for_memories(&caller.tenant, &ids).await?;
        self.audit(caller, AuditAction::Export, ids.iter().copied());
        let memories = page
            .records
            .into_iter()
            .map(|record| {
                let entries = history.remove(&record.id).unwrap_or_default();
                ExportedMemory::of(record, entries, embeddings)
            })
            .collect();
        Ok(ExportPage { memories, next: page.next.map(|cursor| cursor.encode()) })
    }

    /// Checks an import's header: the import needs the admin role, and a file of this format and
    /// version. Returns whether its embeddings can be used as they are (same model and dimension).
    ///
    /// # Errors
    /// [`Error::Forbidden`], validation of the header.
    pub fn check_import(&self, caller: &Caller, header: &ExportHeader) -> Result<bool> {
        caller
            .require(Role::Admin)
            .map_err(|_| Error::Forbidden("importing memories (with their history) needs the admin role".into()))?;
        if header.format != EXPORT_FORMAT {
            return Err(Error::validation("format", format!("expected `{EXPORT_FORMAT}`")));
        }
        if header.version == 0 || header.version > EXPORT_VERSION {
            return Err(Error::validation(
                "version",
                format!("this server reads versions 1 to {EXPORT_VERSION} of the format"),
            ));
        }
        Ok(header.embeddings
            && header.embedding_model == self.embedder.model_id()
            && header.dimension == self.embedder.dimension())
    }

    /// Imports one batch of memory lines (`(line number, memory)`) into the caller's tenant, all
    /// or nothing for the lines it accepts: a line that fails its checks (scope outside the
    /// caller's reach, bad text, hash, metadata, a text the write policy would change or refuse)
    /// is reported and left out; a memory the tenant already has is left as it is. With
    /// `reuse_embeddings` (see [`Memory::check_import`]) a line's own embedding is stored;
    /// otherwise (or when a line has none) its text is embedded again. Imports publish no
    /// webhook events; each imported memory is audited as `import`.
    ///
    /// # Errors
    /// Embedder and store errors (nothing of the batch is stored then).
    #[instrument(skip_all, fields(tenant = %caller.tenant, lines = lines.len()))]
    pub async fn import_batch(
        &self,
        caller: &Caller,
        reuse_embeddings: bool,
        lines: Vec<(usize, ExportedMemory)>,
    ) -> Result<ImportOutcome> {
        caller.require(Role::Admin)?;
        let mut outcome = ImportOutcome::default();
        let ids: Vec<Uuid> = lines.iter().map(|(_, memory)| memory.id).collect();
        let present: HashSet<Uuid> =
            self.store.get_many(&caller.tenant, &ids).await?.into_iter().map(|record| record.id).collect();
        let mut seen = HashSet::new();
        let mut accepted = Vec::new();
        for (line, memory) in lines {
            // Checked first: whether a memory exists is told only to who may see it.
            let (scope, metadata) = match self.accept(caller, &memory) {
                Ok(checked) => checked,
                Err(error) => {
                    outcome.failed.push((line, Some(memory.id), error));
                    continue;
                }
            };
            if present.contains(&memory.id) {
                outcome.existing.push(memory.id);
            } else if !seen.insert(memory.id) {
                let error = Error::validation("id", "the same id is on an earlier line of this batch");
                outcome.failed.push((line, Some(memory.id), error));
            } else {
                accepted.push((line, memory, scope, metadata));
            }
        }
        if accepted.is_empty() {
            return Ok(outcome);
        }
        let dimension = self.embedder.dimension();
        let usable = |memory: &ExportedMemory| {
            reuse_embeddings
                && memory
                    .embedding
                    .as_ref()
                    .is_some_and(|vector| vector.len() == dimension && vector.iter().all(|x| x.is_finite()))
        };
        let to_embed: Vec<String> = accepted
            .iter()
            .filter(|(_, memory, _, _)| !usable(memory))
            .map(|(_, memory, _, _)| crate::state::embedding_text(memory.state_key.as_deref(), &memory.memory))
            .collect();
        let names: Vec<Vec<String>> = accepted.iter().map(|(_, memory, _, _)| memory.entities.clone()).collect();
        let (mut fresh, name_vectors) = self.embed_with_entities(&to_embed, &names).await?;
        fresh.reverse();
        let mut records = Vec::with_capacity(accepted.len());
        let mut history = Vec::new();
        let mut lines_of = HashMap::new();
        for (line, memory, scope, metadata) in accepted {
            let embedding = if usable(&memory) {
                memory.embedding.clone().unwrap_or_default()
            } else {
                fresh.pop().ok_or_else(|| Error::Internal("embedder returned too few vectors".into()))?
            };
            lines_of.insert(memory.id, line);
            history.extend(memory.history.iter().cloned().map(|mut entry| {
                entry.tenant = caller.tenant.clone();
                entry.scope = scope.clone();
                entry
            }));
            records.push(record_of(caller, memory, scope, metadata, embedding));
        }
        let links = entity_links(&records, &name_vectors, "imported");
        let write = WriteSet {
            tenant: caller.tenant.clone(),
            insert: records,
            links,
            merge_threshold: self.retrieval().entity_merge_threshold,
            skip_existing_ids: true,
            ..WriteSet::default()
        };
        let inserted: Vec<Uuid> = write.insert.iter().map(|record| record.id).collect();
        // Imports restore what happened before: they are not news for webhooks.
        let quiet = Self { events: None, ..self.clone() };
        let applied = quiet.commit(write, history, None).await?;
        // Skipped in the transaction: stored meanwhile by a concurrent import of the same file
        // (then it is the tenant's), or another tenant's id.
        let mine: HashSet<Uuid> = if applied.skipped.is_empty() {
            HashSet::new()
        } else {
            self.store.get_many(&caller.tenant, &applied.skipped).await?.into_iter().map(|record| record.id).collect()
        };
        for id in inserted {
            if mine.contains(&id) {
                outcome.existing.push(id);
            } else if applied.skipped.contains(&id) {
                let line = lines_of.get(&id).copied().unwrap_or_default();
                outcome.failed.push((
                    line,
                    Some(id),
                    Error::Conflict(format!("memory {id} belongs to another tenant")),
                ));
            } else {
                outcome.imported.push(id);
            }
        }
        self.audit(caller, AuditAction::Import, outcome.imported.iter().copied());
        Ok(outcome)
    }

    /// The checks of one imported memory: within the caller's reach, well formed, and texts the
    /// write policy keeps as they are.
    fn accept(&self, caller: &Caller, memory: &ExportedMemory) -> Result<(Scope, Metadata)> {
        let (scope, metadata) = memory.check()?;
        caller.check_scope(&scope)?;
        let texts = std::iter::once(("memory", &memory.memory)).chain(
            memory
                .history
                .iter()
                .flat_map(|entry| [&entry.old_memory, &entry.new_memory])
                .flatten()
                .map(|t| ("history", t)),
        );
        for (field, text) in texts {
            let (kept, redacted) = self.screen(caller, field, text)?;
            if !redacted.is_empty() || kept != *text {
                return Err(Error::PolicyRejected {
                    field: field.to_owned(),
                    rule: format!(
                        "the write policy would redact {}; imports keep texts as they are",
                        redacted.join(", ")
                    ),
                });
            }
        }
        Ok((scope, metadata))
    }
}

fn record_of(
    caller: &Caller,
    memory: ExportedMemory,
    scope: Scope,
    metadata: Metadata,
    embedding: Vec<f32>,
) -> MemoryRecord {
    let entities: Vec<String> =
        memory.entities.into_iter().filter(|name| !entities::normalize(name).is_empty()).collect();
    MemoryRecord {
        id: memory.id,
        metadata,
        updated_at: memory.updated_at,
        expiration_date: memory.expiration_date,
        attributed_to: memory.attributed_to,
        role: memory.role,
        actor_id: memory.actor_id,
        memory_type: memory.memory_type,
        linked_memory_ids: memory.linked_memory_ids,
        entities,
        provenance: Provenance {
            source_type: memory.source_type,
            source_actor: memory.source_actor,
            source_app: memory.source_app,
            evidence_ref: memory.evidence_ref,
            confidence: memory.confidence,
        },
        state: StateInfo {
            state_key: memory.state_key,
            status: memory.status,
            superseded_by: memory.superseded_by,
            valid_to: memory.valid_to,
            event_time: memory.event_time,
        },
        ..MemoryRecord::new(caller.tenant.clone(), scope, memory.memory, embedding, memory.created_at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_tagged_and_refuse_unknown_fields() {
        let end = serde_json::to_string(&ExportLine::End(ExportEnd { count: 3 })).unwrap();
        assert_eq!(end, r#"{"type":"end","count":3}"#);
        let back: ExportLine = serde_json::from_str(&end).unwrap();
        assert_eq!(back, ExportLine::End(ExportEnd { count: 3 }));
        let typo = serde_json::from_str::<ExportLine>(r#"{"type":"end","count":3,"cuont":4}"#);
        assert!(typo.is_err(), "an unknown field is refused");
        let unknown = serde_json::from_str::<ExportLine>(r#"{"type":"trailer","count":3}"#);
        assert!(unknown.is_err(), "an unknown line type is refused");
    }

    #[test]
    fn a_changed_text_fails_the_hash_check() {
        let record = MemoryRecord::new(
            "t",
            Scope::new(Some("alice"), None, None).unwrap(),
            "Likes tea".into(),
            vec![0.0],
            Utc::now(),
        );
        let mut exported = ExportedMemory::of(record, Vec::new(), false);
        assert!(exported.check().is_ok());
        exported.memory = "Likes coffee".into();
        let error = exported.check().unwrap_err();
        assert!(matches!(error, Error::Validation { ref field, .. } if field == "hash"), "{error}");
    }
}
