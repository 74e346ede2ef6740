//! The `Llm` trait and its clients: one for every server speaking OpenAI's chat-completions wire
//! format (OpenAI, Azure-style gateways, Ollama, vLLM, llama.cpp, LM Studio, OpenRouter, Groq,
//! DeepSeek, Together…) and a native Anthropic Messages client.

mod anthropic;
mod openai;

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

pub use anthropic::{AnthropicLlm, AnthropicLlmConfig, DEFAULT_ANTHROPIC_BASE_URL};
pub use openai::{JsonMode, OpenAiLlm, OpenAiLlmConfig};

use crate::error::{ProviderError, Result};

/// Who says a chat message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChatRole {
    /// Instructions.
    System,
    /// The caller.
    User,
    /// The model.
    Assistant,
}

/// One message of a chat request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChatMessage {
    /// Speaker.
    pub role: ChatRole,
    /// Text.
    pub content: String,
}

impl ChatMessage {
    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self { role: ChatRole::System, content: content.into() }
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self { role: ChatRole::User, content: content.into() }
    }
}

/// A completion request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LlmRequest {
    /// The conversation; system messages may appear anywhere, clients move them where their API wants.
    pub messages: Vec<ChatMessage>,
    /// Ask for a JSON object (JSON mode where the provider has one; the prompt must ask too).
    pub json: bool,
}

/// Tokens a call consumed, as the provider reported them (0 when it did not).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TokenUsage {
    /// Input tokens.
    pub prompt_tokens: u64,
    /// Output tokens.
    pub completion_tokens: u64,
}

/// A completion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LlmResponse {
    /// The model's text.
    pub text: String,
    /// Token usage of the call (all attempts' successful one).
    pub usage: TokenUsage,
}

/// A chat model.
#[async_trait]
pub trait Llm: Debug + Send + Sync + 'static {
    /// Provider name for logs (`openai`, `anthropic`).
    fn provider(&self) -> &'static str;

    /// Model name sent with every request.
    fn model(&self) -> &str;

    /// Runs one completion (with the client's retries).
    ///
    /// # Errors
    /// A classified [`ProviderError`].
    async fn complete(&self, request: &LlmRequest) -> Result<LlmResponse, ProviderError>;
}

/// Which LLM to build. Settings of every provider may be present; `provider` picks one.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct LlmConfig {
    /// The provider in use.
    #[serde(default)]
    pub provider: LlmProvider,
    /// Settings of the OpenAI-compatible client.
    #[serde(default)]
    pub openai: OpenAiLlmConfig,
    /// Settings of the Anthropic client.
    #[serde(default)]
    pub anthropic: AnthropicLlmConfig,
}

/// The LLM providers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum LlmProvider {
    /// OpenAI-compatible when an OpenAI key or base URL is set, else Anthropic when its key is set,
    /// else none.
    #[default]
    Auto,
    /// No LLM: `infer=true` is refused with `llm_not_configured`.
    None,
    /// Any server speaking OpenAI's `/v1/chat/completions`.
    Openai,
    /// Anthropic's Messages API.
    Anthropic,
}

impl LlmConfig {
    /// Checks the values; `prefix` names the section in messages (`memory.llm`).
    ///
    /// # Errors
    /// A message naming the bad key.
    pub fn validate(&self, prefix: &str) -> std::result::Result<(), String> {
        self.openai.validate(&format!("{prefix}.openai"))?;
        self.anthropic.validate(&format!("{prefix}.anthropic"))
    }

    /// Takes the credentials of `before` where they still apply (same origin).
    pub fn keep_credentials(&mut self, before: &Self) {
        self.openai.keep_credentials(&before.openai);
        self.anthropic.keep_credentials(&before.anthropic);
    }

    /// The base URL of the provider in use, when it has one configured.
    pub fn base_url_in_use(&self) -> Option<&str> {
        match self.resolved_provider() {
            LlmProvider::Openai => self.openai.base_url.as_deref(),
            LlmProvider::Anthropic => self.anthropic.base_url.as_deref(),
            LlmProvider::None | LlmProvider::Auto => None,
        }
    }

    /// The provider `auto` resolves to.
    pub fn resolved_provider(&self) -> LlmProvider {
        match self.provider {
            LlmProvider::Auto if self.openai.api_key.is_some() || self.openai.base_url.is_some() => LlmProvider::Openai,
            LlmProvider::Auto if self.anthropic.api_key.is_some() => LlmProvider::Anthropic,
            LlmProvider::Auto => LlmProvider::None,
            other => other,
        }
    }
}

/// Builds the configured LLM client, or `None` when no LLM is configured. No request is made.
///
/// # Errors
/// [`crate::Error::Config`] for an invalid base URL or header.
pub fn build_llm(config: &LlmConfig) -> Result<Option<Arc<dyn Llm>>> {
    Ok(match config.resolved_provider() {
        LlmProvider::Openai => Some(Arc::new(OpenAiLlm::new(config.openai.clone())?)),
        LlmProvider::Anthropic => Some(Arc::new(AnthropicLlm::new(config.anthropic.clone())?)),
        LlmProvider::None | LlmProvider::Auto => None,
    })
}

/// The completion of a call, or a bad-response error when the model returned no text; `stop`
/// is the provider's field naming why it stopped (`finish_reason`, `stop_reason`) and its value.
fn completion(
    provider: &'static str,
    model: &str,
    text: String,
    usage: TokenUsage,
    stop: (&str, Option<String>),
) -> Result<LlmResponse, ProviderError> {
    if text.trim().is_empty() {
        let (field, reason) = stop;
        let reason = reason.unwrap_or_else(|| "unknown".to_owned());
        return Err(ProviderError::new(
            crate::error::ProviderErrorKind::BadResponse,
            provider,
            format!("the model returned no text ({field} {reason})"),
        ));
    }
    tracing::debug!(%model, prompt_tokens = usage.prompt_tokens, completion_tokens = usage.completion_tokens, "llm call");
    Ok(LlmResponse { text, usage })
}

/// Builds `base/suffix` and checks it is a URL.
fn endpoint(base_url: &str, suffix: &str) -> Result<String> {
    let url = format!("{}/{suffix}", base_url.trim_end_matches('/'));
    reqwest::Url::parse(&url)
        .map_err(|error| crate::Error::Config(format!("invalid llm base_url {base_url}: {error}")))?;
    Ok(url)
}
