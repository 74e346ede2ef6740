//! Changing memories, all or nothing: every write commits its rows, index entries, entity links
//! and its history in one store transaction (history on Postgres), or a journal of its history
//! that is then delivered to the history volume (see [`Memory::commit`]); updates and deletes;
//! recovery of what a crash left in the journal.

use std::collections::HashSet;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use tracing::{error, instrument, warn, Instrument as _};
use uuid::Uuid;

use super::add::entity_links;
use super::limits::{check_metadata_size, sanitize_metadata, stored_now, MAX_PAGE_SIZE, MAX_TEXT_BYTES};
use super::{Memory, UpdateRequest};
use crate::analysis;
use crate::entities;
use crate::error::{Error, Result};
use crate::history::{AuditAction, BufferedMessages, Pending};
use crate::scope::{Caller, Role, Scope};
use crate::state::StateKey;
use crate::store::{Applied, EntityLink, WriteSet};
use crate::text;
use crate::types::{memory_hash, HistoryEvent, HistoryRecord, MemoryItem, MemoryRecord, MemoryStatus};

/// A hook called with the name of each step of the write path (`write.before_commit`,
/// `write.after_commit`, `write.after_delivery`), so a test can stop the process exactly there.
pub type FailPoint = Arc<dyn Fn(&'static str) + Send + Sync>;

/// Marks journal entries as belonging to a write in progress, until dropped.
pub(super) struct Writing<'a> {
    set: &'a std::sync::Mutex<HashSet<Uuid>>,
    ids: Vec<Uuid>,
}

impl<'a> Writing<'a> {
    fn register(set: &'a std::sync::Mutex<HashSet<Uuid>>, ids: &[Uuid]) -> Self {
        set.lock().unwrap_or_else(std::sync::PoisonError::into_inner).extend(ids.iter().copied());
        Self { set, ids: ids.to_vec() }
    }
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        let mut set = self.set.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for id in &self.ids {
            set.remove(id);
        }
    }
}

/// What an add writes besides its new memories.
#[derive(Debug, Default)]
pub(super) struct WriteWith {
    /// The messages of an inferred add, for the session's buffer.
    pub buffered: Option<BufferedMessages>,
    /// Skip new memories whose hash this scope already has (checked in the transaction).
    pub unique_in: Option<crate::store::ScopedQuery>,
    /// Existing memories joining a new memory's chain (their state key set).
    pub rekeyed: Vec<MemoryRecord>,
}

impl Memory {
    /// Returns the service with `hook` called at each step of the write path (tests only).
    #[must_use]
    pub fn with_fail_point(mut self, hook: FailPoint) -> Self {
        self.fail_point = Some(hook);
        self
    }

    pub(super) fn fail_point(&self, step: &'static str) {
        if let Some(hook) = &self.fail_point {
            hook(step);
        }
    }

    /// Writes this process is committing right now (each runs to its end on its own task).
    pub fn writes_in_flight(&self) -> usize {
        self.writing.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }

    /// Delivers journal entries older than `min_age` to the history volume and removes them from
    /// the journal; returns how many were delivered. Entries of writes this process is still
    /// committing are left alone. Run it once when the service starts (before it serves): it
    /// completes the writes a crash interrupted. Run periodically it also completes writes whose
    /// undo failed. Only one process may use a store's journal this way (one server per store).
    ///
    /// # Errors
    /// Store errors; entries not delivered stay in the journal.
    pub async fn recover(&self, min_age: std::time::Duration) -> Result<usize> {
        const BATCH: usize = 500;
        let before = Utc::now() - chrono::Duration::from_std(min_age).unwrap_or_default();
        let mut delivered = 0;
        loop {
            let entries = self.store.journal(before, BATCH).await?;
            let in_flight = self.writing.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
            let mut records = Vec::new();
            let mut batches = Vec::new();
            let mut ids = Vec::new();
            for entry in entries.iter().filter(|entry| !in_flight.contains(&entry.id)) {
                match Pending::from_entry(entry) {
                    Ok(Pending::History { record, .. }) => records.push(*record),
                    Ok(Pending::Messages { batch }) => batches.push(batch),
                    Err(error) => {
                        // Kept (not deleted): a later version may read it; the rest goes on.
                        error!(entry = %entry.id, %error, "a journal entry cannot be read; skipped");
                        continue;
                    }
                }
                ids.push(entry.id);
            }
            if ids.is_empty() {
                return Ok(delivered);
            }
            self.history.deliver(&records, &batches).await?;
            self.store.settle(&ids).await?;
            delivered += ids.len();
            if entries.len() < BATCH {
                return Ok(delivered);
            }
        }
    }

    /// Writes new memories, their entity links, their ADD history and (optionally) buffered
    /// messages, all or nothing (see [`Memory::commit`]). With `unique_in`, memories whose hash
    /// one matching it already has are left out, checked inside the transaction (see
    /// [`WriteSet::unique_in`]); returns the ids left out.
    pub(super) async fn write_new(
        &self,
        caller: &Caller,
        records: &[MemoryRecord],
        links: &[EntityLink],
        with: WriteWith,
        now: DateTime<Utc>,
    ) -> Result<Vec<Uuid>> {
        let WriteWith { buffered, unique_in, rekeyed } = with;
        let history: Vec<HistoryRecord> =
            records.iter().map(|record| HistoryRecord::for_event(record, HistoryEvent::Add, None, now)).collect();
        let write = WriteSet {
            tenant: caller.tenant.clone(),
            insert: records.to_vec(),
            // Existing memories joining a chain (their state key only; no history entry, like
            // every status change): unchanged since they were read, or the write is refused.
            expect: rekeyed.iter().map(|record| (record.id, record.updated_at)).collect(),
            update: rekeyed,
            links: links.to_vec(),
            merge_threshold: self.retrieval().entity_merge_threshold,
            unique_in,
            ..WriteSet::default()
        };
        Ok(self.commit(write, history, buffered).await?.skipped)
    }

    /// Commits a change with its history. History on Postgres: the change, its history entries
    /// and buffered messages in one store transaction. History in the SQLite volume: the change
    /// and its journal entries (history entries, buffered messages) in one store transaction, then the entries to the history volume, then
    /// the journal entries are removed. If the history volume refuses them, the change is undone
    /// (and its journal entries with it) and the error returned: the caller sees nothing changed.
    /// A crash after the store transaction leaves the entries in the journal, delivered by
    /// [`Memory::recover`] at the next start, so a committed change always gets its history and
    /// history never describes a change that did not happen.
    pub(super) async fn commit(
        &self,
        mut write: WriteSet,
        history: Vec<HistoryRecord>,
        buffered: Option<BufferedMessages>,
    ) -> Result<Applied> {
        // The chains of every state key the change writes are resolved in its transaction.
        write.resolve.extend(write.insert.iter().chain(&write.update).filter_map(StateKey::of));
        // On its own task: a caller that goes away (a client that disconnects, a request
        // timeout) cannot cut the write between its store transaction and its history.
        let memory = self.clone();
        let task = tokio::spawn(
            async move {
                let entries = memory.events.is_some().then(|| history.clone());
                let applied = memory.commit_now(write, history, buffered).await?;
                if let Some(mut entries) = entries {
                    entries.retain(|entry| applied.describes(Some(entry.memory_id)));
                    memory.publish_changes(&entries);
                }
                Ok(applied)
            }
            .instrument(tracing::Span::current()),
        );
        task.await.map_err(|error| Error::Internal(format!("write task failed: {error}")))?
    }

    async fn commit_now(
        &self,
        mut write: WriteSet,
        history: Vec<HistoryRecord>,
        buffered: Option<BufferedMessages>,
    ) -> Result<Applied> {
        if self.history.in_store() {
            // History on Postgres: the store commits it in the change's own transaction.
            write.history = history;
            write.messages = buffered.into_iter().filter(|batch| !batch.messages.is_empty()).collect();
            self.fail_point("write.before_commit");
            let applied = self.store.apply(&write).await?;
            self.fail_point("write.after_commit");
            return Ok(applied);
        }
        let now = Utc::now();
        let mut pending: Vec<Pending> = history
            .into_iter()
            .map(|record| Pending::History {
                tenant: record.tenant.clone(),
                scope: record.scope.clone(),
                record: Box::new(record),
            })
            .collect();
        if let Some(batch) = buffered.filter(|batch| !batch.messages.is_empty()) {
            pending.push(Pending::Messages { batch });
        }
        write.journal = pending.iter().map(|item| item.to_entry(now)).collect::<Result<_>>()?;
        let journal: Vec<Uuid> = write.journal.iter().map(|entry| entry.id).collect();
        let _writing = Writing::register(&self.writing, &journal);
        self.fail_point("write.before_commit");
        let applied = self.store.apply(&write).await?;
        self.fail_point("write.after_commit");
        let mut records = Vec::new();
        let mut batches = Vec::new();
        for item in pending {
            match item {
                Pending::History { record, .. } if !applied.describes(Some(record.memory_id)) => {}
                Pending::History { record, .. } => records.push(*record),
                Pending::Messages { batch } => batches.push(batch),
            }
        }
        if let Err(error) = self.history.deliver(&records, &batches).await {
            let undo = write.inverse(&applied, journal);
            if let Err(undo_error) = self.store.apply(&undo).await {
                // The change stays with its journal entries; recovery delivers its history.
                warn!(%error, %undo_error, "history write failed and the change could not be undone; its history stays in the journal");
            }
            return Err(error);
        }
        self.fail_point("write.after_delivery");
        if let Err(error) = self.store.settle(&journal).await {
            // Delivered twice later is harmless: delivery ignores what is already there.
            warn!(%error, "could not clear delivered journal entries; recovery will");
        }
        Ok(applied)
    }

    /// Changes text, metadata (merged) and/or expiration of a memory.
    ///
    /// # Errors
    /// Validation, [`Error::MemoryNotFound`], embedder and store errors; on error nothing changes.
    #[instrument(skip_all, fields(tenant = %caller.tenant, memory_id = %id))]
    pub async fn update(&self, caller: &Caller, id: Uuid, request: UpdateRequest) -> Result<MemoryItem> {
        caller.require(Role::Write)?;
        if request.text.is_none()
            && request.metadata.is_none()
            && request.expiration_date.is_none()
            && request.source.is_empty()
            && request.state_key.is_none()
            && request.status.is_none()
            && request.event_time.is_none()
        {
            return Err(Error::validation(
                "text",
                "at least one of text, metadata, expiration_date, state_key, status, event_time, source_type, \
                 source_actor, evidence_ref or confidence must be provided",
            ));
        }
        request.source.validate()?;
        if let Some(Some(key)) = &request.state_key {
            crate::state::check_key(key).map_err(|message| Error::validation("state_key", message))?;
        }
        if matches!(request.status, Some(MemoryStatus::Superseded | MemoryStatus::Conflict)) {
            return Err(Error::validation(
                "status",
                "set pinned, retired or active; superseded and conflict follow from the memories of the state key",
            ));
        }
        let new_text = request.text.as_deref().map(str::trim).map(str::to_owned);
        if let Some(new_text) = &new_text {
            text::reject_nul("text", new_text)?;
        }
        if let Some(text) = &new_text {
            if text.is_empty() {
                return Err(Error::validation("text", "cannot be empty"));
            }
            if text.len() > MAX_TEXT_BYTES {
                return Err(Error::validation("text", format!("at most {MAX_TEXT_BYTES} bytes")));
            }
        }
        let new_text = new_text.map(|text| self.screen(caller, "text", &text).map(|(text, _)| text)).transpose()?;
        let metadata_update = request.metadata.map(sanitize_metadata).transpose()?;
        let old = self.visible(caller, id).await?;
        let mut updated = old.clone();
        // A new text gets new entities (the store keeps the old links for an undo).
        let mut relink: Option<Vec<EntityLink>> = None;
        // The key lends its words to the embedding (see `state::embedding_text`).
        let new_key = request.state_key.clone().unwrap_or_else(|| old.state.state_key.clone());
        if let Some(text) = new_text.filter(|text| *text != old.memory) {
            let names = entities::names_in(&text);
            let embedded = crate::state::embedding_text(new_key.as_deref(), &text);
            let (mut vectors, name_vectors) =
                self.embed_with_entities(std::slice::from_ref(&embedded), std::slice::from_ref(&names)).await?;
            updated.embedding =
                vectors.pop().ok_or_else(|| Error::Internal("embedder returned no vector".into()))?.into();
            updated.hash = memory_hash(&text);
            updated.text_lemmatized = analysis::lemmatize(&text);
            updated.memory = text;
            updated.entities = names;
            relink = Some(entity_links(std::slice::from_ref(&updated), &name_vectors, "proper"));
        } else if new_key != old.state.state_key {
            let embedded = crate::state::embedding_text(new_key.as_deref(), &old.memory);
            updated.embedding = self.embedder.embed(&embedded).await?.into();
        }
        if let Some(metadata) = metadata_update {
            updated.metadata.extend(metadata);
            check_metadata_size(&updated.metadata)?;
        }
        if let Some(expiration) = request.expiration_date {
            updated.expiration_date = expiration;
        }
        if !request.source.is_empty() {
            // A new source type without a confidence gets that type's default (a fact a person
            // reviewed is `human_reviewed` at 1.0); the credential of the change becomes the app.
            let source = &request.source;
            let provenance = &mut updated.provenance;
            if let Some(source_type) = source.source_type {
                provenance.source_type = source_type;
                provenance.confidence = source_type.default_confidence();
            }
            if let Some(actor) = &source.source_actor {
                provenance.source_actor = Some(actor.clone());
            }
            if let Some(evidence) = &source.evidence_ref {
                provenance.evidence_ref = Some(evidence.clone());
            }
            if let Some(confidence) = source.confidence {
                provenance.confidence = confidence;
            }
            provenance.source_app = Some(caller.principal_id.clone());
        }
        if let Some(state_key) = request.state_key {
            updated.state.state_key = state_key;
            if updated.state.state_key.is_none() {
                // Out of any chain: current again.
                updated.state.status = MemoryStatus::Active;
                updated.state.superseded_by = None;
                updated.state.valid_to = None;
            }
        }
        if let Some(event_time) = request.event_time {
            updated.state.event_time = event_time;
        }
        if let Some(status) = request.status {
            updated.state.status = status;
            if status != MemoryStatus::Superseded {
                updated.state.superseded_by = None;
                updated.state.valid_to = None;
            }
        }
        let now = stored_now();
        updated.updated_at = now;
        let entry = HistoryRecord::for_event(&updated, HistoryEvent::Update, Some(old.memory.clone()), now);
        let write = WriteSet {
            tenant: caller.tenant.clone(),
            update: vec![updated.clone()],
            relink: if relink.is_some() { vec![id] } else { Vec::new() },
            links: relink.unwrap_or_default(),
            merge_threshold: self.retrieval().entity_merge_threshold,
            // A memory leaving a chain changes the chain it leaves.
            resolve: StateKey::of(&old).into_iter().collect(),
            ..WriteSet::default()
        };
        self.commit(write, vec![entry], None).await?;
        self.audit(caller, AuditAction::Update, [id]);
        // The resolver may have placed it in its chain: return it as stored.
        Ok(self.store.get(&caller.tenant, id).await?.map_or_else(|| updated.into(), MemoryItem::from))
    }

    /// Deletes one memory.
    ///
    /// # Errors
    /// [`Error::MemoryNotFound`], store errors; on error nothing changes.
    #[instrument(skip_all, fields(tenant = %caller.tenant, memory_id = %id))]
    pub async fn delete(&self, caller: &Caller, id: Uuid) -> Result<()> {
        caller.require(Role::Write)?;
        let record = self.visible(caller, id).await?;
        let entry = HistoryRecord::for_event(&record, HistoryEvent::Delete, Some(record.memory.clone()), stored_now());
        let write = WriteSet {
            tenant: caller.tenant.clone(),
            delete: vec![id],
            // Deleting the current value makes the one before it current again.
            resolve: StateKey::of(&record).into_iter().collect(),
            ..WriteSet::default()
        };
        self.commit(write, vec![entry], None).await?;
        self.audit(caller, AuditAction::Delete, [id]);
        Ok(())
    }

    /// Deletes every memory of exactly `scope` (every id given must match; others are untouched)
    /// with its history, and the scope's buffered conversation. Returns how many were deleted.
    ///
    /// # Errors
    /// Validation (empty scope), scope and store errors. Memories are deleted in chunks of
    /// 1,000, each all or nothing; an error stops before the next chunk.
    #[instrument(skip_all, fields(tenant = %caller.tenant))]
    pub async fn delete_all(&self, caller: &Caller, scope: Scope) -> Result<usize> {
        caller.require(Role::Admin)?;
        if scope.is_empty() {
            return Err(Error::validation(
                "user_id",
                "at least one of user_id, agent_id or run_id is required; use reset to delete everything",
            ));
        }
        caller.check_scope(&scope)?;
        // Queued adds of the scope would bring its memories back once run.
        let cancelled = self.history.jobs().cancel(&caller.tenant, Some(&scope), Utc::now()).await?;
        if cancelled > 0 {
            tracing::info!(cancelled, "cancelled the queued adds of the deleted scope");
        }
        // Memories added after the listing stay. Each chunk of 1,000 is deleted with its history
        // all or nothing; an error stops before the next chunk.
        let mut query = self.scoped_query(caller, scope.clone(), None, true);
        query.include_superseded = true;
        let mut doomed: Vec<MemoryRecord> = Vec::new();
        let mut cursor = None;
        loop {
            let page = self.store.list(&query, cursor, MAX_PAGE_SIZE).await?;
            doomed.extend(page.records);
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        let now = stored_now();
        let mut deleted = 0;
        for chunk in doomed.chunks(MAX_PAGE_SIZE) {
            let entries: Vec<HistoryRecord> = chunk
                .iter()
                .map(|record| HistoryRecord::for_event(record, HistoryEvent::Delete, Some(record.memory.clone()), now))
                .collect();
            let write = WriteSet {
                tenant: caller.tenant.clone(),
                delete: chunk.iter().map(|record| record.id).collect(),
                // Deleted meanwhile by someone else: skipped, without a second DELETE entry.
                skip_missing: true,
                ..WriteSet::default()
            };
            let applied = self.commit(write, entries, None).await?;
            deleted += applied.deleted.len();
            self.audit(caller, AuditAction::Delete, applied.deleted.iter().map(|record| record.id));
        }
        // The conversation buffer of these scopes goes too: it is raw user text. So do buffered
        // messages still waiting in the journal, which would otherwise arrive later.
        if let Err(error) = self.history.forget_sessions(&caller.tenant, &scope).await {
            warn!(%error, "memories deleted, but their scope's conversation buffer could not be");
        }
        if let Err(error) = self.forget_journalled_sessions(&caller.tenant, &scope).await {
            warn!(%error, "memories deleted, but buffered messages in the journal could not be");
        }
        Ok(deleted)
    }

    /// Removes buffered-message batches of sessions under `scope` from the journal.
    async fn forget_journalled_sessions(&self, tenant: &str, scope: &Scope) -> Result<()> {
        let everything = Utc::now() + chrono::Duration::days(1);
        let doomed: Vec<Uuid> = self
            .store
            .journal(everything, 100_000)
            .await?
            .iter()
            .filter(|entry| entry.tenant == tenant && entry.memory_id.is_none())
            .filter(|entry| match Pending::from_entry(entry) {
                Ok(Pending::Messages { batch }) => crate::history::session_under(&batch.session, scope),
                _ => false,
            })
            .map(|entry| entry.id)
            .collect();
        self.store.settle(&doomed).await
    }
}
