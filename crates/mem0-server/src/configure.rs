//! Runtime configuration (`/configure`): a redacted view built from an allowlist of safe fields,
//! and changes that are validated, built and checked against the stores before they are swapped
//! in atomically. A failed change leaves the running configuration untouched. Changes are
//! persisted without secrets (secrets only come from the environment or secret files) and applied
//! again at startup. Provider base URLs may not point at link-local or cloud metadata addresses.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use axum::http::StatusCode;
use mem0_core::providers::embedder::{build_embedder, EmbedderConfig, EmbedderProvider, DEFAULT_OPENAI_BASE_URL};
use mem0_core::providers::llm::{build_llm, JsonMode, LlmConfig, LlmProvider, DEFAULT_ANTHROPIC_BASE_URL};
use mem0_core::providers::reranker::{build_reranker, RerankerProvider};
use mem0_core::{Caller, ExtractionSettings, Memory, Role};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::ToSchema;

use crate::config::Settings;
use crate::error::{ApiError, ErrorCode};
use crate::state::AppState;

/// Settings of runtime configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigureSettings {
    /// Where changes are persisted.
    pub state_path: PathBuf,
    /// Allow provider URLs on link-local and metadata addresses.
    pub allow_link_local_base_urls: bool,
}

/// A change to the runtime configuration. Sections given replace the running ones; secrets are
/// not accepted here.
#[derive(Debug, Clone, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConfigurePatch {
    /// The embedder.
    #[serde(default)]
    pub embedder: Option<EmbedderPatch>,
    /// The LLM of fact extraction and procedural memory.
    #[serde(default)]
    pub llm: Option<LlmPatch>,
    /// How the extraction prompt is built.
    #[serde(default)]
    pub extraction: Option<ExtractionPatch>,
}

/// The configuration a running server can change: what `/configure` swaps and persists.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// The embedder.
    pub embedder: EmbedderConfig,
    /// The LLM.
    pub llm: LlmConfig,
    /// Extraction prompt settings.
    pub extraction: ExtractionSettings,
}

impl RuntimeConfig {
    /// The runtime part of the startup settings.
    pub fn from_settings(settings: &Settings) -> Self {
        Self {
            embedder: settings.memory.embedder.clone(),
            llm: settings.memory.llm.clone(),
            extraction: settings.memory.extraction.clone(),
        }
    }
}

/// LLM settings that can change at runtime (API keys stay as configured at startup).
#[derive(Debug, Clone, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LlmPatch {
    /// `auto`, `none`, `openai` or `anthropic`.
    #[serde(default)]
    pub provider: Option<String>,
    /// OpenAI-compatible settings (replaced whole).
    #[serde(default)]
    pub openai: Option<OpenAiLlmPatch>,
    /// Anthropic settings (replaced whole).
    #[serde(default)]
    pub anthropic: Option<AnthropicLlmPatch>,
}

/// OpenAI-compatible chat settings.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OpenAiLlmPatch {
    /// Base URL up to `/v1`; `null` means OPENAI_BASE_URL or OpenAI.
    #[serde(default)]
    pub base_url: Option<String>,
    /// Model name.
    pub model: String,
    /// Sampling temperature (ignored for reasoning models).
    #[serde(default)]
    pub temperature: Option<f32>,
    /// Output token budget.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// `auto`, `on` or `off`.
    #[serde(default)]
    pub json_mode: Option<String>,
    /// Reasoning effort for reasoning models.
    #[serde(default)]
    pub reasoning_effort: Option<String>,
    /// Timeout of one attempt, seconds.
    #[serde(default)]
    pub timeout_secs: Option<u64>,
}

/// Anthropic settings.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AnthropicLlmPatch {
    /// API root; `null` means ANTHROPIC_BASE_URL or Anthropic's.
    #[serde(default)]
    pub base_url: Option<String>,
    /// Model name.
    pub model: String,
    /// Sampling temperature.
    #[serde(default)]
    pub temperature: Option<f32>,
    /// Output token budget.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// Timeout of one attempt, seconds.
    #[serde(default)]
    pub timeout_secs: Option<u64>,
}

/// Extraction prompt settings.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExtractionPatch {
    /// Instructions added to every extraction prompt; `null` removes them.
    #[serde(default)]
    pub custom_instructions: Option<String>,
    /// Earlier messages of the session shown as context (0-50).
    #[serde(default)]
    pub context_messages: Option<usize>,
    /// Nearest existing memories shown (0-50).
    #[serde(default)]
    pub existing_memories: Option<usize>,
}

/// Embedder settings that can change at runtime.
#[derive(Debug, Clone, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EmbedderPatch {
    /// `local` or `openai`.
    #[serde(default)]
    pub provider: Option<String>,
    /// Local model settings (replaced whole).
    #[serde(default)]
    pub local: Option<LocalEmbedderPatch>,
    /// OpenAI-compatible settings (replaced whole; the API key stays as configured at startup).
    #[serde(default)]
    pub openai: Option<OpenAiEmbedderPatch>,
}

/// Local embedder settings.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LocalEmbedderPatch {
    /// Model directory.
    #[schema(value_type = String)]
    pub model_dir: PathBuf,
}

/// OpenAI-compatible embedder settings.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OpenAiEmbedderPatch {
    /// Base URL up to `/v1`; `null` means OPENAI_BASE_URL or OpenAI.
    #[serde(default)]
    pub base_url: Option<String>,
    /// Model name.
    pub model: String,
    /// Output dimensions to request.
    #[serde(default)]
    pub dimensions: Option<usize>,
    /// Request timeout, seconds.
    #[serde(default)]
    pub timeout_secs: Option<u64>,
    /// Texts per request.
    #[serde(default)]
    pub batch_size: Option<usize>,
}

fn rejected(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, ErrorCode::ConfigurationRejected, message)
}

/// Keys that look like secrets anywhere in a configuration body.
fn secret_key(value: &Value) -> Option<String> {
    match value {
        Value::Object(map) => map.iter().find_map(|(key, inner)| {
            let lower = key.to_ascii_lowercase();
            let secret = ["key", "secret", "password", "credential"].iter().any(|word| lower.contains(word))
                || (lower.contains("token") && !lower.ends_with("tokens"));
            if secret {
                Some(key.clone())
            } else {
                secret_key(inner)
            }
        }),
        Value::Array(items) => items.iter().find_map(secret_key),
        _ => None,
    }
}

/// Returns `current` with every section of `patch` applied.
///
/// # Errors
/// A message naming the bad field.
pub fn apply_patch(current: &RuntimeConfig, patch: &ConfigurePatch) -> Result<RuntimeConfig, String> {
    let mut next = current.clone();
    if let Some(embedder) = &patch.embedder {
        next.embedder = apply_embedder_patch(&current.embedder, embedder)?;
    }
    if let Some(llm) = &patch.llm {
        next.llm = apply_llm_patch(&current.llm, llm)?;
    }
    if let Some(extraction) = &patch.extraction {
        let bounded = |field: &str, value: Option<usize>, default: usize| match value {
            Some(count) if count > 50 => Err(format!("extraction.{field} must be between 0 and 50")),
            Some(count) => Ok(count),
            None => Ok(default),
        };
        let defaults = ExtractionSettings::default();
        next.extraction = ExtractionSettings {
            custom_instructions: extraction.custom_instructions.clone().filter(|text| !text.trim().is_empty()),
            context_messages: bounded("context_messages", extraction.context_messages, defaults.context_messages)?,
            existing_memories: bounded("existing_memories", extraction.existing_memories, defaults.existing_memories)?,
        };
        if next.extraction.custom_instructions.as_ref().is_some_and(|text| text.len() > 8192) {
            return Err("extraction.custom_instructions must be at most 8192 bytes".into());
        }
    }
    Ok(next)
}

fn apply_llm_patch(current: &LlmConfig, patch: &LlmPatch) -> Result<LlmConfig, String> {
    let mut next = current.clone();
    if let Some(provider) = &patch.provider {
        next.provider = match provider.as_str() {
            "auto" => LlmProvider::Auto,
            "none" => LlmProvider::None,
            "openai" => LlmProvider::Openai,
            "anthropic" => LlmProvider::Anthropic,
            other => return Err(format!("llm.provider `{other}` is not one of auto, none, openai, anthropic")),
        };
    }
    let temperature_ok = |value: Option<f32>| value.is_none_or(|temperature| (0.0..=2.0).contains(&temperature));
    let anthropic_temperature_ok =
        |value: Option<f32>| value.is_none_or(|temperature| (0.0..=1.0).contains(&temperature));
    if let Some(openai) = &patch.openai {
        if openai.model.trim().is_empty() {
            return Err("llm.openai.model cannot be empty".into());
        }
        if !temperature_ok(openai.temperature) {
            return Err("llm.openai.temperature must be between 0 and 2".into());
        }
        let defaults = mem0_core::providers::llm::OpenAiLlmConfig::default();
        if !same_origin(current.openai.base_url.as_deref(), openai.base_url.as_deref(), DEFAULT_OPENAI_BASE_URL) {
            // Keys and extra headers belong to the host they were configured for.
            next.openai.api_key = None;
            next.openai.api_key_header = None;
            next.openai.extra_headers.clear();
            next.openai.query_params.clear();
        }
        next.openai.base_url = openai.base_url.clone();
        next.openai.model = openai.model.clone();
        next.openai.temperature = openai.temperature.or(defaults.temperature);
        next.openai.max_tokens = openai.max_tokens.map(|tokens| tokens.clamp(1, 128_000));
        next.openai.json_mode = match openai.json_mode.as_deref() {
            None | Some("auto") => JsonMode::Auto,
            Some("on") => JsonMode::On,
            Some("off") => JsonMode::Off,
            Some(other) => return Err(format!("llm.openai.json_mode `{other}` is not one of auto, on, off")),
        };
        next.openai.reasoning_effort = openai.reasoning_effort.clone();
        next.openai.timeout_secs = openai.timeout_secs.unwrap_or(defaults.timeout_secs).clamp(1, 600);
    }
    if let Some(anthropic) = &patch.anthropic {
        if anthropic.model.trim().is_empty() {
            return Err("llm.anthropic.model cannot be empty".into());
        }
        if !anthropic_temperature_ok(anthropic.temperature) {
            return Err("llm.anthropic.temperature must be between 0 and 1".into());
        }
        let defaults = mem0_core::providers::llm::AnthropicLlmConfig::default();
        if !same_origin(
            current.anthropic.base_url.as_deref(),
            anthropic.base_url.as_deref(),
            DEFAULT_ANTHROPIC_BASE_URL,
        ) {
            next.anthropic.api_key = None;
        }
        next.anthropic.base_url = anthropic.base_url.clone();
        next.anthropic.model = anthropic.model.clone();
        next.anthropic.temperature = anthropic.temperature;
        next.anthropic.max_tokens = anthropic.max_tokens.unwrap_or(defaults.max_tokens).clamp(1, 128_000);
        next.anthropic.timeout_secs = anthropic.timeout_secs.unwrap_or(defaults.timeout_secs).clamp(1, 600);
    }
    Ok(next)
}

/// True when two base URLs (`None` = the provider's default) have the same scheme, host and port.
fn same_origin(before: Option<&str>, after: Option<&str>, default: &str) -> bool {
    let origin = |url: Option<&str>| {
        url::Url::parse(url.unwrap_or(default)).ok().map(|parsed| {
            (parsed.scheme().to_owned(), parsed.host_str().map(str::to_owned), parsed.port_or_known_default())
        })
    };
    match (origin(before), origin(after)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

fn apply_embedder_patch(current: &EmbedderConfig, patch: &EmbedderPatch) -> Result<EmbedderConfig, String> {
    let mut next = current.clone();
    if let Some(provider) = &patch.provider {
        next.provider = match provider.as_str() {
            "local" => EmbedderProvider::Local,
            "openai" => EmbedderProvider::Openai,
            other => return Err(format!("embedder.provider `{other}` is not one of local, openai")),
        };
    }
    if let Some(local) = &patch.local {
        next.local.model_dir = local.model_dir.clone();
    }
    if let Some(openai) = &patch.openai {
        if openai.model.trim().is_empty() {
            return Err("embedder.openai.model cannot be empty".into());
        }
        let defaults = mem0_core::providers::embedder::OpenAiEmbedderConfig::default();
        if !same_origin(current.openai.base_url.as_deref(), openai.base_url.as_deref(), DEFAULT_OPENAI_BASE_URL) {
            next.openai.api_key = None;
        }
        next.openai.base_url = openai.base_url.clone();
        next.openai.model = openai.model.clone();
        next.openai.dimensions = openai.dimensions;
        next.openai.timeout_secs = openai.timeout_secs.unwrap_or(defaults.timeout_secs).clamp(1, 600);
        next.openai.batch_size = openai.batch_size.unwrap_or(defaults.batch_size).clamp(1, 2048);
    }
    Ok(next)
}

fn full_patch(config: &RuntimeConfig) -> ConfigurePatch {
    let embedder = &config.embedder;
    let llm = &config.llm;
    ConfigurePatch {
        embedder: Some(EmbedderPatch {
            provider: Some(match embedder.provider {
                EmbedderProvider::Local => "local".to_owned(),
                EmbedderProvider::Openai => "openai".to_owned(),
            }),
            local: Some(LocalEmbedderPatch { model_dir: embedder.local.model_dir.clone() }),
            openai: Some(OpenAiEmbedderPatch {
                base_url: embedder.openai.base_url.clone(),
                model: embedder.openai.model.clone(),
                dimensions: embedder.openai.dimensions,
                timeout_secs: Some(embedder.openai.timeout_secs),
                batch_size: Some(embedder.openai.batch_size),
            }),
        }),
        llm: Some(LlmPatch {
            provider: Some(llm_provider_name(llm.provider).to_owned()),
            openai: Some(OpenAiLlmPatch {
                base_url: llm.openai.base_url.clone(),
                model: llm.openai.model.clone(),
                temperature: llm.openai.temperature,
                max_tokens: llm.openai.max_tokens,
                json_mode: Some(json_mode_name(llm.openai.json_mode).to_owned()),
                reasoning_effort: llm.openai.reasoning_effort.clone(),
                timeout_secs: Some(llm.openai.timeout_secs),
            }),
            anthropic: Some(AnthropicLlmPatch {
                base_url: llm.anthropic.base_url.clone(),
                model: llm.anthropic.model.clone(),
                temperature: llm.anthropic.temperature,
                max_tokens: Some(llm.anthropic.max_tokens),
                timeout_secs: Some(llm.anthropic.timeout_secs),
            }),
        }),
        extraction: Some(ExtractionPatch {
            custom_instructions: config.extraction.custom_instructions.clone(),
            context_messages: Some(config.extraction.context_messages),
            existing_memories: Some(config.extraction.existing_memories),
        }),
    }
}

fn llm_provider_name(provider: LlmProvider) -> &'static str {
    match provider {
        LlmProvider::Auto => "auto",
        LlmProvider::None => "none",
        LlmProvider::Openai => "openai",
        LlmProvider::Anthropic => "anthropic",
    }
}

fn json_mode_name(mode: JsonMode) -> &'static str {
    match mode {
        JsonMode::Auto => "auto",
        JsonMode::On => "on",
        JsonMode::Off => "off",
    }
}

/// Applies the persisted runtime configuration, if any, to `settings` (at startup).
///
/// # Errors
/// An unreadable or invalid file, named.
pub fn apply_persisted(settings: &mut Settings) -> anyhow::Result<()> {
    let path = &settings.configure.state_path;
    if !path.exists() {
        return Ok(());
    }
    let text =
        std::fs::read_to_string(path).map_err(|error| anyhow::anyhow!("cannot read {}: {error}", path.display()))?;
    let patch: ConfigurePatch = serde_json::from_str(&text)
        .map_err(|error| anyhow::anyhow!("{} is not a valid runtime configuration: {error}", path.display()))?;
    let next = apply_patch(&RuntimeConfig::from_settings(settings), &patch)
        .map_err(|error| anyhow::anyhow!("{}: {error}", path.display()))?;
    settings.memory.embedder = next.embedder;
    settings.memory.llm = next.llm;
    settings.memory.extraction = next.extraction;
    tracing::info!(path = %path.display(), "applied the persisted runtime configuration");
    Ok(())
}

fn persist(path: &Path, config: &RuntimeConfig) -> std::io::Result<()> {
    if let Some(parent) = path.parent().filter(|parent| !parent.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    let text = serde_json::to_string_pretty(&full_patch(config)).map_err(std::io::Error::other)?;
    let temporary = path.with_extension("json.tmp");
    std::fs::write(&temporary, text)?;
    std::fs::rename(&temporary, path)
}

/// Strips credentials and query strings from a URL before showing it.
fn shown_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) => {
            let _ = parsed.set_username("");
            let _ = parsed.set_password(None);
            parsed.set_query(None);
            parsed.to_string()
        }
        Err(_) => "[unparsable]".to_owned(),
    }
}

/// The configuration in effect, from an allowlist of safe fields only.
pub fn redacted_view(runtime: &RuntimeConfig, memory: &Memory, settings: &Settings) -> Value {
    let config = &runtime.embedder;
    let llm = &runtime.llm;
    json!({
        "embedder": {
            "provider": match config.provider { EmbedderProvider::Local => "local", EmbedderProvider::Openai => "openai" },
            "model_id": memory.embedder().model_id(),
            "dimension": memory.embedder().dimension(),
            "local": { "model_dir": config.local.model_dir.display().to_string() },
            "openai": {
                "base_url": config.openai.base_url.as_deref().map(shown_url),
                "model": config.openai.model,
                "dimensions": config.openai.dimensions,
                "timeout_secs": config.openai.timeout_secs,
                "batch_size": config.openai.batch_size,
                "api_key_configured": config.openai.api_key.is_some(),
            },
        },
        "vector_store": { "provider": match settings.memory.vector_store.provider {
            mem0_core::VectorStoreProvider::Sqlite => "sqlite",
            mem0_core::VectorStoreProvider::Pgvector => "pgvector",
        } },
        "llm": {
            "provider": llm_provider_name(llm.provider),
            "in_use": memory.llm().map(|llm| json!({"provider": llm.provider(), "model": llm.model()})),
            "openai": {
                "base_url": llm.openai.base_url.as_deref().map(shown_url),
                "model": llm.openai.model,
                "temperature": llm.openai.temperature,
                "max_tokens": llm.openai.max_tokens,
                "json_mode": json_mode_name(llm.openai.json_mode),
                "reasoning_effort": llm.openai.reasoning_effort,
                "timeout_secs": llm.openai.timeout_secs,
                "api_key_configured": llm.openai.api_key.is_some(),
                "extra_headers": llm.openai.extra_headers.keys().collect::<Vec<_>>(),
            },
            "anthropic": {
                "base_url": llm.anthropic.base_url.as_deref().map(shown_url),
                "model": llm.anthropic.model,
                "temperature": llm.anthropic.temperature,
                "max_tokens": llm.anthropic.max_tokens,
                "timeout_secs": llm.anthropic.timeout_secs,
                "api_key_configured": llm.anthropic.api_key.is_some(),
            },
        },
        "extraction": {
            "custom_instructions": runtime.extraction.custom_instructions,
            "context_messages": runtime.extraction.context_messages,
            "existing_memories": runtime.extraction.existing_memories,
        },
        "reranker": {
            "provider": match settings.memory.reranker.provider {
                RerankerProvider::None => "none",
                RerankerProvider::Http => "http",
                RerankerProvider::Llm => "llm",
            },
            "in_use": memory.reranker().map(|reranker| reranker.name().to_owned()),
            "candidates": settings.memory.reranker.candidates,
            "http": {
                "base_url": settings.memory.reranker.http.base_url.as_deref().map(shown_url),
                "model": settings.memory.reranker.http.model,
                "api_key_configured": settings.memory.reranker.http.api_key.is_some(),
            },
        },
        "retrieval": {
            "semantic_weight": memory.retrieval().semantic_weight,
            "keyword_weight": memory.retrieval().keyword_weight,
            "entity_weight": memory.retrieval().entity_weight,
            "candidates": memory.retrieval().candidates,
        },
        "auth": {
            "disabled": settings.auth.disabled,
            "api_keys": true,
            "jwt": settings.auth.jwt.hs256_secret.is_some() || settings.auth.jwt.public_key_pem.is_some()
                || settings.auth.jwt.public_key_file.is_some() || settings.auth.jwt.jwks_url.is_some(),
        },
        "rate_limit": { "enabled": settings.rate_limit.enabled },
    })
}

fn forbidden_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            v4.is_link_local() || v4.is_unspecified() || v4.is_broadcast() || v4.octets() == [100, 100, 100, 200]
        }
        IpAddr::V6(v6) => {
            if let Some(embedded) = embedded_ipv4(v6) {
                return forbidden_ip(IpAddr::V4(embedded));
            }
            let segments = v6.segments();
            (segments[0] & 0xffc0) == 0xfe80
                || v6.is_unspecified()
                || segments == [0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254]
        }
    }
}

/// The IPv4 address an IPv6 address carries, for the forms that reach an IPv4 host: mapped
/// (`::ffff:a.b.c.d`), compatible (`::a.b.c.d`, deprecated but still routed by some stacks),
/// translated (`::ffff:0:a.b.c.d`, RFC 2765), NAT64 (`64:ff9b::a.b.c.d` and the local-use
/// `64:ff9b:1::/48`, RFC 6052/8215) and 6to4 (`2002:AABB:CCDD::`, RFC 3056).
fn embedded_ipv4(v6: std::net::Ipv6Addr) -> Option<std::net::Ipv4Addr> {
    let s = v6.segments();
    let low = || std::net::Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    let mapped = s[..5] == [0; 5] && s[5] == 0xffff;
    // `::` and `::1` are not IPv4 addresses (unspecified and loopback are handled as IPv6).
    let compatible = s[..6] == [0; 6] && (s[6] != 0 || s[7] > 1);
    let translated = s[..4] == [0; 4] && s[4] == 0xffff && s[5] == 0;
    let nat64 = s[..6] == [0x64, 0xff9b, 0, 0, 0, 0];
    if mapped || compatible || translated || nat64 {
        return Some(low());
    }
    if s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1 {
        // The local-use NAT64 prefix may place the IPv4 address at any of RFC 6052's offsets:
        // treat the whole /48 as reaching a metadata address.
        return Some(std::net::Ipv4Addr::new(169, 254, 169, 254));
    }
    if s[0] == 0x2002 {
        return Some(std::net::Ipv4Addr::new((s[1] >> 8) as u8, s[1] as u8, (s[2] >> 8) as u8, s[2] as u8));
    }
    None
}

/// Refuses base URLs on link-local or metadata addresses (after DNS resolution).
///
/// # Errors
/// A message saying why.
pub async fn check_base_url(raw: &str, allow_link_local: bool) -> Result<(), String> {
    let url = url::Url::parse(raw).map_err(|error| format!("base_url `{raw}` is not a URL: {error}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("base_url must be http or https, got `{}`", url.scheme()));
    }
    if allow_link_local {
        return Ok(());
    }
    let port = url.port_or_known_default().unwrap_or(443);
    let addresses: Vec<IpAddr> = match url.host() {
        Some(url::Host::Ipv4(ip)) => vec![IpAddr::V4(ip)],
        Some(url::Host::Ipv6(ip)) => vec![IpAddr::V6(ip)],
        Some(url::Host::Domain(domain)) => {
            let lower = domain.to_ascii_lowercase();
            let metadata_names = ["metadata.google.internal", "metadata", "instance-data", "metadata.azure.internal"];
            if metadata_names.contains(&lower.trim_end_matches('.')) {
                return Err(format!("base_url host `{domain}` is a cloud metadata service"));
            }
            tokio::net::lookup_host((domain, port))
                .await
                .map_err(|error| format!("base_url host `{domain}` does not resolve: {error}"))?
                .map(|address| address.ip())
                .collect()
        }
        None => return Err("base_url has no host".into()),
    };
    match addresses.into_iter().find(|ip| forbidden_ip(*ip)) {
        Some(ip) => Err(format!(
            "base_url resolves to {ip}, a link-local or metadata address; set configure.allow_link_local_base_urls in the startup configuration to allow it"
        )),
        None => Ok(()),
    }
}

/// Validates, builds, checks and swaps in a configuration change; returns the new redacted view.
///
/// # Errors
/// 403 unless the global admin; 400 `configuration_rejected` with the reason, leaving the running
/// configuration as it was; 500 when the change cannot be persisted (not applied then either).
pub async fn apply(state: &AppState, caller: &Caller, body: Value) -> Result<Value, ApiError> {
    caller.require(Role::Admin)?;
    if !caller.global_admin {
        return Err(
            mem0_core::Error::Forbidden("changing the server configuration needs the global admin".into()).into()
        );
    }
    if let Some(key) = secret_key(&body) {
        return Err(rejected(format!(
            "`{key}` looks like a secret; secrets are only read from the environment or secret files, never over HTTP"
        )));
    }
    let patch: ConfigurePatch =
        serde_json::from_value(body).map_err(|error| rejected(format!("invalid configuration: {error}")))?;
    if patch.embedder.is_none() && patch.llm.is_none() && patch.extraction.is_none() {
        return Err(rejected("nothing to change: give an `embedder`, `llm` or `extraction` section"));
    }
    let mut running = state.memory_handle.runtime.lock().await;
    let next = apply_patch(&running, &patch).map_err(rejected)?;
    let allow_link_local = state.settings.configure.allow_link_local_base_urls;
    if next.embedder.provider == EmbedderProvider::Openai {
        if let Some(url) = &next.embedder.openai.base_url {
            check_base_url(url, allow_link_local).await.map_err(rejected)?;
        }
    }
    let llm_url = match next.llm.resolved_provider() {
        LlmProvider::Openai => next.llm.openai.base_url.as_ref(),
        LlmProvider::Anthropic => next.llm.anthropic.base_url.as_ref(),
        LlmProvider::None | LlmProvider::Auto => None,
    };
    if let Some(url) = llm_url {
        check_base_url(url, allow_link_local).await.map_err(rejected)?;
    }
    let mut memory = if patch.embedder.is_some() {
        let embedder = build_embedder(&next.embedder)
            .await
            .map_err(|error| rejected(format!("the new embedder does not work: {error}")))?;
        state.memory().with_embedder(embedder).await.map_err(|error| rejected(error.to_string()))?
    } else {
        state.memory().as_ref().clone()
    };
    let llm = build_llm(&next.llm).map_err(|error| rejected(format!("the new llm settings do not work: {error}")))?;
    // An LLM reranker follows the LLM.
    let reranker = build_reranker(&state.settings.memory.reranker, llm.as_ref())
        .map_err(|error| rejected(format!("the reranker cannot use the new llm: {error}")))?;
    memory = memory
        .with_llm(llm, next.extraction.clone())
        .with_reranker(reranker, state.settings.memory.reranker.candidates);
    persist(&state.settings.configure.state_path, &next).map_err(|error| {
        tracing::error!(%error, "could not persist the runtime configuration");
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::InternalError,
            "could not persist the configuration; nothing changed",
        )
    })?;
    let view = redacted_view(&next, &memory, &state.settings);
    state.memory_handle.swap(memory);
    *running = next;
    tracing::warn!(principal = %caller.principal_id, "runtime configuration changed");
    Ok(view)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn metadata_and_link_local_urls_are_refused() {
        for bad in [
            "http://169.254.169.254/latest/meta-data",
            "http://[fe80::1]:8080/v1",
            "http://metadata.google.internal/v1",
            "http://100.100.100.200/v1",
            "http://[::ffff:169.254.169.254]/v1",
            "http://[::169.254.169.254]/v1",
            "http://[::ffff:0:169.254.169.254]/v1",
            "http://[64:ff9b::169.254.169.254]/v1",
            "http://[64:ff9b:1::a9fe:a9fe]/v1",
            "http://[64:ff9b:1:a9fe:a9:fe00::]/v1",
            "http://[2002:a9fe:a9fe::1]/v1",
            "http://[::ffff:100.100.100.200]/v1",
            "http://0.0.0.0:11434/v1",
            "file:///etc/passwd",
        ] {
            assert!(check_base_url(bad, false).await.is_err(), "{bad}");
        }
        assert!(check_base_url("http://127.0.0.1:11434/v1", false).await.is_ok(), "local servers are fine");
        assert!(check_base_url("http://[::1]:11434/v1", false).await.is_ok(), "IPv6 loopback is not IPv4");
        assert!(check_base_url("http://[2001:db8::1]/v1", false).await.is_ok(), "ordinary IPv6");
        assert!(check_base_url("http://169.254.169.254/v1", true).await.is_ok(), "unless explicitly allowed");
    }

    #[test]
    fn secrets_are_spotted_at_any_depth() {
        assert_eq!(secret_key(&json!({"embedder": {"openai": {"api_key": "sk"}}})).as_deref(), Some("api_key"));
        assert_eq!(secret_key(&json!({"embedder": {"openai": {"model": "m"}}})), None);
    }

    #[test]
    fn shown_urls_lose_credentials() {
        assert_eq!(shown_url("https://user:pw@example.com/v1?key=abc"), "https://example.com/v1");
    }
}

#[cfg(test)]
mod origin_tests {
    use super::*;

    #[test]
    fn keys_stay_with_their_host() {
        let mut current = LlmConfig::default();
        current.openai.api_key = Some("sk-startup".to_owned().into());
        current.openai.extra_headers.insert("X-Org".into(), "acme".into());
        let patch = |base_url: Option<&str>| LlmPatch {
            provider: Some("openai".into()),
            openai: Some(OpenAiLlmPatch {
                base_url: base_url.map(str::to_owned),
                model: "m".into(),
                temperature: None,
                max_tokens: None,
                json_mode: None,
                reasoning_effort: None,
                timeout_secs: None,
            }),
            anthropic: None,
        };
        let same = apply_llm_patch(&current, &patch(Some("https://api.openai.com/v1/"))).expect("valid");
        assert!(same.openai.api_key.is_some() && !same.openai.extra_headers.is_empty());
        let moved = apply_llm_patch(&current, &patch(Some("https://collector.example/v1"))).expect("valid");
        assert!(moved.openai.api_key.is_none() && moved.openai.extra_headers.is_empty());
        let other_port = apply_llm_patch(&current, &patch(Some("https://api.openai.com:8443/v1"))).expect("valid");
        assert!(other_port.openai.api_key.is_none());
    }
}
