//! LLM token accounting: every LLM call the service makes for a tenant (extraction, procedural
//! memory, reranking) is counted per tenant, UTC day, provider, model and purpose, with the tokens
//! the provider reported. The counters are added to in batches (the server's background writer),
//! never rewritten, and kept when a tenant's memories are reset.

use std::collections::BTreeMap;
use std::fmt;

use chrono::{DateTime, NaiveDate, Utc};
use serde::Serialize;
use sqlx::Row;

use super::db::{in_transaction, on_pool, Db};
use crate::error::{Error, Result};

/// One LLM call, as the service reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LlmCall {
    /// The tenant it was made for.
    pub tenant: String,
    /// When it finished.
    pub at: DateTime<Utc>,
    /// `openai`, `anthropic`, …
    pub provider: String,
    /// The model.
    pub model: String,
    /// What it was for: `extraction`, `procedural_memory`, `rerank`.
    pub purpose: String,
    /// Input tokens, as the provider reported them (0 when it did not).
    pub prompt_tokens: u64,
    /// Output tokens, likewise.
    pub completion_tokens: u64,
}

/// Where the service reports LLM calls. `record` is called on the request path: it must not wait.
pub trait UsageSink: Send + Sync + fmt::Debug {
    /// Takes the calls of one operation.
    fn record(&self, calls: Vec<LlmCall>);
}

/// One counter row: a tenant's use of one model for one purpose on one day.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UsageRow {
    /// The UTC day.
    pub day: NaiveDate,
    /// `openai`, `anthropic`, …
    pub provider: String,
    /// The model.
    pub model: String,
    /// `extraction`, `procedural_memory` or `rerank`.
    pub purpose: String,
    /// Calls that returned an answer.
    pub calls: u64,
    /// Input tokens, as the provider reported them.
    pub prompt_tokens: u64,
    /// Output tokens, likewise.
    pub completion_tokens: u64,
}

type Key = (String, String, String, String, String);

/// The counters in the history database.
#[derive(Debug, Clone)]
pub struct UsageLog {
    db: Db,
}

impl UsageLog {
    pub(super) fn new(db: Db) -> Self {
        Self { db }
    }

    /// Adds `calls` to their counters, in one transaction.
    ///
    /// # Errors
    /// [`Error::StoreUnavailable`]; nothing is added then.
    pub async fn append(&self, calls: &[LlmCall]) -> Result<()> {
        // One upsert per counter, however many calls it got in this batch.
        let mut sums: BTreeMap<Key, (i64, i64, i64)> = BTreeMap::new();
        for call in calls {
            let key = (
                call.tenant.clone(),
                call.at.date_naive().to_string(),
                call.provider.clone(),
                call.model.clone(),
                call.purpose.clone(),
            );
            let sum = sums.entry(key).or_default();
            sum.0 += 1;
            sum.1 = sum.1.saturating_add(i64::try_from(call.prompt_tokens).unwrap_or(i64::MAX));
            sum.2 = sum.2.saturating_add(i64::try_from(call.completion_tokens).unwrap_or(i64::MAX));
        }
        if sums.is_empty() {
            return Ok(());
        }
        const UPSERT: &str = "insert into llm_usage (tenant, day, provider, model, purpose, calls, prompt_tokens, \
             completion_tokens) values (?, ?, ?, ?, ?, ?, ?, ?) on conflict (tenant, day, provider, model, purpose) \
             do update set calls = llm_usage.calls + excluded.calls, \
             prompt_tokens = llm_usage.prompt_tokens + excluded.prompt_tokens, \
             completion_tokens = llm_usage.completion_tokens + excluded.completion_tokens";
        in_transaction!(&self.db, |transaction, sql| {
            let statement = sql(UPSERT);
            for ((tenant, day, provider, model, purpose), (count, prompt, completion)) in &sums {
                sqlx::query(&statement)
                    .bind(tenant)
                    .bind(day)
                    .bind(provider)
                    .bind(model)
                    .bind(purpose)
                    .bind(count)
                    .bind(prompt)
                    .bind(completion)
                    .execute(&mut *transaction)
                    .await?;
            }
        });
        Ok(())
    }

    /// The counters of `tenant` from `from` to `to` (both included), by day, then provider, model
    /// and purpose.
    ///
    /// # Errors
    /// [`Error::StoreUnavailable`].
    pub async fn list(&self, tenant: &str, from: NaiveDate, to: NaiveDate) -> Result<Vec<UsageRow>> {
        const SELECT: &str = "select day, provider, model, purpose, calls, prompt_tokens, completion_tokens \
             from llm_usage where tenant = ? and day >= ? and day <= ? order by day, provider, model, purpose";
        on_pool!(&self.db, |pool, sql| {
            let rows = sqlx::query(&sql(SELECT))
                .bind(tenant)
                .bind(from.to_string())
                .bind(to.to_string())
                .fetch_all(pool)
                .await?;
            rows.iter()
                .map(|row| {
                    let day: String = row.try_get("day")?;
                    let count = |name: &str| -> Result<u64> {
                        let value: i64 = row.try_get(name)?;
                        Ok(u64::try_from(value).unwrap_or_default())
                    };
                    Ok(UsageRow {
                        day: day.parse().map_err(|_| Error::Internal(format!("llm_usage: bad day {day}")))?,
                        provider: row.try_get("provider")?,
                        model: row.try_get("model")?,
                        purpose: row.try_get("purpose")?,
                        calls: count("calls")?,
                        prompt_tokens: count("prompt_tokens")?,
                        completion_tokens: count("completion_tokens")?,
                    })
                })
                .collect()
        })
    }
}
