//! A client for OpenAI's `/v1/chat/completions` wire format, which most model servers speak.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracing::warn;

use super::{completion, endpoint, ChatMessage, Llm, LlmRequest, LlmResponse, TokenUsage};
use crate::error::{ProviderError, ProviderErrorKind, Result};
use crate::providers::embedder::DEFAULT_OPENAI_BASE_URL;
use crate::providers::http::{check_range, check_url, same_origin, ProviderHttp, RetryPolicy};

const PROVIDER: &str = "openai";

/// Whether to ask for JSON output with `response_format`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum JsonMode {
    /// Ask for it; if the server rejects `response_format`, rely on the prompt alone from then on.
    #[default]
    Auto,
    /// Always ask for it.
    On,
    /// Never ask (models or servers without JSON mode); the prompt asks for JSON.
    Off,
}

/// Configuration of an OpenAI-compatible chat client.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct OpenAiLlmConfig {
    /// Base URL up to and including `/v1` (e.g. `http://localhost:11434/v1` for Ollama); `None`
    /// means OpenAI's.
    #[serde(default)]
    pub base_url: Option<String>,
    /// Key sent as a bearer token (or in `api_key_header`); optional for local servers. Never
    /// serialised (views, persisted settings).
    #[serde(default, skip_serializing)]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub api_key: Option<SecretString>,
    /// Header carrying the key instead of `Authorization: Bearer` (e.g. `api-key` for Azure).
    /// Not serialised: it goes with the key.
    #[serde(default, skip_serializing)]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub api_key_header: Option<String>,
    /// Model (or deployment) name.
    #[serde(default = "default_model")]
    pub model: String,
    /// Sampling temperature; never sent to reasoning models.
    #[serde(default = "default_temperature")]
    pub temperature: Option<f32>,
    /// Output token budget (`max_tokens`, or `max_completion_tokens` for reasoning models);
    /// defaults to 2000, or 8000 for reasoning models whose reasoning counts against it.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// JSON mode policy.
    #[serde(default)]
    pub json_mode: JsonMode,
    /// Treat the model as a reasoning model (no temperature, `max_completion_tokens`); detected
    /// from the name (o1, o3, o4, gpt-5 except gpt-5-chat) when unset.
    #[serde(default)]
    pub reasoning: Option<bool>,
    /// `reasoning_effort` sent to reasoning models (`minimal`, `low`, `medium`, `high`).
    #[serde(default)]
    pub reasoning_effort: Option<String>,
    /// Extra headers on every request (e.g. OpenRouter's `HTTP-Referer`). Not serialised: they
    /// may carry credentials.
    #[serde(default, skip_serializing)]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub extra_headers: BTreeMap<String, String>,
    /// Extra query parameters (e.g. Azure's `api-version`). Not serialised: they may carry
    /// credentials.
    #[serde(default, skip_serializing)]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub query_params: BTreeMap<String, String>,
    /// Timeout of one attempt, in seconds.
    #[serde(default = "default_timeout_secs")]
    pub timeout_secs: u64,
    /// Retries of throttled, failed and timed-out calls.
    #[serde(default)]
    pub retry: RetryPolicy,
}

fn default_model() -> String {
    "gpt-5-mini".to_owned()
}
#[allow(clippy::unnecessary_wraps)]
fn default_temperature() -> Option<f32> {
    Some(0.1)
}
fn default_timeout_secs() -> u64 {
    120
}

impl Default for OpenAiLlmConfig {
    fn default() -> Self {
        Self {
            base_url: None,
            api_key: None,
            api_key_header: None,
            model: default_model(),
            temperature: default_temperature(),
            max_tokens: None,
            json_mode: JsonMode::Auto,
            reasoning: None,
            reasoning_effort: None,
            extra_headers: BTreeMap::new(),
            query_params: BTreeMap::new(),
            timeout_secs: default_timeout_secs(),
            retry: RetryPolicy::default(),
        }
    }
}

impl OpenAiLlmConfig {
    /// Checks the values; `prefix` names the section in messages.
    ///
    /// # Errors
    /// A message naming the bad key.
    pub fn validate(&self, prefix: &str) -> Result<(), String> {
        check_url(&format!("{prefix}.base_url"), self.base_url.as_deref())?;
        if self.model.trim().is_empty() {
            return Err(format!("{prefix}.model cannot be empty"));
        }
        if let Some(temperature) = self.temperature {
            check_range(&format!("{prefix}.temperature"), temperature, 0.0, 2.0)?;
        }
        if let Some(max_tokens) = self.max_tokens {
            check_range(&format!("{prefix}.max_tokens"), max_tokens, 1, 128_000)?;
        }
        check_range(&format!("{prefix}.timeout_secs"), self.timeout_secs, 1, 600)?;
        self.retry.validate(&format!("{prefix}.retry"))
    }

    /// Takes the key, key header, extra headers and query parameters of `before` if this config
    /// talks to the same origin; they belong to the host they were configured for.
    pub fn keep_credentials(&mut self, before: &Self) {
        if same_origin(before.base_url.as_deref(), self.base_url.as_deref(), DEFAULT_OPENAI_BASE_URL) {
            self.api_key.clone_from(&before.api_key);
            self.api_key_header.clone_from(&before.api_key_header);
            self.extra_headers.clone_from(&before.extra_headers);
            self.query_params.clone_from(&before.query_params);
        } else {
            self.api_key = None;
            self.api_key_header = None;
            self.extra_headers.clear();
            self.query_params.clear();
        }
    }
}

/// True for model names that take no sampling parameters and count reasoning in their budget.
pub fn is_reasoning_model(model: &str) -> bool {
    let name = model.rsplit('/').next().unwrap_or(model).to_ascii_lowercase();
    ["o1", "o3", "o4"].iter().any(|prefix| name == *prefix || name.starts_with(&format!("{prefix}-")))
        || (name.starts_with("gpt-5") && !name.contains("chat"))
}

/// The OpenAI-compatible chat client.
#[derive(Debug)]
pub struct OpenAiLlm {
    http: ProviderHttp,
    url: String,
    headers: HeaderMap,
    api_key: Option<SecretString>,
    model: String,
    temperature: Option<f32>,
    max_tokens: u32,
    reasoning: bool,
    reasoning_effort: Option<String>,
    json_mode: JsonMode,
    /// Cleared once the server rejected `response_format` (JSON mode `auto`).
    json_supported: AtomicBool,
}

#[derive(Serialize)]
struct ChatRequest<'a> {
    model: &'a str,
    messages: &'a [ChatMessage],
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<Value>,
}

#[derive(Deserialize)]
struct ChatResponse {
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct Choice {
    message: ChoiceMessage,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct ChoiceMessage {
    #[serde(default)]
    content: Option<String>,
}

#[derive(Deserialize)]
struct Usage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
}

impl OpenAiLlm {
    /// Builds the client; no request is made.
    ///
    /// # Errors
    /// [`crate::Error::Config`] for an invalid base URL or header.
    pub fn new(config: OpenAiLlmConfig) -> Result<Self> {
        let base_url = config.base_url.as_deref().unwrap_or(DEFAULT_OPENAI_BASE_URL);
        let mut url = reqwest::Url::parse(&endpoint(base_url, "chat/completions")?)
            .map_err(|error| crate::Error::Config(format!("invalid llm base_url: {error}")))?;
        if !config.query_params.is_empty() {
            url.query_pairs_mut().extend_pairs(config.query_params.iter());
        }
        let mut headers = HeaderMap::new();
        for (name, value) in &config.extra_headers {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| crate::Error::Config(format!("invalid llm header name `{name}`")))?;
            let value = HeaderValue::from_str(value)
                .map_err(|_| crate::Error::Config(format!("invalid value of llm header `{name}`")))?;
            headers.insert(name, value);
        }
        if let Some(key) = &config.api_key {
            let header_name = match &config.api_key_header {
                Some(name) => HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| crate::Error::Config(format!("invalid llm api_key_header `{name}`")))?,
                None => AUTHORIZATION,
            };
            let raw = if header_name == AUTHORIZATION {
                format!("Bearer {}", key.expose_secret())
            } else {
                key.expose_secret().to_owned()
            };
            let mut value = HeaderValue::from_str(&raw)
                .map_err(|_| crate::Error::Config("the llm api key is not a valid header value".into()))?;
            value.set_sensitive(true);
            headers.insert(header_name, value);
        }
        let reasoning = config.reasoning.unwrap_or_else(|| is_reasoning_model(&config.model));
        let max_tokens = config.max_tokens.unwrap_or(if reasoning { 8000 } else { 2000 });
        Ok(Self {
            http: ProviderHttp::new(PROVIDER, "llm", Duration::from_secs(config.timeout_secs), config.retry)?,
            url: url.to_string(),
            headers,
            api_key: config.api_key,
            model: config.model,
            temperature: config.temperature,
            max_tokens,
            reasoning,
            reasoning_effort: config.reasoning_effort,
            json_mode: config.json_mode,
            json_supported: AtomicBool::new(true),
        })
    }

    fn body<'a>(&'a self, request: &'a LlmRequest, json: bool) -> ChatRequest<'a> {
        ChatRequest {
            model: &self.model,
            messages: &request.messages,
            temperature: if self.reasoning { None } else { self.temperature },
            max_tokens: (!self.reasoning).then_some(self.max_tokens),
            max_completion_tokens: self.reasoning.then_some(self.max_tokens),
            reasoning_effort: if self.reasoning { self.reasoning_effort.as_deref() } else { None },
            response_format: json.then(|| serde_json::json!({"type": "json_object"})),
        }
    }

    async fn send(&self, body: &ChatRequest<'_>) -> Result<ChatResponse, ProviderError> {
        let secret = self.api_key.as_ref().map(|key| key.expose_secret().to_owned()).unwrap_or_default();
        self.http.post_json(&self.url, &self.headers, body, &[secret.as_str()]).await
    }
}

/// True when a 400 says the server does not take `response_format`.
fn rejects_json_mode(error: &ProviderError) -> bool {
    let message = error.message.to_ascii_lowercase();
    error.kind == ProviderErrorKind::BadRequest
        && (message.contains("response_format") || message.contains("json mode") || message.contains("json_object"))
}

#[async_trait]
impl Llm for OpenAiLlm {
    fn provider(&self) -> &'static str {
        PROVIDER
    }

    fn model(&self) -> &str {
        &self.model
    }

    async fn complete(&self, request: &LlmRequest) -> Result<LlmResponse, ProviderError> {
        let json = request.json
            && match self.json_mode {
                JsonMode::On => true,
                JsonMode::Off => false,
                JsonMode::Auto => self.json_supported.load(Ordering::Relaxed),
            };
        let response = match self.send(&self.body(request, json)).await {
            Err(error) if json && self.json_mode == JsonMode::Auto && rejects_json_mode(&error) => {
                warn!(model = %self.model, %error, "the server refused JSON mode; asking through the prompt alone from now on");
                self.json_supported.store(false, Ordering::Relaxed);
                self.send(&self.body(request, false)).await?
            }
            other => other?,
        };
        let usage = response
            .usage
            .map(|usage| TokenUsage { prompt_tokens: usage.prompt_tokens, completion_tokens: usage.completion_tokens })
            .unwrap_or_default();
        let choice = response.choices.into_iter().next().ok_or_else(|| {
            ProviderError::new(ProviderErrorKind::BadResponse, PROVIDER, "the response has no choices")
        })?;
        let text = choice.message.content.unwrap_or_default();
        completion(PROVIDER, &self.model, text, usage, ("finish_reason", choice.finish_reason))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasoning_models_are_recognised() {
        for model in ["o1", "o3-mini", "o4-mini", "gpt-5", "gpt-5-mini", "gpt-5.1", "openai/gpt-5-nano"] {
            assert!(is_reasoning_model(model), "{model}");
        }
        for model in ["gpt-4o-mini", "gpt-4.1", "gpt-5-chat-latest", "llama3.1:8b", "qwen3:4b", "o1x"] {
            assert!(!is_reasoning_model(model), "{model}");
        }
    }

    #[test]
    fn reasoning_models_get_no_sampling_parameters() {
        let reasoning = OpenAiLlm::new(OpenAiLlmConfig {
            model: "gpt-5-mini".into(),
            reasoning_effort: Some("low".into()),
            ..OpenAiLlmConfig::default()
        })
        .expect("client");
        let request = LlmRequest { messages: vec![ChatMessage::user("hi")], json: true };
        let body = serde_json::to_value(reasoning.body(&request, true)).expect("json");
        assert_eq!(body["max_completion_tokens"], 8000);
        assert_eq!(body["reasoning_effort"], "low");
        assert!(body.get("temperature").is_none() && body.get("max_tokens").is_none());

        let chat =
            OpenAiLlm::new(OpenAiLlmConfig { model: "llama3.1".into(), ..OpenAiLlmConfig::default() }).expect("client");
        let body = serde_json::to_value(chat.body(&request, false)).expect("json");
        assert_eq!(body["max_tokens"], 2000);
        assert!(body.get("response_format").is_none() && body.get("reasoning_effort").is_none());
        assert!((body["temperature"].as_f64().unwrap_or_default() - 0.1).abs() < 1e-6);
    }
}
