//! A native client for Anthropic's Messages API (`POST /v1/messages`).

use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::{HeaderMap, HeaderValue};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

use super::{completion, endpoint, ChatRole, Llm, LlmRequest, LlmResponse, TokenUsage};
use crate::error::{ProviderError, Result};
use crate::providers::http::{check_range, check_url, same_origin, ProviderHttp, RetryPolicy};

const PROVIDER: &str = "anthropic";

/// The base URL used when none is configured.
pub const DEFAULT_ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";

/// Configuration of the Anthropic client.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AnthropicLlmConfig {
    /// API root (with or without `/v1`).
    #[serde(default)]
    pub base_url: Option<String>,
    /// `x-api-key`; from ANTHROPIC_API_KEY when unset. Never serialised.
    #[serde(default, skip_serializing)]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub api_key: Option<SecretString>,
    /// Model name.
    #[serde(default = "default_model")]
    pub model: String,
    /// Sampling temperature (omitted when unset).
    #[serde(default)]
    pub temperature: Option<f32>,
    /// Output token budget.
    #[serde(default = "default_max_tokens")]
    pub max_tokens: u32,
    /// `anthropic-version` header.
    #[serde(default = "default_version")]
    pub version: String,
    /// Timeout of one attempt, in seconds.
    #[serde(default = "default_timeout_secs")]
    pub timeout_secs: u64,
    /// Retries of throttled, overloaded and timed-out calls.
    #[serde(default)]
    pub retry: RetryPolicy,
}

fn default_model() -> String {
    "claude-haiku-4-5".to_owned()
}
fn default_max_tokens() -> u32 {
    2000
}
fn default_version() -> String {
    "2023-06-01".to_owned()
}
fn default_timeout_secs() -> u64 {
    120
}

impl AnthropicLlmConfig {
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
            check_range(&format!("{prefix}.temperature"), temperature, 0.0, 1.0)?;
        }
        check_range(&format!("{prefix}.max_tokens"), self.max_tokens, 1, 128_000)?;
        check_range(&format!("{prefix}.timeout_secs"), self.timeout_secs, 1, 600)?;
        self.retry.validate(&format!("{prefix}.retry"))
    }

    /// Takes the key of `before` if this config talks to the same origin.
    pub fn keep_credentials(&mut self, before: &Self) {
        if same_origin(before.base_url.as_deref(), self.base_url.as_deref(), DEFAULT_ANTHROPIC_BASE_URL) {
            self.api_key.clone_from(&before.api_key);
        } else {
            self.api_key = None;
        }
    }
}

impl Default for AnthropicLlmConfig {
    fn default() -> Self {
        Self {
            base_url: None,
            api_key: None,
            model: default_model(),
            temperature: None,
            max_tokens: default_max_tokens(),
            version: default_version(),
            timeout_secs: default_timeout_secs(),
            retry: RetryPolicy::default(),
        }
    }
}

/// The Anthropic Messages client.
#[derive(Debug)]
pub struct AnthropicLlm {
    http: ProviderHttp,
    url: String,
    headers: HeaderMap,
    api_key: Option<SecretString>,
    model: String,
    temperature: Option<f32>,
    max_tokens: u32,
}

#[derive(Serialize)]
struct MessagesRequest<'a> {
    model: &'a str,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<String>,
    messages: Vec<Turn>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
}

#[derive(Serialize)]
struct Turn {
    role: &'static str,
    content: String,
}

#[derive(Deserialize)]
struct MessagesResponse {
    #[serde(default)]
    content: Vec<ContentBlock>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    stop_reason: Option<String>,
}

#[derive(Deserialize)]
struct ContentBlock {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: Option<String>,
}

#[derive(Deserialize)]
struct Usage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
}

impl AnthropicLlm {
    /// Builds the client; no request is made.
    ///
    /// # Errors
    /// [`crate::Error::Config`] for an invalid base URL or key.
    pub fn new(config: AnthropicLlmConfig) -> Result<Self> {
        let base = config.base_url.as_deref().unwrap_or(DEFAULT_ANTHROPIC_BASE_URL).trim_end_matches('/');
        let url = if base.ends_with("/v1") { endpoint(base, "messages")? } else { endpoint(base, "v1/messages")? };
        let mut headers = HeaderMap::new();
        headers.insert(
            "anthropic-version",
            HeaderValue::from_str(&config.version)
                .map_err(|_| crate::Error::Config("invalid anthropic version".into()))?,
        );
        if let Some(key) = &config.api_key {
            let mut value = HeaderValue::from_str(key.expose_secret())
                .map_err(|_| crate::Error::Config("the anthropic api key is not a valid header value".into()))?;
            value.set_sensitive(true);
            headers.insert("x-api-key", value);
        }
        Ok(Self {
            http: ProviderHttp::new(PROVIDER, "llm", Duration::from_secs(config.timeout_secs), config.retry)?,
            url,
            headers,
            api_key: config.api_key,
            model: config.model,
            temperature: config.temperature,
            max_tokens: config.max_tokens.max(1),
        })
    }

    fn body(&self, request: &LlmRequest) -> MessagesRequest<'_> {
        let system: Vec<&str> = request
            .messages
            .iter()
            .filter(|message| message.role == ChatRole::System)
            .map(|message| message.content.as_str())
            .collect();
        // The API wants alternating turns starting with the user; merge runs of one role.
        let mut turns: Vec<Turn> = Vec::new();
        for message in request.messages.iter().filter(|message| message.role != ChatRole::System) {
            let role = if message.role == ChatRole::Assistant { "assistant" } else { "user" };
            match turns.last_mut() {
                Some(last) if last.role == role => {
                    last.content.push_str("\n\n");
                    last.content.push_str(&message.content);
                }
                _ => turns.push(Turn { role, content: message.content.clone() }),
            }
        }
        if turns.first().is_none_or(|turn| turn.role != "user") {
            turns.insert(0, Turn { role: "user", content: "Continue.".to_owned() });
        }
        MessagesRequest {
            model: &self.model,
            max_tokens: self.max_tokens,
            system: (!system.is_empty()).then(|| system.join("\n\n")),
            messages: turns,
            temperature: self.temperature,
        }
    }
}

#[async_trait]
impl Llm for AnthropicLlm {
    fn provider(&self) -> &'static str {
        PROVIDER
    }

    fn model(&self) -> &str {
        &self.model
    }

    async fn complete(&self, request: &LlmRequest) -> Result<LlmResponse, ProviderError> {
        let secret = self.api_key.as_ref().map(|key| key.expose_secret().to_owned()).unwrap_or_default();
        let response: MessagesResponse =
            self.http.post_json(&self.url, &self.headers, &self.body(request), &[secret.as_str()]).await?;
        let usage = response
            .usage
            .map(|usage| TokenUsage { prompt_tokens: usage.input_tokens, completion_tokens: usage.output_tokens })
            .unwrap_or_default();
        let text: String = response
            .content
            .into_iter()
            .filter(|block| block.kind == "text")
            .filter_map(|block| block.text)
            .collect::<Vec<_>>()
            .join("");
        completion(PROVIDER, &self.model, text, usage, ("stop_reason", response.stop_reason))
    }
}

#[cfg(test)]
mod tests {
    use super::super::ChatMessage;
    use super::*;

    #[test]
    fn system_messages_move_to_the_system_field_and_turns_alternate() {
        let llm = AnthropicLlm::new(AnthropicLlmConfig::default()).expect("client");
        let request = LlmRequest {
            messages: vec![
                ChatMessage::system("be brief"),
                ChatMessage::user("one"),
                ChatMessage::user("two"),
                ChatMessage { role: ChatRole::Assistant, content: "three".into() },
            ],
            json: true,
        };
        let body = serde_json::to_value(llm.body(&request)).expect("json");
        assert_eq!(body["system"], "be brief");
        assert_eq!(body["messages"][0]["content"], "one\n\ntwo");
        assert_eq!(body["messages"][1]["role"], "assistant");
        assert_eq!(body["messages"].as_array().map(Vec::len), Some(2));
        assert!(body.get("temperature").is_none());
        assert_eq!(llm.url, "https://api.anthropic.com/v1/messages");
    }
}
