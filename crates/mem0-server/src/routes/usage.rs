//! `GET /usage`: the tenant's LLM token counters (see [`mem0_core::history::UsageLog`]).

use axum::extract::State;
use chrono::{Duration, NaiveDate, Utc};
use mem0_core::history::UsageRow;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::{ApiError, AppJson, AppQuery, ErrorBody};
use crate::state::{AppState, RequestCaller};

/// Longest period one request covers, in days.
const MAX_DAYS: i64 = 366;

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(get_usage))
}

/// Query of `GET /usage`.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct UsageQuery {
    /// First UTC day (YYYY-MM-DD, or the day of an RFC 3339 time; default 30 days before `to`).
    #[param(format = Date)]
    pub from: Option<String>,
    /// Last UTC day, included (default today).
    #[param(format = Date)]
    pub to: Option<String>,
    /// Another tenant (the global admin only).
    #[param(min_length = 1, max_length = 128)]
    pub tenant: Option<String>,
}

/// Sums over the period.
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct UsageTotals {
    /// LLM calls.
    pub calls: u64,
    /// Input tokens.
    pub prompt_tokens: u64,
    /// Output tokens.
    pub completion_tokens: u64,
}

/// A tenant's LLM use over a period.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct UsageResponse {
    /// The tenant.
    pub tenant: String,
    /// First day.
    pub from: NaiveDate,
    /// Last day.
    pub to: NaiveDate,
    /// One row per day, provider, model and purpose with any call, by day.
    pub results: Vec<UsageRow>,
    /// Sums of `results`.
    pub totals: UsageTotals,
}

/// The tenant's LLM calls and tokens per day, provider, model and purpose (tenant admin)
#[utoipa::path(
    get,
    path = "/usage",
    tag = "admin",
    params(UsageQuery),
    responses(
        (status = 200, description = "Counters of every LLM call made for the tenant (extraction, procedural memory, \
            rerank) with the tokens the provider reported; kept when the tenant's memories are reset", body = UsageResponse),
        (status = 400, description = "Bad dates, `from` after `to`, or more than 366 days", body = ErrorBody),
        (status = 401, description = "No valid credentials", body = ErrorBody),
        (status = 403, description = "Not an admin of the whole tenant; another tenant needs the global admin", body = ErrorBody),
    )
)]
#[tracing::instrument(skip_all)]
pub async fn get_usage(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    AppQuery(query): AppQuery<UsageQuery>,
) -> Result<AppJson<UsageResponse>, ApiError> {
    let tenant = super::policy::whole_tenant(&caller, query.tenant, "LLM usage")?;
    let day = super::memories::parse_date;
    let to = query.to.as_deref().map(|raw| day("to", raw)).transpose()?.unwrap_or_else(|| Utc::now().date_naive());
    let from = query.from.as_deref().map(|raw| day("from", raw)).transpose()?.unwrap_or(to - Duration::days(30));
    if from > to {
        return Err(ApiError::validation("from", "must not be after `to`"));
    }
    if (to - from).num_days() >= MAX_DAYS {
        return Err(ApiError::validation("from", format!("a request covers at most {MAX_DAYS} days")));
    }
    let results = state.memory().history_store().usage_log().list(&tenant, from, to).await?;
    let totals = results.iter().fold(UsageTotals::default(), |mut totals, row| {
        totals.calls += row.calls;
        totals.prompt_tokens += row.prompt_tokens;
        totals.completion_tokens += row.completion_tokens;
        totals
    });
    Ok(AppJson(UsageResponse { tenant, from, to, results, totals }))
}
