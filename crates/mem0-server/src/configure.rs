//! Runtime configuration (`/configure`). The typed configuration of the core is the patch, the
//! view and the persisted form at once:
//! - a change is a JSON merge patch (RFC 7396) over the running [`RuntimeConfig`], deserialised
//!   with unknown keys refused and validated by the same `validate()` as at startup;
//! - secrets are never accepted over HTTP, never shown and never persisted (the config types do
//!   not serialise them); credentials configured at startup stay with their host when a base URL
//!   moves elsewhere they are dropped;
//! - provider base URLs are checked against link-local and cloud metadata addresses
//!   ([`check_base_url`]);
//! - the new providers are built by the same composition root as at startup
//!   ([`Memory::reconfigure`]) and checked against the stores before they are swapped in
//!   atomically; a failed change leaves the running configuration untouched.
//!
//! Changes are persisted (without secrets: in `configure.state_path`, or in Postgres when the
//! history is there) and applied again at startup.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use mem0_core::policy::PolicyConfig;
use mem0_core::providers::embedder::{build_embedder, EmbedderConfig, EmbedderProvider};
use mem0_core::providers::http::check_base_url;
use mem0_core::providers::llm::LlmConfig;
use mem0_core::{Caller, ExtractionSettings, HistoryProvider, Memory, Role};
use secrecy::ExposeSecret as _;
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
    /// With the history on Postgres, how often (seconds) a replica looks for a change made
    /// through another replica and applies it.
    #[serde(default = "default_poll_secs")]
    pub poll_secs: u64,
}

fn default_poll_secs() -> u64 {
    5
}

/// The configuration a running server can change: what `/configure` patches, shows and persists.
/// A change names only what it changes (a JSON merge patch: `null` removes a key, so an optional
/// setting goes back to its default; `embedder` itself cannot be removed).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RuntimeConfig {
    /// The embedder.
    pub embedder: EmbedderConfig,
    /// The LLM of fact extraction and procedural memory.
    #[serde(default)]
    pub llm: LlmConfig,
    /// How the extraction prompt is built.
    #[serde(default)]
    pub extraction: ExtractionSettings,
    /// The write policy (global detectors and rules, per-tenant overrides; `PUT /policy` sets a
    /// tenant's).
    #[serde(default)]
    pub policy: PolicyConfig,
}

impl RuntimeConfig {
    /// The runtime part of the startup settings.
    pub fn from_settings(settings: &Settings) -> Self {
        Self {
            embedder: settings.memory.embedder.clone(),
            llm: settings.memory.llm.clone(),
            extraction: settings.memory.extraction.clone(),
            policy: settings.memory.policy.clone(),
        }
    }

    /// Puts this runtime part into `settings`.
    pub fn apply_to(self, settings: &mut Settings) {
        settings.memory.embedder = self.embedder;
        settings.memory.llm = self.llm;
        settings.memory.extraction = self.extraction;
        settings.memory.policy = self.policy;
    }

    /// This configuration with `patch` (a JSON merge patch) applied, validated.
    ///
    /// # Errors
    /// A message saying what is wrong: a secret, an unknown or mistyped key, a bad value.
    pub fn patched(&self, patch: &Value) -> Result<Self, String> {
        // The policy section holds detector names such as `secrets`, never credentials.
        let mut scanned = patch.clone();
        if let Value::Object(sections) = &mut scanned {
            sections.remove("policy");
        }
        if let Some(key) = secret_key(&scanned) {
            return Err(format!(
                "`{key}` looks like a secret or carries credentials (headers, query parameters); these are only read from the environment or the configuration files at startup, never over HTTP"
            ));
        }
        match patch {
            Value::Object(sections) if sections.is_empty() => {
                return Err("nothing to change: give an `embedder`, `llm`, `extraction` or `policy` section".into())
            }
            Value::Object(_) => {}
            _ => {
                return Err("a change is a JSON object of `embedder`, `llm`, `extraction` and `policy` sections".into())
            }
        }
        let mut merged = serde_json::to_value(self).map_err(|error| error.to_string())?;
        merge_patch(&mut merged, patch);
        let mut next: Self =
            serde_json::from_value(merged).map_err(|error| format!("invalid configuration: {error}"))?;
        next.embedder.keep_credentials(&self.embedder);
        next.llm.keep_credentials(&self.llm);
        next.validate()?;
        Ok(next)
    }

    /// Checks every section with the rules used at startup.
    ///
    /// # Errors
    /// A message naming the bad key.
    pub fn validate(&self) -> Result<(), String> {
        self.embedder.validate("embedder")?;
        self.llm.validate("llm")?;
        self.extraction.validate("extraction")?;
        mem0_core::policy::Policy::compile(&self.policy).map(|_| ())
    }
}

/// Applies a JSON merge patch (RFC 7396) to `target`: objects merge key by key, `null` removes a
/// key, anything else replaces.
fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(changes) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(serde_json::Map::new());
    }
    if let Value::Object(fields) = target {
        for (key, change) in changes {
            if change.is_null() {
                fields.remove(key);
            } else {
                merge_patch(fields.entry(key.clone()).or_insert(Value::Null), change);
            }
        }
    }
}

fn rejected(message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::ConfigurationRejected, message)
}

/// Keys that look like secrets anywhere in a configuration body.
fn secret_key(value: &Value) -> Option<String> {
    match value {
        Value::Object(map) => map.iter().find_map(|(key, inner)| {
            let lower = key.to_ascii_lowercase();
            // Extra headers and query parameters carry gateway credentials as often as not.
            let secret =
                ["key", "secret", "password", "credential", "header", "param"].iter().any(|word| lower.contains(word))
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

/// Name of the persisted runtime configuration among the history's settings.
const RUNTIME_SETTING: &str = "runtime";

/// Applies the persisted runtime configuration, if any, to `settings` (at startup): from the
/// Postgres database when the history is there (every replica reads the same; its version is
/// returned), else from `configure.state_path`.
///
/// # Errors
/// An unreadable or invalid persisted configuration, named; an unreachable database.
pub async fn apply_persisted(settings: &mut Settings) -> anyhow::Result<Option<i64>> {
    let (text, origin, version) = if settings.memory.history.provider == HistoryProvider::Postgres {
        let Some(url) = settings.memory.vector_store.pgvector.url.as_ref() else { return Ok(None) };
        let stored = mem0_core::history::read_postgres_setting(url.expose_secret(), RUNTIME_SETTING)
            .await
            .map_err(|error| anyhow::anyhow!("cannot read the persisted runtime configuration: {error}"))?;
        let Some(stored) = stored else { return Ok(None) };
        (stored.value, format!("the runtime_config table (version {})", stored.version), Some(stored.version))
    } else {
        let path = settings.configure.state_path.clone();
        if !path.exists() {
            return Ok(None);
        }
        let text = std::fs::read_to_string(&path)
            .map_err(|error| anyhow::anyhow!("cannot read {}: {error}", path.display()))?;
        (text, path.display().to_string(), None)
    };
    let persisted: Value =
        serde_json::from_str(&text).map_err(|error| anyhow::anyhow!("{origin} is not valid JSON: {error}"))?;
    let next = RuntimeConfig::from_settings(settings)
        .patched(&persisted)
        .map_err(|error| anyhow::anyhow!("{origin}: {error}"))?;
    next.apply_to(settings);
    tracing::info!(from = %origin, "applied the persisted runtime configuration");
    Ok(version)
}

/// Persists `config` (the config types never serialise secrets) where [`apply_persisted`]
/// reads it; returns its version when it is shared with other replicas (history on Postgres).
async fn persist(state: &AppState, config: &RuntimeConfig) -> anyhow::Result<Option<i64>> {
    let text = serde_json::to_string_pretty(config)?;
    let memory = state.memory();
    if memory.history_store().in_store() {
        return Ok(Some(memory.history_store().save_setting(RUNTIME_SETTING, &text).await?));
    }
    let path = &state.settings.configure.state_path;
    if let Some(parent) = path.parent().filter(|parent| !parent.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    let temporary = path.with_extension("json.tmp");
    std::fs::write(&temporary, text)?;
    std::fs::rename(&temporary, path)?;
    Ok(None)
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

/// Every `base_url` in `value` shown without credentials.
fn hide_url_credentials(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map.iter_mut() {
                match inner {
                    Value::String(url) if key == "base_url" => *url = shown_url(url),
                    _ => hide_url_credentials(inner),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(hide_url_credentials),
        _ => {}
    }
}

/// The configuration in effect: the runtime configuration and the startup settings that matter,
/// as the config types serialise them (never a secret), with what is in use and which
/// credentials are configured.
pub fn redacted_view(runtime: &RuntimeConfig, memory: &Memory, settings: &Settings) -> Value {
    let configured = |secret: bool| json!(secret);
    let jwt = &settings.auth.jwt;
    let mut view = json!({
        "embedder": runtime.embedder,
        "vector_store": { "provider": settings.memory.vector_store.provider },
        "llm": runtime.llm,
        "extraction": runtime.extraction,
        "policy": runtime.policy,
        "reranker": settings.memory.reranker,
        "retrieval": memory.retrieval(),
        "auth": {
            "disabled": settings.auth.disabled,
            "api_keys": true,
            "jwt": jwt.hs256_secret.is_some() || jwt.public_key_pem.is_some() || jwt.public_key_file.is_some()
                || jwt.jwks_url.is_some(),
        },
        "rate_limit": { "enabled": settings.rate_limit.enabled },
    });
    view["embedder"]["model_id"] = json!(memory.embedder().model_id());
    view["embedder"]["dimension"] = json!(memory.embedder().dimension());
    view["embedder"]["openai"]["api_key_configured"] = configured(runtime.embedder.openai.api_key.is_some());
    view["llm"]["in_use"] = json!(memory.llm().map(|llm| json!({"provider": llm.provider(), "model": llm.model()})));
    view["llm"]["openai"]["api_key_configured"] = configured(runtime.llm.openai.api_key.is_some());
    view["llm"]["openai"]["extra_headers"] = json!(runtime.llm.openai.extra_headers.keys().collect::<Vec<_>>());
    view["llm"]["anthropic"]["api_key_configured"] = configured(runtime.llm.anthropic.api_key.is_some());
    view["reranker"]["in_use"] = json!(memory.reranker().map(|reranker| reranker.name().to_owned()));
    view["reranker"]["http"]["api_key_configured"] = configured(settings.memory.reranker.http.api_key.is_some());
    hide_url_credentials(&mut view);
    view
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
    let new_embedder = body.get("embedder").is_some();
    let next = change(state, caller, new_embedder, |running| running.patched(&body)).await?;
    Ok(redacted_view(&next, &state.memory(), &state.settings))
}

/// Makes the runtime configuration `edit` returns from the running one: validated, built and
/// checked ([`prepare`]), persisted (shared with other replicas when the history is on Postgres),
/// then swapped in. Returns the configuration now in effect.
///
/// # Errors
/// 400 `configuration_rejected` with the reason, leaving the running configuration as it was;
/// 500 when the change cannot be persisted (not applied then either).
pub async fn change(
    state: &AppState,
    caller: &Caller,
    new_embedder: bool,
    edit: impl FnOnce(&RuntimeConfig) -> Result<RuntimeConfig, String>,
) -> Result<RuntimeConfig, ApiError> {
    let mut running = state.memory_handle.runtime.lock().await;
    let next = edit(&running).map_err(rejected)?;
    let memory = prepare(state, &next, new_embedder).await.map_err(rejected)?;
    let version = persist(state, &next).await.map_err(|error| {
        tracing::error!(%error, "could not persist the runtime configuration");
        ApiError::new(ErrorCode::InternalError, "could not persist the configuration; nothing changed")
    })?;
    state.memory_handle.swap(memory);
    *running = next.clone();
    if let Some(version) = version {
        // The newest shared version is now this one, in effect here.
        state.memory_handle.config_version.store(version, Ordering::SeqCst);
        *state.memory_handle.config_problem.write().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    }
    tracing::warn!(principal = %caller.principal_id, tenant = %caller.tenant, "runtime configuration changed");
    Ok(next)
}

/// The service built for `next`: provider base URLs checked, a new embedder
/// built and probed when `new_embedder`, the stores' dimension checked. Nothing is swapped.
async fn prepare(state: &AppState, next: &RuntimeConfig, new_embedder: bool) -> Result<Memory, String> {
    let allow_link_local = state.settings.configure.allow_link_local_base_urls;
    if next.embedder.provider == EmbedderProvider::Openai {
        if let Some(url) = &next.embedder.openai.base_url {
            check_base_url(url, allow_link_local).await?;
        }
    }
    if let Some(url) = next.llm.base_url_in_use() {
        check_base_url(url, allow_link_local).await?;
    }
    let embedder = if new_embedder {
        let built =
            build_embedder(&next.embedder).await.map_err(|error| format!("the new embedder does not work: {error}"))?;
        Some(built)
    } else {
        None
    };
    let mut config = state.settings.memory.clone();
    config.embedder = next.embedder.clone();
    config.llm = next.llm.clone();
    config.extraction = next.extraction.clone();
    config.policy = next.policy.clone();
    state.memory().reconfigure(embedder, &config).await.map_err(|error| error.to_string())
}

/// With the history on Postgres, applies runtime configuration changes made through other
/// replicas: every `configure.poll_secs` it reads the stored version and, when it is newer than
/// the one in effect, applies it with the same checks as `POST /configure`. A change this
/// replica cannot apply (its provider probe fails, say) leaves the running configuration as it
/// is; the error is logged and shown by `/ready` until a later version applies.
pub fn follow_shared_changes(state: AppState) {
    let every = Duration::from_secs(state.settings.configure.poll_secs.max(1));
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            if let Err(error) = catch_up(&state).await {
                tracing::warn!(%error, "could not read the shared runtime configuration");
            }
        }
    });
}

/// One look at the shared runtime configuration (see [`follow_shared_changes`]).
async fn catch_up(state: &AppState) -> mem0_core::Result<()> {
    let handle = &state.memory_handle;
    let Some(stored) = state.memory().history_store().setting(RUNTIME_SETTING).await? else { return Ok(()) };
    if stored.version <= handle.config_version.load(Ordering::SeqCst) {
        return Ok(());
    }
    let mut running = handle.runtime.lock().await;
    // POST /configure on this replica may have stored it meanwhile.
    if stored.version <= handle.config_version.load(Ordering::SeqCst) {
        return Ok(());
    }
    let outcome = async {
        let persisted: Value =
            serde_json::from_str(&stored.value).map_err(|error| format!("not valid JSON: {error}"))?;
        let next = running.patched(&persisted)?;
        let new_embedder = serde_json::to_value(&next.embedder).ok() != serde_json::to_value(&running.embedder).ok();
        let memory = prepare(state, &next, new_embedder).await?;
        Ok::<_, String>((next, memory))
    }
    .await;
    match outcome {
        Ok((next, memory)) => {
            handle.swap(memory);
            *running = next;
            handle.config_version.store(stored.version, Ordering::SeqCst);
            *handle.config_problem.write().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
            tracing::warn!(
                version = stored.version,
                "applied the runtime configuration changed through another replica"
            );
        }
        Err(error) => {
            let problem = format!(
                "runtime configuration version {} (changed through another replica) not applied; still on the previous one: {error}",
                stored.version
            );
            let mut slot = handle.config_problem.write().unwrap_or_else(std::sync::PoisonError::into_inner);
            if slot.as_deref() != Some(problem.as_str()) {
                tracing::error!("{problem}");
            }
            *slot = Some(problem);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running() -> RuntimeConfig {
        let mut config = RuntimeConfig {
            embedder: EmbedderConfig {
                provider: EmbedderProvider::Local,
                local: mem0_core::providers::embedder::LocalEmbedderConfig::default(),
                openai: mem0_core::providers::embedder::OpenAiEmbedderConfig::default(),
            },
            llm: LlmConfig::default(),
            extraction: ExtractionSettings::default(),
            policy: PolicyConfig::default(),
        };
        config.llm.openai.api_key = Some("sk-startup".to_owned().into());
        config.llm.openai.extra_headers.insert("X-Org".into(), "acme".into());
        config
    }

    #[test]
    fn secrets_are_spotted_at_any_depth() {
        assert_eq!(secret_key(&json!({"embedder": {"openai": {"api_key": "sk"}}})).as_deref(), Some("api_key"));
        assert_eq!(secret_key(&json!({"embedder": {"openai": {"model": "m"}}})), None);
        assert_eq!(secret_key(&json!({"llm": {"openai": {"max_tokens": 5}}})), None);
        let headers = json!({"llm": {"openai": {"extra_headers": {"Authorization": "Bearer x"}}}});
        assert_eq!(secret_key(&headers).as_deref(), Some("extra_headers"));
        let params = json!({"llm": {"openai": {"query_params": {"api-version": "1"}}}});
        assert_eq!(secret_key(&params).as_deref(), Some("query_params"));
    }

    #[test]
    fn shown_urls_lose_credentials() {
        assert_eq!(shown_url("https://user:pw@example.com/v1?key=abc"), "https://example.com/v1");
    }

    #[test]
    fn changes_merge_into_the_running_configuration_and_are_validated() {
        let current = running();
        let next =
            current.patched(&json!({"llm": {"provider": "openai", "openai": {"max_tokens": 500}}})).expect("valid");
        assert_eq!(next.llm.openai.max_tokens, Some(500));
        assert_eq!(next.llm.openai.model, current.llm.openai.model, "untouched keys stay");
        assert_eq!(next.extraction.context_messages, current.extraction.context_messages);
        let reset = next.patched(&json!({"llm": {"openai": {"max_tokens": null}}})).expect("valid");
        assert_eq!(reset.llm.openai.max_tokens, None, "null resets to the default");
        for bad in [
            json!({}),
            json!([1]),
            json!({"vector_store": {"provider": "sqlite"}}),
            json!({"embedder": {"provider": "carrier-pigeon"}}),
            json!({"llm": {"openai": {"temperature": 7.0}}}),
            json!({"llm": {"openai": {"json_mode": "sometimes"}}}),
            json!({"extraction": {"context_messages": 500}}),
            json!({"embedder": {"openai": {"timeout_secs": 0}}}),
            json!({"llm": {"openai": {"api_key": "sk-over-http"}}}),
        ] {
            assert!(current.patched(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_policy_is_a_section_whose_detector_names_are_not_secrets() {
        let next = running()
            .patched(&json!({"policy": {"secrets": "reject", "tenants": {"acme": {"emails": "redact"}}}}))
            .expect("a policy change");
        assert_eq!(next.policy.detectors.secrets, Some(mem0_core::policy::Action::Reject));
        assert!(next.policy.tenants.contains_key("acme"));
        let bad = json!({"policy": {"rules": [{"name": "broken", "pattern": "(", "action": "redact"}]}});
        assert!(running().patched(&bad).expect_err("invalid").contains("rules[0]"));
        // Elsewhere a secret-looking key is still refused.
        assert!(running().patched(&json!({"llm": {"openai": {"api_key": "x"}}})).is_err());
    }

    #[test]
    fn keys_stay_with_their_host() {
        let current = running();
        let moved = |base_url: &str| {
            current.patched(&json!({"llm": {"provider": "openai", "openai": {"base_url": base_url}}})).expect("valid")
        };
        let same = moved("https://api.openai.com/v1/");
        assert!(same.llm.openai.api_key.is_some() && !same.llm.openai.extra_headers.is_empty());
        let elsewhere = moved("https://collector.example/v1");
        assert!(elsewhere.llm.openai.api_key.is_none() && elsewhere.llm.openai.extra_headers.is_empty());
        assert!(moved("https://api.openai.com:8443/v1").llm.openai.api_key.is_none(), "another port");
        // Nothing secret is ever serialised (persisted, shown).
        let text = serde_json::to_string(&same).expect("json");
        assert!(!text.contains("sk-startup") && !text.contains("acme"), "{text}");
    }
}
