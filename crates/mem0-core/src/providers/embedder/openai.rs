//! An embedder for any server speaking the OpenAI `/v1/embeddings` wire format
//! (OpenAI, Ollama, vLLM, TEI, LM Studio, …).

use std::time::Duration;

use async_trait::async_trait;

use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

use super::Embedder;
use crate::error::{ProviderError, ProviderErrorKind, Result};
use crate::providers::http::{check_range, check_url, classify_status, same_origin};

const PROVIDER: &str = "openai-embedder";

/// Configuration of an OpenAI-compatible embedder.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct OpenAiEmbedderConfig {
    /// Base URL up to and including `/v1`, e.g. `http://localhost:11434/v1`; `None` means OpenAI's.
    #[serde(default)]
    pub base_url: Option<String>,
    /// Bearer key; optional for local servers. Never serialised (views, persisted settings).
    #[serde(default, skip_serializing)]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub api_key: Option<SecretString>,
    /// Model name sent with every request.
    #[serde(default = "default_model")]
    pub model: String,
    /// Output dimensions to request (only sent when set; not every server supports it).
    #[serde(default)]
    pub dimensions: Option<usize>,
    /// Total timeout of one request, in seconds.
    #[serde(default = "default_timeout_secs")]
    pub timeout_secs: u64,
    /// Largest number of texts sent in one request.
    #[serde(default = "default_batch_size")]
    pub batch_size: usize,
}

/// The base URL used when none is configured.
pub const DEFAULT_OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
fn default_model() -> String {
    "text-embedding-3-small".to_owned()
}
fn default_timeout_secs() -> u64 {
    30
}
fn default_batch_size() -> usize {
    100
}

impl OpenAiEmbedderConfig {
    /// Checks the values; `prefix` names the section in messages.
    ///
    /// # Errors
    /// A message naming the bad key.
    pub fn validate(&self, prefix: &str) -> Result<(), String> {
        check_url(&format!("{prefix}.base_url"), self.base_url.as_deref())?;
        if self.model.trim().is_empty() {
            return Err(format!("{prefix}.model cannot be empty"));
        }
        if let Some(dimensions) = self.dimensions {
            check_range(&format!("{prefix}.dimensions"), dimensions, 1, 16_384)?;
        }
        check_range(&format!("{prefix}.timeout_secs"), self.timeout_secs, 1, 600)?;
        check_range(&format!("{prefix}.batch_size"), self.batch_size, 1, 2048)
    }

    /// Takes the key of `before` if this config talks to the same origin; a key belongs to the
    /// host it was configured for and never follows a base URL elsewhere.
    pub fn keep_credentials(&mut self, before: &Self) {
        if same_origin(before.base_url.as_deref(), self.base_url.as_deref(), DEFAULT_OPENAI_BASE_URL) {
            self.api_key.clone_from(&before.api_key);
        } else {
            self.api_key = None;
        }
    }
}

impl Default for OpenAiEmbedderConfig {
    fn default() -> Self {
        Self {
            base_url: None,
            api_key: None,
            model: default_model(),
            dimensions: None,
            timeout_secs: default_timeout_secs(),
            batch_size: default_batch_size(),
        }
    }
}

/// A client for `/v1/embeddings`.
#[derive(Debug)]
pub struct OpenAiEmbedder {
    client: reqwest::Client,
    endpoint: String,
    api_key: Option<SecretString>,
    model: String,
    dimensions: Option<usize>,
    batch_size: usize,
    dimension: usize,
}

#[derive(Serialize)]
struct EmbeddingsRequest<'a> {
    model: &'a str,
    input: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    dimensions: Option<usize>,
    encoding_format: &'static str,
}

#[derive(Deserialize)]
struct EmbeddingsResponse {
    data: Vec<EmbeddingDatum>,
}

#[derive(Deserialize)]
struct EmbeddingDatum {
    embedding: Vec<f32>,
    #[serde(default)]
    index: Option<usize>,
}

impl OpenAiEmbedder {
    /// Builds the client and discovers the embedding dimension with one probe request.
    ///
    /// # Errors
    /// The classified provider error when the probe fails, or a config error for a bad URL.
    pub async fn connect(config: OpenAiEmbedderConfig) -> Result<Self> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(config.timeout_secs.max(1)))
            .build()
            .map_err(|error| crate::Error::Config(format!("cannot build http client: {error}")))?;
        let base_url = config.base_url.as_deref().unwrap_or(DEFAULT_OPENAI_BASE_URL);
        let endpoint = format!("{}/embeddings", base_url.trim_end_matches('/'));
        reqwest::Url::parse(&endpoint)
            .map_err(|error| crate::Error::Config(format!("invalid embedder base_url {base_url}: {error}")))?;
        let mut embedder = Self {
            client,
            endpoint,
            api_key: config.api_key,
            model: config.model,
            dimensions: config.dimensions,
            batch_size: config.batch_size.clamp(1, 2048),
            dimension: 0,
        };
        let probe = embedder.request(&["dimension probe".to_owned()]).await?;
        embedder.dimension = probe.first().map_or(0, Vec::len);
        if embedder.dimension == 0 {
            return Err(
                ProviderError::new(ProviderErrorKind::BadResponse, PROVIDER, "probe returned an empty vector").into()
            );
        }
        Ok(embedder)
    }

    async fn request(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, ProviderError> {
        let body = EmbeddingsRequest {
            model: &self.model,
            input: texts,
            dimensions: self.dimensions,
            encoding_format: "float",
        };
        let mut request = self.client.post(&self.endpoint).json(&body);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key.expose_secret());
        }
        let response = request.send().await.map_err(classify_transport_error)?;
        let status = response.status();
        if !status.is_success() {
            let retry_after = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|value| value.to_str().ok())
                .and_then(|value| value.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            let mut error = ProviderError::new(
                classify_status(status),
                PROVIDER,
                format!("embeddings request failed with status {}", status.as_u16()),
            );
            error.retry_after = retry_after;
            return Err(error);
        }
        let parsed: EmbeddingsResponse = response.json().await.map_err(|error| {
            if error.is_timeout() {
                ProviderError::new(ProviderErrorKind::Timeout, PROVIDER, "timed out reading the embeddings response")
            } else {
                ProviderError::new(
                    ProviderErrorKind::BadResponse,
                    PROVIDER,
                    format!("unreadable embeddings response: {error}"),
                )
            }
        })?;
        if parsed.data.len() != texts.len() {
            return Err(ProviderError::new(
                ProviderErrorKind::BadResponse,
                PROVIDER,
                format!("asked for {} embeddings, got {}", texts.len(), parsed.data.len()),
            ));
        }
        let mut data = parsed.data;
        if data.iter().all(|datum| datum.index.is_some()) {
            data.sort_by_key(|datum| datum.index);
        }
        Ok(data.into_iter().map(|datum| normalise(datum.embedding)).collect())
    }
}

fn normalise(mut vector: Vec<f32>) -> Vec<f32> {
    let norm = vector.iter().map(|value| value * value).sum::<f32>().sqrt();
    if norm > 0.0 {
        vector.iter_mut().for_each(|value| *value /= norm);
    }
    vector
}

fn classify_transport_error(error: reqwest::Error) -> ProviderError {
    let kind = if error.is_timeout() { ProviderErrorKind::Timeout } else { ProviderErrorKind::Unavailable };
    // Without the URL (hosts stay private); headers, and so the key, never appear.
    let error = error.without_url();
    ProviderError::new(kind, PROVIDER, format!("embeddings request failed: {error}"))
}

#[async_trait]
impl Embedder for OpenAiEmbedder {
    fn dimension(&self) -> usize {
        self.dimension
    }

    fn model_id(&self) -> &str {
        &self.model
    }

    async fn embed_batch(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, ProviderError> {
        let mut vectors = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(self.batch_size) {
            let started = std::time::Instant::now();
            let batch = self.request(chunk).await;
            crate::metrics::core().provider_attempt(PROVIDER, "embed", batch.as_ref().map(|_| ()), started.elapsed());
            let batch = batch?;
            if let Some(bad) = batch.iter().find(|vector| vector.len() != self.dimension) {
                return Err(ProviderError::new(
                    ProviderErrorKind::BadResponse,
                    PROVIDER,
                    format!("expected {} dimensions, got {}", self.dimension, bad.len()),
                ));
            }
            vectors.extend(batch);
        }
        Ok(vectors)
    }
}

#[cfg(test)]
mod tests {
    use wiremock::matchers::{header, method, path};
    use wiremock::{Mock, MockServer, ResponseTemplate};

    use super::*;

    fn config(server: &MockServer) -> OpenAiEmbedderConfig {
        OpenAiEmbedderConfig {
            base_url: Some(format!("{}/v1", server.uri())),
            api_key: Some(SecretString::from("sk-test-secret")),
            model: "test-embed".to_owned(),
            dimensions: None,
            timeout_secs: 2,
            batch_size: 2,
        }
    }

    fn vectors_body(count: usize) -> serde_json::Value {
        let data: Vec<_> = (0..count)
            .map(|index| serde_json::json!({"object": "embedding", "index": index, "embedding": [3.0, 4.0, index as f32]}))
            .collect();
        serde_json::json!({"object": "list", "data": data, "model": "test-embed"})
    }

    #[tokio::test]
    async fn discovers_dimension_and_batches_requests() {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path("/v1/embeddings"))
            .and(header("authorization", "Bearer sk-test-secret"))
            .respond_with(move |request: &wiremock::Request| {
                let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap_or_default();
                let count = body["input"].as_array().map_or(0, Vec::len);
                ResponseTemplate::new(200).set_body_json(vectors_body(count))
            })
            .mount(&server)
            .await;
        let embedder = OpenAiEmbedder::connect(config(&server)).await.expect("connect");
        assert_eq!(embedder.dimension(), 3);
        let texts: Vec<String> = (0..5).map(|index| format!("text {index}")).collect();
        let vectors = embedder.embed_batch(&texts).await.expect("embed");
        assert_eq!(vectors.len(), 5);
        let norm: f32 = vectors[0].iter().map(|value| value * value).sum();
        assert!((norm - 1.0).abs() < 1e-5, "vectors are normalised");
        // probe + ceil(5 / 2) batches
        assert_eq!(server.received_requests().await.map_or(0, |requests| requests.len()), 4);
    }

    #[tokio::test]
    async fn classifies_http_failures_without_leaking_the_key() {
        for (status, kind) in [
            (401, ProviderErrorKind::AuthFailed),
            (429, ProviderErrorKind::RateLimited),
            (500, ProviderErrorKind::Unavailable),
            (400, ProviderErrorKind::BadRequest),
        ] {
            let server = MockServer::start().await;
            Mock::given(method("POST"))
                .respond_with(ResponseTemplate::new(status).insert_header("retry-after", "7"))
                .mount(&server)
                .await;
            let error = OpenAiEmbedder::connect(config(&server)).await.expect_err("must fail");
            let crate::Error::Provider(error) = error else {
                panic!("expected a provider error, got {error:?}");
            };
            assert_eq!(error.kind, kind, "status {status}");
            assert!(!error.to_string().contains("sk-test-secret"));
            if status == 429 {
                assert_eq!(error.retry_after, Some(Duration::from_secs(7)));
            }
        }
    }

    #[tokio::test]
    async fn slow_provider_is_a_timeout() {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(200).set_body_json(vectors_body(1)).set_delay(Duration::from_secs(4)))
            .mount(&server)
            .await;
        let mut slow = config(&server);
        slow.timeout_secs = 1;
        let error = OpenAiEmbedder::connect(slow).await.expect_err("must time out");
        let crate::Error::Provider(error) = error else {
            panic!("expected a provider error");
        };
        assert_eq!(error.kind, ProviderErrorKind::Timeout);
    }

    #[tokio::test]
    async fn wrong_count_is_a_bad_response() {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(200).set_body_json(vectors_body(2)))
            .mount(&server)
            .await;
        let error = OpenAiEmbedder::connect(config(&server)).await.expect_err("must fail");
        let crate::Error::Provider(error) = error else {
            panic!("expected a provider error");
        };
        assert_eq!(error.kind, ProviderErrorKind::BadResponse);
    }
}
