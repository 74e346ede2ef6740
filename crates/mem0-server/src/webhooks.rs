//! Webhooks: a tenant's admins register URLs that are told about the tenant's events
//! (`memory.added`, `memory.updated`, `memory.deleted`, `job.succeeded`, `job.failed`).
//!
//! - Each stored change is reported by the memory service after its commit; the reports are
//!   gathered in the background (like the audit trail) and written as one delivery per webhook
//!   that wants the event, beside the history, so they survive a restart and are shared by
//!   replicas on Postgres.
//! - Senders in every server process claim due deliveries and post them, signed:
//!   `Mem0-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>" keyed by the secret>`.
//!   A 2xx answer delivers; anything else (a redirect too: none are followed) is tried again
//!   after each of `webhooks.retry_delays_secs` (about 24 hours by default), then given up. A
//!   webhook whose delivery is given up while nothing succeeded since it was queued is disabled
//!   until an admin enables it again: meanwhile no new events are queued for it, and its
//!   deliveries still waiting for a retry are held.
//! - Target URLs pass the guard of `/configure`: no link-local or metadata addresses, checked
//!   when the webhook is created and again at every connection (DNS rebinding).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use mem0_core::history::{Attempt, Claimed, Delivery, DeliveryStatus, Event, EventKind, EventSink, Webhook, Webhooks};
use mem0_core::Caller;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use crate::background_log::{LogWriter, RetainedLogSettings, Sink};
use crate::error::{ApiError, AppJson, AppPath, AppQuery, ErrorBody, ErrorCode};
use crate::routes::MessageResponse;
use crate::state::{AppState, RequestCaller};

/// Settings of webhooks.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookSettings {
    /// Report events and send deliveries at all.
    #[serde(default = "default_enabled")]
    pub enabled: bool,
    /// Webhooks one tenant may have.
    #[serde(default = "default_max_per_tenant")]
    pub max_per_tenant: usize,
    /// Deliveries this process sends at once (0: it only queues; other replicas send).
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    /// How long a receiver may take to answer, in seconds.
    #[serde(default = "default_timeout_secs")]
    pub timeout_secs: u64,
    /// Waits before the second, third… attempt of a delivery, in seconds; after the last one
    /// it is given up (default: 10 s, 1 min, 5 min, 30 min, 1 h, 2 h, 4 h, 8 h, 8 h: ~24 h).
    #[serde(default = "default_retry_delays")]
    pub retry_delays_secs: Vec<u64>,
    /// Days finished deliveries stay in a webhook's delivery log.
    #[serde(default = "default_retention_days")]
    pub retention_days: u32,
    /// Allow webhook URLs on link-local and metadata addresses.
    #[serde(default)]
    pub allow_link_local_urls: bool,
}

fn default_enabled() -> bool {
    true
}
fn default_max_per_tenant() -> usize {
    20
}
fn default_concurrency() -> usize {
    4
}
fn default_timeout_secs() -> u64 {
    10
}
fn default_retry_delays() -> Vec<u64> {
    vec![10, 60, 300, 1800, 3600, 7200, 14_400, 28_800, 28_800]
}
fn default_retention_days() -> u32 {
    7
}

impl Default for WebhookSettings {
    fn default() -> Self {
        Self {
            enabled: default_enabled(),
            max_per_tenant: default_max_per_tenant(),
            concurrency: default_concurrency(),
            timeout_secs: default_timeout_secs(),
            retry_delays_secs: default_retry_delays(),
            retention_days: default_retention_days(),
            allow_link_local_urls: false,
        }
    }
}

impl WebhookSettings {
    /// Checks the settings.
    ///
    /// # Errors
    /// What is wrong.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            !self.retry_delays_secs.is_empty() && self.retry_delays_secs.len() <= 30,
            "webhooks.retry_delays_secs must have 1 to 30 entries"
        );
        anyhow::ensure!(
            self.retry_delays_secs.iter().all(|delay| (1..=86_400).contains(delay)),
            "webhooks.retry_delays_secs must each be 1 to 86400 seconds"
        );
        anyhow::ensure!((1..=300).contains(&self.timeout_secs), "webhooks.timeout_secs must be 1 to 300");
        anyhow::ensure!(self.concurrency <= 256, "webhooks.concurrency must be at most 256");
        anyhow::ensure!(self.retention_days >= 1, "webhooks.retention_days must be at least 1");
        Ok(())
    }
}

// ---- Reporting events --------------------------------------------------------------------

/// Where reported events go: fanned out to the deliveries of their tenants' webhooks.
#[derive(Debug, Clone)]
pub struct Outbox {
    webhooks: Webhooks,
    bell: Arc<Notify>,
}

impl Sink for Outbox {
    type Entry = Event;
    const NAME: &'static str = "webhook outbox";

    async fn append(&self, events: &[Event]) -> mem0_core::Result<()> {
        if self.webhooks.fan_out(events, Utc::now()).await? > 0 {
            self.bell.notify_one();
        }
        Ok(())
    }

    fn prune(&self, cutoff: DateTime<Utc>) -> impl std::future::Future<Output = mem0_core::Result<u64>> + Send {
        let webhooks = self.webhooks.clone();
        async move { webhooks.prune(cutoff).await }
    }
}

/// The events' writer: the [`EventSink`] the memory service and the job workers report to.
pub type EventWriter = LogWriter<Outbox>;

impl EventSink for LogWriter<Outbox> {
    fn publish(&self, events: Vec<Event>) {
        self.record_all(events);
    }
}

/// Webhooks as the server uses them.
#[derive(Debug, Clone)]
pub struct WebhookService {
    /// The stored webhooks and deliveries.
    pub webhooks: Webhooks,
    /// Where events are reported.
    pub events: EventWriter,
    bell: Arc<Notify>,
}

impl WebhookService {
    /// Starts the writer of reported events (nothing is reported when webhooks are disabled).
    pub fn spawn(webhooks: Webhooks, settings: &WebhookSettings) -> Self {
        let bell = Arc::new(Notify::new());
        let outbox = Outbox { webhooks: webhooks.clone(), bell: Arc::clone(&bell) };
        let events = EventWriter::spawn(
            outbox,
            &RetainedLogSettings { enabled: settings.enabled, retention_days: settings.retention_days },
        );
        Self { webhooks, events, bell }
    }

    /// The sink for the memory service, when webhooks are on.
    pub fn sink(&self, settings: &WebhookSettings) -> Option<Arc<dyn EventSink>> {
        settings.enabled.then(|| Arc::new(self.events.clone()) as Arc<dyn EventSink>)
    }
}

// ---- Sending -----------------------------------------------------------------------------

/// The signature header of `body` sent at `timestamp` (unix seconds) with `secret`.
pub fn signature(secret: &str, timestamp: i64, body: &str) -> String {
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes keys of any length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body.as_bytes());
    let digest = mac.finalize().into_bytes();
    let hex: String = digest.iter().map(|byte| format!("{byte:02x}")).collect();
    format!("t={timestamp},v1={hex}")
}

/// Starts this process's senders (unless webhooks are off or `concurrency` is 0).
pub fn spawn_sender(state: &AppState) {
    let settings = state.settings.webhooks.clone();
    if !settings.enabled || settings.concurrency == 0 {
        return;
    }
    let mut builder = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(settings.timeout_secs))
        .connect_timeout(Duration::from_secs(settings.timeout_secs.min(10)))
        .user_agent(concat!("mem0-rs-webhooks/", env!("CARGO_PKG_VERSION")));
    if !settings.allow_link_local_urls {
        builder = builder.dns_resolver(Arc::new(mem0_core::providers::http::GuardedResolver));
    }
    let client = match builder.build() {
        Ok(client) => client,
        Err(error) => {
            tracing::error!(%error, "could not build the webhook client: no deliveries will be sent");
            return;
        }
    };
    let service = state.webhooks.clone();
    let in_store = state.memory().history_store().in_store();
    tokio::spawn(async move {
        // The only sender of the SQLite history volume: what a previous process was sending
        // goes out again at once rather than after its lease.
        if !in_store {
            match service.webhooks.requeue_sending().await {
                Ok(0) => {}
                Ok(requeued) => tracing::info!(requeued, "webhook deliveries a previous run was sending queued again"),
                Err(error) => tracing::warn!(%error, "could not requeue webhook deliveries; their leases will"),
            }
        }
        loop {
            match send_due(&service, &client, &settings).await {
                Ok(sent) if sent >= settings.concurrency => {}
                Ok(_) => {
                    let _ = tokio::time::timeout(Duration::from_secs(1), service.bell.notified()).await;
                }
                Err(error) => {
                    tracing::warn!(%error, "webhook deliveries unavailable; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    });
}

/// Claims the deliveries due now (up to `concurrency`), sends them at once and records each
/// outcome; returns how many were sent.
async fn send_due(
    service: &WebhookService,
    client: &reqwest::Client,
    settings: &WebhookSettings,
) -> mem0_core::Result<usize> {
    let now = Utc::now();
    // The lease outlasts an attempt (its timeout), so no other sender takes it over meanwhile.
    let lease = chrono::Duration::seconds(i64::try_from(settings.timeout_secs).unwrap_or(300) * 2 + 30);
    let claimed = service.webhooks.claim(now, now + lease, settings.concurrency).await?;
    let count = claimed.len();
    let attempts = claimed.into_iter().map(|claimed| async move {
        let outcome = attempt(client, &claimed, settings).await;
        (claimed, outcome)
    });
    for (claimed, outcome) in futures::future::join_all(attempts).await {
        let delivery = &claimed.delivery;
        match &outcome {
            Attempt::Succeeded { status } => {
                tracing::debug!(delivery_id = %delivery.id, webhook_id = %delivery.webhook_id, status, "webhook delivered");
            }
            Attempt::Failed { status, error, retry_at } => tracing::info!(
                delivery_id = %delivery.id,
                webhook_id = %delivery.webhook_id,
                attempt = delivery.attempts,
                ?status,
                %error,
                retry_at = ?retry_at,
                "webhook delivery failed"
            ),
        }
        match service.webhooks.record(delivery, delivery.attempts, &outcome, Utc::now()).await {
            Ok(true) => tracing::warn!(
                webhook_id = %delivery.webhook_id,
                tenant = %delivery.tenant,
                "webhook disabled: its deliveries kept failing; enable it again with PATCH /webhooks/{{webhook_id}}"
            ),
            Ok(false) => {}
            Err(error) => {
                tracing::warn!(%error, delivery_id = %delivery.id, "could not record a webhook delivery's outcome")
            }
        }
    }
    Ok(count)
}

/// One attempt at a delivery.
async fn attempt(client: &reqwest::Client, claimed: &Claimed, settings: &WebhookSettings) -> Attempt {
    let delivery = &claimed.delivery;
    let timestamp = Utc::now().timestamp();
    let sent = client
        .post(&claimed.url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header("mem0-signature", signature(&claimed.secret, timestamp, &delivery.body))
        .header("mem0-event", delivery.event.as_str())
        .header("mem0-delivery", delivery.id.to_string())
        .header("mem0-webhook", delivery.webhook_id.to_string())
        .body(delivery.body.clone())
        .send()
        .await;
    let (status, error) = match sent {
        Ok(response) if response.status().is_success() => {
            return Attempt::Succeeded { status: response.status().as_u16() };
        }
        Ok(response) => {
            let status = response.status();
            let what = if status.is_redirection() { " (redirects are not followed)" } else { "" };
            (Some(status.as_u16()), format!("the receiver answered {status}{what}"))
        }
        Err(error) => (None, describe(&error)),
    };
    let retry_at = usize::try_from(delivery.attempts)
        .ok()
        .and_then(|attempts| settings.retry_delays_secs.get(attempts.saturating_sub(1)))
        .map(|delay| Utc::now() + chrono::Duration::seconds(i64::try_from(*delay).unwrap_or(86_400)));
    Attempt::Failed { status, error, retry_at }
}

/// What went wrong with a request that got no answer (without the URL, which may hold a token).
fn describe(error: &reqwest::Error) -> String {
    let kind = if error.is_timeout() {
        "timed out"
    } else if error.is_connect() {
        "could not connect"
    } else {
        "request failed"
    };
    let mut cause = String::new();
    let mut source = std::error::Error::source(error);
    while let Some(inner) = source {
        cause = inner.to_string();
        source = inner.source();
    }
    if cause.is_empty() {
        kind.to_owned()
    } else {
        format!("{kind}: {cause}")
    }
}

/// Reports that a queued add finished.
pub fn publish_job(state: &AppState, tenant: &str, kind: EventKind, job: serde_json::Value) {
    if state.settings.webhooks.enabled {
        state.webhooks.events.publish(vec![Event::new(tenant, kind, job)]);
    }
}

// ---- Routes ------------------------------------------------------------------------------

pub(crate) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_webhook, list_webhooks))
        .routes(routes!(get_webhook, update_webhook, delete_webhook))
        .routes(routes!(list_deliveries))
}

/// Most bytes of a webhook URL.
const MAX_URL_BYTES: usize = 2048;
/// Most bytes of a description.
const MAX_DESCRIPTION_BYTES: usize = 500;

/// Body of `POST /webhooks`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateWebhookRequest {
    /// Where events are posted (http or https; not link-local or metadata addresses).
    #[schema(example = "https://example.com/hooks/mem0", min_length = 1, max_length = 2048)]
    pub url: String,
    /// The events it wants (all of them when left out).
    #[serde(default)]
    #[schema(min_items = 1, max_items = 5)]
    pub events: Option<Vec<EventKind>>,
    /// Free text to recognise it by.
    #[serde(default)]
    #[schema(max_length = 500)]
    pub description: Option<String>,
    /// Tenant of the webhook; only the global admin may name another tenant than its own.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 128)]
    pub tenant: Option<String>,
}

/// Body of `PATCH /webhooks/{webhook_id}`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateWebhookRequest {
    /// `true` enables it again (its failures are forgotten; deliveries held meanwhile are sent),
    /// `false` disables it (no new events are queued for it; queued ones are held).
    pub enabled: bool,
}

/// Query of the webhook routes.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct WebhookParams {
    /// Another tenant's webhooks (global admin only); the caller's own by default.
    #[param(min_length = 1, max_length = 128)]
    pub tenant: Option<String>,
}

/// Query of `GET /webhooks/{webhook_id}/deliveries`.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DeliveryParams {
    /// Another tenant's webhook (global admin only).
    #[param(min_length = 1, max_length = 128)]
    pub tenant: Option<String>,
    /// Most deliveries, newest first (1 to 500, default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<usize>,
}

/// A webhook (its secret is shown only when it is created).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WebhookView {
    /// Its id.
    pub id: Uuid,
    /// Owning tenant.
    pub tenant: String,
    /// Where events are posted.
    pub url: String,
    /// The events it wants.
    pub events: Vec<EventKind>,
    /// Free text.
    pub description: Option<String>,
    /// False while disabled.
    pub enabled: bool,
    /// Why it was disabled.
    pub disabled_reason: Option<String>,
    /// Failed attempts since the last success.
    pub consecutive_failures: u32,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// The last successful delivery.
    pub last_success_at: Option<DateTime<Utc>>,
    /// The last failed attempt.
    pub last_failure_at: Option<DateTime<Utc>>,
}

impl From<Webhook> for WebhookView {
    fn from(webhook: Webhook) -> Self {
        Self {
            id: webhook.id,
            tenant: webhook.tenant,
            url: webhook.url,
            events: webhook.events,
            description: webhook.description,
            enabled: webhook.enabled,
            disabled_reason: webhook.disabled_reason,
            consecutive_failures: webhook.consecutive_failures,
            created_at: webhook.created_at,
            last_success_at: webhook.last_success_at,
            last_failure_at: webhook.last_failure_at,
        }
    }
}

/// A new webhook, with its secret.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CreatedWebhook {
    /// The webhook.
    #[serde(flatten)]
    pub webhook: WebhookView,
    /// The key of the deliveries' signatures: shown only now.
    #[schema(example = "whsec_3q2-7w…")]
    pub secret: String,
}

/// The webhooks of a tenant.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WebhookList {
    /// Oldest first.
    pub results: Vec<WebhookView>,
}

/// One delivery of an event to a webhook.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DeliveryView {
    /// Its id (the `Mem0-Delivery` header; the same on every attempt).
    pub id: Uuid,
    /// The event's id (the body's `id`).
    pub event_id: Uuid,
    /// The event.
    pub event: EventKind,
    /// `pending`, `sending`, `succeeded` or `failed` (given up).
    pub status: DeliveryStatus,
    /// Attempts so far.
    pub attempts: u32,
    /// When it was queued.
    pub created_at: DateTime<Utc>,
    /// When it is tried next, while pending.
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// When it was last tried.
    pub last_attempt_at: Option<DateTime<Utc>>,
    /// The receiver's status code at the last attempt.
    pub response_status: Option<u16>,
    /// Why the last attempt failed.
    pub error: Option<String>,
    /// When it succeeded or was given up.
    pub finished_at: Option<DateTime<Utc>>,
}

impl From<Delivery> for DeliveryView {
    fn from(delivery: Delivery) -> Self {
        Self {
            id: delivery.id,
            event_id: delivery.event_id,
            event: delivery.event,
            next_attempt_at: (delivery.status == DeliveryStatus::Pending).then_some(delivery.next_attempt_at),
            status: delivery.status,
            attempts: delivery.attempts,
            created_at: delivery.created_at,
            last_attempt_at: delivery.last_attempt_at,
            response_status: delivery.response_status,
            error: delivery.error,
            finished_at: delivery.finished_at,
        }
    }
}

/// A webhook's delivery log.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DeliveryList {
    /// Newest first.
    pub results: Vec<DeliveryView>,
}

/// The tenant a request is about: the caller's, or another one for the global admin. Webhooks
/// see every event of the tenant, so they need an admin of the whole tenant.
fn tenant_of(caller: &Caller, requested: Option<String>) -> Result<String, ApiError> {
    crate::routes::policy::whole_tenant(caller, requested, "webhooks")
}

fn parse_id(raw: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(raw).map_err(|_| ApiError::validation("webhook_id", "expected a UUID"))
}

fn not_found(id: Uuid) -> ApiError {
    ApiError::new(ErrorCode::WebhookNotFound, format!("no webhook {id}"))
}

fn enabled(state: &AppState) -> Result<(), ApiError> {
    if state.settings.webhooks.enabled {
        Ok(())
    } else {
        Err(ApiError::new(ErrorCode::ValidationFailed, "webhooks are disabled on this server (webhooks.enabled)"))
    }
}

fn new_secret() -> Result<String, ApiError> {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine as _;
    let mut bytes = [0_u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|error| ApiError::new(ErrorCode::InternalError, format!("no randomness: {error}")))?;
    Ok(format!("whsec_{}", URL_SAFE_NO_PAD.encode(bytes)))
}

/// Register a webhook for the tenant's events (tenant admin); the secret is returned once
#[utoipa::path(
    post,
    path = "/webhooks",
    tag = "admin",
    request_body = CreateWebhookRequest,
    responses(
        (status = 201, description = "Created; `secret` is shown only now", body = CreatedWebhook),
        (status = 400, description = "Invalid input, or a URL the guard refuses", body = ErrorBody),
        (status = 401, description = "No valid credentials", body = ErrorBody),
        (status = 403, description = "Not an admin of the whole tenant", body = ErrorBody),
        (status = 409, description = "The tenant has `webhooks.max_per_tenant` webhooks", body = ErrorBody),
        (status = 429, description = "Rate limited", body = ErrorBody),
    )
)]
#[tracing::instrument(skip_all)]
pub async fn create_webhook(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    AppJson(body): AppJson<CreateWebhookRequest>,
) -> Result<(StatusCode, AppJson<CreatedWebhook>), ApiError> {
    let tenant = tenant_of(&caller, body.tenant)?;
    enabled(&state)?;
    let url = body.url.trim();
    if url.is_empty() || url.len() > MAX_URL_BYTES {
        return Err(ApiError::validation("url", format!("must be 1 to {MAX_URL_BYTES} bytes")));
    }
    let settings = &state.settings.webhooks;
    mem0_core::providers::http::check_target_url(
        "url",
        url,
        settings.allow_link_local_urls,
        "webhooks.allow_link_local_urls",
    )
    .await
    .map_err(|message| ApiError::validation("url", message))?;
    // Stored as the parser writes it (anything unusual percent-encoded).
    let url = url::Url::parse(url).map_err(|error| ApiError::validation("url", error))?.to_string();
    let description = body.description.map(|text| text.trim().to_owned()).filter(|text| !text.is_empty());
    if let Some(text) = &description {
        if text.len() > MAX_DESCRIPTION_BYTES {
            return Err(ApiError::validation("description", format!("at most {MAX_DESCRIPTION_BYTES} bytes")));
        }
        if text.chars().any(|c| c.is_control() && c != '\n' && c != '\t') {
            return Err(ApiError::validation("description", "cannot contain control characters"));
        }
    }
    let mut events = body.events.unwrap_or_else(|| EventKind::ALL.to_vec());
    if events.is_empty() {
        return Err(ApiError::validation("events", "name at least one event, or leave `events` out for all"));
    }
    events.sort_by_key(|kind| EventKind::ALL.iter().position(|known| known == kind));
    events.dedup();
    let webhook = Webhook {
        id: Uuid::now_v7(),
        tenant,
        url,
        secret: new_secret()?,
        events,
        description,
        enabled: true,
        disabled_reason: None,
        consecutive_failures: 0,
        created_at: Utc::now(),
        last_success_at: None,
        last_failure_at: None,
    };
    if !state.webhooks.webhooks.create(&webhook, settings.max_per_tenant).await? {
        return Err(ApiError::new(
            ErrorCode::Conflict,
            format!("the tenant already has {} webhooks (webhooks.max_per_tenant)", settings.max_per_tenant),
        ));
    }
    tracing::info!(webhook_id = %webhook.id, tenant = %webhook.tenant, "webhook created");
    let secret = webhook.secret.clone();
    Ok((StatusCode::CREATED, AppJson(CreatedWebhook { webhook: webhook.into(), secret })))
}

/// List the tenant's webhooks (tenant admin)
#[utoipa::path(
    get,
    path = "/webhooks",
    tag = "admin",
    params(WebhookParams),
    responses(
        (status = 200, description = "Webhooks, oldest first", body = WebhookList),
        (status = 400, description = "Invalid input", body = ErrorBody),
        (status = 401, description = "No valid credentials", body = ErrorBody),
        (status = 403, description = "Not an admin of the whole tenant", body = ErrorBody),
    )
)]
#[tracing::instrument(skip_all)]
pub async fn list_webhooks(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    AppQuery(params): AppQuery<WebhookParams>,
) -> Result<AppJson<WebhookList>, ApiError> {
    let tenant = tenant_of(&caller, params.tenant)?;
    let results = state.webhooks.webhooks.list(&tenant).await?.into_iter().map(WebhookView::from).collect();
    Ok(AppJson(WebhookList { results }))
}

/// One webhook of the tenant (tenant admin)
#[utoipa::path(
    get,
    path = "/webhooks/{webhook_id}",
    tag = "admin",
    params(("webhook_id" = Uuid, Path, description = "Webhook id"), WebhookParams),
    responses(
        (status = 200, description = "The webhook", body = WebhookView),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 401, description = "No valid credentials", body = ErrorBody),
        (status = 403, description = "Not an admin of the whole tenant", body = ErrorBody),
        (status = 404, description = "No such webhook", body = ErrorBody),
    )
)]
#[tracing::instrument(skip_all)]
pub async fn get_webhook(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    AppPath(webhook_id): AppPath<String>,
    AppQuery(params): AppQuery<WebhookParams>,
) -> Result<AppJson<WebhookView>, ApiError> {
    let tenant = tenant_of(&caller, params.tenant)?;
    let id = parse_id(&webhook_id)?;
    let webhook = state.webhooks.webhooks.get(&tenant, id).await?.ok_or_else(|| not_found(id))?;
    Ok(AppJson(webhook.into()))
}

/// Enable or disable a webhook (tenant admin)
#[utoipa::path(
    patch,
    path = "/webhooks/{webhook_id}",
    tag = "admin",
    params(("webhook_id" = Uuid, Path, description = "Webhook id"), WebhookParams),
    request_body = UpdateWebhookRequest,
    responses(
        (status = 200, description = "The webhook as it is now", body = WebhookView),
        (status = 400, description = "Invalid input", body = ErrorBody),
        (status = 401, description = "No valid credentials", body = ErrorBody),
        (status = 403, description = "Not an admin of the whole tenant", body = ErrorBody),
        (status = 404, description = "No such webhook", body = ErrorBody),
    )
)]
#[tracing::instrument(skip_all)]
pub async fn update_webhook(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    AppPath(webhook_id): AppPath<String>,
    AppQuery(params): AppQuery<WebhookParams>,
    AppJson(body): AppJson<UpdateWebhookRequest>,
) -> Result<AppJson<WebhookView>, ApiError> {
    let tenant = tenant_of(&caller, params.tenant)?;
    let id = parse_id(&webhook_id)?;
    let webhooks = &state.webhooks.webhooks;
    if !webhooks.set_enabled(&tenant, id, body.enabled, Some("disabled by an admin")).await? {
        return Err(not_found(id));
    }
    if body.enabled {
        state.webhooks.bell.notify_one();
    }
    tracing::info!(webhook_id = %id, enabled = body.enabled, "webhook changed");
    let webhook = webhooks.get(&tenant, id).await?.ok_or_else(|| not_found(id))?;
    Ok(AppJson(webhook.into()))
}

/// Delete a webhook with its delivery log (tenant admin)
#[utoipa::path(
    delete,
    path = "/webhooks/{webhook_id}",
    tag = "admin",
    params(("webhook_id" = Uuid, Path, description = "Webhook id"), WebhookParams),
    responses(
        (status = 200, description = "Deleted", body = MessageResponse),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 401, description = "No valid credentials", body = ErrorBody),
        (status = 403, description = "Not an admin of the whole tenant", body = ErrorBody),
        (status = 404, description = "No such webhook", body = ErrorBody),
    )
)]
#[tracing::instrument(skip_all)]
pub async fn delete_webhook(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    AppPath(webhook_id): AppPath<String>,
    AppQuery(params): AppQuery<WebhookParams>,
) -> Result<AppJson<MessageResponse>, ApiError> {
    let tenant = tenant_of(&caller, params.tenant)?;
    let id = parse_id(&webhook_id)?;
    if !state.webhooks.webhooks.delete(&tenant, id).await? {
        return Err(not_found(id));
    }
    tracing::info!(webhook_id = %id, "webhook deleted");
    Ok(AppJson(MessageResponse { message: "Webhook deleted".to_owned() }))
}

/// A webhook's delivery log, newest first (tenant admin)
#[utoipa::path(
    get,
    path = "/webhooks/{webhook_id}/deliveries",
    tag = "admin",
    params(("webhook_id" = Uuid, Path, description = "Webhook id"), DeliveryParams),
    responses(
        (status = 200, description = "Deliveries, newest first", body = DeliveryList),
        (status = 400, description = "Invalid input", body = ErrorBody),
        (status = 401, description = "No valid credentials", body = ErrorBody),
        (status = 403, description = "Not an admin of the whole tenant", body = ErrorBody),
        (status = 404, description = "No such webhook", body = ErrorBody),
    )
)]
#[tracing::instrument(skip_all)]
pub async fn list_deliveries(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    AppPath(webhook_id): AppPath<String>,
    AppQuery(params): AppQuery<DeliveryParams>,
) -> Result<AppJson<DeliveryList>, ApiError> {
    let tenant = tenant_of(&caller, params.tenant)?;
    let id = parse_id(&webhook_id)?;
    let limit = params.limit.unwrap_or(50);
    if !(1..=500).contains(&limit) {
        return Err(ApiError::validation("limit", "must be 1 to 500"));
    }
    let webhooks = &state.webhooks.webhooks;
    webhooks.get(&tenant, id).await?.ok_or_else(|| not_found(id))?;
    let results = webhooks.deliveries(&tenant, id, limit).await?.into_iter().map(DeliveryView::from).collect();
    Ok(AppJson(DeliveryList { results }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_are_hmac_sha256_of_timestamp_dot_body() {
        // Computed independently: Python's hmac.new(b"key", b"1700000000.{}", sha256).
        assert_eq!(
            signature("key", 1_700_000_000, "{}"),
            "t=1700000000,v1=9d713ed406bb7076d4123f0dc2c39d2df5c654ed4b0cd56b52c8b4c940bd63ae"
        );
    }

    #[test]
    fn the_default_retries_last_about_a_day() {
        let total: u64 = default_retry_delays().iter().sum();
        assert!((20 * 3600..=26 * 3600).contains(&total), "{total}");
        WebhookSettings::default().validate().expect("defaults are valid");
    }

    #[test]
    fn bad_settings_are_refused() {
        let empty = WebhookSettings { retry_delays_secs: Vec::new(), ..WebhookSettings::default() };
        assert!(empty.validate().is_err());
        let zero = WebhookSettings { retry_delays_secs: vec![0], ..WebhookSettings::default() };
        assert!(zero.validate().is_err());
    }
}
