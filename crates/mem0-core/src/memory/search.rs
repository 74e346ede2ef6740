//! Searching memories: dense, keyword or hybrid retrieval, the threshold, and reranking.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use tracing::{instrument, warn, Instrument as _};
use uuid::Uuid;

use super::limits::{check_bound, MAX_QUERY_BYTES};
use super::{Memory, SearchMode, SearchOutcome, SearchRequest};
use crate::decay;
use crate::error::{Error, Result};
use crate::filter::{Condition, Field, Filter, Operand, Operator, Scalar, TextField, TimeField};
use crate::history::AuditAction;
use crate::retrieval::{self, ScoreExplanation};
use crate::scope::{Caller, Role};
use crate::state;
use crate::store::ScopedQuery;
use crate::temporal::{self, TimePreference};
use crate::text;
use crate::types::{MemoryItem, MemoryRecord, MemoryStatus};

/// Least fused hybrid score of the memory taken for the event a query's time refers to: a memory
/// sharing the event's words and meaning ("the move" → "I moved to San Francisco" ~0.3–0.6), not
/// one that merely shares neither (~0.05).
const ANCHOR_MIN_SCORE: f32 = 0.25;

impl Memory {
    /// Finds the memories of a scope that match a query best: hybrid (dense, BM25 and entity
    /// candidates, fused), dense or keyword retrieval, then the threshold and, when asked, a
    /// reranker.
    ///
    /// # Errors
    /// Validation (query, top_k, threshold), scope and embedder errors.
    #[instrument(skip_all, fields(tenant = %caller.tenant, top_k = request.top_k))]
    pub async fn search(&self, caller: &Caller, request: SearchRequest) -> Result<SearchOutcome> {
        caller.require(Role::Read)?;
        if request.scope.is_empty() {
            return Err(Error::validation("filters", "at least one of user_id, agent_id or run_id is required"));
        }
        caller.check_scope(&request.scope)?;
        let query_text = request.query.trim();
        text::reject_nul("query", query_text)?;
        if query_text.is_empty() {
            return Err(Error::validation("query", "cannot be empty"));
        }
        if query_text.len() > MAX_QUERY_BYTES {
            return Err(Error::validation("query", format!("at most {MAX_QUERY_BYTES} bytes")));
        }
        check_bound("top_k", request.top_k)?;
        if !(0.0..=1.0).contains(&request.threshold) {
            return Err(Error::validation("threshold", "must be between 0 and 1"));
        }
        let mut query = self.scoped_query(caller, request.scope.clone(), request.filter.clone(), request.show_expired);
        query.include_superseded = request.include_superseded;
        // Every store call of this search may share one look at the store's state.
        query.fresh_since = Some(std::time::Instant::now());
        let mut intent = request
            .temporal
            .then(|| temporal::parse(query_text, request.reference_time.unwrap_or_else(Utc::now)))
            .flatten();
        let mut warnings = Vec::new();
        if let Some(intent) = intent.as_mut() {
            if let Some(anchor) = intent.anchor.clone() {
                match self.find_anchor(&query, &anchor.phrase).await? {
                    Some((id, at)) => intent.anchor_at(id, at),
                    None => warnings.push(format!(
                        "no memory matched the event the query's time refers to (\"{}\"); the results are not limited by it",
                        anchor.phrase
                    )),
                }
            }
        }
        let anchored = intent.as_ref().and_then(|intent| intent.anchor.as_ref()).filter(|a| a.memory_id.is_some());
        let mut scored = match intent.as_ref().and_then(|intent| intent.from.zip(intent.to)) {
            Some((from, to)) if anchored.is_some() => {
                // Relative to an event, the range applies to the values of state keys only: the
                // event's time says which value held; other memories are ranked as if no time
                // were named (a hard range there lost more LoCoMo evidence than it excluded).
                // Before the event a key's value is the one it had just before, not every earlier
                // one ("where did I live before the move?").
                let keyed_from = match anchored {
                    Some(anchor) if anchor.side == temporal::Side::Before => to - chrono::Duration::microseconds(1),
                    _ => from,
                };
                // As a filter, so the stores apply it and a search still gets `top_k` results.
                let window = Filter::Or(vec![Filter::Not(Box::new(keyed())), keyed_in(keyed_from, to)]);
                let everything = ScopedQuery {
                    include_superseded: true,
                    filter: Some(match query.filter.clone() {
                        Some(filter) => Filter::And(vec![filter, window]),
                        None => window,
                    }),
                    ..query.clone()
                };
                self.retrieve(&everything, query_text, &request, &mut None).await?
            }
            Some((from, to)) => {
                // The past is asked for: values superseded since count, within the range.
                let window = time_window(from, to);
                let windowed = ScopedQuery {
                    include_superseded: true,
                    filter: Some(match query.filter.clone() {
                        Some(filter) => Filter::And(vec![filter, window]),
                        None => window,
                    }),
                    ..query.clone()
                };
                let mut vector = None;
                let found = self.retrieve(&windowed, query_text, &request, &mut vector).await?;
                if found.is_empty() {
                    warnings.push(format!(
                        "nothing matched the time the query names ({}); the results are not limited to it",
                        intent.as_ref().map_or("", |intent| intent.cue.as_str())
                    ));
                    // The query's embedding is reused.
                    self.retrieve(&query, query_text, &request, &mut vector).await?
                } else {
                    found
                }
            }
            None => {
                if intent.as_ref().and_then(|intent| intent.preference) == Some(TimePreference::Oldest) {
                    // "The first time": earlier values of a state key count.
                    query.include_superseded = true;
                }
                self.retrieve(&query, query_text, &request, &mut None).await?
            }
        };
        if let Some(preference) = intent.as_ref().and_then(|intent| intent.preference) {
            prefer_by_age(&mut scored, preference);
        }
        if request.decay.unwrap_or_else(|| self.decay.applies_to(&caller.tenant)) && !scored.is_empty() {
            let ids: Vec<Uuid> = scored.iter().map(|(record, _)| record.id).collect();
            let last_reads = self.store.last_reads(&caller.tenant, &ids).await?;
            let now = Utc::now();
            for (record, explanation) in &mut scored {
                // Never read: idle since it was stored.
                let last = last_reads.get(&record.id).copied().unwrap_or(record.created_at).max(record.created_at);
                let idle_days = (now - last).num_seconds() as f64 / 86_400.0;
                explanation.decay_factor = Some(decay::factor(idle_days, self.decay.idle_days));
            }
        }
        scored.retain(|(_, explanation)| retrieval::clears_threshold(explanation, request.threshold));
        scored.sort_by(|a, b| b.1.score().total_cmp(&a.1.score()).then_with(|| a.0.id.cmp(&b.0.id)));
        let mut rerank_scores: Option<Vec<f32>> = None;
        if request.rerank {
            match &self.reranker {
                None => warnings.push(
                    "rerank was asked for but no reranker is configured (memory.reranker); results are in fused order"
                        .to_owned(),
                ),
                Some(_) if scored.is_empty() => {}
                Some(reranker) => {
                    scored.truncate(self.rerank_candidates.max(request.top_k));
                    let documents: Vec<String> = scored.iter().map(|(record, _)| record.memory.clone()).collect();
                    let span = tracing::info_span!("rerank", candidates = documents.len());
                    match reranker.rerank_with_cost(query_text, &documents).instrument(span).await {
                        Ok((scores, cost)) => {
                            if let Some(cost) = cost {
                                self.note_llm_call(&caller.tenant, cost.provider, &cost.model, "rerank", cost.usage);
                            }
                            rerank_scores = Some(scores);
                        }
                        Err(error) => {
                            warn!(reranker = reranker.name(), %error, "reranker failed; keeping the fused order");
                            warnings.push(format!(
                                "the reranker failed ({}); results are in fused order",
                                error.kind.code()
                            ));
                        }
                    }
                }
            }
        }
        let mut ranked: Vec<(Arc<MemoryRecord>, ScoreExplanation, Option<f32>)> = scored
            .into_iter()
            .enumerate()
            .map(|(index, (record, explanation))| {
                (record, explanation, rerank_scores.as_ref().and_then(|scores| scores.get(index).copied()))
            })
            .collect();
        if rerank_scores.is_some() {
            // Stable: equal rerank scores keep the fused order.
            ranked.sort_by(|a, b| b.2.unwrap_or(0.0).total_cmp(&a.2.unwrap_or(0.0)));
        }
        // Values of one key that the resolver could not order by time: the more trusted first.
        state::order_conflicts(&mut ranked, |(record, ..)| {
            let key = record.state.state_key.as_ref().filter(|_| record.state.status == MemoryStatus::Conflict)?;
            let ids = [&record.scope.user_id, &record.scope.agent_id, &record.scope.run_id];
            let scope = ids.map(|id| id.as_deref().unwrap_or_default());
            let provenance = &record.provenance;
            Some((
                format!("{}\u{1f}{key}", scope.join("\u{1f}")),
                provenance.confidence,
                provenance.source_type,
                record.id,
            ))
        });
        // Only what is returned is copied out of the rows the store shares with its cache.
        ranked.truncate(request.top_k);
        let results: Vec<MemoryItem> = ranked
            .into_iter()
            .map(|(record, explanation, rerank_score)| MemoryItem {
                score: Some(explanation.score()),
                rerank_score,
                explain: request.explain.then_some(explanation),
                ..MemoryItem::from(Arc::unwrap_or_clone(record))
            })
            .collect();
        self.audit(caller, AuditAction::SearchHit, results.iter().map(|item| item.id));
        self.note_reads(caller, results.iter().map(|item| item.id));
        Ok(SearchOutcome { results, warnings, temporal: intent })
    }

    /// The memory that best matches `phrase` (an event a query's time refers to: "the move") in
    /// the query's scope, superseded values included, by hybrid retrieval (so "move" finds
    /// "moved" by its stem as well as by meaning), with its time (event time, else when it was
    /// stored); `None` when no memory's fused score reaches [`ANCHOR_MIN_SCORE`].
    async fn find_anchor(&self, query: &ScopedQuery, phrase: &str) -> Result<Option<(Uuid, DateTime<Utc>)>> {
        let scope = ScopedQuery { include_superseded: true, ..query.clone() };
        let found = self.retriever.hybrid(&scope, phrase, 1, &mut None).await?;
        Ok(found
            .into_iter()
            .filter(|(_, explanation)| explanation.score() >= ANCHOR_MIN_SCORE)
            .max_by(|a, b| a.1.score().total_cmp(&b.1.score()).then_with(|| b.0.id.cmp(&a.0.id)))
            .map(|(record, _)| (record.id, record.effective_time())))
    }

    /// Candidates of `query` with their score explanations, by the request's mode. The query's
    /// embedding is taken from `vector` when there (a second retrieval of one search), else made
    /// and left there.
    async fn retrieve(
        &self,
        query: &ScopedQuery,
        query_text: &str,
        request: &SearchRequest,
        vector: &mut Option<Vec<f32>>,
    ) -> Result<Vec<(Arc<MemoryRecord>, ScoreExplanation)>> {
        Ok(match request.mode {
            SearchMode::Dense => {
                if vector.is_none() {
                    *vector = Some(self.embedder.embed(query_text).await?);
                }
                let vector = vector.as_deref().unwrap_or_default();
                let hits = self.store.search(query, vector, request.top_k, request.threshold).await?;
                hits.into_iter()
                    .map(|hit| {
                        let explanation =
                            ScoreExplanation::new([hit.score, 0.0, 0.0], 0.0, [1.0, 0.0, 0.0], vec!["dense".into()]);
                        (hit.record, explanation)
                    })
                    .collect()
            }
            SearchMode::Keyword => {
                let (bm25, top) = self.retriever.bm25(query, query_text, request.top_k).await?;
                let ids: Vec<Uuid> = top.into_iter().map(|(id, _)| id).collect();
                self.store
                    .get_candidates(query, &ids)
                    .await?
                    .into_iter()
                    .map(|record| {
                        let raw = bm25.score_text(&record.text_lemmatized);
                        let signals = [0.0, bm25.normalised(raw), 0.0];
                        (record, ScoreExplanation::new(signals, raw as f32, [0.0, 1.0, 0.0], vec!["keyword".into()]))
                    })
                    .collect()
            }
            SearchMode::Hybrid => self.retriever.hybrid(query, query_text, request.top_k, vector).await?,
        })
    }
}

/// Memories that were true at some moment in `[from, to)`: a value of a state key from its event
/// time (else observation time) until its `valid_to`; any other memory by its event time (else
/// observation time) alone.
fn time_window(from: DateTime<Utc>, to: DateTime<Utc>) -> Filter {
    Filter::Or(vec![
        Filter::And(vec![
            Filter::Not(Box::new(keyed())),
            condition(Field::Time(TimeField::EventTime), Operator::Gte, Scalar::Time(from)),
            condition(Field::Time(TimeField::EventTime), Operator::Lt, Scalar::Time(to)),
        ]),
        keyed_in(from, to),
    ])
}

fn condition(field: Field, op: Operator, value: Scalar) -> Filter {
    Filter::Condition(Condition { field, op, value: Operand::One(value) })
}

/// Memories with a state key.
fn keyed() -> Filter {
    condition(Field::Text(TextField::StateKey), Operator::Gte, Scalar::Text(String::new()))
}

/// Values of a state key that held at some moment in `[from, to)`: from their event time (else
/// observation time) until their `valid_to`.
fn keyed_in(from: DateTime<Utc>, to: DateTime<Utc>) -> Filter {
    Filter::And(vec![
        keyed(),
        condition(Field::Time(TimeField::EventTime), Operator::Lt, Scalar::Time(to)),
        // A value still current has no end (null compares false, and NOT makes it true).
        Filter::Not(Box::new(condition(Field::Time(TimeField::ValidTo), Operator::Lte, Scalar::Time(from)))),
    ])
}

/// Re-weighs fused scores by age among the candidates: the newest (or, for `Oldest`, the oldest)
/// ×1.1, the other end ×0.9, linear between; recorded as the explanation's `time_factor`.
fn prefer_by_age(scored: &mut [(Arc<MemoryRecord>, ScoreExplanation)], preference: TimePreference) {
    let times: Vec<i64> = scored.iter().map(|(record, _)| record.effective_time().timestamp_micros()).collect();
    let (Some(oldest), Some(newest)) = (times.iter().min(), times.iter().max()) else { return };
    let span = (newest - oldest) as f64;
    for ((_, explanation), time) in scored.iter_mut().zip(&times) {
        let age = if span > 0.0 { (time - oldest) as f64 / span } else { 1.0 };
        let newness = match preference {
            TimePreference::Recent => age,
            TimePreference::Oldest => 1.0 - age,
        };
        explanation.time_factor = Some((0.9 + 0.2 * newness) as f32);
    }
}
