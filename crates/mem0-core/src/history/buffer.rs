//! The conversation buffer: recent messages of each session (same user, agent and run), the
//! context fact extraction shows the model; written with the history (see
//! [`super::HistoryStore::deliver`]), trimmed to [`super::BUFFER_KEEP`] messages a session.

use sqlx::Row;

use super::db::on_pool;
use super::HistoryStore;
use crate::error::Result;
use crate::scope::Scope;
use crate::types::Message;

/// The `&key=value&` pieces a session key (see [`crate::extraction::session_scope`]) of a
/// session under `scope` contains, once wrapped in `&`.
fn session_pairs(scope: &Scope) -> Vec<String> {
    scope
        .pairs()
        .iter()
        .map(|(key, value)| {
            let escaped = value.replace('%', "%25").replace('&', "%26").replace('=', "%3D");
            format!("&{key}={escaped}&")
        })
        .collect()
}

/// True when the session key `session` belongs to a session under `scope` (it holds each of the
/// scope's ids), e.g. every session of a user for `user_id=u`.
pub fn session_under(session: &str, scope: &Scope) -> bool {
    let wrapped = format!("&{session}&");
    let pairs = session_pairs(scope);
    !pairs.is_empty() && pairs.iter().all(|pair| wrapped.contains(pair.as_str()))
}

impl HistoryStore {
    /// Deletes the buffered messages of every session under `scope` (sessions whose key holds
    /// each of the scope's ids), e.g. all of a user's sessions for `user_id=u`.
    ///
    /// # Errors
    /// [`Error::StoreUnavailable`].
    pub async fn forget_sessions(&self, tenant: &str, scope: &Scope) -> Result<()> {
        let pairs = session_pairs(scope);
        if pairs.is_empty() {
            return Ok(());
        }
        // A substring test, not like: scope ids may contain `_`, a like wildcard (and SQLite's
        // like ignores case).
        let position = if self.db.is_postgres() { "strpos" } else { "instr" };
        let condition = format!("{position}('&' || session_scope || '&', ?) > 0");
        let conditions = vec![condition.as_str(); pairs.len()].join(" and ");
        let statement = format!("delete from messages where tenant = ? and {conditions}");
        on_pool!(&self.db, |pool, sql| {
            let statement = sql(&statement);
            let mut query = sqlx::query(&statement).bind(tenant);
            for pair in &pairs {
                query = query.bind(pair);
            }
            query.execute(pool).await?;
        });
        Ok(())
    }

    /// Returns the newest `limit` buffered messages of a session, oldest first.
    ///
    /// # Errors
    /// [`Error::StoreUnavailable`].
    pub async fn recent_messages(&self, tenant: &str, session: &str, limit: usize) -> Result<Vec<Message>> {
        const SELECT: &str = "select role, content, name from (select role, content, name, seq from messages \
             where tenant = ? and session_scope = ? order by seq desc limit ?) as recent order by seq";
        on_pool!(&self.db, |pool, sql| {
            let rows = sqlx::query(&sql(SELECT))
                .bind(tenant)
                .bind(session)
                .bind(i64::try_from(limit).unwrap_or(i64::MAX))
                .fetch_all(pool)
                .await?;
            rows.iter()
                .map(|row| {
                    Ok(Message {
                        role: row.try_get("role")?,
                        content: row.try_get("content")?,
                        name: row.try_get("name")?,
                    })
                })
                .collect()
        })
    }
}
