//! The bounded in-process cache of embeddings the embedded store searches with.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use uuid::Uuid;

use crate::types::MemoryRecord;

/// An embedding shared between the cache and a running search.
pub(super) type SharedVector = (Uuid, Arc<[f32]>);

/// Embeddings by memory id; bounded, never a source of truth.
#[derive(Debug, Default)]
pub(super) struct VectorCache {
    vectors: RwLock<HashMap<Uuid, Arc<[f32]>>>,
    capacity: usize,
}

impl VectorCache {
    /// An empty cache holding at most `capacity` embeddings.
    pub(super) fn new(capacity: usize) -> Self {
        Self { vectors: RwLock::default(), capacity }
    }

    pub(super) fn get_many(&self, ids: &[Uuid]) -> (Vec<SharedVector>, Vec<Uuid>) {
        let vectors = self.vectors.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut found = Vec::with_capacity(ids.len());
        let mut missing = Vec::new();
        for id in ids {
            match vectors.get(id) {
                Some(vector) => found.push((*id, Arc::clone(vector))),
                None => missing.push(*id),
            }
        }
        (found, missing)
    }

    /// Stores vectors read from the database, never replacing a newer one written meanwhile.
    pub(super) fn fill(&self, loaded: &[SharedVector]) {
        let mut vectors = self.vectors.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        for (id, vector) in loaded {
            if vectors.len() >= self.capacity {
                break;
            }
            vectors.entry(*id).or_insert_with(|| Arc::clone(vector));
        }
    }

    /// Records vectors this store has just written.
    pub(super) fn put(&self, records: &[MemoryRecord]) {
        let mut vectors = self.vectors.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        for record in records {
            if vectors.len() < self.capacity || vectors.contains_key(&record.id) {
                vectors.insert(record.id, Arc::from(record.embedding.as_slice()));
            }
        }
    }

    pub(super) fn remove(&self, ids: impl IntoIterator<Item = Uuid>) {
        let mut vectors = self.vectors.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        for id in ids {
            vectors.remove(&id);
        }
    }

    pub(super) fn clear(&self) {
        self.vectors.write().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
    }
}
