//! Queued adds (`async_mode`): durable jobs beside the history, so they survive a restart and,
//! on Postgres, are shared by replicas. A job is claimed oldest first and only when no older job
//! of its scope is still open, so the adds of one conversation run one after another in the
//! order they arrived; a claim holds a lease, and a job whose lease ran out (its server died
//! mid-run) is claimed again. What a job stores (the request, the caller it runs as, the outcome)
//! is JSON the server reads back; this module only moves it through its states.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::Row;
use uuid::Uuid;

use super::db::{in_transaction, micros, on_pool, time};
use super::HistoryStore;
use crate::error::{Error, Result};

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    /// Waiting for its turn (also between retries).
    Queued,
    /// Being run.
    Running,
    /// Done; `result` holds the add's response.
    Succeeded,
    /// Given up; `error` says why.
    Failed,
}

impl JobStatus {
    fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
        }
    }

    fn parse(raw: &str) -> Result<Self> {
        match raw {
            "queued" => Ok(Self::Queued),
            "running" => Ok(Self::Running),
            "succeeded" => Ok(Self::Succeeded),
            "failed" => Ok(Self::Failed),
            other => Err(Error::Internal(format!("unknown job status `{other}`"))),
        }
    }
}

/// A job as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// Its id (also what its memories' ids are derived from).
    pub id: Uuid,
    /// Owning tenant.
    pub tenant: String,
    /// Jobs with the same key run one at a time, in order.
    pub scope_key: String,
    /// The scope its memories go to (deleting the scope cancels the job while it waits).
    pub scope: crate::scope::Scope,
    /// The caller it runs as (JSON).
    pub caller: String,
    /// The request (JSON).
    pub request: String,
    /// Where it is.
    pub status: JobStatus,
    /// Runs started so far.
    pub attempts: u32,
    /// When it arrived.
    pub created_at: DateTime<Utc>,
    /// When its first run started.
    pub started_at: Option<DateTime<Utc>>,
    /// When it succeeded or failed.
    pub finished_at: Option<DateTime<Utc>>,
    /// The response of the add (JSON), once succeeded.
    pub result: Option<String>,
    /// Why it failed or why the last attempt failed (JSON).
    pub error: Option<String>,
}

/// The queue of jobs, beside the history.
#[derive(Debug, Clone)]
pub struct Jobs {
    history: HistoryStore,
}

impl HistoryStore {
    /// Returns the job queue, which lives in the same database.
    pub fn jobs(&self) -> Jobs {
        Jobs { history: self.clone() }
    }
}

const COLUMNS: &str = "id, tenant, scope_key, user_id, agent_id, run_id, caller, request, status, attempts, \
     created_at, started_at, finished_at, result, error";

macro_rules! job_from_row {
    ($row:expr) => {{
        let row = $row;
        let id: String = row.try_get("id")?;
        Job {
            id: Uuid::parse_str(&id).map_err(|error| Error::Internal(format!("bad job id: {error}")))?,
            tenant: row.try_get("tenant")?,
            scope_key: row.try_get("scope_key")?,
            scope: crate::scope::Scope {
                user_id: row.try_get("user_id")?,
                agent_id: row.try_get("agent_id")?,
                run_id: row.try_get("run_id")?,
            },
            caller: row.try_get("caller")?,
            request: row.try_get("request")?,
            status: JobStatus::parse(&row.try_get::<String, _>("status")?)?,
            attempts: u32::try_from(row.try_get::<i64, _>("attempts")?).unwrap_or(u32::MAX),
            created_at: time(Some(row.try_get("created_at")?))?.unwrap_or_default(),
            started_at: time(row.try_get("started_at")?)?,
            finished_at: time(row.try_get("finished_at")?)?,
            result: row.try_get("result")?,
            error: row.try_get("error")?,
        }
    }};
}

impl Jobs {
    /// Queues a job unless its tenant already has `max_open` jobs queued or running.
    ///
    /// # Errors
    /// [`Error::RateLimited`]-like refusal as `Ok(false)`; store errors.
    pub async fn enqueue(&self, job: &Job, max_open: usize, now: DateTime<Utc>) -> Result<bool> {
        let at = micros(now);
        let limit = i64::try_from(max_open).unwrap_or(i64::MAX);
        let inserted = in_transaction!(&self.history.db, |tx, sql| {
            let open: i64 = sqlx::query(&sql(
                "select count(*) as open from jobs where tenant = ? and status in ('queued', 'running')",
            ))
            .bind(&job.tenant)
            .fetch_one(&mut *tx)
            .await?
            .try_get("open")?;
            if open >= limit {
                false
            } else {
                sqlx::query(&sql(
                    "insert into jobs (id, seq, tenant, scope_key, user_id, agent_id, run_id, caller, request, status, \
                     attempts, not_before, created_at) values (?, ?, ?, ?, ?, ?, ?, ?, ?, 'queued', 0, ?, ?)",
                ))
                .bind(job.id.to_string())
                .bind(at)
                .bind(&job.tenant)
                .bind(&job.scope_key)
                .bind(&job.scope.user_id)
                .bind(&job.scope.agent_id)
                .bind(&job.scope.run_id)
                .bind(&job.caller)
                .bind(&job.request)
                .bind(at)
                .bind(at)
                .execute(&mut *tx)
                .await?;
                true
            }
        });
        Ok(inserted)
    }

    /// Claims the oldest job that may run now: queued and due, or running with its lease run out;
    /// and no older job of its scope still open. It is marked running until `lease_until`.
    ///
    /// # Errors
    /// Store errors.
    pub async fn claim(&self, now: DateTime<Utc>, lease_until: DateTime<Utc>) -> Result<Option<Job>> {
        let at = micros(now);
        // Workers poll every second: an idle queue is a read, not a write transaction (which on
        // SQLite would wait for, and hold up, every other writer of the history volume).
        let due = on_pool!(&self.history.db, |pool, sql| {
            sqlx::query(&sql("select 1 as due from jobs where (status = 'queued' and not_before <= ?) \
                 or (status = 'running' and lease_until < ?) limit 1"))
            .bind(at)
            .bind(at)
            .fetch_optional(pool)
            .await?
            .is_some()
        });
        if !due {
            return Ok(None);
        }
        let postgres = self.history.db.is_postgres();
        let claimed = in_transaction!(&self.history.db, |tx, sql| {
            // Replicas on Postgres skip the rows another one is claiming.
            let lock = if postgres { " for update skip locked" } else { "" };
            let candidate = sqlx::query(&sql(&format!(
                "select id from jobs j where ((j.status = 'queued' and j.not_before <= ?) \
                   or (j.status = 'running' and j.lease_until < ?)) \
                 and not exists (select 1 from jobs o where o.scope_key = j.scope_key \
                   and o.status in ('queued', 'running') and (o.seq < j.seq or (o.seq = j.seq and o.id < j.id))) \
                 order by j.seq, j.id limit 1{lock}"
            )))
            .bind(at)
            .bind(at)
            .fetch_optional(&mut *tx)
            .await?;
            match candidate {
                None => None,
                Some(row) => {
                    let id: String = row.try_get("id")?;
                    let row = sqlx::query(&sql(&format!(
                        "update jobs set status = 'running', attempts = attempts + 1, lease_until = ?, \
                         started_at = coalesce(started_at, ?) where id = ? returning {COLUMNS}"
                    )))
                    .bind(micros(lease_until))
                    .bind(at)
                    .bind(&id)
                    .fetch_one(&mut *tx)
                    .await?;
                    Some(job_from_row!(row))
                }
            }
        });
        Ok(claimed)
    }

    /// Records the success of run `attempt` of a job and its result; false (and nothing changed)
    /// when that run no longer holds the job (its lease ran out and another run took it over).
    ///
    /// # Errors
    /// Store errors.
    pub async fn succeed(&self, id: Uuid, attempt: u32, result: &str, now: DateTime<Utc>) -> Result<bool> {
        self.finish(id, attempt, JobStatus::Succeeded, Some(result), None, now).await
    }

    /// Records that run `attempt` of a job failed for good; false as for [`Jobs::succeed`].
    ///
    /// # Errors
    /// Store errors.
    pub async fn fail(&self, id: Uuid, attempt: u32, error: &str, now: DateTime<Utc>) -> Result<bool> {
        self.finish(id, attempt, JobStatus::Failed, None, Some(error), now).await
    }

    /// A finished job keeps its outcome; its request (the messages as sent) is dropped.
    async fn finish(
        &self,
        id: Uuid,
        attempt: u32,
        status: JobStatus,
        result: Option<&str>,
        error: Option<&str>,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let finished = on_pool!(&self.history.db, |pool, sql| {
            sqlx::query(&sql(
                "update jobs set status = ?, result = ?, error = coalesce(?, error), finished_at = ?, lease_until = null, \
                 request = '{}' where id = ? and status = 'running' and attempts = ?",
            ))
            .bind(status.as_str())
            .bind(result)
            .bind(error)
            .bind(micros(now))
            .bind(id.to_string())
            .bind(i64::from(attempt))
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(finished == 1)
    }

    /// Puts a job back in the queue after run `attempt` failed in a way worth retrying, not
    /// before `not_before` (it keeps its place: younger jobs of its scope still wait for it);
    /// false as for [`Jobs::succeed`].
    ///
    /// # Errors
    /// Store errors.
    pub async fn retry_later(&self, id: Uuid, attempt: u32, error: &str, not_before: DateTime<Utc>) -> Result<bool> {
        let queued = on_pool!(&self.history.db, |pool, sql| {
            sqlx::query(&sql("update jobs set status = 'queued', error = ?, not_before = ?, lease_until = null \
                 where id = ? and status = 'running' and attempts = ?"))
            .bind(error)
            .bind(micros(not_before))
            .bind(id.to_string())
            .bind(i64::from(attempt))
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(queued == 1)
    }

    /// Cancels the queued jobs of `tenant` whose memories would go to `scope` or part of it
    /// (every id `scope` sets matches), or all of the tenant's with `None`: the scope was
    /// deleted, and a job run afterwards would bring its memories back. Returns how many.
    ///
    /// # Errors
    /// Store errors.
    pub async fn cancel(&self, tenant: &str, scope: Option<&crate::scope::Scope>, now: DateTime<Utc>) -> Result<u64> {
        let error = r#"{"code":"cancelled","message":"the scope was deleted before the add ran"}"#;
        let none = crate::scope::Scope::default();
        let scope = scope.unwrap_or(&none);
        let cancelled = on_pool!(&self.history.db, |pool, sql| {
            sqlx::query(&sql("update jobs set status = 'failed', error = ?, finished_at = ?, request = '{}' \
                 where tenant = ? and status = 'queued' and (? is null or user_id = ?) \
                 and (? is null or agent_id = ?) and (? is null or run_id = ?)"))
            .bind(error)
            .bind(micros(now))
            .bind(tenant)
            .bind(&scope.user_id)
            .bind(&scope.user_id)
            .bind(&scope.agent_id)
            .bind(&scope.agent_id)
            .bind(&scope.run_id)
            .bind(&scope.run_id)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(cancelled)
    }

    /// Puts every running job back in the queue (keeping its attempts): for a process that
    /// alone runs this queue (the SQLite history volume) and starts, the runs it finds were cut
    /// off by its own end, and need not wait for their leases. Returns how many.
    ///
    /// # Errors
    /// Store errors.
    pub async fn requeue_running(&self) -> Result<u64> {
        let requeued = on_pool!(&self.history.db, |pool, sql| {
            sqlx::query(&sql("update jobs set status = 'queued', lease_until = null where status = 'running'"))
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(requeued)
    }

    /// The job `id` of `tenant`, if any.
    ///
    /// # Errors
    /// Store errors.
    pub async fn get(&self, tenant: &str, id: Uuid) -> Result<Option<Job>> {
        let job = on_pool!(&self.history.db, |pool, sql| {
            let row = sqlx::query(&sql(&format!("select {COLUMNS} from jobs where tenant = ? and id = ?")))
                .bind(tenant)
                .bind(id.to_string())
                .fetch_optional(pool)
                .await?;
            match row {
                Some(row) => Some(job_from_row!(row)),
                None => None,
            }
        });
        Ok(job)
    }

    /// How many jobs are queued or running (all tenants).
    ///
    /// # Errors
    /// Store errors.
    pub async fn open(&self) -> Result<u64> {
        let open: i64 = on_pool!(&self.history.db, |pool, sql| {
            sqlx::query(&sql("select count(*) as open from jobs where status in ('queued', 'running')"))
                .fetch_one(pool)
                .await?
                .try_get("open")?
        });
        Ok(u64::try_from(open).unwrap_or_default())
    }

    /// Deletes finished jobs older than `before`; returns how many.
    ///
    /// # Errors
    /// Store errors.
    pub async fn prune(&self, before: DateTime<Utc>) -> Result<u64> {
        let pruned = on_pool!(&self.history.db, |pool, sql| {
            sqlx::query(&sql("delete from jobs where finished_at is not null and finished_at < ?"))
                .bind(micros(before))
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(pruned)
    }
}
