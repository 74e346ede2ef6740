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

pub use self::hybrid::Retriever;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::store::{FastMap, KeywordStats};

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

/// BM25 of one query over one scope: the query terms' IDFs and the scope's mean length, from
/// which any memory's score follows from its analysed text ([`Bm25::score_text`]). The store
/// finds the best-scoring memories with the same formula ([`Bm25::sql_weights`]), so that only
/// those, not every posting, leave the database.
///
/// The statistics (memory count, mean length, document frequencies) are those of the scope —
/// tenant and scope ids — as a search engine's are those of its index: expiration and metadata
/// filters choose which memories are scored, not how rare a word is. So a memory scores the same
/// whatever filter finds it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Bm25 {
    /// IDF of each distinct query term, sorted by term.
    idf: Vec<(String, f64)>,
    /// Mean analysed length over the scope (1 when unknown).
    avg_doc_len: f64,
    /// The normaliser: BM25 of an average-length memory holding every query term once (the sum
    /// of the query terms' IDFs).
    pub reference: f64,
    /// Memories in the scope.
    pub doc_count: u64,
}

/// IDF of a term (or entity) found in `df` of `total` memories (the "plus one" form: never
/// negative).
pub fn idf(df: f64, total: f64) -> f64 {
    (1.0 + (total - df + 0.5) / (df + 0.5)).ln()
}

impl Bm25 {
    /// BM25 for `terms` (distinct) over a scope with `stats`.
    pub fn new(stats: &KeywordStats, terms: &[String]) -> Self {
        if stats.doc_count == 0 || terms.is_empty() {
            return Self { doc_count: stats.doc_count, avg_doc_len: 1.0, ..Self::default() };
        }
        let total = stats.doc_count as f64;
        let mut idf: Vec<(String, f64)> = terms
            .iter()
            .map(|term| {
                let df = stats.document_frequency.get(term).copied().unwrap_or(0) as f64;
                (term.clone(), idf(df.min(total), total))
            })
            .collect();
        idf.sort_by(|a, b| a.0.cmp(&b.0));
        idf.dedup_by(|a, b| a.0 == b.0);
        let reference = idf.iter().map(|(_, idf)| idf).sum();
        let avg_doc_len = if stats.avg_doc_len > 0.0 { stats.avg_doc_len } else { 1.0 };
        Self { idf, avg_doc_len, reference, doc_count: stats.doc_count }
    }

    /// The raw BM25 of a memory from its analysed text (one pass over its terms, counting only
    /// the query's; summed in term order).
    pub fn score_text(&self, text_lemmatized: &str) -> f64 {
        if self.idf.is_empty() {
            return 0.0;
        }
        let mut frequencies = vec![0u32; self.idf.len()];
        let mut length = 0u32;
        let mut count = |term: &str| {
            length = length.saturating_add(1);
            // A few query terms: a scan comparing lengths first beats a search of the sorted list.
            if let Some(at) = self.idf.iter().position(|(known, _)| known.len() == term.len() && known == term) {
                frequencies[at] += 1;
            }
        };
        // ASCII without a vertical tab (the one ASCII character `split_whitespace` splits at and
        // `split_ascii_whitespace` does not) splits alike, without decoding characters.
        if text_lemmatized.is_ascii() && !text_lemmatized.contains('\u{b}') {
            text_lemmatized.split_ascii_whitespace().for_each(&mut count);
        } else {
            text_lemmatized.split_whitespace().for_each(&mut count);
        }
        let length = f64::from(length);
        self.idf
            .iter()
            .zip(frequencies)
            .filter(|(_, tf)| *tf > 0)
            .map(|((_, idf), tf)| idf * self.saturation(f64::from(tf), length))
            .sum()
    }

    /// Term-frequency saturation with length normalisation.
    fn saturation(&self, tf: f64, length: f64) -> f64 {
        tf * (BM25_K1 + 1.0) / (tf + BM25_K1 * (1.0 - BM25_B + BM25_B * length / self.avg_doc_len))
    }

    /// The same score in the shape a store sums over postings:
    /// `Σ weight(term) × tf / (tf + base + per_length × doc_len)`; returns the weight of each
    /// term (`idf × (k1 + 1)`), `base` and `per_length`.
    pub fn sql_weights(&self) -> (Vec<(String, f64)>, f64, f64) {
        let weights: Vec<(String, f64)> =
            self.idf.iter().map(|(term, idf)| (term.clone(), idf * (BM25_K1 + 1.0))).collect();
        (weights, BM25_K1 * (1.0 - BM25_B), BM25_K1 * BM25_B / self.avg_doc_len)
    }

    /// The normalised keyword signal of a raw score, in [0, 1].
    pub fn normalised(&self, score: f64) -> f32 {
        if self.reference > 0.0 && score > 0.0 {
            (score / self.reference).min(1.0) as f32
        } else {
            0.0
        }
    }
}

/// The entity signal of memories linked to the query's entities: the IDF-weighted share of
/// the query entities a memory is linked to. An entity linked to most memories of the scope
/// (the user's own name in every memory) weighs little; a rare one weighs a lot; a query entity
/// that matches nothing still counts in the denominator, as unmatched query terms do for BM25.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EntityScores {
    /// Weight of each query entity (its IDF over the scope).
    weights: Vec<f64>,
    /// Probes each scored memory is linked to.
    linked: FastMap<Uuid, Vec<usize>>,
}

impl EntityScores {
    /// Weights of the query entities from how many memories of a scope of `doc_count` each is
    /// linked to (`linked[probe]`).
    pub fn weights(linked: &[u64], doc_count: u64) -> Vec<f64> {
        let most = linked.iter().copied().max().unwrap_or(0);
        let total = doc_count.max(most) as f64;
        linked.iter().map(|n| idf(*n as f64, total)).collect()
    }

    /// Scores memories by their `hits` (memory, probe) given the query entities' `weights`.
    pub fn new(weights: Vec<f64>, hits: &[crate::store::EntityHit]) -> Self {
        let mut linked: FastMap<Uuid, Vec<usize>> = FastMap::default();
        for hit in hits {
            if hit.probe < weights.len() {
                let probes = linked.entry(hit.memory_id).or_default();
                if !probes.contains(&hit.probe) {
                    probes.push(hit.probe);
                }
            }
        }
        Self { weights, linked }
    }

    /// The entity signal of a memory, in [0, 1].
    pub fn signal(&self, id: &Uuid) -> f32 {
        let denominator: f64 = self.weights.iter().sum();
        match self.linked.get(id) {
            Some(probes) if denominator > 0.0 => {
                let sum: f64 = probes.iter().map(|probe| self.weights[*probe]).sum();
                (sum / denominator).min(1.0) as f32
            }
            _ => 0.0,
        }
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
    /// The query asked for the newest or the oldest (see [`crate::temporal`]): the fused score
    /// times this factor, 0.9–1.1 by the memory's age among the results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_factor: Option<f32>,
    /// Decay by use was applied (see [`crate::decay`]): the score times this factor, 0.3 (long
    /// idle) to 1.5 (just read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decay_factor: Option<f32>,
    /// The query was read as asking for this memory's state key (hybrid search): the similarity
    /// of the query to the key's words, which the semantic signal is at least.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_match: Option<f32>,
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
            time_factor: None,
            decay_factor: None,
            key_match: None,
        }
    }

    /// The fused score: the sum of the contributions, times the time and decay factors when there
    /// are any.
    pub fn score(&self) -> f32 {
        let fused = self.contributions.semantic + self.contributions.keyword + self.contributions.entity;
        (fused * self.time_factor.unwrap_or(1.0) * self.decay_factor.unwrap_or(1.0)).clamp(0.0, 1.0)
    }
}

/// Cosine similarity of two unit vectors, clipped to [0, 1] (0 when the dimensions differ).
pub fn semantic(query: &[f32], memory: &[f32]) -> f32 {
    if query.len() != memory.len() {
        return 0.0;
    }
    crate::store::dot(query, memory).clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    fn stats(doc_count: u64, avg_doc_len: f64, df: &[(&str, u64)]) -> KeywordStats {
        KeywordStats {
            doc_count,
            avg_doc_len,
            document_frequency: df.iter().map(|(term, n)| ((*term).to_owned(), *n)).collect(),
        }
    }

    #[test]
    fn bm25_matches_a_hand_computed_score() {
        // Scope of 4 memories, mean length 5. "peanut" in 1 memory, "allergi" in 2.
        let terms = vec!["peanut".to_owned(), "allergi".to_owned()];
        let bm25 = Bm25::new(&stats(4, 5.0, &[("peanut", 1), ("allergi", 2)]), &terms);
        let idf_peanut = (1.0_f64 + (4.0 - 1.0 + 0.5) / (1.0 + 0.5)).ln(); // ln(1 + 3.5/1.5)
        let idf_allergi = (1.0_f64 + (4.0 - 2.0 + 0.5) / (2.0 + 0.5)).ln(); // ln 2
        let norm = |length: f64| 1.2 * (1.0 - 0.75 + 0.75 * length / 5.0);
        // a: tf(peanut) 2, tf(allergi) 1, length 4; b: allergi once, length 8.
        let a = "peanut allergi peanut other";
        let b = "allergi x x x x x x x";
        let expected_a = idf_peanut * 2.0 * 2.2 / (2.0 + norm(4.0)) + idf_allergi * 2.2 / (1.0 + norm(4.0));
        let expected_b = idf_allergi * 2.2 / (1.0 + norm(8.0));
        assert!((bm25.score_text(a) - expected_a).abs() < 1e-9, "{} vs {expected_a}", bm25.score_text(a));
        assert!((bm25.score_text(b) - expected_b).abs() < 1e-9);
        assert!((bm25.reference - (idf_peanut + idf_allergi)).abs() < 1e-12);
        // The shape stores sum over postings gives the same number.
        let (weights, base, per_length) = bm25.sql_weights();
        let weight = |term: &str| weights.iter().find(|(t, _)| t == term).map(|(_, w)| *w).unwrap_or(0.0);
        let summed = weight("peanut") * 2.0 / (2.0 + base + per_length * 4.0)
            + weight("allergi") * 1.0 / (1.0 + base + per_length * 4.0);
        assert!((summed - expected_a).abs() < 1e-9);
        // Shorter-than-average memory with both terms beats the reference: capped at 1.
        assert!((bm25.normalised(bm25.score_text(a)) - 1.0).abs() < 1e-6);
        let normalised_b = bm25.normalised(bm25.score_text(b));
        assert!(normalised_b > 0.0 && normalised_b < 0.5);
        assert_eq!(bm25.score_text("unrelated words"), 0.0);
        assert_eq!(bm25.normalised(0.0), 0.0);
    }

    #[test]
    fn a_memory_scores_alike_whatever_whitespace_separates_its_terms() {
        // The postings a store sums are split by `split_whitespace` (`term_frequencies`,
        // `doc_len`); `score_text` splits ASCII faster, and must split the same.
        let terms = vec!["peanut".to_owned(), "allergi".to_owned(), "café".to_owned()];
        let bm25 = Bm25::new(&stats(4, 5.0, &[("peanut", 1), ("allergi", 2), ("café", 1)]), &terms);
        let spaced = bm25.score_text("peanut allergi peanut other café");
        assert!(spaced > 0.0);
        for text in [
            "peanut\tallergi\npeanut\r\nother café",
            "peanut\u{b}allergi\u{c}peanut other café",
            "peanut\u{a0}allergi\u{2003}peanut  other\u{85}café",
            "  peanut allergi peanut other café  ",
        ] {
            assert_eq!(crate::store::doc_len(text), 5, "{text:?}");
            assert_eq!(bm25.score_text(text), spaced, "{text:?}");
        }
        // A vertical tab inside ASCII text separates terms too (`split_ascii_whitespace` would not).
        assert_eq!(bm25.score_text("peanut\u{b}allergi"), bm25.score_text("peanut allergi"));
    }

    #[test]
    fn idf_is_over_the_scope_only() {
        // The same term is rarer in a bigger scope: higher IDF, higher score.
        let terms = vec!["kyoto".to_owned()];
        let small = Bm25::new(&stats(2, 3.0, &[("kyoto", 1)]), &terms);
        let large = Bm25::new(&stats(200, 3.0, &[("kyoto", 1)]), &terms);
        assert!(large.score_text("kyoto a b") > small.score_text("kyoto a b"));
        let empty = Bm25::new(&KeywordStats::default(), &terms);
        assert_eq!(empty.score_text("kyoto"), 0.0);
        assert_eq!(empty.reference, 0.0);
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
        let weights = EntityScores::weights(&[90, 1], 100);
        let hits = [
            EntityHit { memory_id: Uuid::from_u128(5), probe: 0 },
            EntityHit { memory_id: Uuid::from_u128(5), probe: 1 },
            EntityHit { memory_id: Uuid::from_u128(5), probe: 1 },
            EntityHit { memory_id: Uuid::from_u128(6), probe: 0 },
            EntityHit { memory_id: Uuid::from_u128(7), probe: 9 },
        ];
        let scores = EntityScores::new(weights, &hits);
        let both = scores.signal(&Uuid::from_u128(5));
        let common_only = scores.signal(&Uuid::from_u128(6));
        assert!((both - 1.0).abs() < 1e-6, "linked to every query entity (a repeated hit counts once): {both}");
        assert!(common_only > 0.0 && common_only < 0.1, "the common entity alone: {common_only}");
        assert_eq!(scores.signal(&Uuid::from_u128(7)), 0.0, "no such probe");
        assert_eq!(scores.signal(&Uuid::from_u128(500)), 0.0);
        // A query entity that matches nothing still weighs in the denominator.
        let unmatched = EntityScores::new(EntityScores::weights(&[1, 0], 100), &hits[..1]);
        let share = unmatched.signal(&Uuid::from_u128(5));
        assert!(share > 0.4 && share < 0.6, "{share}");
        assert_eq!(EntityScores::new(Vec::new(), &hits).signal(&Uuid::from_u128(5)), 0.0);
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
