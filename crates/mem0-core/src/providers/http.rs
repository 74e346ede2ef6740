//! JSON-over-HTTP calls to external providers with one policy for every client: connect and
//! total timeouts, bounded retries with jittered exponential backoff on throttling, server
//! errors and connection failures (honouring `Retry-After`), and classified errors that never
//! carry secrets.

use std::time::Duration;

use reqwest::header::{HeaderMap, RETRY_AFTER};
use reqwest::StatusCode;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tracing::warn;

use crate::error::{ProviderError, ProviderErrorKind};

/// How often and how patiently a failed call is retried.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryPolicy {
    /// Attempts in total, including the first (1 = no retries).
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    /// Delay before the first retry, in milliseconds; doubles with each retry.
    #[serde(default = "default_base_delay_ms")]
    pub base_delay_ms: u64,
    /// Longest wait before a retry, in milliseconds. A `Retry-After` longer than this is not
    /// waited for: the error goes back to the caller with the provider's hint.
    #[serde(default = "default_max_delay_ms")]
    pub max_delay_ms: u64,
}

fn default_max_attempts() -> u32 {
    3
}
fn default_base_delay_ms() -> u64 {
    500
}
fn default_max_delay_ms() -> u64 {
    10_000
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: default_max_attempts(),
            base_delay_ms: default_base_delay_ms(),
            max_delay_ms: default_max_delay_ms(),
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (1-based): the provider's `Retry-After` when given,
    /// else full jitter over `base * 2^(retry-1)`, capped. `None` means do not retry.
    fn delay(&self, retry: u32, retry_after: Option<Duration>) -> Option<Duration> {
        let cap = Duration::from_millis(self.max_delay_ms);
        if let Some(hint) = retry_after {
            return (hint <= cap).then_some(hint);
        }
        let exponential = self.base_delay_ms.saturating_mul(1u64 << (retry - 1).min(20)).min(self.max_delay_ms);
        Some(Duration::from_millis(fastrand::u64(exponential / 2..=exponential.max(1))))
    }
}

/// A reqwest client bound to one provider name and retry policy.
#[derive(Debug, Clone)]
pub struct ProviderHttp {
    client: reqwest::Client,
    provider: &'static str,
    retry: RetryPolicy,
}

impl ProviderHttp {
    /// Builds the client with a 5 s connect timeout and `timeout` per attempt.
    ///
    /// # Errors
    /// [`crate::Error::Config`] when the TLS backend cannot initialise.
    pub fn new(provider: &'static str, timeout: Duration, retry: RetryPolicy) -> crate::Result<Self> {
        // No redirects: a redirect would carry keys in custom headers to another host and get
        // around the base-URL checks of /configure.
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(5))
            .timeout(timeout.max(Duration::from_secs(1)))
            .build()
            .map_err(|error| crate::Error::Config(format!("cannot build http client: {error}")))?;
        Ok(Self { client, provider, retry: RetryPolicy { max_attempts: retry.max_attempts.max(1), ..retry } })
    }

    /// Returns the provider name used in errors.
    pub fn provider(&self) -> &'static str {
        self.provider
    }

    /// POSTs `body` as JSON to `url` and parses the JSON answer, retrying transient failures.
    /// `secrets` are redacted from any provider message that ends up in an error.
    ///
    /// # Errors
    /// The classified [`ProviderError`] of the last attempt.
    pub async fn post_json<B: Serialize + Sync, R: DeserializeOwned>(
        &self,
        url: &str,
        headers: &HeaderMap,
        body: &B,
        secrets: &[&str],
    ) -> Result<R, ProviderError> {
        let mut attempt = 1;
        loop {
            match self.attempt(url, headers, body, secrets).await {
                Ok(value) => return Ok(value),
                Err(error) if attempt < self.retry.max_attempts && retryable(error.kind) => {
                    let Some(delay) = self.retry.delay(attempt, error.retry_after) else {
                        return Err(error);
                    };
                    warn!(provider = self.provider, attempt, delay_ms = delay.as_millis() as u64, %error, "retrying provider call");
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                }
                Err(error) => return Err(error),
            }
        }
    }

    async fn attempt<B: Serialize + Sync, R: DeserializeOwned>(
        &self,
        url: &str,
        headers: &HeaderMap,
        body: &B,
        secrets: &[&str],
    ) -> Result<R, ProviderError> {
        let response = self
            .client
            .post(url)
            .headers(headers.clone())
            .json(body)
            .send()
            .await
            .map_err(|error| self.transport(error))?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let text = response.text().await.map_err(|error| self.transport(error))?;
        if !status.is_success() {
            let kind = classify_status(status);
            let mut message = format!("request failed with status {}", status.as_u16());
            // Auth failures may quote the key back (even masked); never pass their text on.
            if kind != ProviderErrorKind::AuthFailed {
                if let Some(detail) = provider_message(&text, secrets) {
                    message = format!("{message}: {detail}");
                }
            }
            let mut error = ProviderError::new(kind, self.provider, message);
            error.retry_after = retry_after;
            return Err(error);
        }
        serde_json::from_str(&text).map_err(|error| {
            ProviderError::new(ProviderErrorKind::BadResponse, self.provider, format!("unreadable response: {error}"))
        })
    }

    fn transport(&self, error: reqwest::Error) -> ProviderError {
        let kind = if error.is_timeout() { ProviderErrorKind::Timeout } else { ProviderErrorKind::Unavailable };
        // Without the URL: its query string may carry keys (query_params) and hosts stay private.
        let error = error.without_url();
        ProviderError::new(kind, self.provider, format!("request failed: {error}"))
    }
}

fn retryable(kind: ProviderErrorKind) -> bool {
    matches!(kind, ProviderErrorKind::RateLimited | ProviderErrorKind::Unavailable | ProviderErrorKind::Timeout)
}

/// Maps an HTTP status to the error class callers see.
pub fn classify_status(status: StatusCode) -> ProviderErrorKind {
    match status.as_u16() {
        401 | 403 => ProviderErrorKind::AuthFailed,
        429 => ProviderErrorKind::RateLimited,
        408 | 504 => ProviderErrorKind::Timeout,
        // Anthropic's "overloaded".
        529 => ProviderErrorKind::Unavailable,
        code if code >= 500 => ProviderErrorKind::Unavailable,
        _ => ProviderErrorKind::BadRequest,
    }
}

/// The provider's own explanation from an error body (`{"error": {"message": ...}}` and the like),
/// shortened, with secrets removed.
fn provider_message(body: &str, secrets: &[&str]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(body).ok()?;
    let message = value
        .pointer("/error/message")
        .or_else(|| value.get("error").filter(|error| error.is_string()))
        .or_else(|| value.get("message"))
        .or_else(|| value.get("detail"))?
        .as_str()?;
    let mut message = message.to_owned();
    for secret in secrets.iter().filter(|secret| secret.len() >= 4) {
        message = message.replace(secret, "[redacted]");
    }
    Some(message.chars().take(300).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_honoured_up_to_the_cap() {
        let policy = RetryPolicy { max_attempts: 3, base_delay_ms: 100, max_delay_ms: 2000 };
        assert_eq!(policy.delay(1, Some(Duration::from_secs(2))), Some(Duration::from_secs(2)));
        assert_eq!(policy.delay(1, Some(Duration::from_secs(3))), None);
        for retry in 1..6 {
            let delay = policy.delay(retry, None).expect("retry");
            let ceiling = (100u64 << (retry - 1)).min(2000);
            assert!(delay.as_millis() as u64 <= ceiling && delay.as_millis() as u64 >= ceiling / 2, "{delay:?}");
        }
    }

    #[test]
    fn provider_messages_lose_secrets() {
        let body = r#"{"error": {"message": "model gpt-x not found for key sk-secret-123", "type": "invalid"}}"#;
        assert_eq!(
            provider_message(body, &["sk-secret-123"]).as_deref(),
            Some("model gpt-x not found for key [redacted]")
        );
        assert_eq!(provider_message("<html>bad gateway</html>", &[]), None);
        assert_eq!(provider_message(r#"{"error": "overloaded"}"#, &[]).as_deref(), Some("overloaded"));
    }
}
