//! Named settings beside the history: the runtime configuration `POST /configure` persists when
//! the history is on Postgres, where every replica reads it (one row per name, with a version
//! that grows with each change).

use chrono::Utc;
use sqlx::{Connection as _, Row};

use super::db::on_pool;
use super::HistoryStore;
use crate::error::Result;

/// A stored setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSetting {
    /// Its value (JSON text).
    pub value: String,
    /// Increases with every change.
    pub version: i64,
}

impl HistoryStore {
    /// Returns the setting stored under `name`, if any.
    ///
    /// # Errors
    /// [`crate::Error::StoreUnavailable`].
    pub async fn setting(&self, name: &str) -> Result<Option<StoredSetting>> {
        on_pool!(&self.db, |pool, sql| {
            let row = sqlx::query(&sql("select value, version from runtime_config where name = ?"))
                .bind(name)
                .fetch_optional(pool)
                .await?;
            row.map(|row| Ok(StoredSetting { value: row.try_get("value")?, version: row.try_get("version")? }))
                .transpose()
        })
    }

    /// Stores `value` under `name` as its next version, and returns that version.
    ///
    /// # Errors
    /// [`crate::Error::StoreUnavailable`].
    pub async fn save_setting(&self, name: &str, value: &str) -> Result<i64> {
        let statement = "insert into runtime_config (name, value, version, updated_at) values (?, ?, 1, ?) \
             on conflict (name) do update set value = excluded.value, version = runtime_config.version + 1, \
             updated_at = excluded.updated_at returning version";
        let version = on_pool!(&self.db, |pool, sql| {
            sqlx::query_scalar::<_, i64>(&sql(statement))
                .bind(name)
                .bind(value)
                .bind(Utc::now().timestamp_micros())
                .fetch_one(pool)
                .await?
        });
        Ok(version)
    }
}

/// Reads the setting `name` from the Postgres database at `url` before anything else is opened
/// (the persisted runtime configuration decides which embedder the service is built with);
/// `None` when there is none, or no table yet (migrations not applied).
///
/// # Errors
/// [`crate::Error::StoreUnavailable`] when the database cannot be reached.
pub async fn read_postgres_setting(url: &str, name: &str) -> Result<Option<StoredSetting>> {
    let mut connection = sqlx::PgConnection::connect(url).await?;
    let exists: bool =
        sqlx::query_scalar("select to_regclass('runtime_config') is not null").fetch_one(&mut connection).await?;
    let found = if exists {
        sqlx::query("select value, version from runtime_config where name = $1")
            .bind(name)
            .fetch_optional(&mut connection)
            .await?
            .map(|row| {
                Ok::<_, sqlx::Error>(StoredSetting { value: row.try_get("value")?, version: row.try_get("version")? })
            })
            .transpose()?
    } else {
        None
    };
    let _ = connection.close().await;
    Ok(found)
}
