//! Webhooks: a tenant's subscriptions to its events, and the durable queue of deliveries to
//! them, beside the history (so they survive a restart and, on Postgres, are shared by replicas).
//! The server signs and sends; this module keeps the rows and moves deliveries through their
//! states: `pending` (until `next_attempt_at`), `sending` (held by a worker until its lease runs
//! out), then `succeeded` or `failed`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::Row;
use uuid::Uuid;

use super::db::{in_transaction, micros, on_pool, time};
use super::HistoryStore;
use crate::error::{Error, Result};

/// What a webhook can be told about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum EventKind {
    /// A memory was stored (by an add, verbatim or extracted).
    #[serde(rename = "memory.added")]
    MemoryAdded,
    /// A memory's text or labels changed (by an update, or an add that corrected it).
    #[serde(rename = "memory.updated")]
    MemoryUpdated,
    /// A memory was deleted (one, a scope's, or by an add that retracted it).
    #[serde(rename = "memory.deleted")]
    MemoryDeleted,
    /// A queued add finished.
    #[serde(rename = "job.succeeded")]
    JobSucceeded,
    /// A queued add was given up.
    #[serde(rename = "job.failed")]
    JobFailed,
}

impl EventKind {
    /// Every kind, in the order of the documentation.
    pub const ALL: [Self; 5] =
        [Self::MemoryAdded, Self::MemoryUpdated, Self::MemoryDeleted, Self::JobSucceeded, Self::JobFailed];

    /// Its name on the wire (`memory.added`…).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MemoryAdded => "memory.added",
            Self::MemoryUpdated => "memory.updated",
            Self::MemoryDeleted => "memory.deleted",
            Self::JobSucceeded => "job.succeeded",
            Self::JobFailed => "job.failed",
        }
    }

    /// The kind named `raw`, if any.
    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == raw)
    }
}

/// One event of a tenant, before it is fanned out to the webhooks that want it.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Its id: the same in every webhook's delivery (receivers deduplicate by it).
    pub id: Uuid,
    /// Owning tenant.
    pub tenant: String,
    /// What happened.
    pub kind: EventKind,
    /// When.
    pub at: DateTime<Utc>,
    /// What it is about (the `data` of the body).
    pub data: serde_json::Value,
}

impl Event {
    /// A new event happening now.
    pub fn new(tenant: &str, kind: EventKind, data: serde_json::Value) -> Self {
        Self { id: Uuid::now_v7(), tenant: tenant.to_owned(), kind, at: Utc::now(), data }
    }

    /// The JSON body posted to webhooks.
    pub fn body(&self) -> String {
        serde_json::json!({
            "id": self.id,
            "type": self.kind.as_str(),
            "created_at": self.at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            "tenant": self.tenant,
            "data": self.data,
        })
        .to_string()
    }
}

/// Where events are reported (the server queues them for the webhooks of their tenant).
pub trait EventSink: Send + Sync + std::fmt::Debug {
    /// Takes events that happened; must not block.
    fn publish(&self, events: Vec<Event>);
}

/// A webhook as stored (the secret included: read it only to sign).
#[derive(Debug, Clone, PartialEq)]
pub struct Webhook {
    /// Its id.
    pub id: Uuid,
    /// Owning tenant.
    pub tenant: String,
    /// Where deliveries are posted.
    pub url: String,
    /// The key of the HMAC signature.
    pub secret: String,
    /// The events it wants.
    pub events: Vec<EventKind>,
    /// Free text.
    pub description: Option<String>,
    /// False once disabled (by hand, or after deliveries failed for good).
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

/// Where a delivery is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum DeliveryStatus {
    /// Waiting for its next attempt.
    Pending,
    /// Being sent.
    Sending,
    /// The receiver answered 2xx.
    Succeeded,
    /// Given up after its last attempt.
    Failed,
}

impl DeliveryStatus {
    fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Sending => "sending",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
        }
    }

    fn parse(raw: &str) -> Result<Self> {
        match raw {
            "pending" => Ok(Self::Pending),
            "sending" => Ok(Self::Sending),
            "succeeded" => Ok(Self::Succeeded),
            "failed" => Ok(Self::Failed),
            other => Err(Error::Internal(format!("unknown delivery status `{other}`"))),
        }
    }
}

/// One event for one webhook.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    /// Its id (the same on every attempt).
    pub id: Uuid,
    /// The webhook.
    pub webhook_id: Uuid,
    /// Owning tenant.
    pub tenant: String,
    /// The event's id.
    pub event_id: Uuid,
    /// The event's kind.
    pub event: EventKind,
    /// The JSON body.
    pub body: String,
    /// Where it is.
    pub status: DeliveryStatus,
    /// Attempts started so far.
    pub attempts: u32,
    /// When it was queued.
    pub created_at: DateTime<Utc>,
    /// When it is tried next (while pending).
    pub next_attempt_at: DateTime<Utc>,
    /// When it was last tried.
    pub last_attempt_at: Option<DateTime<Utc>>,
    /// The receiver's status code at the last attempt.
    pub response_status: Option<u16>,
    /// Why the last attempt failed.
    pub error: Option<String>,
    /// When it succeeded or was given up.
    pub finished_at: Option<DateTime<Utc>>,
}

/// A delivery claimed for an attempt, with what sending it needs.
#[derive(Debug, Clone)]
pub struct Claimed {
    /// The delivery (its `attempts` counts this one).
    pub delivery: Delivery,
    /// The webhook's URL.
    pub url: String,
    /// The webhook's secret.
    pub secret: String,
}

/// The outcome of one attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum Attempt {
    /// The receiver answered 2xx.
    Succeeded {
        /// Its status.
        status: u16,
    },
    /// It failed; try again at `retry_at`, or give up with `None`.
    Failed {
        /// The receiver's status, when it answered.
        status: Option<u16>,
        /// Why.
        error: String,
        /// The next attempt.
        retry_at: Option<DateTime<Utc>>,
    },
}

/// The webhooks and their deliveries, beside the history.
#[derive(Debug, Clone)]
pub struct Webhooks {
    history: HistoryStore,
}

impl HistoryStore {
    /// Returns the webhooks, which live in the same database.
    pub fn webhooks(&self) -> Webhooks {
        Webhooks { history: self.clone() }
    }
}

fn uuid(raw: &str) -> Result<Uuid> {
    Uuid::parse_str(raw).map_err(|error| Error::Internal(format!("bad webhook id `{raw}`: {error}")))
}

fn events_json(events: &[EventKind]) -> String {
    serde_json::to_string(events).unwrap_or_else(|_| "[]".to_owned())
}

const WEBHOOK_COLUMNS: &str = "id, tenant, url, secret, events, description, enabled, disabled_reason, \
     consecutive_failures, created_at, last_success_at, last_failure_at";

const DELIVERY_COLUMNS: &str = "id, webhook_id, tenant, event_id, event, body, status, attempts, created_at, \
     next_attempt_at, last_attempt_at, response_status, error, finished_at";

macro_rules! webhook_from_row {
    ($row:expr) => {{
        let row = $row;
        let events: String = row.try_get("events")?;
        Webhook {
            id: uuid(&row.try_get::<String, _>("id")?)?,
            tenant: row.try_get("tenant")?,
            url: row.try_get("url")?,
            secret: row.try_get("secret")?,
            events: serde_json::from_str(&events)
                .map_err(|error| Error::Internal(format!("bad webhook events `{events}`: {error}")))?,
            description: row.try_get("description")?,
            enabled: row.try_get::<i64, _>("enabled")? != 0,
            disabled_reason: row.try_get("disabled_reason")?,
            consecutive_failures: u32::try_from(row.try_get::<i64, _>("consecutive_failures")?).unwrap_or(u32::MAX),
            created_at: time(Some(row.try_get("created_at")?))?.unwrap_or_default(),
            last_success_at: time(row.try_get("last_success_at")?)?,
            last_failure_at: time(row.try_get("last_failure_at")?)?,
        }
    }};
}

macro_rules! delivery_from_row {
    ($row:expr) => {{
        let row = $row;
        let event: String = row.try_get("event")?;
        Delivery {
            id: uuid(&row.try_get::<String, _>("id")?)?,
            webhook_id: uuid(&row.try_get::<String, _>("webhook_id")?)?,
            tenant: row.try_get("tenant")?,
            event_id: uuid(&row.try_get::<String, _>("event_id")?)?,
            event: EventKind::parse(&event).ok_or_else(|| Error::Internal(format!("unknown event `{event}`")))?,
            body: row.try_get("body")?,
            status: DeliveryStatus::parse(&row.try_get::<String, _>("status")?)?,
            attempts: u32::try_from(row.try_get::<i64, _>("attempts")?).unwrap_or(u32::MAX),
            created_at: time(Some(row.try_get("created_at")?))?.unwrap_or_default(),
            next_attempt_at: time(Some(row.try_get("next_attempt_at")?))?.unwrap_or_default(),
            last_attempt_at: time(row.try_get("last_attempt_at")?)?,
            response_status: row
                .try_get::<Option<i64>, _>("response_status")?
                .and_then(|code| u16::try_from(code).ok()),
            error: row.try_get("error")?,
            finished_at: time(row.try_get("finished_at")?)?,
        }
    }};
}

impl Webhooks {
    /// Stores a new webhook unless its tenant already has `max_per_tenant`; false then.
    ///
    /// # Errors
    /// Store errors.
    pub async fn create(&self, webhook: &Webhook, max_per_tenant: usize) -> Result<bool> {
        let limit = i64::try_from(max_per_tenant).unwrap_or(i64::MAX);
        let created = in_transaction!(&self.history.db, |tx, sql| {
            let count: i64 = sqlx::query(&sql("select count(*) as n from webhooks where tenant = ?"))
                .bind(&webhook.tenant)
                .fetch_one(&mut *tx)
                .await?
                .try_get("n")?;
            if count >= limit {
                false
            } else {
                sqlx::query(&sql(&format!(
                    "insert into webhooks ({WEBHOOK_COLUMNS}) values (?, ?, ?, ?, ?, ?, ?, ?, 0, ?, null, null)"
                )))
                .bind(webhook.id.to_string())
                .bind(&webhook.tenant)
                .bind(&webhook.url)
                .bind(&webhook.secret)
                .bind(events_json(&webhook.events))
                .bind(&webhook.description)
                .bind(i64::from(webhook.enabled))
                .bind(&webhook.disabled_reason)
                .bind(micros(webhook.created_at))
                .execute(&mut *tx)
                .await?;
                true
            }
        });
        Ok(created)
    }

    /// The webhooks of `tenant`, oldest first.
    ///
    /// # Errors
    /// Store errors.
    pub async fn list(&self, tenant: &str) -> Result<Vec<Webhook>> {
        on_pool!(&self.history.db, |pool, sql| {
            let rows = sqlx::query(&sql(&format!(
                "select {WEBHOOK_COLUMNS} from webhooks where tenant = ? order by created_at, id"
            )))
            .bind(tenant)
            .fetch_all(pool)
            .await?;
            rows.iter().map(|row| Ok(webhook_from_row!(row))).collect()
        })
    }

    /// The webhook `id` of `tenant`, if any.
    ///
    /// # Errors
    /// Store errors.
    pub async fn get(&self, tenant: &str, id: Uuid) -> Result<Option<Webhook>> {
        let found = on_pool!(&self.history.db, |pool, sql| {
            let row = sqlx::query(&sql(&format!("select {WEBHOOK_COLUMNS} from webhooks where tenant = ? and id = ?")))
                .bind(tenant)
                .bind(id.to_string())
                .fetch_optional(pool)
                .await?;
            match row {
                Some(row) => Some(webhook_from_row!(row)),
                None => None,
            }
        });
        Ok(found)
    }

    /// Deletes a webhook of `tenant` with its deliveries; false when there is none.
    ///
    /// # Errors
    /// Store errors.
    pub async fn delete(&self, tenant: &str, id: Uuid) -> Result<bool> {
        // Deliveries first: a sender recording an attempt locks its delivery, then the webhook,
        // and the same order here keeps the two from deadlocking on Postgres.
        let deleted = in_transaction!(&self.history.db, |tx, sql| {
            sqlx::query(&sql("delete from webhook_deliveries where tenant = ? and webhook_id = ?"))
                .bind(tenant)
                .bind(id.to_string())
                .execute(&mut *tx)
                .await?;
            sqlx::query(&sql("delete from webhooks where tenant = ? and id = ?"))
                .bind(tenant)
                .bind(id.to_string())
                .execute(&mut *tx)
                .await?
                .rows_affected()
                == 1
        });
        Ok(deleted)
    }

    /// Enables (clearing its failures; deliveries held meanwhile are sent again) or disables a
    /// webhook of `tenant` (events are no longer queued for it); false when there is none.
    ///
    /// # Errors
    /// Store errors.
    pub async fn set_enabled(&self, tenant: &str, id: Uuid, enabled: bool, reason: Option<&str>) -> Result<bool> {
        let changed = on_pool!(&self.history.db, |pool, sql| {
            sqlx::query(&sql("update webhooks set enabled = ?, disabled_reason = ?, \
                 consecutive_failures = case when ? = 1 then 0 else consecutive_failures end \
                 where tenant = ? and id = ?"))
            .bind(i64::from(enabled))
            .bind(if enabled { None } else { reason })
            .bind(i64::from(enabled))
            .bind(tenant)
            .bind(id.to_string())
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(changed == 1)
    }

    /// Queues each event for every enabled webhook of its tenant that wants it, first attempt
    /// at `now`. Returns how many deliveries were queued.
    ///
    /// # Errors
    /// Store errors.
    pub async fn fan_out(&self, events: &[Event], now: DateTime<Utc>) -> Result<usize> {
        let mut tenants: Vec<&str> = events.iter().map(|event| event.tenant.as_str()).collect();
        tenants.sort_unstable();
        tenants.dedup();
        let mut subscribed: Vec<Webhook> = Vec::new();
        for tenant in tenants {
            subscribed.extend(self.list(tenant).await?.into_iter().filter(|webhook| webhook.enabled));
        }
        if subscribed.is_empty() {
            return Ok(0);
        }
        let deliveries: Vec<(String, String, String, String, &'static str, String)> = events
            .iter()
            .flat_map(|event| {
                let body = event.body();
                subscribed
                    .iter()
                    .filter(move |webhook| webhook.tenant == event.tenant && webhook.events.contains(&event.kind))
                    .map(move |webhook| {
                        (
                            Uuid::now_v7().to_string(),
                            webhook.id.to_string(),
                            event.tenant.clone(),
                            event.id.to_string(),
                            event.kind.as_str(),
                            body.clone(),
                        )
                    })
            })
            .collect();
        let at = micros(now);
        in_transaction!(&self.history.db, |tx, sql| {
            for (id, webhook_id, tenant, event_id, event, body) in &deliveries {
                sqlx::query(&sql("insert into webhook_deliveries (id, webhook_id, tenant, event_id, event, body, \
                     status, attempts, created_at, next_attempt_at) values (?, ?, ?, ?, ?, ?, 'pending', 0, ?, ?)"))
                .bind(id)
                .bind(webhook_id)
                .bind(tenant)
                .bind(event_id)
                .bind(*event)
                .bind(body)
                .bind(at)
                .bind(at)
                .execute(&mut *tx)
                .await?;
            }
        });
        Ok(deliveries.len())
    }

    /// Claims up to `limit` deliveries due now (pending and due, or sending with their lease run
    /// out) of enabled webhooks, oldest first, holding them until `lease_until`.
    ///
    /// # Errors
    /// Store errors.
    pub async fn claim(&self, now: DateTime<Utc>, lease_until: DateTime<Utc>, limit: usize) -> Result<Vec<Claimed>> {
        let at = micros(now);
        const DUE: &str =
            "((d.status = 'pending' and d.next_attempt_at <= ?) or (d.status = 'sending' and d.lease_until < ?))";
        // Polled every second: an idle queue is a read, not a write transaction.
        let due = on_pool!(&self.history.db, |pool, sql| {
            sqlx::query(&sql(&format!("select 1 as due from webhook_deliveries d where {DUE} limit 1")))
                .bind(at)
                .bind(at)
                .fetch_optional(pool)
                .await?
                .is_some()
        });
        if !due {
            return Ok(Vec::new());
        }
        let postgres = self.history.db.is_postgres();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let claimed = in_transaction!(&self.history.db, |tx, sql| {
            // Replicas on Postgres skip the rows another one is claiming.
            let lock = if postgres { " for update of d skip locked" } else { "" };
            let rows = sqlx::query(&sql(&format!(
                "select d.id, w.url, w.secret from webhook_deliveries d join webhooks w on w.id = d.webhook_id \
                 where {DUE} and w.enabled = 1 order by d.next_attempt_at, d.id limit ?{lock}"
            )))
            .bind(at)
            .bind(at)
            .bind(limit)
            .fetch_all(&mut *tx)
            .await?;
            let mut claimed = Vec::with_capacity(rows.len());
            for row in rows {
                let id: String = row.try_get("id")?;
                let updated = sqlx::query(&sql(&format!(
                    "update webhook_deliveries set status = 'sending', attempts = attempts + 1, lease_until = ?, \
                     last_attempt_at = ? where id = ? returning {DELIVERY_COLUMNS}"
                )))
                .bind(micros(lease_until))
                .bind(at)
                .bind(&id)
                .fetch_one(&mut *tx)
                .await?;
                claimed.push(Claimed {
                    delivery: delivery_from_row!(updated),
                    url: row.try_get("url")?,
                    secret: row.try_get("secret")?,
                });
            }
            claimed
        });
        Ok(claimed)
    }

    /// Records the outcome of attempt `attempt` of a delivery (ignored when that attempt no
    /// longer holds it). A success resets its webhook's failures; a delivery given up while
    /// nothing of its webhook succeeded since it was queued disables the webhook. Returns true
    /// when this disabled the webhook.
    ///
    /// # Errors
    /// Store errors.
    pub async fn record(
        &self,
        delivery: &Delivery,
        attempt: u32,
        outcome: &Attempt,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let at = micros(now);
        let id = delivery.id.to_string();
        let webhook_id = delivery.webhook_id.to_string();
        let disabled = in_transaction!(&self.history.db, |tx, sql| {
            let (status, code, error, next, finished) = match outcome {
                Attempt::Succeeded { status } => {
                    (DeliveryStatus::Succeeded, Some(i64::from(*status)), None, None, Some(at))
                }
                Attempt::Failed { status, error, retry_at: Some(retry_at) } => (
                    DeliveryStatus::Pending,
                    status.map(i64::from),
                    Some(error.as_str()),
                    Some(micros(*retry_at)),
                    None,
                ),
                Attempt::Failed { status, error, retry_at: None } => {
                    (DeliveryStatus::Failed, status.map(i64::from), Some(error.as_str()), None, Some(at))
                }
            };
            let held = sqlx::query(&sql("update webhook_deliveries set status = ?, response_status = ?, error = ?, \
                 next_attempt_at = coalesce(?, next_attempt_at), finished_at = ?, lease_until = null \
                 where id = ? and status = 'sending' and attempts = ?"))
            .bind(status.as_str())
            .bind(code)
            .bind(error)
            .bind(next)
            .bind(finished)
            .bind(&id)
            .bind(i64::from(attempt))
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if held == 0 {
                false
            } else if matches!(outcome, Attempt::Succeeded { .. }) {
                sqlx::query(&sql("update webhooks set consecutive_failures = 0, last_success_at = ? where id = ?"))
                    .bind(at)
                    .bind(&webhook_id)
                    .execute(&mut *tx)
                    .await?;
                false
            } else {
                sqlx::query(&sql("update webhooks set consecutive_failures = consecutive_failures + 1, \
                     last_failure_at = ? where id = ?"))
                .bind(at)
                .bind(&webhook_id)
                .execute(&mut *tx)
                .await?;
                if status == DeliveryStatus::Failed {
                    let reason = format!(
                        "delivery {id} failed {attempt} times since {} and nothing succeeded meanwhile",
                        delivery.created_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                    );
                    sqlx::query(&sql("update webhooks set enabled = 0, disabled_reason = ? where id = ? \
                         and enabled = 1 and (last_success_at is null or last_success_at < ?)"))
                    .bind(reason)
                    .bind(&webhook_id)
                    .bind(micros(delivery.created_at))
                    .execute(&mut *tx)
                    .await?
                    .rows_affected()
                        == 1
                } else {
                    false
                }
            }
        });
        Ok(disabled)
    }

    /// The newest `limit` deliveries of a webhook of `tenant`, newest first.
    ///
    /// # Errors
    /// Store errors.
    pub async fn deliveries(&self, tenant: &str, webhook_id: Uuid, limit: usize) -> Result<Vec<Delivery>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        on_pool!(&self.history.db, |pool, sql| {
            let rows = sqlx::query(&sql(&format!(
                "select {DELIVERY_COLUMNS} from webhook_deliveries where tenant = ? and webhook_id = ? \
                 order by created_at desc, id desc limit ?"
            )))
            .bind(tenant)
            .bind(webhook_id.to_string())
            .bind(limit)
            .fetch_all(pool)
            .await?;
            rows.iter().map(|row| Ok(delivery_from_row!(row))).collect()
        })
    }

    /// Puts every delivery being sent back to pending: for a process that alone sends them
    /// (the SQLite history volume) and starts. Returns how many.
    ///
    /// # Errors
    /// Store errors.
    pub async fn requeue_sending(&self) -> Result<u64> {
        let requeued = on_pool!(&self.history.db, |pool, sql| {
            sqlx::query(&sql(
                "update webhook_deliveries set status = 'pending', lease_until = null where status = 'sending'",
            ))
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(requeued)
    }

    /// Deletes finished deliveries older than `before`, and those of webhooks deleted while
    /// their events were being queued; returns how many.
    ///
    /// # Errors
    /// Store errors.
    pub async fn prune(&self, before: DateTime<Utc>) -> Result<u64> {
        let pruned = on_pool!(&self.history.db, |pool, sql| {
            sqlx::query(&sql("delete from webhook_deliveries where (finished_at is not null and finished_at < ?) \
                 or not exists (select 1 from webhooks w where w.id = webhook_deliveries.webhook_id)"))
            .bind(micros(before))
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(pruned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_kinds_round_trip_their_names() {
        for kind in EventKind::ALL {
            assert_eq!(EventKind::parse(kind.as_str()), Some(kind));
            assert_eq!(serde_json::to_value(kind).unwrap(), serde_json::json!(kind.as_str()));
        }
        assert_eq!(EventKind::parse("memory.created"), None);
    }

    #[test]
    fn the_body_carries_id_type_time_tenant_and_data() {
        let event = Event::new("acme", EventKind::MemoryAdded, serde_json::json!({"memory_id": "m"}));
        let body: serde_json::Value = serde_json::from_str(&event.body()).unwrap();
        assert_eq!(body["id"], event.id.to_string());
        assert_eq!(body["type"], "memory.added");
        assert_eq!(body["tenant"], "acme");
        assert_eq!(body["data"]["memory_id"], "m");
        assert!(body["created_at"].as_str().unwrap().ends_with('Z'));
    }
}
