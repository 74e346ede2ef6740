//! Searching memories: dense, keyword or hybrid retrieval, the threshold, and reranking.

use tracing::{instrument, warn};
use uuid::Uuid;

use super::limits::{check_bound, MAX_QUERY_BYTES};
use super::{Memory, SearchMode, SearchOutcome, SearchRequest};
use crate::error::{Error, Result};
use crate::history::AuditAction;
use crate::retrieval::{self, ScoreExplanation};
use crate::scope::{Caller, Role};
use crate::text;
use crate::types::{MemoryItem, MemoryRecord};

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
        let mut query = self.scoped_query(caller, request.scope, request.filter, request.show_expired);
        query.include_superseded = request.include_superseded;
        let mut scored: Vec<(MemoryRecord, ScoreExplanation)> = match request.mode {
            SearchMode::Dense => {
                let vector = self.embedder.embed(query_text).await?;
                let hits = self.store.search(&query, &vector, request.top_k, request.threshold).await?;
                hits.into_iter()
                    .map(|hit| {
                        let explanation =
                            ScoreExplanation::new([hit.score, 0.0, 0.0], 0.0, [1.0, 0.0, 0.0], vec!["dense".into()]);
                        (hit.record, explanation)
                    })
                    .collect()
            }
            SearchMode::Keyword => {
                let (bm25, top) = self.retriever.bm25(&query, query_text, request.top_k).await?;
                let ids: Vec<Uuid> = top.into_iter().map(|(id, _)| id).collect();
                self.store
                    .get_many(&caller.tenant, &ids)
                    .await?
                    .into_iter()
                    .map(|record| {
                        let raw = bm25.score_text(&record.text_lemmatized);
                        let signals = [0.0, bm25.normalised(raw), 0.0];
                        (record, ScoreExplanation::new(signals, raw as f32, [0.0, 1.0, 0.0], vec!["keyword".into()]))
                    })
                    .collect()
            }
            SearchMode::Hybrid => self.retriever.hybrid(&query, query_text, request.top_k).await?,
        };
        scored.retain(|(_, explanation)| retrieval::clears_threshold(explanation, request.threshold));
        scored.sort_by(|a, b| b.1.score().total_cmp(&a.1.score()).then_with(|| a.0.id.cmp(&b.0.id)));
        let mut warnings = Vec::new();
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
                    match reranker.rerank(query_text, &documents).await {
                        Ok(scores) => rerank_scores = Some(scores),
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
        let mut results: Vec<MemoryItem> = scored
            .into_iter()
            .enumerate()
            .map(|(index, (record, explanation))| MemoryItem {
                score: Some(explanation.score()),
                rerank_score: rerank_scores.as_ref().and_then(|scores| scores.get(index).copied()),
                explain: request.explain.then_some(explanation),
                ..MemoryItem::from(record)
            })
            .collect();
        if rerank_scores.is_some() {
            // Stable: equal rerank scores keep the fused order.
            results.sort_by(|a, b| b.rerank_score.unwrap_or(0.0).total_cmp(&a.rerank_score.unwrap_or(0.0)));
        }
        results.truncate(request.top_k);
        self.audit(caller, AuditAction::SearchHit, results.iter().map(|item| item.id));
        Ok(SearchOutcome { results, warnings })
    }
}
