//! The bounded in-process caches the stores search with: embeddings by memory id, and
//! whole memory rows by id (the candidates a hybrid search scores are mostly the same few
//! hundred rows from one search to the next).
//!
//! Writes never put entries in; they drop the ids they changed and bump a generation after they
//! commit. A search fills in what it read from the database only if no write committed since it
//! started reading, so a value read before a write can never outlive it in the cache (and two
//! writers finishing in any order cannot leave the older value behind).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use uuid::Uuid;

use super::FastMap;
use crate::types::MemoryRecord;

/// An embedding shared between the cache and a running search.
pub(crate) type SharedVector = (Uuid, Arc<[f32]>);

/// Embeddings by memory id.
pub(crate) type VectorCache = Cache<Arc<[f32]>>;

/// Memory rows by id.
pub(crate) type RecordCache = Cache<Arc<MemoryRecord>>;

/// Values by memory id; bounded, never a source of truth.
#[derive(Debug, Default)]
pub(crate) struct Cache<V> {
    entries: RwLock<FastMap<Uuid, V>>,
    capacity: usize,
    /// Bumped by every committed write.
    generation: AtomicU64,
}

impl<V: Clone> Cache<V> {
    /// An empty cache holding at most `capacity` values.
    pub(crate) fn new(capacity: usize) -> Self {
        Self { entries: RwLock::default(), capacity, generation: AtomicU64::new(0) }
    }

    /// Whether it keeps anything at all.
    pub(crate) fn enabled(&self) -> bool {
        self.capacity > 0
    }

    /// The generation to pass to [`Cache::fill`]; read it before reading the database.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The cached values of `ids`, and the ids not cached.
    pub(crate) fn get_many(&self, ids: &[Uuid]) -> (Vec<(Uuid, V)>, Vec<Uuid>) {
        let entries = self.entries.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut found = Vec::with_capacity(ids.len());
        let mut missing = Vec::new();
        for id in ids {
            match entries.get(id) {
                Some(value) => found.push((*id, value.clone())),
                None => missing.push(*id),
            }
        }
        (found, missing)
    }

    /// Stores values read from the database since `generation`, unless a write committed since.
    /// When full, about an eighth of the entries (arbitrary ones) make room first.
    pub(crate) fn fill(&self, loaded: &[(Uuid, V)], generation: u64) {
        if self.capacity == 0 || loaded.is_empty() {
            return;
        }
        let mut entries = self.entries.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        if self.generation.load(Ordering::Acquire) != generation {
            return;
        }
        for (id, value) in loaded {
            if entries.len() >= self.capacity && !entries.contains_key(id) {
                let evict: Vec<Uuid> = entries.keys().take(self.capacity.div_ceil(8)).copied().collect();
                for id in evict {
                    entries.remove(&id);
                }
            }
            entries.entry(*id).or_insert_with(|| value.clone());
        }
    }

    /// Forgets the values of rows a committed write changed or removed.
    pub(crate) fn invalidate(&self, ids: impl IntoIterator<Item = Uuid>) {
        let mut entries = self.entries.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        self.generation.fetch_add(1, Ordering::AcqRel);
        for id in ids {
            entries.remove(&id);
        }
    }

    pub(crate) fn clear(&self) {
        let mut entries = self.entries.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        self.generation.fetch_add(1, Ordering::AcqRel);
        entries.clear();
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.read().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fill_that_started_before_a_write_is_dropped() {
        let cache: Cache<u32> = Cache::new(10);
        let id = Uuid::now_v7();
        let before = cache.generation();
        cache.invalidate([id]);
        cache.fill(&[(id, 1)], before);
        assert_eq!(cache.get_many(&[id]).1, vec![id]);
        cache.fill(&[(id, 2)], cache.generation());
        assert_eq!(cache.get_many(&[id]).0, vec![(id, 2)]);
    }

    #[test]
    fn a_full_cache_makes_room() {
        let cache: Cache<u32> = Cache::new(16);
        let ids: Vec<Uuid> = (0..40).map(|_| Uuid::now_v7()).collect();
        for (index, id) in ids.iter().enumerate() {
            cache.fill(&[(*id, u32::try_from(index).unwrap())], cache.generation());
            assert!(cache.len() <= 16);
        }
        // The latest value is always there after its fill.
        assert_eq!(cache.get_many(&ids[39..]).0, vec![(ids[39], 39)]);
    }
}
