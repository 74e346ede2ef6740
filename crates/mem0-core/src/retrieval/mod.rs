//! Hybrid retrieval: BM25 over the caller's scope, and a calibrated fusion of semantic, keyword
//! and entity signals.
//!
//! Every signal is in [0, 1] and means the same thing for every query:
//! - `semantic`: cosine similarity of query and memory embeddings, clipped to [0, 1];
//! - `keyword`: BM25 divided by the BM25 of an average-length memory that contains every query
//!   term once (so 1.0 = "all query terms present", 0.5 = "the rarer half"), capped at 1;
//! - `entity`: the share of the query's entities linked to the memory.
//!
//! The score is their weighted sum with weights that add up to 1, so it stays in [0, 1] and
//! `threshold` keeps one meaning across queries; `explain` returns each signal and its
//! contribution, and the contributions add up to the score.

mod hybrid;

use std::collections::HashMap;

pub use self::hybrid::Retriever;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::store::KeywordPostings;

/// BM25 term-frequency saturation.
pub const BM25_K1: f64 = 1.2;
/// BM25 length normalisation.
pub const BM25_B: f64 = 0.75;
/// Most distinct query terms used for keyword search.
pub const MAX_QUERY_TERMS: usize = 64;

/// How hybrid search weighs its signals and how many candidates each retriever brings.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RetrievalSettings {
    /// Weight of embedding similarity.
    #[serde(default = "default_semantic_weight")]
    pub semantic_weight: f32,
    /// Weight of the normalised BM25 score.
    #[serde(default = "default_keyword_weight")]
    pub keyword_weight: f32,
    /// Weight of the entity match.
    #[serde(default = "default_entity_weight")]
    pub entity_weight: f32,
    /// Candidates each retriever brings (at least `top_k`).
    #[serde(default = "default_candidates")]
    pub candidates: usize,
    /// A query entity matches a stored one with the same normalised name, or with an embedding
    /// at least this similar.
    #[serde(default = "default_entity_match_threshold")]
    pub entity_match_threshold: f32,
    /// A new entity is merged into an existing one of its scope with the same normalised name,
    /// or with an embedding at least this similar.
    #[serde(default = "default_entity_merge_threshold")]
    pub entity_merge_threshold: f32,
}

fn default_entity_match_threshold() -> f32 {
    0.9
}
fn default_entity_merge_threshold() -> f32 {
    0.95
}

// Chosen on the LoCoMo benchmark (benches/locomo.rs): R@10 0.58 at 0.7/0.2/0.1, 0.64 at
// 0.5/0.4/0.1, 0.65 at 0.4/0.5/0.1; equal semantic and keyword weights keep paraphrased queries
// (no shared words) well served while exact names, numbers and rare words count.
fn default_semantic_weight() -> f32 {
    0.45
}
fn default_keyword_weight() -> f32 {
    0.45
}
fn default_entity_weight() -> f32 {
    0.1
}
fn default_candidates() -> usize {
    50
}

impl Default for RetrievalSettings {
    fn default() -> Self {
        Self {
            semantic_weight: default_semantic_weight(),
            keyword_weight: default_keyword_weight(),
            entity_weight: default_entity_weight(),
            candidates: default_candidates(),
            entity_match_threshold: default_entity_match_threshold(),
            entity_merge_threshold: default_entity_merge_threshold(),
        }
    }
}

impl RetrievalSettings {
    /// The weights scaled to add up to 1 (all zero → semantic only).
    pub fn normalised_weights(&self) -> [f32; 3] {
        let weights = [self.semantic_weight, self.keyword_weight, self.entity_weight].map(|weight| weight.max(0.0));
        let total: f32 = weights.iter().sum();
        if total <= f32::EPSILON {
            [1.0, 0.0, 0.0]
        } else {
            weights.map(|weight| weight / total)
        }
    }

    /// Checks the values.
    ///
    /// # Errors
    /// A message naming the bad key.
    pub fn validate(&self) -> Result<(), String> {
        for (name, weight) in [
            ("semantic_weight", self.semantic_weight),
            ("keyword_weight", self.keyword_weight),
            ("entity_weight", self.entity_weight),
        ] {
            if !(0.0..=1.0).contains(&weight) {
                return Err(format!("retrieval.{name} must be between 0 and 1"));
            }
        }
        for (name, threshold) in [
            ("entity_match_threshold", self.entity_match_threshold),
            ("entity_merge_threshold", self.entity_merge_threshold),
        ] {
            if !(0.5..=1.0).contains(&threshold) {
                return Err(format!("retrieval.{name} must be between 0.5 and 1"));
            }
        }
        if !(1..=1000).contains(&self.candidates) {
            return Err("retrieval.candidates must be between 1 and 1000".into());
        }
        Ok(())
    }
}

/// BM25 scores of the memories containing query terms.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Bm25 {
    /// Raw BM25 per memory.
    pub scores: HashMap<Uuid, f64>,
    /// The normaliser: BM25 of an average-length memory holding every query term once (the sum
    /// of the query terms' IDFs).
    pub reference: f64,
    /// Memories in the scope.
    pub doc_count: u64,
}

impl Bm25 {
    /// Scores the postings of `terms` (distinct) over a scope of `postings.doc_count` memories.
    pub fn score(postings: &KeywordPostings, terms: &[String]) -> Self {
        let total = postings.doc_count as f64;
        if total == 0.0 || terms.is_empty() {
            return Self { doc_count: postings.doc_count, ..Self::default() };
        }
        let avg_len = if postings.avg_doc_len > 0.0 { postings.avg_doc_len } else { 1.0 };
        let mut document_frequency: HashMap<&str, f64> = HashMap::new();
        for posting in &postings.postings {
            *document_frequency.entry(posting.term.as_str()).or_default() += 1.0;
        }
        let idf = |term: &str| {
            let df = document_frequency.get(term).copied().unwrap_or(0.0);
            (1.0 + (total - df + 0.5) / (df + 0.5)).ln()
        };
        let reference = terms.iter().map(|term| idf(term)).sum();
        let mut scores: HashMap<Uuid, f64> = HashMap::new();
        for posting in &postings.postings {
            let tf = f64::from(posting.tf);
            let length = f64::from(posting.doc_len);
            let saturation = tf * (BM25_K1 + 1.0) / (tf + BM25_K1 * (1.0 - BM25_B + BM25_B * length / avg_len));
            *scores.entry(posting.id).or_default() += idf(&posting.term) * saturation;
        }
        Self { scores, reference, doc_count: postings.doc_count }
    }

    /// The normalised keyword signal of a memory, in [0, 1].
    pub fn normalised(&self, id: &Uuid) -> f32 {
        match self.scores.get(id) {
            Some(score) if self.reference > 0.0 => (score / self.reference).min(1.0) as f32,
            _ => 0.0,
        }
    }

    /// The `limit` best memories, best first (ties by id).
    pub fn top(&self, limit: usize) -> Vec<(Uuid, f64)> {
        let mut ranked: Vec<(Uuid, f64)> = self.scores.iter().map(|(id, score)| (*id, *score)).collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        ranked.truncate(limit);
        ranked
    }
}

/// The entity signal of memories linked to the query's entities: the IDF-weighted share of
/// the query entities a memory is linked to. An entity linked to most memories of the scope
/// (the user's own name in every memory) weighs little; a rare one weighs a lot; a query entity
/// that matches nothing still counts in the denominator, as unmatched query terms do for BM25.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EntityScores {
    signals: HashMap<Uuid, f32>,
}

impl EntityScores {
    /// Scores the links found for `probes` query entities in a scope of `doc_count` memories.
    pub fn new(hits: &[crate::store::EntityHit], probes: usize, doc_count: u64) -> Self {
        if probes == 0 || hits.is_empty() {
            return Self::default();
        }
        let mut linked: Vec<std::collections::HashSet<Uuid>> = vec![std::collections::HashSet::new(); probes];
        for hit in hits {
            if let Some(memories) = linked.get_mut(hit.probe) {
                memories.insert(hit.memory_id);
            }
        }
        let distinct: std::collections::HashSet<Uuid> = hits.iter().map(|hit| hit.memory_id).collect();
        let total = (doc_count as f64).max(distinct.len() as f64);
        let idf: Vec<f64> = linked
            .iter()
            .map(|memories| {
                let n = memories.len() as f64;
                (1.0 + (total - n + 0.5) / (n + 0.5)).ln()
            })
            .collect();
        let denominator: f64 = idf.iter().sum();
        let mut signals: HashMap<Uuid, f64> = HashMap::new();
        for (probe, memories) in linked.iter().enumerate() {
            for memory in memories {
                *signals.entry(*memory).or_default() += idf[probe];
            }
        }
        Self {
            signals: signals
                .into_iter()
                .map(|(id, sum)| (id, if denominator > 0.0 { (sum / denominator).min(1.0) as f32 } else { 0.0 }))
                .collect(),
        }
    }

    /// The entity signal of a memory, in [0, 1].
    pub fn signal(&self, id: &Uuid) -> f32 {
        self.signals.get(id).copied().unwrap_or(0.0)
    }

    /// The `limit` memories with the strongest signal (ties by id, newest first).
    pub fn top(&self, limit: usize) -> Vec<Uuid> {
        let mut ranked: Vec<(Uuid, f32)> = self.signals.iter().map(|(id, signal)| (*id, *signal)).collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| b.0.cmp(&a.0)));
        ranked.into_iter().take(limit).map(|(id, _)| id).collect()
    }
}

/// Where a result came from and how its score was made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ScoreExplanation {
    /// Cosine similarity, clipped to [0, 1].
    pub semantic: f32,
    /// Normalised BM25 in [0, 1].
    pub keyword: f32,
    /// Raw BM25 (IDF over the scope).
    pub bm25: f32,
    /// Share of the query's entities linked to the memory.
    pub entity: f32,
    /// Weight × signal for each signal; they add up to the score.
    pub contributions: Contributions,
    /// Retrievers that proposed the memory: `dense`, `keyword`, `entity`.
    pub sources: Vec<String>,
}

/// The weighted parts of a score.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Contributions {
    /// From embedding similarity.
    pub semantic: f32,
    /// From BM25.
    pub keyword: f32,
    /// From entity links.
    pub entity: f32,
}

/// True when a result clears `threshold`: its score or its semantic similarity reaches it.
///
/// The score of a hybrid result is a weighted sum, so a memory that matches only by meaning
/// scores `semantic_weight × cosine`: with a plain score threshold it would be hidden although
/// dense search (cosine ≥ threshold) returns it. With this rule every mode keeps what dense
/// search at the same threshold keeps, and memories that match by words or entities as well
/// only rank higher. In `dense` mode the score is the cosine and in `keyword` mode the cosine is
/// 0, so the rule is the plain one there.
pub fn clears_threshold(explanation: &ScoreExplanation, threshold: f32) -> bool {
    explanation.score() >= threshold || explanation.semantic >= threshold
}

impl ScoreExplanation {
    /// Builds the explanation of a candidate from its signals and the weights.
    pub fn new(signals: [f32; 3], bm25: f32, weights: [f32; 3], sources: Vec<String>) -> Self {
        let [semantic, keyword, entity] = signals;
        Self {
            semantic,
            keyword,
            bm25,
            entity,
            contributions: Contributions {
                semantic: weights[0] * semantic,
                keyword: weights[1] * keyword,
                entity: weights[2] * entity,
            },
            sources,
        }
    }

    /// The fused score: the sum of the contributions.
    pub fn score(&self) -> f32 {
        (self.contributions.semantic + self.contributions.keyword + self.contributions.entity).clamp(0.0, 1.0)
    }
}

/// Cosine similarity of two unit vectors, clipped to [0, 1] (0 when the dimensions differ).
pub fn semantic(query: &[f32], memory: &[f32]) -> f32 {
    if query.len() != memory.len() {
        return 0.0;
    }
    query.iter().zip(memory).map(|(a, b)| a * b).sum::<f32>().clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Posting;

    fn posting(id: Uuid, term: &str, tf: u32, doc_len: u32) -> Posting {
        Posting { id, term: term.to_owned(), tf, doc_len }
    }

    #[test]
    fn bm25_matches_a_hand_computed_score() {
        // Scope of 4 memories, mean length 5. "peanut" in 1 memory (tf 2, length 4), "allergi"
        // in 2 (tf 1, lengths 4 and 8).
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let postings = KeywordPostings {
            doc_count: 4,
            avg_doc_len: 5.0,
            postings: vec![posting(a, "peanut", 2, 4), posting(a, "allergi", 1, 4), posting(b, "allergi", 1, 8)],
        };
        let terms = vec!["peanut".to_owned(), "allergi".to_owned()];
        let bm25 = Bm25::score(&postings, &terms);
        let idf_peanut = (1.0_f64 + (4.0 - 1.0 + 0.5) / (1.0 + 0.5)).ln(); // ln(1 + 3.5/1.5)
        let idf_allergi = (1.0_f64 + (4.0 - 2.0 + 0.5) / (2.0 + 0.5)).ln(); // ln 2
        let norm = |length: f64| 1.2 * (1.0 - 0.75 + 0.75 * length / 5.0);
        let expected_a = idf_peanut * 2.0 * 2.2 / (2.0 + norm(4.0)) + idf_allergi * 2.2 / (1.0 + norm(4.0));
        let expected_b = idf_allergi * 2.2 / (1.0 + norm(8.0));
        assert!((bm25.scores[&a] - expected_a).abs() < 1e-9, "{} vs {expected_a}", bm25.scores[&a]);
        assert!((bm25.scores[&b] - expected_b).abs() < 1e-9);
        assert!((bm25.reference - (idf_peanut + idf_allergi)).abs() < 1e-12);
        assert_eq!(bm25.top(1), vec![(a, bm25.scores[&a])]);
        // Shorter-than-average memory with both terms beats the reference: capped at 1.
        assert!((bm25.normalised(&a) - 1.0).abs() < 1e-6);
        assert!(bm25.normalised(&b) > 0.0 && bm25.normalised(&b) < 0.5);
        assert_eq!(bm25.normalised(&Uuid::from_u128(3)), 0.0);
    }

    #[test]
    fn idf_is_over_the_scope_only() {
        // The same posting is rarer in a bigger scope: higher IDF, higher score.
        let id = Uuid::from_u128(7);
        let terms = vec!["kyoto".to_owned()];
        let small = KeywordPostings { doc_count: 2, avg_doc_len: 3.0, postings: vec![posting(id, "kyoto", 1, 3)] };
        let large = KeywordPostings { doc_count: 200, ..small.clone() };
        assert!(Bm25::score(&large, &terms).scores[&id] > Bm25::score(&small, &terms).scores[&id]);
        assert_eq!(Bm25::score(&KeywordPostings::default(), &terms), Bm25::default());
    }

    #[test]
    fn contributions_add_up_to_the_score() {
        let weights = RetrievalSettings::default().normalised_weights();
        assert!((weights.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        let explained = ScoreExplanation::new([0.42, 0.8, 0.5], 3.1, weights, vec!["dense".into()]);
        let parts = explained.contributions;
        assert!((parts.semantic + parts.keyword + parts.entity - explained.score()).abs() < 1e-6);
        // A keyword-only match still gets a positive score.
        let keyword_only = ScoreExplanation::new([0.0, 1.0, 0.0], 5.0, weights, vec!["keyword".into()]);
        assert!(keyword_only.score() > 0.0);
    }

    #[test]
    fn rare_entities_weigh_more_than_common_ones() {
        use crate::store::EntityHit;
        // Probe 0 ("Caroline") is linked to 90 of 100 memories, probe 1 ("Sweden") to one.
        let mut hits: Vec<EntityHit> =
            (0..90).map(|index| EntityHit { memory_id: Uuid::from_u128(index), probe: 0 }).collect();
        hits.push(EntityHit { memory_id: Uuid::from_u128(5), probe: 1 });
        let scores = EntityScores::new(&hits, 2, 100);
        let both = scores.signal(&Uuid::from_u128(5));
        let common_only = scores.signal(&Uuid::from_u128(6));
        assert!((both - 1.0).abs() < 1e-6, "linked to every query entity: {both}");
        assert!(common_only > 0.0 && common_only < 0.1, "the common entity alone: {common_only}");
        assert_eq!(scores.top(1), vec![Uuid::from_u128(5)]);
        assert_eq!(scores.signal(&Uuid::from_u128(500)), 0.0);
        assert_eq!(EntityScores::new(&[], 2, 100), EntityScores::default());
    }

    #[test]
    fn the_threshold_keeps_what_dense_search_keeps() {
        let weights = RetrievalSettings::default().normalised_weights();
        // Matches by meaning only: cosine 0.2 clears 0.1 although its weighted score does not.
        let meaning_only = ScoreExplanation::new([0.2, 0.0, 0.0], 0.0, weights, vec!["dense".into()]);
        assert!(meaning_only.score() < 0.1);
        assert!(clears_threshold(&meaning_only, 0.1));
        assert!(!clears_threshold(&meaning_only, 0.25));
        // Matches by words only: the score decides.
        let words_only = ScoreExplanation::new([0.0, 0.3, 0.0], 3.0, weights, vec!["keyword".into()]);
        assert!(clears_threshold(&words_only, 0.1));
        assert!(!clears_threshold(&words_only, 0.2));
        let nothing = ScoreExplanation::new([0.05, 0.05, 0.0], 0.5, weights, vec![]);
        assert!(!clears_threshold(&nothing, 0.1));
        assert!(clears_threshold(&nothing, 0.0));
    }

    #[test]
    fn weights_are_normalised_and_validated() {
        let settings = RetrievalSettings { semantic_weight: 2.0, ..RetrievalSettings::default() };
        assert!(settings.validate().is_err());
        let zero = RetrievalSettings {
            semantic_weight: 0.0,
            keyword_weight: 0.0,
            entity_weight: 0.0,
            ..RetrievalSettings::default()
        };
        assert_eq!(zero.normalised_weights(), [1.0, 0.0, 0.0]);
        let half = RetrievalSettings {
            semantic_weight: 0.5,
            keyword_weight: 0.5,
            entity_weight: 0.0,
            ..RetrievalSettings::default()
        };
        assert_eq!(half.normalised_weights(), [0.5, 0.5, 0.0]);
    }
}
