//! mem0-server: the HTTP shell around [`mem0_core::Memory`].
//!
//! Handlers parse, call one core method with the request's caller, and map the result. This crate
//! owns routing, the error envelope, request ids, limits, configuration loading and OpenAPI.

pub mod auth;
pub mod background_log;
pub mod body;
pub mod browser;
pub mod compat;
pub mod config;
pub mod configure;
pub mod docs;
pub mod error;
pub mod guard;
pub mod idempotency;
pub mod jobs;
pub mod mcp;
pub mod metrics;
pub mod openapi;
pub mod rate_limit;
pub mod request_context;
pub mod routes;
pub mod state;
pub mod traces;
pub mod ui;
pub mod webhooks;

use std::future::IntoFuture as _;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::handler::Handler;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{middleware, Router};
use mem0_core::history::AuditSink;
use mem0_core::Memory;
use tokio::net::TcpListener;
use tower::limit::GlobalConcurrencyLimitLayer;

use crate::config::Settings;
use crate::error::{ApiError, ErrorCode};
use crate::rate_limit::RouteClass;
use crate::state::AppState;

/// Builds the application router for `state`.
///
/// Layers, outermost first: request context (id, span, request log, metrics), browser defences
/// (Host allow list, cross-site writes), then per group of routes its time limit, the guard
/// (authentication and the group's rate-limit class) and, for the API groups only, body reading
/// with its own timeout (not for streamed routes, which read their body as it arrives and have
/// `server.import_timeout_secs` as their limit), `Idempotency-Key` handling (write and admin
/// groups) and the concurrency limit. `/health`, `/ready` and the docs never wait for a
/// concurrency slot.
pub fn app(state: AppState) -> Router {
    let server = &state.settings.server;
    let context =
        request_context::ContextSettings { log: state.request_log.clone(), traces: state.settings.traces.enabled };
    let time_limit =
        |limit: u64| middleware::from_fn_with_state(Duration::from_secs(limit), request_context::time_limit);
    let body = body::BodySettings {
        limit: server.body_limit_bytes,
        timeout: Duration::from_secs(server.body_read_timeout_secs),
    };
    let browser_guard = browser::BrowserGuard::new(state.settings.auth.disabled, &server.allowed_hosts);
    let concurrency = GlobalConcurrencyLimitLayer::new(server.concurrency_limit);
    let guarded = |class: RouteClass| middleware::from_fn_with_state((state.clone(), class), guard::guard);
    // Our routes and, in Mem0's dialect, the same operations for its SDKs (`compat`): one set of
    // layers per rate-limit class for both.
    // Streamed routes read their own body as it arrives and have their own time limit.
    let layered_as = |group: Router<AppState>, class: RouteClass, streamed: bool| {
        let group = group.layer(DefaultBodyLimit::max(server.body_limit_bytes)).layer(concurrency.clone());
        // Reads (search included) ignore Idempotency-Key: nothing to protect, nothing to keep.
        // Streamed routes refuse it themselves (their body cannot be kept for a replay).
        let group = if class == RouteClass::Read || streamed {
            group
        } else {
            group.layer(middleware::from_fn_with_state(state.clone(), idempotency::idempotent))
        };
        let (group, limit) = if streamed {
            (group, server.import_timeout_secs)
        } else {
            (group.layer(middleware::from_fn_with_state(body, body::read_body)), server.request_timeout_secs)
        };
        group.layer(guarded(class)).layer(time_limit(limit))
    };
    let layered = |group: Router<AppState>, class: RouteClass| layered_as(group, class, false);
    let mut router = Router::new();
    for (class, group) in routes::streamed_groups() {
        let (group, _) = group.split_for_parts();
        router = router.merge(layered_as(group, class, true));
    }
    for (class, mut group) in routes::api_groups() {
        if class == RouteClass::Admin && state.settings.metrics.enabled {
            group = group.merge(metrics::router());
        }
        let (group, _) = group.split_for_parts();
        router = router
            .merge(layered(group, class))
            .merge(layered(compat::routes(class), class).layer(middleware::from_fn(compat::error_detail)));
    }
    // MCP calls both read and change memories: the write budget and layers.
    router = router.merge(layered(mcp::router(state.clone()), RouteClass::Write));
    let (open, _) = routes::open_router().split_for_parts();
    let doc_json = Arc::new(openapi::document_json());
    let open = open
        .route(
            "/openapi.json",
            get(move || {
                let body = Arc::clone(&doc_json);
                async move { ([(axum::http::header::CONTENT_TYPE, "application/json")], (*body).clone()) }
            }),
        )
        .merge(docs::router())
        .merge(ui::router())
        .layer(guarded(RouteClass::Open))
        .layer(time_limit(server.request_timeout_secs));
    // Unknown routes and methods pass the guard too (credentials, then the read budget), so they
    // are neither a way around authentication nor an unlimited way to fill the request log.
    router
        .merge(open)
        .fallback(route_not_found.layer(guarded(RouteClass::Read)).layer(time_limit(server.request_timeout_secs)))
        .method_not_allowed_fallback(
            method_not_allowed.layer(guarded(RouteClass::Read)).layer(time_limit(server.request_timeout_secs)),
        )
        .layer(middleware::from_fn_with_state(browser_guard, browser::guard))
        .layer(middleware::from_fn_with_state(context, request_context::request_context))
        .with_state(state)
}

async fn route_not_found() -> ApiError {
    ApiError::new(ErrorCode::RouteNotFound, "no such route; see /docs for the API")
}

async fn method_not_allowed() -> impl IntoResponse {
    ApiError::new(ErrorCode::MethodNotAllowed, "method not allowed on this route")
}

/// The periodic sweep leaves journal entries younger than this alone (writes in flight are
/// skipped anyway; this only keeps it off entries a moment old).
const JOURNAL_SWEEP_MIN_AGE: Duration = Duration::from_secs(60);

/// Builds the state from settings: loads the embedder, opens the stores, checks dimensions,
/// sets up authentication, rate limits and the request log.
///
/// # Errors
/// Any startup failure, with a message saying what to fix.
pub async fn build_state(mut settings: Settings) -> anyhow::Result<AppState> {
    let config_version = configure::apply_persisted(&mut settings).await?;
    let memory = Memory::from_config(&settings.memory)
        .await
        .map_err(|error| anyhow::anyhow!("cannot start the memory service: {error}"))?;
    assemble_state_at(memory, settings, config_version.unwrap_or(0)).await
}

/// Builds the state around an existing memory service (tests give it their own stores). With
/// the history on Postgres the shared runtime configuration is applied at the first look
/// (`configure.poll_secs`), as for a replica that starts after a change.
///
/// # Errors
/// Unsafe or invalid authentication settings.
pub async fn assemble_state(memory: Memory, settings: Settings) -> anyhow::Result<AppState> {
    assemble_state_at(memory, settings, 0).await
}

/// [`assemble_state`] with `settings` already carrying version `config_version` of the shared
/// runtime configuration.
async fn assemble_state_at(memory: Memory, settings: Settings, config_version: i64) -> anyhow::Result<AppState> {
    // Writes a crash interrupted get their history before anything is served.
    match memory.recover(Duration::ZERO).await {
        Ok(0) => {}
        Ok(delivered) => tracing::info!(delivered, "delivered history left in the journal by an interrupted write"),
        Err(error) => tracing::warn!(%error, "could not deliver the history journal yet; the sweep will retry"),
    }
    // The composition root: the history volume's handles go to the parts that use them.
    let api_keys = memory.history_store().api_keys();
    let requests = memory.history_store().request_log();
    let auth = auth::Authenticator::build(
        &settings.auth,
        settings.server.bind,
        &settings.server.default_tenant,
        api_keys.clone(),
    )?;
    auth.warm_up().await;
    // Without authentication there is one implicit caller on loopback and nobody to protect from
    // anybody: a local bulk import must not hit 429.
    if settings.rate_limit.enabled && settings.auth.disabled {
        tracing::info!("rate limits are off while authentication is disabled");
    }
    let limits = (settings.rate_limit.enabled && !settings.auth.disabled).then(|| {
        let limits: Arc<dyn rate_limit::Limits> = Arc::new(rate_limit::RateLimits::with_clock(
            &settings.rate_limit,
            governor::clock::DefaultClock::default(),
        ));
        let housekeeping = Arc::clone(&limits);
        tokio::spawn(async move {
            let mut every_minute = tokio::time::interval(Duration::from_secs(60));
            loop {
                every_minute.tick().await;
                housekeeping.housekeeping();
            }
        });
        limits
    });
    let request_log = background_log::RequestLogWriter::spawn(requests.clone(), &settings.request_log);
    let audit_log = memory.history_store().audit_log();
    let audit = background_log::AuditWriter::spawn(audit_log.clone(), &settings.audit);
    let memory = memory.with_audit(settings.audit.enabled.then(|| Arc::new(audit.clone()) as Arc<dyn AuditSink>));
    // Reads (a memory by id, search hits) go to the store in batches, for decay by use.
    let reads = background_log::ReadWriter::spawn(
        background_log::StoreReads(Arc::clone(memory.store())),
        &background_log::RetainedLogSettings { enabled: true, retention_days: 1 },
    );
    let memory = memory.with_reads(Some(Arc::new(reads.clone()) as Arc<dyn mem0_core::decay::ReadSink>));
    // LLM calls, counted per tenant, day, model and purpose (GET /usage).
    let usage = background_log::UsageWriter::spawn(
        memory.history_store().usage_log(),
        &background_log::RetainedLogSettings { enabled: true, retention_days: 1 },
    );
    let memory = memory.with_usage(Some(Arc::new(usage.clone()) as Arc<dyn mem0_core::history::UsageSink>));
    let webhooks = webhooks::WebhookService::spawn(memory.history_store().webhooks(), &settings.webhooks);
    let memory = memory.with_events(webhooks.sink(&settings.webhooks));
    let memory_handle = Arc::new(state::MemoryHandle::new(memory, configure::RuntimeConfig::from_settings(&settings)));
    // Journal entries left behind by a write whose undo failed (the store was down at that
    // moment) get their history once it answers again; startup already delivered older ones.
    let sweeper = Arc::clone(&memory_handle);
    tokio::spawn(async move {
        let mut every_minute = tokio::time::interval(Duration::from_secs(60));
        every_minute.tick().await;
        loop {
            every_minute.tick().await;
            match sweeper.get().recover(JOURNAL_SWEEP_MIN_AGE).await {
                Ok(0) => {}
                Ok(delivered) => tracing::info!(delivered, "delivered history left in the journal"),
                Err(error) => tracing::warn!(%error, "could not deliver the history journal yet"),
            }
        }
    });
    // Idempotency keys are replayed for 24 hours; older ones go once an hour.
    let pruner = Arc::clone(&memory_handle);
    tokio::spawn(async move {
        let mut every_hour = tokio::time::interval(Duration::from_secs(3600));
        loop {
            every_hour.tick().await;
            let keys = pruner.get().history_store().idempotency();
            if let Err(error) = keys.prune(chrono::Utc::now()).await {
                tracing::warn!(%error, "could not prune expired idempotency keys");
            }
        }
    });
    memory_handle.config_version.store(config_version, std::sync::atomic::Ordering::SeqCst);
    let memory_handle_jobs = memory_handle.get().history_store().jobs();
    let state = AppState {
        memory_handle,
        settings: Arc::new(settings),
        auth: Arc::new(auth),
        limits,
        request_log,
        requests,
        audit,
        audit_log,
        reads,
        usage,
        api_keys,
        draining: Arc::default(),
        jobs: jobs::JobQueue::new(memory_handle_jobs),
        webhooks,
    };
    jobs::spawn_workers(&state);
    webhooks::spawn_sender(&state);
    if state.memory().history_store().in_store() {
        configure::follow_shared_changes(state.clone());
    }
    Ok(state)
}

/// Serves `state` on `listener` until `shutdown` completes, then rolls out gracefully: `/ready`
/// answers 503 `draining` at once while requests are still served for
/// `server.drain_delay_secs`; then the listener closes and in-flight requests get
/// `server.shutdown_grace_secs` to finish before this returns anyway. (A write cut off by the
/// deadline is not half-done: each write is one transaction.)
///
/// # Errors
/// I/O errors of the listener.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let draining = Arc::clone(&state.draining);
    let delay = Duration::from_secs(state.settings.server.drain_delay_secs);
    let grace = Duration::from_secs(state.settings.server.shutdown_grace_secs);
    let closing = Arc::new(tokio::sync::Notify::new());
    let closed = Arc::clone(&closing);
    let logs = (
        state.request_log.clone(),
        state.audit.clone(),
        state.reads.clone(),
        state.usage.clone(),
        state.webhooks.events.clone(),
    );
    let signal = async move {
        shutdown.await;
        draining.store(true, std::sync::atomic::Ordering::SeqCst);
        if !delay.is_zero() {
            tracing::info!(
                delay_secs = delay.as_secs(),
                "draining: /ready answers 503; still serving until the delay ends"
            );
            tokio::time::sleep(delay).await;
        }
        tracing::info!(grace_secs = grace.as_secs(), "no longer accepting connections; finishing requests in flight");
        closed.notify_one();
    };
    // Connections live on their own tasks, which outlive this function when the grace period
    // ends: the requests still running then are cut here (503 `draining`), so that nothing is
    // acknowledged after the logs below were flushed.
    let (cut, cut_off) = tokio::sync::watch::channel(false);
    let router =
        app(state).layer(middleware::from_fn(move |request, next| cut_at_deadline(cut_off.clone(), request, next)));
    let server = axum::serve(listener, router.into_make_service_with_connect_info::<std::net::SocketAddr>())
        .with_graceful_shutdown(signal)
        .into_future();
    let deadline = async {
        closing.notified().await;
        tokio::time::sleep(grace).await;
    };
    let served = tokio::select! {
        served = server => served,
        () = deadline => {
            tracing::warn!(grace_secs = grace.as_secs(), "shutdown grace period over: requests still in flight are cut off");
            let _ = cut.send(true);
            Ok(())
        }
    };
    // What the requests queued for the request log, the audit trail, the read log, the token
    // counters and webhooks is written before the process ends (bounded: a database that is gone
    // must not hold the exit).
    let (request_log, audit, reads, usage, events) = logs;
    let written =
        async { tokio::join!(request_log.flush(), audit.flush(), reads.flush(), usage.flush(), events.flush()) };
    if tokio::time::timeout(LOG_FLUSH_AT_EXIT, written).await.is_err() {
        tracing::warn!("the logs were not all written within {LOG_FLUSH_AT_EXIT:?} of shutdown: entries may be lost");
    }
    served
}

/// Runs a request unless the shutdown's grace period ends first: then it answers 503 `draining`
/// (its outcome unknown to the client, which may retry it, with the same `Idempotency-Key`).
async fn cut_at_deadline(
    mut cut_off: tokio::sync::watch::Receiver<bool>,
    request: axum::extract::Request,
    next: middleware::Next,
) -> axum::response::Response {
    tokio::select! {
        biased;
        response = next.run(request) => response,
        _ = cut_off.wait_for(|cut| *cut) => ApiError::new(
            ErrorCode::Draining,
            "shutting down: the grace period ended before this request finished; retry it on another replica",
        )
        .into_response(),
    }
}

/// How long a shutdown waits for the background logs to be written.
const LOG_FLUSH_AT_EXIT: Duration = Duration::from_secs(10);
