//! Hybrid retrieval: candidates from dense search, BM25 over the caller's scope and the entities
//! the query names, each scored on every signal ([`super::ScoreExplanation`]). Holds the cache of
//! query-entity embeddings (names repeat: "Caroline" in every question about her), so a search
//! embeds only the query and names it has not seen.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use uuid::Uuid;

use super::{semantic, Bm25, EntityScores, RetrievalSettings, ScoreExplanation, MAX_QUERY_TERMS};
use crate::analysis;
use crate::entities;
use crate::error::{Error, Result};
use crate::providers::embedder::Embedder;
use crate::store::{EntityProbe, ScopedQuery, VectorStore};
use crate::types::MemoryRecord;

/// Most entity-name embeddings kept for queries.
const QUERY_ENTITY_CACHE: usize = 10_000;
/// Most candidates one retriever brings.
const MAX_CANDIDATES: usize = 1000;

/// The distinct analysed terms of a query (at most [`MAX_QUERY_TERMS`]).
fn query_terms(text: &str) -> Vec<String> {
    let mut terms = analysis::terms(text);
    let mut seen = HashSet::new();
    terms.retain(|term| seen.insert(term.clone()));
    terms.truncate(MAX_QUERY_TERMS);
    terms
}

/// The retrievers of one store and embedder, with their settings.
#[derive(Clone)]
pub struct Retriever {
    store: Arc<dyn VectorStore>,
    embedder: Arc<dyn Embedder>,
    settings: RetrievalSettings,
    /// Embeddings of entity names seen in queries; bounded, per embedder.
    query_entities: Arc<Mutex<HashMap<String, Vec<f32>>>>,
}

impl std::fmt::Debug for Retriever {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Retriever").field("settings", &self.settings).finish_non_exhaustive()
    }
}

impl Retriever {
    /// Retrievers over `store` with `embedder`, weighted by `settings`.
    pub fn new(store: Arc<dyn VectorStore>, embedder: Arc<dyn Embedder>, settings: RetrievalSettings) -> Self {
        Self { store, embedder, settings, query_entities: Arc::default() }
    }

    /// The weights and candidate counts in use.
    pub fn settings(&self) -> &RetrievalSettings {
        &self.settings
    }

    /// BM25 of the query's terms over the query's scope, and the `limit` memories scoring best.
    pub async fn bm25(&self, query: &ScopedQuery, text: &str, limit: usize) -> Result<(Bm25, Vec<(Uuid, f64)>)> {
        let terms = query_terms(text);
        // Without terms the store still reports the scope's size (entity weighting uses it).
        let found = self.store.keyword_candidates(query, &terms, limit).await?;
        Ok((Bm25::new(&found.stats, &terms), found.top))
    }

    /// Candidates from the dense, keyword and entity retrievers, each scored on every signal.
    ///
    /// The stores return only their best candidates (at most `candidates` each, with the
    /// statistics to score any memory); every candidate is then scored here on all three
    /// signals: semantic from its embedding, BM25 from its analysed text, entities from its
    /// links to the matched entity rows (one more store call for the candidates the entity
    /// retriever did not bring).
    pub async fn hybrid(
        &self,
        query: &ScopedQuery,
        text: &str,
        top_k: usize,
    ) -> Result<Vec<(MemoryRecord, ScoreExplanation)>> {
        let pool = self.settings.candidates.max(top_k).min(MAX_CANDIDATES);
        // The query and the entities it names, embedded in one call.
        let mut names: Vec<String> = Vec::new();
        let mut seen = HashSet::new();
        for name in entities::names_in(text) {
            let normalized = entities::normalize(&name);
            if !normalized.is_empty() && seen.insert(normalized) {
                names.push(name);
            }
        }
        let mut known: HashMap<String, Vec<f32>> = {
            let cache = self.query_entities.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            names.iter().filter_map(|name| cache.get(name).map(|vector| (name.clone(), vector.clone()))).collect()
        };
        let unknown: Vec<String> = names.iter().filter(|name| !known.contains_key(*name)).cloned().collect();
        let mut batch = vec![text.to_owned()];
        batch.extend(unknown.iter().cloned());
        let mut vectors = self.embedder.embed_batch(&batch).await?;
        if vectors.len() != batch.len() {
            return Err(Error::Internal("embedder returned a wrong number of vectors".into()));
        }
        let new_vectors = vectors.split_off(1);
        let vector = vectors.pop().ok_or_else(|| Error::Internal("embedder returned no vector".into()))?;
        {
            let mut cache = self.query_entities.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if cache.len() + unknown.len() > QUERY_ENTITY_CACHE {
                cache.clear();
            }
            for (name, embedding) in unknown.into_iter().zip(new_vectors) {
                cache.insert(name.clone(), embedding.clone());
                known.insert(name, embedding);
            }
        }
        let probes: Vec<EntityProbe> = names
            .iter()
            .filter_map(|name| {
                known.get(name).map(|embedding| EntityProbe {
                    normalized: entities::normalize(name),
                    embedding: embedding.clone(),
                })
            })
            .collect();
        let (dense, (bm25, keyword_top), entity_found) = futures::try_join!(
            self.store.search(query, &vector, pool, 0.0),
            self.bm25(query, text, pool),
            self.store.entity_candidates(query, &probes, self.settings.entity_match_threshold, pool)
        )?;

        let mut candidates: HashMap<Uuid, (MemoryRecord, Vec<String>)> = HashMap::new();
        for hit in dense {
            candidates.insert(hit.record.id, (hit.record, vec!["dense".to_owned()]));
        }
        let keyword_ids: Vec<Uuid> = keyword_top.iter().map(|(id, _)| *id).collect();
        let mut entity_set: HashSet<Uuid> = HashSet::new();
        let entity_ids: Vec<Uuid> =
            entity_found.hits.iter().map(|hit| hit.memory_id).filter(|id| entity_set.insert(*id)).collect();
        let missing: Vec<Uuid> = keyword_ids
            .iter()
            .chain(&entity_ids)
            .filter(|id| !candidates.contains_key(id))
            .copied()
            .collect::<HashSet<Uuid>>()
            .into_iter()
            .collect();
        for record in self.store.get_many(&query.tenant, &missing).await? {
            candidates.insert(record.id, (record, Vec::new()));
        }
        for (source, ids) in [("keyword", &keyword_ids), ("entity", &entity_ids)] {
            for id in ids {
                if let Some((_, sources)) = candidates.get_mut(id) {
                    sources.push(source.to_owned());
                }
            }
        }
        // The entity signal of candidates the entity retriever did not bring.
        let mut entity_hits = entity_found.hits.clone();
        if !entity_found.matched.is_empty() {
            let unlinked: Vec<Uuid> = candidates.keys().filter(|id| !entity_set.contains(id)).copied().collect();
            if !unlinked.is_empty() {
                entity_hits.extend(self.store.entity_links(&entity_found.matched, &unlinked).await?);
            }
        }
        let entity = EntityScores::new(EntityScores::weights(&entity_found.linked, bm25.doc_count), &entity_hits);
        let weights = self.settings.normalised_weights();
        Ok(candidates
            .into_values()
            .map(|(record, sources)| {
                let raw = bm25.score_text(&record.text_lemmatized);
                let signals = [semantic(&vector, &record.embedding), bm25.normalised(raw), entity.signal(&record.id)];
                (record, ScoreExplanation::new(signals, raw as f32, weights, sources))
            })
            .collect())
    }
}
