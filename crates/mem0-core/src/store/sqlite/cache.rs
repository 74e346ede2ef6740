//! The bounded in-process cache of embeddings the embedded store searches with.
//!
//! Writes never put vectors in; they drop the ids they changed and bump a generation after they
//! commit. A search fills in what it read from the database only if no write committed since it
//! started reading, so a vector read before a write can never outlive it in the cache (and two
//! writers finishing in any order cannot leave the older vector behind).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use uuid::Uuid;

/// An embedding shared between the cache and a running search.
pub(super) type SharedVector = (Uuid, Arc<[f32]>);

/// Embeddings by memory id; bounded, never a source of truth.
#[derive(Debug, Default)]
pub(super) struct VectorCache {
    vectors: RwLock<HashMap<Uuid, Arc<[f32]>>>,
    capacity: usize,
    /// Bumped by every committed write.
    generation: AtomicU64,
}

impl VectorCache {
    /// An empty cache holding at most `capacity` embeddings.
    pub(super) fn new(capacity: usize) -> Self {
        Self { vectors: RwLock::default(), capacity, generation: AtomicU64::new(0) }
    }

    /// The generation to pass to [`VectorCache::fill`]; read it before reading the database.
    pub(super) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
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

    /// Stores vectors read from the database since `generation`, unless a write committed since.
    pub(super) fn fill(&self, loaded: &[SharedVector], generation: u64) {
        let mut vectors = self.vectors.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        if self.generation.load(Ordering::Acquire) != generation {
            return;
        }
        for (id, vector) in loaded {
            if vectors.len() >= self.capacity {
                break;
            }
            vectors.entry(*id).or_insert_with(|| Arc::clone(vector));
        }
    }

    /// Forgets the vectors of rows a committed write changed or removed.
    pub(super) fn invalidate(&self, ids: impl IntoIterator<Item = Uuid>) {
        let mut vectors = self.vectors.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        self.generation.fetch_add(1, Ordering::AcqRel);
        for id in ids {
            vectors.remove(&id);
        }
    }

    pub(super) fn clear(&self) {
        let mut vectors = self.vectors.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        self.generation.fetch_add(1, Ordering::AcqRel);
        vectors.clear();
    }
}
