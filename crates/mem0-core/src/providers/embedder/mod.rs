//! The `Embedder` trait and its implementations: local MiniLM (candle) and OpenAI-compatible HTTP.

mod bert;
mod local;
mod openai;

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

pub use bert::Precision;
pub use local::{pin_thread_count, LocalEmbedder, DEFAULT_MAX_WINDOWS};
pub use openai::{OpenAiEmbedder, OpenAiEmbedderConfig, DEFAULT_OPENAI_BASE_URL};

use crate::error::{ProviderError, Result};

/// Turns texts into fixed-size vectors. Implementations must return L2-normalised vectors,
/// one per input text, in input order.
#[async_trait]
pub trait Embedder: Debug + Send + Sync + 'static {
    /// Returns the dimension of the vectors this embedder produces.
    fn dimension(&self) -> usize;

    /// Returns a short identifier of the model, for logs and the stored-data check.
    fn model_id(&self) -> &str;

    /// Embeds a batch of texts.
    ///
    /// # Errors
    /// A [`ProviderError`] classifying the failure; no partial result is returned.
    async fn embed_batch(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, ProviderError>;

    /// Embeds one text.
    ///
    /// # Errors
    /// As [`Embedder::embed_batch`].
    async fn embed(&self, text: &str) -> Result<Vec<f32>, ProviderError> {
        let mut vectors = self.embed_batch(&[text.to_owned()]).await?;
        vectors.pop().ok_or_else(|| {
            ProviderError::new(
                crate::error::ProviderErrorKind::BadResponse,
                self.model_id(),
                "embedder returned no vector",
            )
        })
    }
}

/// Which embedder to build. Settings of every provider may be present (so configuration layers
/// can switch provider without deleting keys); `provider` picks one.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct EmbedderConfig {
    /// The provider in use.
    pub provider: EmbedderProvider,
    /// Settings of the local embedder.
    #[serde(default)]
    pub local: LocalEmbedderConfig,
    /// Settings of the OpenAI-compatible embedder.
    #[serde(default)]
    pub openai: OpenAiEmbedderConfig,
}

/// The embedder providers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum EmbedderProvider {
    /// all-MiniLM-L6-v2 run in-process with candle.
    Local,
    /// Any server speaking the OpenAI `/v1/embeddings` wire format.
    Openai,
}

/// Settings of the local embedder.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct LocalEmbedderConfig {
    /// Directory holding `model.safetensors`, `tokenizer.json` and `config.json`.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub model_dir: std::path::PathBuf,
    /// Most 256-token windows embedded per text (1 to 32): a longer text's vector is the mean of
    /// its windows'; 1 cuts every text after 256 tokens (about 1,000 characters).
    #[serde(default = "default_max_windows")]
    pub max_windows: usize,
    /// How the model's linear layers are held: `auto` (int8 on x86-64 with AVX2 and FMA, else
    /// f32), `int8` or `f32` (the model's exact vectors, about 3× slower per short query).
    #[serde(default)]
    pub precision: Precision,
}

fn default_max_windows() -> usize {
    local::DEFAULT_MAX_WINDOWS
}

impl Default for LocalEmbedderConfig {
    fn default() -> Self {
        Self {
            model_dir: "models/all-MiniLM-L6-v2".into(),
            max_windows: default_max_windows(),
            precision: Precision::default(),
        }
    }
}

impl EmbedderConfig {
    /// Checks the values; `prefix` names the section in messages (`memory.embedder`).
    ///
    /// # Errors
    /// A message naming the bad key.
    pub fn validate(&self, prefix: &str) -> Result<(), String> {
        if self.local.model_dir.as_os_str().is_empty() {
            return Err(format!("{prefix}.local.model_dir cannot be empty"));
        }
        if !(1..=32).contains(&self.local.max_windows) {
            return Err(format!("{prefix}.local.max_windows must be between 1 and 32"));
        }
        self.openai.validate(&format!("{prefix}.openai"))
    }

    /// Takes the credentials of `before` where they still apply (see
    /// [`OpenAiEmbedderConfig::keep_credentials`]).
    pub fn keep_credentials(&mut self, before: &Self) {
        self.openai.keep_credentials(&before.openai);
    }
}

/// Builds the configured embedder and discovers its dimension.
///
/// # Errors
/// [`crate::Error::Config`] when the model cannot be loaded, or the remote provider's error when
/// the dimension probe fails.
pub async fn build_embedder(config: &EmbedderConfig) -> Result<Arc<dyn Embedder>> {
    match config.provider {
        EmbedderProvider::Local => {
            let local = config.local.clone();
            let embedder = tokio::task::spawn_blocking(move || {
                LocalEmbedder::load_with(&local.model_dir, local.max_windows, local.precision)
            })
            .await
            .map_err(|error| crate::Error::Internal(error.to_string()))??;
            Ok(Arc::new(embedder))
        }
        EmbedderProvider::Openai => Ok(Arc::new(OpenAiEmbedder::connect(config.openai.clone()).await?)),
    }
}
