//! Idempotency keys: a write sent with an `Idempotency-Key` claims the key for its tenant; a
//! retry with the same key gets the first response again instead of running twice. Kept beside
//! the history, so replicas on Postgres share them.

use chrono::{DateTime, Utc};
use sqlx::Row;

use super::db::on_pool;
use super::HistoryStore;
use crate::error::Result;

/// How long a key's response is replayed.
pub const IDEMPOTENCY_TTL_HOURS: i64 = 24;

/// A response kept for replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    /// Its status.
    pub status: u16,
    /// Its JSON body.
    pub body: Vec<u8>,
}

/// What a request carrying a key may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The key is new (or its earlier use expired or was abandoned): run the request, then
    /// [`Idempotency::complete`] or [`Idempotency::release`] it.
    Run,
    /// The first request with this key finished: answer with its response.
    Replay(StoredResponse),
    /// The key was used for a different request.
    Mismatch,
    /// The first request with this key is still running.
    InProgress,
}

/// The idempotency keys, beside the history.
#[derive(Debug, Clone)]
pub struct Idempotency {
    history: HistoryStore,
}

impl HistoryStore {
    /// Returns the idempotency keys, which live in the same database.
    pub fn idempotency(&self) -> Idempotency {
        Idempotency { history: self.clone() }
    }
}

impl Idempotency {
    /// Claims `key` of `tenant` for a request whose fingerprint is `fingerprint`. A key whose
    /// first use is older than [`IDEMPOTENCY_TTL_HOURS`], or still running after `stale_after`
    /// (its server died), is taken over.
    ///
    /// # Errors
    /// [`crate::Error::StoreUnavailable`].
    pub async fn claim(
        &self,
        tenant: &str,
        key: &str,
        fingerprint: &str,
        now: DateTime<Utc>,
        stale_after: chrono::Duration,
    ) -> Result<Claim> {
        let db = &self.history.db;
        let at = now.timestamp_micros();
        let inserted = on_pool!(db, |pool, sql| {
            sqlx::query(&sql(
                "insert into idempotency_keys (tenant, key, fingerprint, created_at) values (?, ?, ?, ?) \
                 on conflict do nothing",
            ))
            .bind(tenant)
            .bind(key)
            .bind(fingerprint)
            .bind(at)
            .execute(pool)
            .await?
            .rows_affected()
        });
        if inserted == 1 {
            return Ok(Claim::Run);
        }
        let expired = (now - chrono::Duration::hours(IDEMPOTENCY_TTL_HOURS)).timestamp_micros();
        let abandoned = (now - stale_after).timestamp_micros();
        // Take over an expired use, or an abandoned one of the same request, in one statement:
        // of two retries racing for it, one wins.
        let taken = on_pool!(db, |pool, sql| {
            sqlx::query(&sql(
                "update idempotency_keys set fingerprint = ?, status = null, body = null, created_at = ? \
                 where tenant = ? and key = ? and (created_at < ? or (status is null and fingerprint = ? and created_at < ?))",
            ))
            .bind(fingerprint)
            .bind(at)
            .bind(tenant)
            .bind(key)
            .bind(expired)
            .bind(fingerprint)
            .bind(abandoned)
            .execute(pool)
            .await?
            .rows_affected()
        });
        if taken == 1 {
            return Ok(Claim::Run);
        }
        let row = on_pool!(db, |pool, sql| {
            let row = sqlx::query(&sql(
                "select fingerprint, status, body from idempotency_keys where tenant = ? and key = ?",
            ))
            .bind(tenant)
            .bind(key)
            .fetch_optional(pool)
            .await?;
            match row {
                Some(row) => Some((
                    row.try_get::<String, _>("fingerprint")?,
                    row.try_get::<Option<i64>, _>("status")?,
                    row.try_get::<Option<Vec<u8>>, _>("body")?,
                )),
                None => None,
            }
        });
        Ok(match row {
            // Released meanwhile: the caller may retry the claim.
            None => Claim::InProgress,
            Some((stored, _, _)) if stored != fingerprint => Claim::Mismatch,
            Some((_, Some(status), body)) => Claim::Replay(StoredResponse {
                status: u16::try_from(status).unwrap_or(500),
                body: body.unwrap_or_default(),
            }),
            Some((_, None, _)) => Claim::InProgress,
        })
    }

    /// Stores the response of the request that claimed `key`, for replay.
    ///
    /// # Errors
    /// [`crate::Error::StoreUnavailable`].
    pub async fn complete(&self, tenant: &str, key: &str, response: &StoredResponse) -> Result<()> {
        on_pool!(&self.history.db, |pool, sql| {
            sqlx::query(&sql("update idempotency_keys set status = ?, body = ? where tenant = ? and key = ?"))
                .bind(i64::from(response.status))
                .bind(response.body.as_slice())
                .bind(tenant)
                .bind(key)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// Forgets `key` (its request failed without changing anything: a retry runs again).
    ///
    /// # Errors
    /// [`crate::Error::StoreUnavailable`].
    pub async fn release(&self, tenant: &str, key: &str) -> Result<()> {
        on_pool!(&self.history.db, |pool, sql| {
            sqlx::query(&sql("delete from idempotency_keys where tenant = ? and key = ?"))
                .bind(tenant)
                .bind(key)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// Deletes keys older than [`IDEMPOTENCY_TTL_HOURS`] before `now`; returns how many.
    ///
    /// # Errors
    /// [`crate::Error::StoreUnavailable`].
    pub async fn prune(&self, now: DateTime<Utc>) -> Result<u64> {
        let cutoff = (now - chrono::Duration::hours(IDEMPOTENCY_TTL_HOURS)).timestamp_micros();
        let deleted = on_pool!(&self.history.db, |pool, sql| {
            sqlx::query(&sql("delete from idempotency_keys where created_at < ?"))
                .bind(cutoff)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(deleted)
    }
}
