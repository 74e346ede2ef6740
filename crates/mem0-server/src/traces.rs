//! OpenTelemetry traces, off by default (`traces.enabled`): the spans of this crate and the core
//! (one per request, named `METHOD /route/template`, with the request id; under it `store`,
//! `embed`, `llm`, `provider` and `rerank` spans) are exported over OTLP/HTTP in its JSON encoding
//! to `traces.endpoint` (an OpenTelemetry Collector, Jaeger, Tempo…), in batches, from a
//! background thread. A request carrying a W3C `traceparent` header continues that trace.
//!
//! The spans are sent by the server's own HTTP client (reqwest, no redirects), run on the
//! server's runtime, so the exporter brings no second HTTP stack.

use std::time::Duration;

use axum::http::HeaderMap;
use bytes::Bytes;
use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use serde::{Deserialize, Serialize};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::{Layer, Registry};

/// Where and how traces are exported.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceSettings {
    /// Export spans at all.
    #[serde(default)]
    pub enabled: bool,
    /// The OTLP/HTTP traces endpoint (the whole URL, `/v1/traces` included).
    #[serde(default = "default_endpoint")]
    pub endpoint: String,
    /// `service.name` of the spans.
    #[serde(default = "default_service_name")]
    pub service_name: String,
    /// Share of traces started here that are kept (0 to 1); a request with a `traceparent`
    /// follows its caller's decision.
    #[serde(default = "default_sample_ratio")]
    pub sample_ratio: f64,
    /// How long one export may take, in seconds.
    #[serde(default = "default_timeout_secs")]
    pub timeout_secs: u64,
}

fn default_endpoint() -> String {
    "http://127.0.0.1:4318/v1/traces".to_owned()
}
fn default_service_name() -> String {
    "mem0-rs".to_owned()
}
fn default_sample_ratio() -> f64 {
    1.0
}
fn default_timeout_secs() -> u64 {
    10
}

impl Default for TraceSettings {
    fn default() -> Self {
        Self {
            enabled: false,
            endpoint: default_endpoint(),
            service_name: default_service_name(),
            sample_ratio: default_sample_ratio(),
            timeout_secs: default_timeout_secs(),
        }
    }
}

impl TraceSettings {
    /// Checks the values.
    ///
    /// # Errors
    /// A message naming the bad key.
    pub fn validate(&self) -> Result<(), String> {
        mem0_core::providers::http::check_url("traces.endpoint", Some(&self.endpoint))?;
        if !(0.0..=1.0).contains(&self.sample_ratio) {
            return Err(format!("traces.sample_ratio must be between 0 and 1, got {}", self.sample_ratio));
        }
        if self.service_name.trim().is_empty() {
            return Err("traces.service_name must not be empty".to_owned());
        }
        mem0_core::providers::http::check_range("traces.timeout_secs", self.timeout_secs, 1, 300)
    }
}

/// The exporter's HTTP client: the request runs on the server's runtime (the batch processor
/// calls from a thread of its own, outside any runtime).
#[derive(Debug)]
struct RuntimeClient {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for RuntimeClient {
    async fn send_bytes(
        &self,
        request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, opentelemetry_http::HttpError> {
        let client = self.client.clone();
        let sent = self.runtime.spawn(async move {
            let request = reqwest::Request::try_from(request.map(reqwest::Body::from))?;
            let response = client.execute(request).await?;
            let mut answer = http::Response::builder().status(response.status().as_u16());
            for (name, value) in response.headers() {
                answer = answer.header(name.as_str(), value.as_bytes());
            }
            let body = response.bytes().await?;
            Ok::<_, opentelemetry_http::HttpError>(answer.body(body)?)
        });
        sent.await?
    }
}

/// The tracing layer exporting this process's spans, and the provider to shut down (which sends
/// what is still buffered) before the process exits. Must be called on the runtime.
///
/// # Errors
/// The HTTP client or the exporter cannot be built.
pub fn layer(settings: &TraceSettings) -> anyhow::Result<(Box<dyn Layer<Registry> + Send + Sync>, SdkTracerProvider)> {
    let timeout = Duration::from_secs(settings.timeout_secs);
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(5))
        .timeout(timeout)
        .build()?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(RuntimeClient { client, runtime: tokio::runtime::Handle::current() })
        .with_protocol(opentelemetry_otlp::Protocol::HttpJson)
        .with_endpoint(settings.endpoint.clone())
        .with_timeout(timeout)
        .build()?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(settings.sample_ratio))))
        .with_resource(Resource::builder().with_service_name(settings.service_name.clone()).build())
        .build();
    let tracer = provider.tracer("mem0-rs");
    // Our spans only (not hyper's, sqlx's or reqwest's, which would multiply them); the core's
    // store and embed spans are at debug, so that the log does not pay for them.
    let ours =
        Targets::new().with_target("mem0_server", tracing::Level::INFO).with_target("mem0_core", tracing::Level::DEBUG);
    let layer = tracing_opentelemetry::layer().with_tracer(tracer).with_filter(ours).boxed();
    Ok((layer, provider))
}

/// Makes `span` continue the trace of the request's W3C `traceparent` header, if it has a valid
/// one (without traces enabled this does nothing).
pub fn continue_trace(span: &tracing::Span, headers: &HeaderMap) {
    if !headers.contains_key("traceparent") {
        return;
    }
    let context = TraceContextPropagator::new().extract(&opentelemetry_http::HeaderExtractor(headers));
    let _ = tracing_opentelemetry::OpenTelemetrySpanExt::set_parent(span, context);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_checked() {
        assert!(TraceSettings::default().validate().is_ok());
        let bad_ratio = TraceSettings { sample_ratio: 1.5, ..TraceSettings::default() };
        assert!(bad_ratio.validate().unwrap_err().contains("traces.sample_ratio"));
        let bad_url = TraceSettings { endpoint: "ftp://collector/v1/traces".to_owned(), ..TraceSettings::default() };
        assert!(bad_url.validate().unwrap_err().contains("traces.endpoint"));
    }
}
