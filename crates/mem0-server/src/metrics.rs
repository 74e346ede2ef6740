//! `/metrics` in the Prometheus text format (0.0.4): the server's families (requests by route
//! template, method and status; requests in flight; rate-limit rejections; database pools; the
//! job queue) beside the core's ([`mem0_core::metrics`]: provider calls, LLM tokens, embedding
//! batches, store operations).
//!
//! Served on the API listener to the global admin, and, when `metrics.listen` is set, without
//! credentials on that address (for a scraper on a private network). Label values are route
//! templates, never raw paths, so a million memory ids make no new series; unknown methods are
//! `other`, and a request whose handler never answered (the client went away, or the shutdown's
//! grace period cut it off) is counted with status `499`.

use std::sync::LazyLock;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{header, Method};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use mem0_core::metrics::{core, latency_histogram, Histograms, PoolStatus};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::{ApiError, ErrorBody};
use crate::rate_limit::RouteClass;
use crate::state::{AppState, RequestCaller};

/// Where `/metrics` is served.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsSettings {
    /// Serve `/metrics` at all (to the global admin on the API listener).
    #[serde(default = "default_enabled")]
    pub enabled: bool,
    /// A second address serving only `/metrics`, without credentials (e.g. `127.0.0.1:9464`, or
    /// a private interface a Prometheus server reaches). Unset: no second listener.
    #[serde(default)]
    pub listen: Option<std::net::SocketAddr>,
}

fn default_enabled() -> bool {
    true
}

impl Default for MetricsSettings {
    fn default() -> Self {
        Self { enabled: default_enabled(), listen: None }
    }
}

/// A request, by route template, method and status.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HttpLabels {
    method: &'static str,
    route: String,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClassLabels {
    class: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolLabels {
    pool: &'static str,
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolName {
    pool: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

/// The server's metric families, and the registry with the core's.
#[derive(Debug)]
pub struct ServerMetrics {
    requests: Histograms<HttpLabels>,
    in_flight: Gauge,
    rate_limited: Family<ClassLabels, Counter>,
    pool_connections: Family<PoolLabels, Gauge>,
    pool_max: Family<PoolName, Gauge>,
    jobs_open: Gauge,
    registry: Registry,
}

static METRICS: LazyLock<ServerMetrics> = LazyLock::new(|| {
    let requests: Histograms<HttpLabels> = Family::new_with_constructor(latency_histogram);
    let in_flight = Gauge::default();
    let rate_limited = Family::<ClassLabels, Counter>::default();
    let pool_connections = Family::<PoolLabels, Gauge>::default();
    let pool_max = Family::<PoolName, Gauge>::default();
    let jobs_open = Gauge::default();
    let build = Family::<BuildLabels, Gauge>::default();
    build.get_or_create(&BuildLabels { version: env!("CARGO_PKG_VERSION") }).set(1);
    let mut registry = Registry::with_prefix("mem0");
    registry.register_with_unit(
        "http_request_duration",
        "HTTP requests by method, route template and status (499: no answer from the handler; the client went \
         away or the shutdown cut it off)",
        Unit::Seconds,
        requests.clone(),
    );
    registry.register("http_requests_in_flight", "HTTP requests being handled", in_flight.clone());
    registry.register(
        "rate_limit_rejections",
        "Requests answered 429 by the rate limiter, by route class",
        rate_limited.clone(),
    );
    registry.register(
        "db_pool_connections",
        "Connections of a database pool by state (in_use, idle)",
        pool_connections.clone(),
    );
    registry.register("db_pool_max_connections", "The most connections a pool opens", pool_max.clone());
    registry.register("jobs_open", "Queued adds waiting or running (all tenants)", jobs_open.clone());
    registry.register("build_info", "The server's version", build);
    core().register(&mut registry);
    ServerMetrics { requests, in_flight, rate_limited, pool_connections, pool_max, jobs_open, registry }
});

/// The process's server metrics.
pub fn server() -> &'static ServerMetrics {
    &METRICS
}

/// The label of a method: the standard ones by name, any other as `other`.
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// A request being handled: counted in flight until dropped. Dropped without
/// [`InFlight::finish`] (the client hung up and the handler was cancelled), it is counted with
/// status 499.
#[derive(Debug)]
pub struct InFlight {
    method: &'static str,
    route: String,
    started: Instant,
    finished: bool,
}

impl ServerMetrics {
    /// Starts counting a request of `method` to `route` (a template, or `unmatched`).
    pub fn start(&self, method: &Method, route: &str) -> InFlight {
        self.in_flight.inc();
        InFlight { method: method_label(method), route: route.to_owned(), started: Instant::now(), finished: false }
    }

    fn observe(&self, request: &InFlight, status: u16, took: Duration) {
        let labels = HttpLabels { method: request.method, route: request.route.clone(), status };
        self.requests.get_or_create(&labels).observe(took.as_secs_f64());
    }

    /// Counts a request the rate limiter refused.
    pub fn rate_limited(&self, class: RouteClass) {
        let class = match class {
            RouteClass::Read => "read",
            RouteClass::Write => "write",
            RouteClass::Admin => "admin",
            RouteClass::Open => "open",
        };
        self.rate_limited.get_or_create(&ClassLabels { class }).inc();
    }

    fn pool(&self, pool: &'static str, status: PoolStatus) {
        let in_use = i64::from(status.size.saturating_sub(status.idle));
        self.pool_connections.get_or_create(&PoolLabels { pool, state: "in_use" }).set(in_use);
        self.pool_connections.get_or_create(&PoolLabels { pool, state: "idle" }).set(i64::from(status.idle));
        self.pool_max.get_or_create(&PoolName { pool }).set(i64::from(status.max));
    }

    /// Reads the gauges that are sampled (pools, queue) from `state`, then encodes every family.
    pub async fn render(&self, state: &AppState) -> String {
        let memory = state.memory();
        self.pool(memory.store().backend(), memory.store().pool_status());
        if let Some(history) = memory.history_store().pool_status() {
            self.pool("history", history);
        }
        match memory.history_store().jobs().open().await {
            Ok(open) => {
                self.jobs_open.set(i64::try_from(open).unwrap_or(i64::MAX));
            }
            Err(error) => tracing::warn!(%error, "metrics: could not count the job queue"),
        }
        let mut text = String::new();
        if let Err(error) = prometheus_client::encoding::prometheus_text::encode(&mut text, &self.registry) {
            tracing::error!(%error, "metrics: could not encode");
        }
        text
    }
}

impl InFlight {
    /// The request was answered with `status`.
    pub fn finish(mut self, status: u16) {
        self.finished = true;
        server().observe(&self, status, self.started.elapsed());
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        server().in_flight.dec();
        if !self.finished {
            server().observe(self, 499, self.started.elapsed());
        }
    }
}

/// The `/metrics` route of the API listener (global admin; absent when `metrics.enabled` is
/// false).
pub(crate) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(get_metrics))
}

fn text_response(text: String) -> Response {
    ([(header::CONTENT_TYPE, prometheus_client::encoding::prometheus_text::CONTENT_TYPE)], text).into_response()
}

/// Prometheus metrics of this process (global admin)
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "admin",
    responses(
        (status = 200, description = "Every metric family in the Prometheus text format 0.0.4: requests by route \
            template, method and status; provider calls, retries and errors; LLM tokens by tenant and model; \
            embedding batches; store operations; database pools; the job queue", body = String,
            content_type = "text/plain"),
        (status = 401, description = "No valid credentials", body = ErrorBody),
        (status = 403, description = "Not the global admin", body = ErrorBody),
        (status = 404, description = "`metrics.enabled` is false", body = ErrorBody),
    )
)]
pub async fn get_metrics(State(state): State<AppState>, RequestCaller(caller): RequestCaller) -> Response {
    if !caller.global_admin {
        return ApiError::from(mem0_core::Error::Forbidden(
            "metrics cover every tenant: they need the global admin (or the `metrics.listen` address)".to_owned(),
        ))
        .into_response();
    }
    text_response(server().render(&state).await)
}

/// The router of the `metrics.listen` address: `GET /metrics` without credentials, nothing else.
pub fn open_router(state: AppState) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(|State(state): State<AppState>| async move { text_response(server().render(&state).await) }),
        )
        .with_state(state)
}

/// Serves [`open_router`] on `listener` until the process ends.
///
/// # Errors
/// I/O errors of the listener.
pub async fn serve_open(listener: tokio::net::TcpListener, state: AppState) -> std::io::Result<()> {
    axum::serve(listener, open_router(state)).await
}
