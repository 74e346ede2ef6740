//! Rerankers: a second opinion on the best search candidates. One client for HTTP rerank APIs
//! (the Cohere request shape, which Jina, Voyage-compatible gateways, vLLM and Infinity also
//! speak, and Hugging Face TEI's `/rerank`), and one that asks the configured LLM.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::http::{check_range, check_url, ProviderHttp, RetryPolicy};
use super::llm::{ChatMessage, Llm, LlmRequest};
use crate::error::{ProviderError, ProviderErrorKind, Result};

/// Longest document text sent to a reranker, in characters.
const MAX_DOCUMENT_CHARS: usize = 4000;

/// Scores documents against a query.
#[async_trait]
pub trait Reranker: Debug + Send + Sync + 'static {
    /// Name for logs and `explain`.
    fn name(&self) -> &str;

    /// Relevance of each document to the query, in [0, 1], in document order.
    ///
    /// # Errors
    /// A classified [`ProviderError`].
    async fn rerank(&self, query: &str, documents: &[String]) -> Result<Vec<f32>, ProviderError>;

    /// Like [`Reranker::rerank`], with the LLM call it made (for token accounting), if any.
    ///
    /// # Errors
    /// A classified [`ProviderError`].
    async fn rerank_with_cost(
        &self,
        query: &str,
        documents: &[String],
    ) -> Result<(Vec<f32>, Option<RerankCost>), ProviderError> {
        Ok((self.rerank(query, documents).await?, None))
    }
}

/// The LLM call of a rerank, as the provider reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RerankCost {
    /// The LLM's provider.
    pub provider: &'static str,
    /// Its model.
    pub model: String,
    /// The tokens of the call.
    pub usage: crate::providers::llm::TokenUsage,
}

/// Which reranker to build.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RerankerConfig {
    /// The provider in use.
    #[serde(default)]
    pub provider: RerankerProvider,
    /// Settings of the HTTP reranker.
    #[serde(default)]
    pub http: HttpRerankerConfig,
    /// Candidates (best fused first) sent to the reranker.
    #[serde(default = "default_candidates")]
    pub candidates: usize,
}

fn default_candidates() -> usize {
    30
}

impl RerankerConfig {
    /// Checks the values; `prefix` names the section in messages (`memory.reranker`).
    ///
    /// # Errors
    /// A message naming the bad key.
    pub fn validate(&self, prefix: &str) -> std::result::Result<(), String> {
        check_range(&format!("{prefix}.candidates"), self.candidates, 1, 1000)?;
        let http = &self.http;
        check_url(&format!("{prefix}.http.base_url"), http.base_url.as_deref())?;
        check_range(&format!("{prefix}.http.timeout_secs"), http.timeout_secs, 1, 600)?;
        http.retry.validate(&format!("{prefix}.http.retry"))
    }
}

/// The reranker providers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RerankerProvider {
    /// No reranker: `rerank: true` returns the fused order with a warning.
    #[default]
    None,
    /// An HTTP rerank API.
    Http,
    /// The configured LLM scores the candidates in one call.
    Llm,
}

/// Request shape of an HTTP rerank API.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RerankFormat {
    /// `POST {base}/rerank` with `{model, query, documents, top_n}` → `{results: [{index,
    /// relevance_score}]}` (Cohere v2, Jina, vLLM, Infinity).
    #[default]
    Cohere,
    /// `POST {base}/rerank` with `{query, texts}` → `[{index, score}]` (Hugging Face TEI).
    Tei,
}

/// Settings of the HTTP reranker.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpRerankerConfig {
    /// API root, e.g. `https://api.cohere.com/v2`, `https://api.jina.ai/v1`, `http://tei:8080`.
    #[serde(default)]
    pub base_url: Option<String>,
    /// Bearer key (env RERANKER_API_KEY). Never serialised.
    #[serde(default, skip_serializing)]
    pub api_key: Option<SecretString>,
    /// Model name (not sent to TEI).
    #[serde(default = "default_model")]
    pub model: String,
    /// Request shape.
    #[serde(default)]
    pub format: RerankFormat,
    /// Timeout of one attempt, in seconds.
    #[serde(default = "default_timeout_secs")]
    pub timeout_secs: u64,
    /// Retries.
    #[serde(default = "quick_retry")]
    pub retry: RetryPolicy,
}

fn default_model() -> String {
    "rerank-v3.5".to_owned()
}
fn default_timeout_secs() -> u64 {
    10
}
/// A search waits for its reranker: retry once, briefly.
fn quick_retry() -> RetryPolicy {
    RetryPolicy { max_attempts: 2, base_delay_ms: 200, max_delay_ms: 1000 }
}

impl Default for HttpRerankerConfig {
    fn default() -> Self {
        Self {
            base_url: None,
            api_key: None,
            model: default_model(),
            format: RerankFormat::Cohere,
            timeout_secs: default_timeout_secs(),
            retry: quick_retry(),
        }
    }
}

/// Builds the configured reranker; the LLM reranker needs the LLM.
///
/// # Errors
/// [`crate::Error::Config`] for a missing base URL, an invalid key, or `llm` without an LLM.
pub fn build_reranker(config: &RerankerConfig, llm: Option<&Arc<dyn Llm>>) -> Result<Option<Arc<dyn Reranker>>> {
    Ok(match config.provider {
        RerankerProvider::None => None,
        RerankerProvider::Http => Some(Arc::new(HttpReranker::new(config.http.clone())?)),
        RerankerProvider::Llm => {
            let llm = llm.ok_or_else(|| {
                crate::Error::Config("reranker.provider = \"llm\" needs an LLM (memory.llm)".to_owned())
            })?;
            Some(Arc::new(LlmReranker { llm: Arc::clone(llm) }))
        }
    })
}

fn truncate(text: &str) -> String {
    text.chars().take(MAX_DOCUMENT_CHARS).collect()
}

/// A client for HTTP rerank APIs.
#[derive(Debug)]
pub struct HttpReranker {
    http: ProviderHttp,
    url: String,
    headers: HeaderMap,
    api_key: Option<SecretString>,
    model: String,
    format: RerankFormat,
}

#[derive(Deserialize)]
struct CohereResponse {
    results: Vec<CohereResult>,
}

#[derive(Deserialize)]
struct CohereResult {
    index: usize,
    relevance_score: f32,
}

#[derive(Deserialize)]
struct TeiResult {
    index: usize,
    score: f32,
}

impl HttpReranker {
    /// Builds the client; no request is made.
    ///
    /// # Errors
    /// [`crate::Error::Config`] for a missing or invalid base URL or key.
    pub fn new(config: HttpRerankerConfig) -> Result<Self> {
        let base = config.base_url.as_deref().ok_or_else(|| {
            crate::Error::Config("memory.reranker.http.base_url is required for the http reranker".to_owned())
        })?;
        let url = format!("{}/rerank", base.trim_end_matches('/'));
        reqwest::Url::parse(&url)
            .map_err(|error| crate::Error::Config(format!("invalid reranker base_url {base}: {error}")))?;
        let mut headers = HeaderMap::new();
        if let Some(key) = &config.api_key {
            let mut value = HeaderValue::from_str(&format!("Bearer {}", key.expose_secret()))
                .map_err(|_| crate::Error::Config("the reranker api key is not a valid header value".into()))?;
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        Ok(Self {
            http: ProviderHttp::new("reranker", "rerank", Duration::from_secs(config.timeout_secs), config.retry)?,
            url,
            headers,
            api_key: config.api_key,
            model: config.model,
            format: config.format,
        })
    }
}

#[async_trait]
impl Reranker for HttpReranker {
    fn name(&self) -> &str {
        &self.model
    }

    async fn rerank(&self, query: &str, documents: &[String]) -> Result<Vec<f32>, ProviderError> {
        let secret = self.api_key.as_ref().map(|key| key.expose_secret().to_owned()).unwrap_or_default();
        let documents: Vec<String> = documents.iter().map(|document| truncate(document)).collect();
        let scored: Vec<(usize, f32)> = match self.format {
            RerankFormat::Cohere => {
                let body =
                    json!({"model": self.model, "query": query, "documents": documents, "top_n": documents.len()});
                let response: CohereResponse = self.http.post_json(&self.url, &self.headers, &body, &[&secret]).await?;
                response.results.into_iter().map(|result| (result.index, result.relevance_score)).collect()
            }
            RerankFormat::Tei => {
                let body = json!({"query": query, "texts": documents, "raw_scores": false});
                let response: Vec<TeiResult> = self.http.post_json(&self.url, &self.headers, &body, &[&secret]).await?;
                response.into_iter().map(|result| (result.index, result.score)).collect()
            }
        };
        place_scores(scored, documents.len(), "reranker")
    }
}

/// Puts `(index, score)` pairs in document order; every document must be scored once.
fn place_scores(scored: Vec<(usize, f32)>, count: usize, provider: &str) -> Result<Vec<f32>, ProviderError> {
    let mut scores = vec![None; count];
    for (index, score) in scored {
        let slot = scores.get_mut(index).ok_or_else(|| {
            ProviderError::new(ProviderErrorKind::BadResponse, provider, format!("score for unknown document {index}"))
        })?;
        *slot = Some(if score.is_finite() { score.clamp(0.0, 1.0) } else { 0.0 });
    }
    scores
        .into_iter()
        .enumerate()
        .map(|(index, score)| {
            score.ok_or_else(|| {
                ProviderError::new(ProviderErrorKind::BadResponse, provider, format!("document {index} was not scored"))
            })
        })
        .collect()
}

/// Asks the LLM to grade every candidate in one call.
#[derive(Debug)]
pub struct LlmReranker {
    llm: Arc<dyn Llm>,
}

const LLM_RERANK_PROMPT: &str =
    "You judge how well stored memories answer a question. For each numbered memory give a \
relevance grade from 0 (unrelated) to 10 (answers the question directly). Judge each memory on its own. Answer with \
one JSON object and nothing else: {\"scores\": [grade of memory 1, grade of memory 2, ...]} with exactly one grade \
per memory, in order.";

#[async_trait]
impl Reranker for LlmReranker {
    fn name(&self) -> &str {
        self.llm.model()
    }

    async fn rerank(&self, query: &str, documents: &[String]) -> Result<Vec<f32>, ProviderError> {
        Ok(self.rerank_with_cost(query, documents).await?.0)
    }

    async fn rerank_with_cost(
        &self,
        query: &str,
        documents: &[String],
    ) -> Result<(Vec<f32>, Option<RerankCost>), ProviderError> {
        let mut prompt = format!("Question: {query}\n\nMemories:\n");
        for (index, document) in documents.iter().enumerate() {
            prompt.push_str(&format!("{}. {}\n", index + 1, truncate(document).replace('\n', " ")));
        }
        let request = LlmRequest {
            messages: vec![ChatMessage::system(LLM_RERANK_PROMPT), ChatMessage::user(prompt)],
            json: true,
        };
        let response = self.llm.complete(&request).await?;
        let bad = |message: String| ProviderError::new(ProviderErrorKind::BadResponse, "llm-reranker", message);
        let value = crate::extraction::parse_json_lenient(&response.text).map_err(bad)?;
        let grades = match &value {
            Value::Object(object) => object.get("scores").and_then(Value::as_array),
            Value::Array(items) => Some(items),
            _ => None,
        }
        .ok_or_else(|| bad("the reply has no `scores` list".to_owned()))?;
        if grades.len() != documents.len() {
            return Err(bad(format!("{} grades for {} memories", grades.len(), documents.len())));
        }
        let scores = grades
            .iter()
            .map(|grade| {
                let number = grade.as_f64().or_else(|| grade.as_str().and_then(|text| text.trim().parse().ok()));
                number
                    .map(|grade| (grade / 10.0).clamp(0.0, 1.0) as f32)
                    .ok_or_else(|| bad(format!("grade {grade} is not a number")))
            })
            .collect::<Result<Vec<f32>, ProviderError>>()?;
        let cost =
            RerankCost { provider: self.llm.provider(), model: self.llm.model().to_owned(), usage: response.usage };
        Ok((scores, Some(cost)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_are_placed_in_document_order_and_checked() {
        assert_eq!(place_scores(vec![(1, 0.2), (0, 0.9)], 2, "r").expect("valid"), vec![0.9, 0.2]);
        assert_eq!(place_scores(vec![(0, 7.0), (1, f32::NAN)], 2, "r").expect("valid"), vec![1.0, 0.0]);
        assert!(place_scores(vec![(0, 0.5)], 2, "r").is_err(), "a missing document");
        assert!(place_scores(vec![(0, 0.5), (5, 0.1)], 2, "r").is_err(), "an unknown index");
    }

    #[test]
    fn http_reranker_needs_a_base_url() {
        assert!(HttpReranker::new(HttpRerankerConfig::default()).is_err());
        let config =
            HttpRerankerConfig { base_url: Some("http://127.0.0.1:9/v2".into()), ..HttpRerankerConfig::default() };
        assert_eq!(HttpReranker::new(config).expect("client").url, "http://127.0.0.1:9/v2/rerank");
    }
}
