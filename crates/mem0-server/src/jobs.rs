//! Async adds: `POST /memories` with `async_mode: true` (or `Prefer: respond-async`) is checked
//! as a synchronous add would be (a bad request is a 400 at once, a forbidden one a 403), queued
//! as a job beside the history and answered 202 with the job's id; `GET /jobs/{job_id}` follows
//! it. Workers in every server process run the jobs: oldest first, one at a time per scope (two
//! adds of one conversation never run at once, and run in the order they arrived), retried with
//! backoff while the LLM or embedding provider throttles or fails, given up after
//! `jobs.max_attempts`. A job survives a restart; one whose server died mid-run is run again once
//! its lease ends, and its memories' ids are derived from the job's id, so a run that had
//! already stored them is recognised and nothing is stored twice.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use chrono::Utc;
use mem0_core::history::{EventKind, Job, JobStatus, Jobs};
use mem0_core::{AddedMemory, Caller};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::Notify;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use crate::error::{ApiError, AppJson, AppPath, ErrorBody, ErrorCode};
use crate::routes::memories::{core_add_request, AddMemoriesRequest, AddMemoriesResponse};
use crate::state::{AppState, RequestCaller};

/// Settings of the job queue.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSettings {
    /// Jobs this process runs at once (0: it only queues; other replicas run them).
    #[serde(default = "default_workers")]
    pub workers: usize,
    /// Jobs one tenant may have queued or running; more are answered 429.
    #[serde(default = "default_max_open")]
    pub max_open_per_tenant: usize,
    /// Runs of a job before a provider failure fails it for good.
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    /// How long a run may take before another worker may take the job over (its server is
    /// presumed dead), in seconds.
    #[serde(default = "default_lease_secs")]
    pub lease_secs: u64,
    /// Days a finished job can still be read at `GET /jobs/{job_id}`.
    #[serde(default = "default_retention_days")]
    pub retention_days: u64,
}

fn default_workers() -> usize {
    2
}
fn default_max_open() -> usize {
    10_000
}
fn default_max_attempts() -> u32 {
    8
}
fn default_lease_secs() -> u64 {
    300
}
fn default_retention_days() -> u64 {
    7
}

impl Default for JobSettings {
    fn default() -> Self {
        Self {
            workers: default_workers(),
            max_open_per_tenant: default_max_open(),
            max_attempts: default_max_attempts(),
            lease_secs: default_lease_secs(),
            retention_days: default_retention_days(),
        }
    }
}

/// The queue as the server uses it: the stored jobs and a bell that wakes this process's workers
/// when a job arrives (they also look every second, for retries and other replicas' jobs).
#[derive(Clone)]
pub struct JobQueue {
    jobs: Jobs,
    bell: Arc<Notify>,
}

impl std::fmt::Debug for JobQueue {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("JobQueue").finish_non_exhaustive()
    }
}

impl JobQueue {
    /// The queue of `jobs`.
    pub fn new(jobs: Jobs) -> Self {
        Self { jobs, bell: Arc::new(Notify::new()) }
    }
}

/// The answer to a queued add.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct JobAccepted {
    /// The job's id.
    pub job_id: Uuid,
    /// `queued`.
    pub status: JobStatus,
    /// Where to follow it.
    #[schema(example = "/jobs/01939c6e-0000-7000-8000-000000000000")]
    pub status_url: String,
}

/// Why a job failed.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct JobError {
    /// The error code a synchronous add would have answered.
    pub code: String,
    /// What went wrong.
    pub message: String,
}

/// A queued add and what became of it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct JobView {
    /// The job's id.
    pub id: Uuid,
    /// `queued` (also while waiting to be retried), `running`, `succeeded` or `failed`.
    pub status: JobStatus,
    /// Runs started so far.
    pub attempts: u32,
    /// When it was queued.
    pub created_at: chrono::DateTime<Utc>,
    /// When its first run started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at: Option<chrono::DateTime<Utc>>,
    /// When it succeeded or failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<chrono::DateTime<Utc>>,
    /// What the add answered, once it succeeded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<AddMemoriesResponse>,
    /// Why it failed (or, while queued again, why its last run failed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<JobError>,
}

impl TryFrom<Job> for JobView {
    type Error = ApiError;

    fn try_from(job: Job) -> Result<Self, ApiError> {
        let result = job.result.as_deref().map(serde_json::from_str).transpose().map_err(internal)?;
        let error = job.error.as_deref().map(serde_json::from_str).transpose().map_err(internal)?;
        Ok(Self {
            id: job.id,
            status: job.status,
            attempts: job.attempts,
            created_at: job.created_at,
            started_at: job.started_at,
            finished_at: job.finished_at,
            result,
            error,
        })
    }
}

fn internal(error: impl std::fmt::Display) -> ApiError {
    ApiError::from(mem0_core::Error::Internal(format!("unreadable job: {error}")))
}

/// Checks an add as a synchronous one would be checked, then queues it for `caller`.
///
/// # Errors
/// What the add would answer for bad input or a forbidden scope; 429 `rate_limited` when the
/// tenant has `jobs.max_open_per_tenant` jobs open.
pub async fn enqueue(state: &AppState, caller: &Caller, mut body: AddMemoriesRequest) -> Result<JobAccepted, ApiError> {
    // What was said was said now, however long the job waits: relative dates ("yesterday") are
    // read against the arrival.
    if body.timestamp.is_none() {
        body.timestamp = Some(serde_json::Value::String(Utc::now().to_rfc3339()));
    }
    let request = core_add_request(body.clone())?;
    state.memory().check_add(caller, &request)?;
    let id = Uuid::now_v7();
    let job = Job {
        id,
        tenant: caller.tenant.clone(),
        scope_key: format!("{}/{}", caller.tenant, mem0_core::extraction::session_scope(&request.scope)),
        scope: request.scope.clone(),
        caller: serde_json::to_string(caller).map_err(internal)?,
        request: serde_json::to_string(&body).map_err(internal)?,
        status: JobStatus::Queued,
        attempts: 0,
        created_at: Utc::now(),
        started_at: None,
        finished_at: None,
        result: None,
        error: None,
    };
    let queued = state.jobs.jobs.enqueue(&job, state.settings.jobs.max_open_per_tenant, Utc::now()).await?;
    if !queued {
        return Err(ApiError::new(
            ErrorCode::RateLimited,
            format!(
                "{} queued adds are waiting for this tenant already; retry later",
                state.settings.jobs.max_open_per_tenant
            ),
        )
        .with_retry_after(Duration::from_secs(5)));
    }
    state.jobs.bell.notify_one();
    tracing::info!(job_id = %id, "add queued");
    Ok(JobAccepted { job_id: id, status: JobStatus::Queued, status_url: format!("/jobs/{id}") })
}

/// The job `id` of the caller's tenant.
///
/// # Errors
/// 404 `job_not_found` when there is none (or it belongs to another tenant).
pub async fn view(state: &AppState, caller: &Caller, id: Uuid) -> Result<JobView, ApiError> {
    let job = state.jobs.jobs.get(&caller.tenant, id).await?;
    let job = job
        .filter(|job| job_visible(caller, job))
        .ok_or_else(|| ApiError::new(ErrorCode::JobNotFound, format!("job {id} not found")))?;
    JobView::try_from(job)
}

/// A job is visible to the caller that queued it, and to an admin of its tenant.
fn job_visible(caller: &Caller, job: &Job) -> bool {
    if caller.global_admin || caller.is_tenant_admin() {
        return true;
    }
    serde_json::from_str::<Caller>(&job.caller).is_ok_and(|queued_by| queued_by.principal_id == caller.principal_id)
}

/// Job routes (reads).
pub(crate) fn read_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(get_job))
}

/// Follow a queued add
#[utoipa::path(
    get,
    path = "/jobs/{job_id}",
    tag = "memories",
    params(("job_id" = Uuid, Path, description = "The id `POST /memories` answered with `async_mode`")),
    responses(
        (status = 401, description = "No valid credentials", body = ErrorBody),
        (status = 429, description = "Rate limited; see Retry-After", body = ErrorBody),
        (status = 200, description = "The job", body = JobView),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 404, description = "No such job (or not the caller's)", body = ErrorBody),
        (status = 503, description = "Store unavailable", body = ErrorBody),
    )
)]
#[tracing::instrument(skip_all)]
pub async fn get_job(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    AppPath(job_id): AppPath<String>,
) -> Result<AppJson<JobView>, ApiError> {
    let id = Uuid::parse_str(&job_id).map_err(|_| ApiError::validation("job_id", "expected a UUID"))?;
    Ok(AppJson(view(&state, &caller, id).await?))
}

/// Starts this process's workers and the pruning of old finished jobs. With the history on the
/// SQLite volume this process is the queue's only runner, so the runs a previous process left
/// unfinished are queued again at once rather than after their leases.
pub fn spawn_workers(state: &AppState) {
    let starting = state.clone();
    tokio::spawn(async move {
        let state = starting;
        // Before any worker claims: a job claimed now must not be put back.
        if state.settings.jobs.workers > 0 && !state.memory().history_store().in_store() {
            match state.jobs.jobs.requeue_running().await {
                Ok(0) => {}
                Ok(requeued) => tracing::info!(requeued, "queued again the adds a previous run left unfinished"),
                Err(error) => tracing::warn!(%error, "could not requeue unfinished adds; their leases will"),
            }
        }
        for worker in 0..state.settings.jobs.workers {
            tokio::spawn(work(state.clone(), worker));
        }
    });
    let jobs = state.jobs.jobs.clone();
    let retention = chrono::Duration::days(i64::try_from(state.settings.jobs.retention_days).unwrap_or(i64::MAX / 2));
    tokio::spawn(async move {
        let mut every_hour = tokio::time::interval(Duration::from_secs(3600));
        loop {
            every_hour.tick().await;
            if let Err(error) = jobs.prune(Utc::now() - retention).await {
                tracing::warn!(%error, "could not prune finished jobs");
            }
        }
    });
}

/// One worker: claims and runs jobs until the server drains.
async fn work(state: AppState, worker: usize) {
    loop {
        if state.draining.load(std::sync::atomic::Ordering::SeqCst) {
            tracing::debug!(worker, "draining: no more jobs taken");
            return;
        }
        match run_next(&state).await {
            Ok(true) => {}
            Ok(false) => {
                let _ = tokio::time::timeout(Duration::from_secs(1), state.jobs.bell.notified()).await;
            }
            Err(error) => {
                tracing::warn!(worker, error = %error.message(), "job queue unavailable; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// Claims and runs one job; false when none was due. A run takes at most four fifths of the
/// lease, so no other worker takes the job over while it still runs; and only the run that holds
/// the job records its outcome.
async fn run_next(state: &AppState) -> Result<bool, ApiError> {
    let settings = &state.settings.jobs;
    let now = Utc::now();
    let lease = Duration::from_secs(settings.lease_secs.max(5));
    let lease_until = now + chrono::Duration::from_std(lease).unwrap_or(chrono::Duration::seconds(300));
    let Some(job) = state.jobs.jobs.claim(now, lease_until).await? else {
        return Ok(false);
    };
    let jobs = &state.jobs.jobs;
    if job.attempts > settings.max_attempts {
        // Every run was cut off (its server died, or it outlived its lease): give up.
        let record = JobError {
            code: ErrorCode::RequestTimeout.name(),
            message: format!("gave up after {} runs that did not finish", job.attempts - 1),
        };
        if jobs.fail(job.id, job.attempts, &serde_json::to_string(&record).map_err(internal)?, Utc::now()).await? {
            publish(state, &job, EventKind::JobFailed, json!({"error": record}));
        }
        tracing::warn!(job_id = %job.id, attempts = job.attempts, "job failed: no run finished");
        return Ok(true);
    }
    let outcome = match tokio::time::timeout(lease * 4 / 5, run(state, &job)).await {
        Ok(outcome) => outcome,
        Err(_) => Err(ApiError::new(ErrorCode::RequestTimeout, "the run took longer than jobs.lease_secs allows")),
    };
    // A failed run may still have stored the add (an error after the commit, or a run taken over
    // from one that stored it meanwhile): then the job succeeded.
    let outcome = match outcome {
        Err(error) => match job_memories(state, &job).await {
            Some(stored) => Ok(stored),
            None => Err(error),
        },
        done => done,
    };
    let recorded = match outcome {
        Ok(response) => {
            let body = serde_json::to_string(&response).map_err(internal)?;
            let recorded = jobs.succeed(job.id, job.attempts, &body, Utc::now()).await?;
            tracing::info!(job_id = %job.id, memories = response.results.len(), attempt = job.attempts, "job succeeded");
            if recorded {
                publish(state, &job, EventKind::JobSucceeded, json!({"result": response}));
            }
            recorded
        }
        Err(error) => {
            let record = JobError { code: error.code_name(), message: error.message().to_owned() };
            let record = serde_json::to_string(&record).map_err(internal)?;
            if retryable(&error) && job.attempts < settings.max_attempts {
                let backoff = Duration::from_secs(2u64.saturating_pow(job.attempts.min(8)).min(300));
                let at = Utc::now() + chrono::Duration::from_std(backoff).unwrap_or_default();
                tracing::warn!(job_id = %job.id, attempt = job.attempts, code = %error.code_name(), retry_in_secs = backoff.as_secs(), "job failed; retrying");
                jobs.retry_later(job.id, job.attempts, &record, at).await?
            } else {
                tracing::warn!(job_id = %job.id, attempt = job.attempts, code = %error.code_name(), "job failed");
                let failed = jobs.fail(job.id, job.attempts, &record, Utc::now()).await?;
                if failed {
                    let error = JobError { code: error.code_name(), message: error.message().to_owned() };
                    publish(state, &job, EventKind::JobFailed, json!({"error": error}));
                }
                failed
            }
        }
    };
    if !recorded {
        tracing::warn!(job_id = %job.id, attempt = job.attempts, "this run no longer held the job; its outcome was not recorded");
    }
    Ok(true)
}

/// Tells the tenant's webhooks that `job` finished (`outcome`: its `result` or `error`).
fn publish(state: &AppState, job: &Job, kind: EventKind, outcome: serde_json::Value) {
    let mut data = json!({
        "job_id": job.id,
        "status": if kind == EventKind::JobSucceeded { JobStatus::Succeeded } else { JobStatus::Failed },
        "attempts": job.attempts,
        "user_id": job.scope.user_id,
        "agent_id": job.scope.agent_id,
        "run_id": job.scope.run_id,
    });
    if let (Some(data), serde_json::Value::Object(outcome)) = (data.as_object_mut(), outcome) {
        data.extend(outcome);
    }
    crate::webhooks::publish_job(state, &job.tenant, kind, data);
}

/// What an earlier or concurrent run of `job` stored, if anything.
async fn job_memories(state: &AppState, job: &Job) -> Option<AddMemoriesResponse> {
    let caller: Caller = serde_json::from_str(&job.caller).ok()?;
    let stored = state.memory().added_by(&caller, job.id).await.ok()?;
    (!stored.is_empty()).then_some(AddMemoriesResponse { results: stored, warnings: Vec::new() })
}

/// Provider and store trouble passes; anything else would fail the same way again.
fn retryable(error: &ApiError) -> bool {
    matches!(
        error.code(),
        ErrorCode::ProviderRateLimited
            | ErrorCode::ProviderUnavailable
            | ErrorCode::ProviderTimeout
            | ErrorCode::StoreUnavailable
            | ErrorCode::Conflict
            | ErrorCode::RequestTimeout
    )
}

/// Runs the add of `job` as the caller that queued it. A run after one that may have been cut
/// off first looks for what that run stored.
async fn run(state: &AppState, job: &Job) -> Result<AddMemoriesResponse, ApiError> {
    let caller: Caller = serde_json::from_str(&job.caller).map_err(internal)?;
    let body: AddMemoriesRequest = serde_json::from_str(&job.request).map_err(internal)?;
    let memory = state.memory();
    if job.attempts > 1 {
        let stored: Vec<AddedMemory> = memory.added_by(&caller, job.id).await?;
        if !stored.is_empty() {
            tracing::info!(job_id = %job.id, memories = stored.len(), "an earlier run of this job had stored its memories");
            return Ok(AddMemoriesResponse { results: stored, warnings: Vec::new() });
        }
    }
    // The job's body carries the arrival time as its timestamp (see `enqueue`).
    let mut request = core_add_request(body)?;
    request.ids_from = Some(job.id);
    let outcome = memory.add(&caller, request).await?;
    Ok(AddMemoriesResponse { results: outcome.results, warnings: outcome.warnings })
}
