//! Tenant-wide operations: resets, the scope listing, re-analysis of old rows.

use tracing::{info, instrument};

use super::add::entity_links;
use super::limits::{check_bound, MAX_PAGE_SIZE};
use super::Memory;
use crate::analysis;
use crate::entities;
use crate::error::{Error, Result};
use crate::history::AuditAction;
use crate::scope::{Caller, Role};
use crate::store::{ScopeCursor, ScopeKind, ScopePage, WriteSet};
use crate::types::MemoryRecord;

impl Memory {
    /// Deletes every memory, history entry and buffered message of the caller's tenant.
    ///
    /// # Errors
    /// [`Error::Forbidden`] unless admin; store errors.
    #[instrument(skip_all, fields(tenant = %caller.tenant))]
    pub async fn reset(&self, caller: &Caller) -> Result<()> {
        caller.require(Role::Admin)?;
        if !caller.is_tenant_admin() {
            return Err(Error::Forbidden("reset needs an admin that is not bound to a scope".into()));
        }
        self.store.reset(Some(&caller.tenant)).await?;
        self.history.reset(Some(&caller.tenant)).await?;
        self.audit_event(caller, AuditAction::Reset, None);
        Ok(())
    }

    /// Deletes every memory, history entry and buffered message of every tenant.
    ///
    /// # Errors
    /// [`Error::Forbidden`] unless a global admin; store errors.
    #[instrument(skip_all, fields(principal = %caller.principal_id))]
    pub async fn reset_all(&self, caller: &Caller) -> Result<()> {
        if !caller.global_admin {
            return Err(Error::Forbidden("a global reset needs the global admin".into()));
        }
        self.store.reset(None).await?;
        self.history.reset(None).await?;
        self.audit_event(caller, AuditAction::Reset, Some("every tenant".to_owned()));
        Ok(())
    }

    /// Lists the scope ids of the caller's tenant that own memories, with counts, ordered by
    /// type (`agent`, `run`, `user`) then id, one page at a time.
    ///
    /// # Errors
    /// [`Error::Forbidden`] unless admin; validation of `limit` and `after`; store errors.
    #[instrument(skip_all, fields(tenant = %caller.tenant))]
    pub async fn scopes(
        &self,
        caller: &Caller,
        kind: Option<ScopeKind>,
        after: Option<String>,
        limit: usize,
    ) -> Result<ScopePage> {
        caller.require(Role::Admin)?;
        check_bound("limit", limit)?;
        let after = after.as_deref().map(ScopeCursor::decode).transpose()?;
        let kinds: Vec<ScopeKind> = match kind {
            Some(kind) => vec![kind],
            None => ScopeKind::ALL.to_vec(),
        };
        let mut items = Vec::new();
        for kind in kinds {
            let start = match &after {
                Some(cursor) if cursor.kind > kind => continue,
                Some(cursor) if cursor.kind == kind => Some(cursor.id.clone()),
                _ => None,
            };
            // One extra row tells whether another page exists.
            let wanted = limit + 1 - items.len();
            let mut rows = self.store.scopes(&caller.tenant, kind, start.as_deref(), wanted).await?;
            rows.retain(|summary| caller.can_see(&caller.tenant, &summary.as_scope()));
            items.extend(rows);
            if items.len() > limit {
                break;
            }
        }
        let next = if items.len() > limit {
            items.truncate(limit);
            items.last().map(|last| ScopeCursor { kind: last.kind, id: last.id.clone() }.encode())
        } else {
            None
        };
        Ok(ScopePage { items, next })
    }

    /// Builds the keyword index and entity links of memories written before they existed (or
    /// restored from a dump without them), in batches of `batch`; returns how many were
    /// analysed. Safe to run while serving, and again: analysed memories are skipped.
    ///
    /// # Errors
    /// Store and embedder errors; memories done before the error stay done.
    pub async fn reindex(&self, batch: usize) -> Result<usize> {
        let mut after = None;
        let mut analysed = 0;
        loop {
            let records = self.store.unanalysed(after, batch.clamp(1, MAX_PAGE_SIZE)).await?;
            let Some(last) = records.last() else {
                return Ok(analysed);
            };
            after = Some(last.id);
            let mut updated: Vec<MemoryRecord> = Vec::with_capacity(records.len());
            for mut record in records {
                record.text_lemmatized = analysis::lemmatize(&record.memory);
                if record.entities.is_empty() {
                    record.entities = entities::names_in(&record.memory);
                }
                updated.push(record);
            }
            let names: Vec<Vec<String>> = updated.iter().map(|record| record.entities.clone()).collect();
            let (_, name_vectors) = self.embed_with_entities(&[], &names).await?;
            // Each row only if nobody changed or deleted it since it was read (an update
            // re-analyses it anyway): a reindex beside a serving server never reverts a change.
            let write = WriteSet {
                relink: updated.iter().map(|record| record.id).collect(),
                links: entity_links(&updated, &name_vectors, "proper"),
                update: updated.clone(),
                merge_threshold: self.retrieval().entity_merge_threshold,
                expect: updated.iter().map(|record| (record.id, record.updated_at)).collect(),
                ..WriteSet::default()
            };
            match self.store.apply(&write).await {
                Ok(_) => {}
                Err(Error::MemoryNotFound { .. } | Error::Conflict(_)) => {
                    // One of the batch changed meanwhile: the others one by one.
                    for record in &updated {
                        let single = WriteSet {
                            relink: vec![record.id],
                            links: write.links.iter().filter(|link| link.memory_id == record.id).cloned().collect(),
                            update: vec![record.clone()],
                            merge_threshold: write.merge_threshold,
                            expect: vec![(record.id, record.updated_at)],
                            ..WriteSet::default()
                        };
                        match self.store.apply(&single).await {
                            Ok(_) | Err(Error::MemoryNotFound { .. } | Error::Conflict(_)) => {}
                            Err(error) => return Err(error),
                        }
                    }
                }
                Err(error) => return Err(error),
            }
            analysed += updated.len();
            info!(analysed, "reindexed memories");
        }
    }
}
