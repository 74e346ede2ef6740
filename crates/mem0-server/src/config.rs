//! Server settings: `config/default.toml` compiled in, an optional file, then `MEM0__*` environment
//! variables; typed, with unknown keys rejected, and validated before anything starts.

use std::net::SocketAddr;
use std::path::Path;

use config::{Config, Environment, File, FileFormat};

use mem0_core::MemoryConfig;
use secrecy::{ExposeSecret as _, SecretString};
use serde::Deserialize;

use crate::auth::AuthSettings;
use crate::background_log::RetainedLogSettings;
use crate::configure::ConfigureSettings;
use crate::rate_limit::RateLimitSettings;

/// The defaults, compiled into the binary so it runs with no files.
pub const DEFAULT_CONFIG: &str = include_str!("../../../config/default.toml");

/// Everything the server is configured with.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Listener and request limits.
    pub server: ServerSettings,
    /// Logging.
    pub log: LogSettings,
    /// Embedder and stores.
    pub memory: MemoryConfig,
    /// Authentication.
    pub auth: AuthSettings,
    /// Rate limits.
    pub rate_limit: RateLimitSettings,
    /// The request log.
    pub request_log: RetainedLogSettings,
    /// The audit trail.
    pub audit: RetainedLogSettings,
    /// Runtime configuration changes (`POST /configure`).
    pub configure: ConfigureSettings,
    /// Queued adds (`async_mode`).
    #[serde(default)]
    pub jobs: crate::jobs::JobSettings,
    /// Webhooks.
    #[serde(default)]
    pub webhooks: crate::webhooks::WebhookSettings,
    /// Prometheus metrics (`/metrics`).
    #[serde(default)]
    pub metrics: crate::metrics::MetricsSettings,
    /// OpenTelemetry traces.
    #[serde(default)]
    pub traces: crate::traces::TraceSettings,
}

/// Listener and request limits.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSettings {
    /// Address to listen on.
    pub bind: SocketAddr,
    /// Largest request body, in bytes.
    pub body_limit_bytes: usize,
    /// Per-request timeout, in seconds.
    pub request_timeout_secs: u64,
    /// Time a request body may take to arrive, in seconds (then 408).
    pub body_read_timeout_secs: u64,
    /// Longest `POST /import`, in seconds (then 504); its body is streamed, not limited by
    /// `body_limit_bytes`, and each part must arrive within `body_read_timeout_secs`.
    pub import_timeout_secs: u64,
    /// Most requests in flight.
    pub concurrency_limit: usize,
    /// Tenant of every memory until authentication is configured.
    pub default_tenant: String,
    /// Host names answered besides loopback ones (`Host` header, without port). Always checked
    /// while authentication is disabled (DNS rebinding); checked with authentication on when set.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// After a shutdown signal, seconds during which `/ready` answers 503 `draining` while every
    /// request is still served (so a load balancer stops sending before the listener closes).
    pub drain_delay_secs: u64,
    /// Then, seconds in-flight requests get to finish before the process exits anyway.
    pub shutdown_grace_secs: u64,
}

/// Logging.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogSettings {
    /// Output format.
    pub format: LogFormat,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// Human-readable.
    Pretty,
    /// One JSON object per line.
    Json,
}

impl Settings {
    /// Loads the layered settings: defaults, then `file` if given, then the environment.
    ///
    /// # Errors
    /// A message naming the bad key or value.
    pub fn load(file: Option<&Path>) -> anyhow::Result<Self> {
        Self::load_with_env(file, Self::environment(), |name| std::env::var(name).ok())
    }

    /// The `MEM0__SECTION__KEY` variables; list settings take comma-separated values.
    pub fn environment() -> Environment {
        Environment::with_prefix("MEM0")
            .prefix_separator("__")
            .separator("__")
            .list_separator(",")
            .with_list_parse_key("server.allowed_hosts")
            .with_list_parse_key("rate_limit.trusted_proxies")
    }

    /// Like [`Settings::load`] with an explicit environment source (for tests).
    ///
    /// # Errors
    /// As [`Settings::load`].
    pub fn load_with_env(
        file: Option<&Path>,
        environment: Environment,
        plain_env: impl Fn(&str) -> Option<String>,
    ) -> anyhow::Result<Self> {
        let mut builder = Config::builder().add_source(File::from_str(DEFAULT_CONFIG, FileFormat::Toml));
        if let Some(path) = file {
            anyhow::ensure!(path.exists(), "config file {} does not exist", path.display());
            builder = builder.add_source(File::from(path).format(FileFormat::Toml));
        }
        let raw = builder
            .add_source(environment.try_parsing(true))
            .build()
            .map_err(|error| anyhow::anyhow!("cannot read configuration: {error}"))?;
        let mut settings: Settings =
            raw.try_deserialize().map_err(|error| anyhow::anyhow!("invalid configuration: {error}"))?;
        settings.clear_blank_values();
        // The variables every OpenAI-compatible tool understands fill what the config leaves unset.
        let openai = &mut settings.memory.embedder.openai;
        if openai.api_key.is_none() {
            openai.api_key = plain_env("OPENAI_API_KEY").filter(|key| !key.trim().is_empty()).map(SecretString::from);
        }
        if openai.base_url.is_none() {
            openai.base_url = plain_env("OPENAI_BASE_URL").filter(|url| !url.trim().is_empty());
        }
        let llm = &mut settings.memory.llm;
        if llm.openai.api_key.is_none() {
            llm.openai.api_key =
                plain_env("OPENAI_API_KEY").filter(|key| !key.trim().is_empty()).map(SecretString::from);
        }
        if llm.openai.base_url.is_none() {
            llm.openai.base_url = plain_env("OPENAI_BASE_URL").filter(|url| !url.trim().is_empty());
        }
        if llm.anthropic.api_key.is_none() {
            llm.anthropic.api_key =
                plain_env("ANTHROPIC_API_KEY").filter(|key| !key.trim().is_empty()).map(SecretString::from);
        }
        if llm.anthropic.base_url.is_none() {
            llm.anthropic.base_url = plain_env("ANTHROPIC_BASE_URL").filter(|url| !url.trim().is_empty());
        }
        let reranker = &mut settings.memory.reranker.http;
        if reranker.api_key.is_none() {
            reranker.api_key =
                plain_env("RERANKER_API_KEY").filter(|key| !key.trim().is_empty()).map(SecretString::from);
        }
        let pgvector = &mut settings.memory.vector_store.pgvector;
        if pgvector.url.is_none() {
            pgvector.url = plain_env("DATABASE_URL").filter(|url| !url.trim().is_empty()).map(SecretString::from);
        }
        if settings.auth.admin_api_key.is_none() {
            settings.auth.admin_api_key =
                plain_env("ADMIN_API_KEY").filter(|key| !key.trim().is_empty()).map(SecretString::from);
        }
        settings.validate()?;
        Ok(settings)
    }

    /// Treats empty and whitespace-only keys, URLs and secrets as unset: `OPENAI_API_KEY=` in a
    /// compose file, or `MEM0__MEMORY__LLM__OPENAI__API_KEY=""`, configures nothing.
    fn clear_blank_values(&mut self) {
        fn secret(value: &mut Option<SecretString>) {
            if value.as_ref().is_some_and(|secret| secret.expose_secret().trim().is_empty()) {
                *value = None;
            }
        }
        fn text(value: &mut Option<String>) {
            if value.as_ref().is_some_and(|text| text.trim().is_empty()) {
                *value = None;
            }
        }
        let memory = &mut self.memory;
        secret(&mut memory.embedder.openai.api_key);
        text(&mut memory.embedder.openai.base_url);
        secret(&mut memory.llm.openai.api_key);
        text(&mut memory.llm.openai.base_url);
        secret(&mut memory.llm.anthropic.api_key);
        text(&mut memory.llm.anthropic.base_url);
        secret(&mut memory.reranker.http.api_key);
        text(&mut memory.reranker.http.base_url);
        secret(&mut memory.vector_store.pgvector.url);
        secret(&mut self.auth.admin_api_key);
        secret(&mut self.auth.jwt.hs256_secret);
        text(&mut self.auth.jwt.jwks_url);
    }

    /// Checks values the types cannot.
    ///
    /// # Errors
    /// A message naming the key.
    pub fn validate(&self) -> anyhow::Result<()> {
        // The same rules as runtime changes (`/configure`).
        self.memory.validate("memory").map_err(|message| anyhow::anyhow!("{message}"))?;
        self.traces.validate().map_err(|message| anyhow::anyhow!("{message}"))?;
        let server = &self.server;
        anyhow::ensure!(
            (1024..=64 * 1024 * 1024).contains(&server.body_limit_bytes),
            "server.body_limit_bytes must be between 1024 and 67108864, got {}",
            server.body_limit_bytes
        );
        anyhow::ensure!(
            (1..=3600).contains(&server.request_timeout_secs),
            "server.request_timeout_secs must be between 1 and 3600, got {}",
            server.request_timeout_secs
        );
        anyhow::ensure!(
            (1..=3600).contains(&server.body_read_timeout_secs),
            "server.body_read_timeout_secs must be between 1 and 3600, got {}",
            server.body_read_timeout_secs
        );
        anyhow::ensure!(
            (1..=86_400).contains(&server.import_timeout_secs),
            "server.import_timeout_secs must be between 1 and 86400, got {}",
            server.import_timeout_secs
        );
        anyhow::ensure!(
            server.drain_delay_secs <= 600,
            "server.drain_delay_secs must be at most 600, got {}",
            server.drain_delay_secs
        );
        anyhow::ensure!(
            (1..=3600).contains(&server.shutdown_grace_secs),
            "server.shutdown_grace_secs must be between 1 and 3600, got {}",
            server.shutdown_grace_secs
        );
        anyhow::ensure!(
            (1..=100_000).contains(&server.concurrency_limit),
            "server.concurrency_limit must be between 1 and 100000, got {}",
            server.concurrency_limit
        );
        let limits = &self.rate_limit;
        for (name, value) in [
            ("read_per_minute", limits.read_per_minute),
            ("write_per_minute", limits.write_per_minute),
            ("admin_per_minute", limits.admin_per_minute),
            ("open_per_minute", limits.open_per_minute),
        ] {
            anyhow::ensure!(value >= 1, "rate_limit.{name} must be at least 1");
        }
        anyhow::ensure!(self.request_log.retention_days >= 1, "request_log.retention_days must be at least 1");
        anyhow::ensure!(self.audit.retention_days >= 1, "audit.retention_days must be at least 1");
        self.webhooks.validate()?;
        mem0_core::scope::validate_scope_id("server.default_tenant", &server.default_tenant)
            .map_err(|error| anyhow::anyhow!("{error}"))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::io::Write as _;

    use secrecy::ExposeSecret;

    use super::*;
    use mem0_core::providers::embedder::EmbedderProvider;

    fn env(pairs: &[(&str, &str)]) -> Environment {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        Settings::environment().source(Some(map))
    }

    #[test]
    fn defaults_load_and_validate() {
        let settings = Settings::load_with_env(None, env(&[]), |_| None).expect("defaults are valid");
        assert_eq!(settings.server.bind.to_string(), "127.0.0.1:8000");
        assert_eq!(settings.memory.embedder.provider, EmbedderProvider::Local);
    }

    #[test]
    fn environment_overrides_nested_keys() {
        let settings = Settings::load_with_env(
            None,
            env(&[("MEM0__SERVER__BIND", "0.0.0.0:9000"), ("MEM0__MEMORY__EMBEDDER__PROVIDER", "openai")]),
            |name| (name == "OPENAI_API_KEY").then(|| "sk-from-env".to_owned()),
        )
        .expect("valid");
        assert_eq!(settings.server.bind.port(), 9000);
        assert_eq!(settings.memory.embedder.provider, EmbedderProvider::Openai);
        let key = settings.memory.embedder.openai.api_key.as_ref().expect("key from env");
        assert_eq!(key.expose_secret(), "sk-from-env");
        assert!(!format!("{settings:?}").contains("sk-from-env"), "secrets are redacted in Debug");
    }

    #[test]
    fn file_layer_and_clear_errors() {
        let mut file = tempfile::NamedTempFile::new().expect("temp");
        writeln!(file, "[server]\nrequest_timeout_secs = 0").expect("write");
        let error = Settings::load_with_env(Some(file.path()), env(&[]), |_| None).expect_err("invalid");
        assert!(error.to_string().contains("server.request_timeout_secs"), "{error}");
        for (key, value) in [("drain_delay_secs", "601"), ("shutdown_grace_secs", "0")] {
            let mut file = tempfile::NamedTempFile::new().expect("temp");
            writeln!(file, "[server]\n{key} = {value}").expect("write");
            let error = Settings::load_with_env(Some(file.path()), env(&[]), |_| None).expect_err("invalid");
            assert!(error.to_string().contains(&format!("server.{key}")), "{error}");
        }

        let mut file = tempfile::NamedTempFile::new().expect("temp");
        writeln!(file, "[server]\nbindd = \"x\"").expect("write");
        let error = Settings::load_with_env(Some(file.path()), env(&[]), |_| None).expect_err("unknown key");
        assert!(error.to_string().contains("bindd"), "{error}");

        let error = Settings::load_with_env(None, env(&[("MEM0__SERVER__BIND", "nonsense")]), |_| None)
            .expect_err("bad address");
        assert!(error.to_string().contains("invalid configuration"), "{error}");
        assert!(Settings::load_with_env(Some(Path::new("/nonexistent.toml")), env(&[]), |_| None).is_err());
    }

    #[test]
    fn example_files_load() {
        let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../config"));
        let mut loaded = 0;
        for entry in std::fs::read_dir(dir).expect("config dir") {
            let path = entry.expect("entry").path();
            if path.to_string_lossy().ends_with(".example.toml") {
                Settings::load_with_env(Some(&path), env(&[]), |_| None)
                    .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
                loaded += 1;
            }
        }
        assert!(loaded >= 2, "found {loaded} example files");
    }

    #[test]
    fn list_settings_come_from_comma_separated_variables() {
        let settings = Settings::load_with_env(
            None,
            env(&[
                ("MEM0__SERVER__ALLOWED_HOSTS", "mem0.internal,mem0.example.com"),
                ("MEM0__RATE_LIMIT__TRUSTED_PROXIES", "10.0.0.1"),
            ]),
            |_| None,
        )
        .expect("valid");
        assert_eq!(settings.server.allowed_hosts, ["mem0.internal", "mem0.example.com"]);
        assert_eq!(settings.rate_limit.trusted_proxies, ["10.0.0.1".parse::<std::net::IpAddr>().expect("ip")]);
    }

    #[test]
    fn empty_keys_configure_no_llm() {
        let blank =
            |name: &str| matches!(name, "OPENAI_API_KEY" | "OPENAI_BASE_URL" | "ANTHROPIC_API_KEY").then(String::new);
        let settings = Settings::load_with_env(
            None,
            env(&[("MEM0__MEMORY__LLM__OPENAI__API_KEY", ""), ("MEM0__MEMORY__LLM__ANTHROPIC__API_KEY", " ")]),
            blank,
        )
        .expect("valid");
        assert!(settings.memory.llm.openai.api_key.is_none());
        assert_eq!(settings.memory.llm.resolved_provider(), mem0_core::providers::llm::LlmProvider::None);
    }

    /// The container builds with exactly the pinned toolchain and runs on a pgvector with
    /// iterative scans (0.8+); the compose file says what OPENAI_API_KEY does.
    #[test]
    fn packaging_pins_what_it_depends_on() {
        let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
        let read = |name: &str| std::fs::read_to_string(root.join(name)).expect(name);
        let toolchain = read("rust-toolchain.toml");
        let channel = toolchain
            .lines()
            .find_map(|line| line.strip_prefix("channel = "))
            .map(|value| value.trim_matches('"'))
            .expect("channel");
        assert_eq!(channel.split('.').count(), 3, "rust-toolchain.toml pins a full version: {channel}");
        let dockerfile = read("Dockerfile");
        assert!(dockerfile.contains(&format!("FROM rust:{channel}-")), "the builder image is rust:{channel}");
        let compose = read("docker-compose.yaml");
        let image = compose
            .lines()
            .find_map(|line| line.trim().strip_prefix("image: pgvector/pgvector:"))
            .expect("pgvector image");
        let version: Vec<u32> =
            image.split('-').next().unwrap_or_default().split('.').filter_map(|part| part.parse().ok()).collect();
        assert!(version.len() == 3 && version[..2] >= [0, 8][..], "pgvector 0.8+ pinned by version: {image}");
        assert!(!compose.contains("OpenAI-compatible embedder instead"), "OPENAI_API_KEY switches the LLM on");
    }

    #[test]
    fn llm_keys_come_from_the_usual_variables() {
        let variables = |name: &str| match name {
            "OPENAI_BASE_URL" => Some("http://localhost:11434/v1".to_owned()),
            "ANTHROPIC_API_KEY" => Some("sk-ant-from-env".to_owned()),
            _ => None,
        };
        let settings = Settings::load_with_env(None, env(&[]), variables).expect("valid");
        let llm = &settings.memory.llm;
        assert_eq!(llm.openai.base_url.as_deref(), Some("http://localhost:11434/v1"));
        assert_eq!(
            llm.anthropic.api_key.as_ref().map(|key| key.expose_secret().to_owned()).as_deref(),
            Some("sk-ant-from-env")
        );
        // A local OpenAI-compatible server needs no key: auto picks it first.
        assert_eq!(llm.resolved_provider(), mem0_core::providers::llm::LlmProvider::Openai);
        let anthropic_only =
            Settings::load_with_env(None, env(&[]), |name| (name == "ANTHROPIC_API_KEY").then(|| "sk-ant".to_owned()))
                .expect("valid");
        assert_eq!(anthropic_only.memory.llm.resolved_provider(), mem0_core::providers::llm::LlmProvider::Anthropic);
        let none = Settings::load_with_env(None, env(&[]), |_| None).expect("valid");
        assert_eq!(none.memory.llm.resolved_provider(), mem0_core::providers::llm::LlmProvider::None);
    }
}
