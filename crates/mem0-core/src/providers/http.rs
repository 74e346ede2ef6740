//! JSON-over-HTTP calls to external providers with one policy for every client: connect and
//! total timeouts, bounded retries with jittered exponential backoff on throttling, server
//! errors and connection failures (honouring `Retry-After`), and classified errors that never
//! carry secrets.

use std::net::IpAddr;
use std::time::Duration;

use reqwest::header::{HeaderMap, RETRY_AFTER};
use reqwest::StatusCode;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tracing::{warn, Instrument as _};

use crate::error::{ProviderError, ProviderErrorKind};

/// How often and how patiently a failed call is retried.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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

impl RetryPolicy {
    /// Checks the values; `prefix` names the section in messages.
    ///
    /// # Errors
    /// A message naming the bad key.
    pub fn validate(&self, prefix: &str) -> Result<(), String> {
        check_range(&format!("{prefix}.max_attempts"), self.max_attempts, 1, 10)?;
        check_range(&format!("{prefix}.base_delay_ms"), self.base_delay_ms, 1, 60_000)?;
        check_range(&format!("{prefix}.max_delay_ms"), self.max_delay_ms, self.base_delay_ms, 600_000)
    }
}

/// Fails with a message naming `key` unless `value` is within `low..=high`.
///
/// # Errors
/// `"{key} must be between {low} and {high}, got {value}"`.
pub fn check_range<T: PartialOrd + std::fmt::Display>(key: &str, value: T, low: T, high: T) -> Result<(), String> {
    if value < low || value > high {
        return Err(format!("{key} must be between {low} and {high}, got {value}"));
    }
    Ok(())
}

/// Fails unless `url` (when set) is an http(s) URL.
///
/// # Errors
/// A message naming `key`.
pub fn check_url(key: &str, url: Option<&str>) -> Result<(), String> {
    let Some(url) = url else { return Ok(()) };
    let parsed = reqwest::Url::parse(url).map_err(|error| format!("{key} `{url}` is not a URL: {error}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!("{key} must be http or https, got `{url}`"));
    }
    Ok(())
}

/// True when two base URLs (`None` meaning the provider's `default`) have the same scheme, host
/// and port: credentials configured for one may follow a change to the other.
pub fn same_origin(before: Option<&str>, after: Option<&str>, default: &str) -> bool {
    let origin = |url: Option<&str>| {
        reqwest::Url::parse(url.unwrap_or(default)).ok().map(|parsed| {
            (parsed.scheme().to_owned(), parsed.host_str().map(str::to_owned), parsed.port_or_known_default())
        })
    };
    match (origin(before), origin(after)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
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
    /// What the provider is called for (`llm`, `rerank`): a label of the provider metrics.
    service: &'static str,
    retry: RetryPolicy,
}

impl ProviderHttp {
    /// Builds the client of `provider` (called for `service`) with a 5 s connect timeout and
    /// `timeout` per attempt.
    ///
    /// # Errors
    /// [`crate::Error::Config`] when the TLS backend cannot initialise.
    pub fn new(
        provider: &'static str,
        service: &'static str,
        timeout: Duration,
        retry: RetryPolicy,
    ) -> crate::Result<Self> {
        // No redirects: a redirect would carry keys in custom headers to another host and get
        // around the base-URL checks of /configure.
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(5))
            .timeout(timeout.max(Duration::from_secs(1)))
            .build()
            .map_err(|error| crate::Error::Config(format!("cannot build http client: {error}")))?;
        Ok(Self { client, provider, service, retry: RetryPolicy { max_attempts: retry.max_attempts.max(1), ..retry } })
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
        let span = tracing::info_span!(
            "provider",
            otel.name = %format!("{} {}", self.provider, self.service),
            otel.kind = "client",
            provider = self.provider,
            service = self.service,
        );
        self.post_json_with_retries(url, headers, body, secrets).instrument(span).await
    }

    async fn post_json_with_retries<B: Serialize + Sync, R: DeserializeOwned>(
        &self,
        url: &str,
        headers: &HeaderMap,
        body: &B,
        secrets: &[&str],
    ) -> Result<R, ProviderError> {
        let mut attempt = 1;
        loop {
            let started = std::time::Instant::now();
            let outcome = self.attempt(url, headers, body, secrets).await;
            crate::metrics::core().provider_attempt(
                self.provider,
                self.service,
                outcome.as_ref().map(|_| ()),
                started.elapsed(),
            );
            match outcome {
                Ok(value) => return Ok(value),
                Err(error) if attempt < self.retry.max_attempts && retryable(error.kind) => {
                    let Some(delay) = self.retry.delay(attempt, error.retry_after) else {
                        return Err(error);
                    };
                    warn!(provider = self.provider, attempt, delay_ms = delay.as_millis() as u64, %error, "retrying provider call");
                    crate::metrics::core().provider_retry(self.provider, self.service);
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

// ---- The base-URL guard of provider URLs changed at runtime ----------------------------------

/// True for addresses provider URLs set at runtime may not reach: link-local, unspecified,
/// broadcast and the cloud metadata addresses, also when carried inside IPv6.
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
    check_target_url("base_url", raw, allow_link_local, "configure.allow_link_local_base_urls").await
}

/// Refuses URLs (of `field`) that are not http(s) or that reach link-local or metadata addresses
/// (after DNS resolution), unless the startup setting `allow_setting` is on.
///
/// # Errors
/// A message saying why.
pub async fn check_target_url(
    field: &str,
    raw: &str,
    allow_link_local: bool,
    allow_setting: &str,
) -> Result<(), String> {
    let url = url::Url::parse(raw).map_err(|error| format!("{field} `{raw}` is not a URL: {error}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("{field} must be http or https, got `{}`", url.scheme()));
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
            if is_metadata_name(&lower) {
                return Err(format!("{field} host `{domain}` is a cloud metadata service"));
            }
            tokio::net::lookup_host((domain, port))
                .await
                .map_err(|error| format!("{field} host `{domain}` does not resolve: {error}"))?
                .map(|address| address.ip())
                .collect()
        }
        None => return Err(format!("{field} has no host")),
    };
    match addresses.into_iter().find(|ip| forbidden_ip(*ip)) {
        Some(ip) => Err(format!(
            "{field} resolves to {ip}, a link-local or metadata address; set {allow_setting} in the startup configuration to allow it"
        )),
        None => Ok(()),
    }
}

/// True for the host names of cloud metadata services.
fn is_metadata_name(lower: &str) -> bool {
    ["metadata.google.internal", "metadata", "instance-data", "metadata.azure.internal"]
        .contains(&lower.trim_end_matches('.'))
}

/// Resolves host names for requests to URLs that users set at runtime (webhooks) and keeps only
/// the addresses [`check_target_url`] allows. It runs when each connection is made, so a name
/// checked when it was set cannot be pointed at a metadata address later (DNS rebinding).
/// (Literal IP addresses are not resolved: check them with [`check_target_url`].)
#[derive(Debug, Clone, Copy, Default)]
pub struct GuardedResolver;

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_ascii_lowercase();
        Box::pin(async move {
            if is_metadata_name(&host) {
                return Err(format!("`{host}` is a cloud metadata service").into());
            }
            let allowed: Vec<std::net::SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .filter(|address| !forbidden_ip(address.ip()))
                .collect();
            if allowed.is_empty() {
                return Err(format!("`{host}` resolves to no address outside link-local and metadata ranges").into());
            }
            Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_guarded_resolver_keeps_only_allowed_addresses() {
        use reqwest::dns::Resolve as _;
        use std::str::FromStr as _;
        let name = |host: &str| reqwest::dns::Name::from_str(host).expect("name");
        let local: Vec<std::net::SocketAddr> =
            GuardedResolver.resolve(name("localhost")).await.expect("localhost resolves").collect();
        assert!(!local.is_empty() && local.iter().all(|address| address.ip().is_loopback()), "{local:?}");
        for metadata in ["metadata.google.internal", "METADATA", "instance-data."] {
            assert!(GuardedResolver.resolve(name(metadata)).await.is_err(), "{metadata}");
        }
    }

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
