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
use crate::store::{EntityProbe, FastMap, FastSet, ScopedQuery, VectorStore};
use crate::types::MemoryRecord;

/// Most entity-name embeddings kept for queries.
const QUERY_ENTITY_CACHE: usize = 10_000;
/// Most candidates one retriever brings.
const MAX_CANDIDATES: usize = 1000;
/// Least similarity of a query to a state key's words for the query to be read as asking for
/// that key's value (all-MiniLM-L6-v2: "Where does the user work?" ~ "employer" 0.36, ~ "car"
/// 0.25; "What car does the user drive?" ~ "car" 0.68).
pub const KEY_MATCH_MIN: f32 = 0.3;
/// How much closer the best key must be than the next one among the candidates' keys.
pub const KEY_MATCH_MARGIN: f32 = 0.05;

/// The distinct analysed terms of a query (at most [`MAX_QUERY_TERMS`]).
fn query_terms(text: &str) -> Vec<String> {
    let mut terms = analysis::terms(text);
    let mut seen = HashSet::new();
    terms.retain(|term| seen.insert(term.clone()));
    terms.truncate(MAX_QUERY_TERMS);
    terms
}

/// A candidate of a hybrid search: its row, the retrievers that brought it and, when the dense
/// one did, the semantic score that retriever computed (the cosine, clipped, as [`semantic`]).
struct Gathered {
    record: Arc<MemoryRecord>,
    sources: Vec<String>,
    dense_score: Option<f32>,
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

    /// Candidates from the dense, keyword and entity retrievers, each scored on every signal
    /// (their rows shared with the store's row cache).
    ///
    /// The stores return only their best candidates (at most `candidates` each, with the
    /// statistics to score any memory); every candidate is then scored here on all three
    /// signals: semantic from its embedding, BM25 from its analysed text, entities from its
    /// links to the matched entity rows (one more store call for the candidates the entity
    /// retriever did not bring). The query's embedding is taken from `query_vector` when there,
    /// else made (with the names' in one call) and left there for a second retrieval.
    pub async fn hybrid(
        &self,
        query: &ScopedQuery,
        text: &str,
        top_k: usize,
        query_vector: &mut Option<Vec<f32>>,
    ) -> Result<Vec<(Arc<MemoryRecord>, ScoreExplanation)>> {
        // The store calls below share what one look at the store's state learned.
        let fresh;
        let query = if query.fresh_since.is_some() {
            query
        } else {
            fresh = ScopedQuery { fresh_since: Some(std::time::Instant::now()), ..query.clone() };
            &fresh
        };
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
        let vector = match query_vector.take() {
            Some(vector) => {
                known.extend(self.embed_cached(&unknown).await?);
                vector
            }
            None => {
                let mut batch = vec![text.to_owned()];
                batch.extend(unknown.iter().cloned());
                let mut vectors = self.embedder.embed_batch(&batch).await?;
                if vectors.len() != batch.len() {
                    return Err(Error::Internal("embedder returned a wrong number of vectors".into()));
                }
                let new_vectors = vectors.split_off(1);
                let vector = vectors.pop().ok_or_else(|| Error::Internal("embedder returned no vector".into()))?;
                self.remember(&unknown, &new_vectors);
                known.extend(unknown.into_iter().zip(new_vectors));
                vector
            }
        };
        *query_vector = Some(vector.clone());
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

        let mut candidates: FastMap<Uuid, Gathered> = FastMap::default();
        for hit in dense {
            let gathered =
                Gathered { sources: vec!["dense".to_owned()], dense_score: Some(hit.score), record: hit.record };
            candidates.insert(gathered.record.id, gathered);
        }
        let keyword_ids: Vec<Uuid> = keyword_top.iter().map(|(id, _)| *id).collect();
        let mut entity_set: FastSet<Uuid> = FastSet::default();
        let entity_ids: Vec<Uuid> =
            entity_found.hits.iter().map(|hit| hit.memory_id).filter(|id| entity_set.insert(*id)).collect();
        let missing: Vec<Uuid> = keyword_ids
            .iter()
            .chain(&entity_ids)
            .filter(|id| !candidates.contains_key(id))
            .copied()
            .collect::<FastSet<Uuid>>()
            .into_iter()
            .collect();
        for record in self.store.get_candidates(query, &missing).await? {
            candidates.insert(record.id, Gathered { record, sources: Vec::new(), dense_score: None });
        }
        for (source, ids) in [("keyword", &keyword_ids), ("entity", &entity_ids)] {
            for id in ids {
                if let Some(gathered) = candidates.get_mut(id) {
                    gathered.sources.push(source.to_owned());
                }
            }
        }
        // The entity signal of candidates the entity retriever did not bring.
        let mut entity_hits = entity_found.hits.clone();
        if !entity_found.matched.is_empty() {
            let unlinked: Vec<Uuid> = candidates.keys().filter(|id| !entity_set.contains(id)).copied().collect();
            if !unlinked.is_empty() {
                entity_hits.extend(self.store.entity_links(query, &entity_found.matched, &unlinked).await?);
            }
        }
        let entity = EntityScores::new(EntityScores::weights(&entity_found.linked, bm25.doc_count), &entity_hits);
        let weights = self.settings.normalised_weights();
        let asked_key = self.key_intent(&vector, candidates.values().map(|gathered| &*gathered.record)).await?;
        Ok(candidates
            .into_values()
            .map(|Gathered { record, sources, dense_score }| {
                let raw = bm25.score_text(&record.text_lemmatized);
                let similarity = dense_score.unwrap_or_else(|| semantic(&vector, &record.embedding));
                let mut signals = [similarity, bm25.normalised(raw), entity.signal(&record.id)];
                let key_match = asked_key
                    .as_ref()
                    .filter(|(key, _)| record.state.state_key.as_deref() == Some(key.as_str()))
                    .map(|(_, similarity)| *similarity);
                if let Some(similarity) = key_match {
                    signals[0] = signals[0].max(similarity);
                }
                let mut explanation = ScoreExplanation::new(signals, raw as f32, weights, sources);
                explanation.key_match = key_match;
                (record, explanation)
            })
            .collect())
    }

    /// The state key the query asks for, with its similarity: among the keys of `candidates`,
    /// the one whose words ([`crate::state::key_words`]) are closest to the query, when that is
    /// at least [`KEY_MATCH_MIN`] and [`KEY_MATCH_MARGIN`] closer than the next key. Its values
    /// then count as at least that similar to the query ("Where does the user work?" finds "My
    /// employer is Globex", keyed `user.employer`, over "I volunteer at the food bank"). Key words
    /// are embedded once and cached with the query entities.
    async fn key_intent<'a>(
        &self,
        query_vector: &[f32],
        candidates: impl Iterator<Item = &'a MemoryRecord>,
    ) -> Result<Option<(String, f32)>> {
        let mut keys: Vec<(String, String)> = Vec::new();
        for record in candidates {
            if let Some(key) = &record.state.state_key {
                if !keys.iter().any(|(known, _)| known == key) {
                    if let Some(words) = crate::state::key_words(key) {
                        keys.push((key.clone(), words));
                    }
                }
            }
        }
        if keys.is_empty() {
            return Ok(None);
        }
        let words: Vec<String> = keys.iter().map(|(_, words)| words.clone()).collect();
        let vectors = self.embed_cached(&words).await?;
        let mut similarities: Vec<(String, f32)> = keys
            .into_iter()
            .filter_map(|(key, words)| vectors.get(&words).map(|vector| (key, semantic(query_vector, vector))))
            .collect();
        similarities.sort_by(|a, b| b.1.total_cmp(&a.1));
        let next = similarities.get(1).map_or(0.0, |(_, similarity)| *similarity);
        Ok(similarities
            .into_iter()
            .next()
            .filter(|(_, similarity)| *similarity >= KEY_MATCH_MIN && *similarity - next >= KEY_MATCH_MARGIN))
    }

    /// Embeddings of short texts (entity names, key words), from the cache or embedded now in one
    /// call and cached.
    async fn embed_cached(&self, texts: &[String]) -> Result<HashMap<String, Vec<f32>>> {
        let mut known: HashMap<String, Vec<f32>> = {
            let cache = self.query_entities.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            texts.iter().filter_map(|text| cache.get(text).map(|vector| (text.clone(), vector.clone()))).collect()
        };
        let unknown: Vec<String> = texts.iter().filter(|text| !known.contains_key(*text)).cloned().collect();
        if unknown.is_empty() {
            return Ok(known);
        }
        let vectors = self.embedder.embed_batch(&unknown).await?;
        if vectors.len() != unknown.len() {
            return Err(Error::Internal("embedder returned a wrong number of vectors".into()));
        }
        self.remember(&unknown, &vectors);
        known.extend(unknown.into_iter().zip(vectors));
        Ok(known)
    }

    /// Caches embeddings of short texts (cleared when full).
    fn remember(&self, texts: &[String], vectors: &[Vec<f32>]) {
        let mut cache = self.query_entities.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if cache.len() + texts.len() > QUERY_ENTITY_CACHE {
            cache.clear();
        }
        for (text, vector) in texts.iter().zip(vectors) {
            cache.insert(text.clone(), vector.clone());
        }
    }
}
