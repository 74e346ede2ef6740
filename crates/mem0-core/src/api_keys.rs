//! API keys: created by admins, shown once, stored only as a SHA-256 digest, found by prefix,
//! compared in constant time, revocable, bound to a tenant, a role and optional scope limits.
//! They live beside the history (the SQLite history volume, or Postgres).

use chrono::{DateTime, Utc};
use serde::Serialize;
use sha2::{Digest, Sha256};
use sqlx::Row;
use subtle::ConstantTimeEq;
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::history::db::{on_pool, Db};
use crate::scope::{validate_scope_id, Caller, Role, ScopeGrant};

/// Every key starts with this, so leaked keys are easy to recognise and scan for.
pub const KEY_PREFIX: &str = "m0sk_";
/// Characters of a key used to find its row (the prefix plus 7 random characters).
pub const LOOKUP_LEN: usize = 12;
/// `last_used_at` is written at most this often per key, so reads do not become writes.
const LAST_USED_RESOLUTION_SECS: i64 = 60;

/// What a new key may do.
#[derive(Debug, Clone)]
pub struct NewApiKey {
    /// Tenant of the key; only a global admin may name another tenant than its own.
    pub tenant: Option<String>,
    /// Free text to recognise the key by.
    pub label: String,
    /// What the key may do.
    pub role: Role,
    /// Scope limits; must lie within the creator's.
    pub grant: ScopeGrant,
}

/// An API key as listed (never with its secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = ApiKeyResponse))]
pub struct ApiKeyInfo {
    /// Key id.
    pub id: Uuid,
    /// Owning tenant.
    pub tenant: String,
    /// The first characters of the key, to recognise it.
    pub key_prefix: String,
    /// Label given at creation.
    pub label: String,
    /// What the key may do.
    pub role: Role,
    /// Allowed user ids (`null`: every user of the tenant).
    pub user_ids: Option<Vec<String>>,
    /// Allowed agent ids (`null`: every agent).
    pub agent_ids: Option<Vec<String>>,
    /// Principal that created it.
    pub created_by: String,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Last successful use (minute resolution).
    pub last_used_at: Option<DateTime<Utc>>,
    /// Revocation time, when revoked.
    pub revoked_at: Option<DateTime<Utc>>,
}

/// A new key with its secret, returned once.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = CreatedApiKeyResponse))]
pub struct CreatedApiKey {
    /// The stored information.
    #[serde(flatten)]
    pub info: ApiKeyInfo,
    /// The key itself: shown once, never stored. Store it now.
    pub key: String,
}

/// The API key store.
#[derive(Debug, Clone)]
pub struct ApiKeys {
    db: Db,
}

fn digest(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

fn random_key() -> Result<String> {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine as _;
    let mut bytes = [0_u8; 32];
    getrandom::fill(&mut bytes).map_err(|error| Error::Internal(format!("no randomness: {error}")))?;
    Ok(format!("{KEY_PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes)))
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::Read => "read",
        Role::Write => "write",
        Role::Admin => "admin",
    }
}

fn parse_role(text: &str) -> Result<Role> {
    match text {
        "read" => Ok(Role::Read),
        "write" => Ok(Role::Write),
        "admin" => Ok(Role::Admin),
        other => Err(Error::Internal(format!("stored role {other}"))),
    }
}

fn validate_ids(field: &str, ids: Option<&[String]>) -> Result<Option<Vec<String>>> {
    let Some(ids) = ids else { return Ok(None) };
    if ids.is_empty() || ids.len() > 1000 {
        return Err(Error::validation(field, "give 1 to 1000 ids, or leave it out for all"));
    }
    ids.iter().map(|id| validate_scope_id(field, id)).collect::<Result<Vec<_>>>().map(Some)
}

/// True when `caller` may see and revoke the key `info`: the global admin any key; a tenant admin
/// the keys of its tenant whose grant lies within its own (so a key bound to some users never
/// manages an unrestricted key or one bound to other users).
fn manages(caller: &Caller, info: &ApiKeyInfo) -> bool {
    caller.global_admin
        || (info.tenant == caller.tenant
            && within(caller.grant.user_ids.as_deref(), info.user_ids.as_deref())
            && within(caller.grant.agent_ids.as_deref(), info.agent_ids.as_deref()))
}

/// True when `inner` allows nothing that `outer` does not.
fn within(outer: Option<&[String]>, inner: Option<&[String]>) -> bool {
    match (outer, inner) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(outer), Some(inner)) => inner.iter().all(|id| outer.contains(id)),
    }
}

fn row_to_info<R: Row>(row: &R) -> Result<ApiKeyInfo>
where
    for<'c> &'c str: sqlx::ColumnIndex<R>,
    String: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    Option<String>: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    i64: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    Option<i64>: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    let id: String = row.try_get("id")?;
    let role: String = row.try_get("role")?;
    let parse_ids = |column: &str| -> Result<Option<Vec<String>>> {
        let raw: Option<String> = row.try_get(column)?;
        raw.map(|raw| serde_json::from_str(&raw).map_err(|error| Error::Internal(format!("stored {column}: {error}"))))
            .transpose()
    };
    let time = |value: Option<i64>| value.and_then(DateTime::from_timestamp_micros);
    Ok(ApiKeyInfo {
        id: Uuid::parse_str(&id).map_err(|error| Error::Internal(format!("stored key id: {error}")))?,
        tenant: row.try_get("tenant")?,
        key_prefix: row.try_get("key_prefix")?,
        label: row.try_get("label")?,
        role: parse_role(&role)?,
        user_ids: parse_ids("user_ids")?,
        agent_ids: parse_ids("agent_ids")?,
        created_by: row.try_get("created_by")?,
        created_at: time(Some(row.try_get("created_at")?)).unwrap_or_default(),
        last_used_at: time(row.try_get("last_used_at")?),
        revoked_at: time(row.try_get("revoked_at")?),
    })
}

const COLUMNS: &str =
    "id, tenant, key_prefix, label, role, user_ids, agent_ids, created_by, created_at, last_used_at, revoked_at";

impl ApiKeys {
    pub(crate) fn new(db: Db) -> Self {
        Self { db }
    }

    /// Creates a key. Tenant admins create keys in their tenant, never with more rights than
    /// their own; a global admin may name any tenant.
    ///
    /// # Errors
    /// [`Error::Forbidden`], [`Error::Validation`], store errors.
    pub async fn create(&self, caller: &Caller, new: NewApiKey) -> Result<CreatedApiKey> {
        caller.require(Role::Admin)?;
        let tenant = match new.tenant {
            Some(tenant) if tenant != caller.tenant => {
                if !caller.global_admin {
                    return Err(Error::Forbidden("only the global admin creates keys for other tenants".into()));
                }
                validate_scope_id("tenant", &tenant)?
            }
            _ => caller.tenant.clone(),
        };
        crate::text::reject_nul("label", &new.label)?;
        let label = new.label.trim().to_owned();
        if label.is_empty() || label.len() > 200 {
            return Err(Error::validation("label", "must be 1 to 200 characters"));
        }
        let user_ids = validate_ids("user_ids", new.grant.user_ids.as_deref())?;
        let agent_ids = validate_ids("agent_ids", new.grant.agent_ids.as_deref())?;
        let within_creator = within(caller.grant.user_ids.as_deref(), user_ids.as_deref())
            && within(caller.grant.agent_ids.as_deref(), agent_ids.as_deref());
        if !(caller.global_admin || within_creator) {
            return Err(Error::Forbidden("a key cannot reach scopes its creator cannot".into()));
        }
        let key = random_key()?;
        let info = ApiKeyInfo {
            id: Uuid::now_v7(),
            tenant,
            key_prefix: key[..LOOKUP_LEN].to_owned(),
            label,
            role: new.role,
            user_ids,
            agent_ids,
            created_by: caller.principal_id.clone(),
            created_at: Utc::now(),
            last_used_at: None,
            revoked_at: None,
        };
        let to_json = |ids: &Option<Vec<String>>| ids.as_ref().map(|ids| serde_json::json!(ids).to_string());
        on_pool!(&self.db, |pool, sql| {
            sqlx::query(&sql(
                "insert into api_keys (id, tenant, key_prefix, key_hash, label, role, user_ids, agent_ids, \
                 created_by, created_at) values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            ))
            .bind(info.id.to_string())
            .bind(&info.tenant)
            .bind(&info.key_prefix)
            .bind(digest(&key).to_vec())
            .bind(&info.label)
            .bind(role_name(info.role))
            .bind(to_json(&info.user_ids))
            .bind(to_json(&info.agent_ids))
            .bind(&info.created_by)
            .bind(info.created_at.timestamp_micros())
            .execute(pool)
            .await?;
        });
        Ok(CreatedApiKey { info, key })
    }

    /// Lists the keys the caller manages, newest first: those of its tenant whose grant lies
    /// within its own (every tenant's for the global admin).
    ///
    /// # Errors
    /// [`Error::Forbidden`] unless admin; store errors.
    pub async fn list(&self, caller: &Caller) -> Result<Vec<ApiKeyInfo>> {
        caller.require(Role::Admin)?;
        // The tenant condition is always there; the global admin's is true for every row.
        let statement = format!(
            "select {COLUMNS} from api_keys where (? or tenant = ?) order by created_at desc, id desc limit 10000"
        );
        let keys = on_pool!(&self.db, |pool, sql| {
            let rows =
                sqlx::query(&sql(&statement)).bind(caller.global_admin).bind(&caller.tenant).fetch_all(pool).await?;
            rows.iter().map(row_to_info).collect::<Result<Vec<_>>>()?
        });
        Ok(keys.into_iter().filter(|info| manages(caller, info)).collect())
    }

    /// Revokes a key the caller manages (see [`ApiKeys::list`]).
    ///
    /// # Errors
    /// [`Error::ApiKeyNotFound`] when missing, already revoked, in another tenant or outside the
    /// caller's grant (its existence is not revealed).
    pub async fn revoke(&self, caller: &Caller, id: Uuid) -> Result<()> {
        caller.require(Role::Admin)?;
        let not_found = || Error::ApiKeyNotFound { id: id.to_string() };
        let info = on_pool!(&self.db, |pool, sql| {
            let statement = sql(&format!("select {COLUMNS} from api_keys where id = ? and revoked_at is null"));
            let row = sqlx::query(&statement).bind(id.to_string()).fetch_optional(pool).await?.ok_or_else(not_found)?;
            row_to_info(&row)?
        });
        if !manages(caller, &info) {
            return Err(not_found());
        }
        let result = on_pool!(&self.db, |pool, sql| {
            sqlx::query(&sql("update api_keys set revoked_at = ? where id = ? and revoked_at is null"))
                .bind(Utc::now().timestamp_micros())
                .bind(id.to_string())
                .execute(pool)
                .await?
                .rows_affected()
        });
        if result == 0 {
            return Err(not_found());
        }
        Ok(())
    }

    /// Returns the caller a presented key stands for, or `None` for an unknown or revoked key.
    ///
    /// # Errors
    /// Store errors only.
    pub async fn authenticate(&self, presented: &str) -> Result<Option<Caller>> {
        if !presented.starts_with(KEY_PREFIX) || presented.len() < LOOKUP_LEN || presented.len() > 128 {
            return Ok(None);
        }
        let presented_digest = digest(presented);
        let statement = format!("select {COLUMNS}, key_hash from api_keys where key_prefix = ? and revoked_at is null");
        let found = on_pool!(&self.db, |pool, sql| {
            let rows = sqlx::query(&sql(&statement)).bind(&presented[..LOOKUP_LEN]).fetch_all(pool).await?;
            let mut found = None;
            for row in &rows {
                let stored: Vec<u8> = row.try_get("key_hash")?;
                if bool::from(stored.as_slice().ct_eq(&presented_digest)) {
                    found = Some(row_to_info(row)?);
                    break;
                }
            }
            found
        });
        if let Some(info) = found {
            self.touch(&info).await;
            return Ok(Some(Caller {
                tenant: info.tenant,
                role: info.role,
                grant: ScopeGrant { user_ids: info.user_ids, agent_ids: info.agent_ids },
                principal_id: format!("key:{}", info.id),
                global_admin: false,
            }));
        }
        Ok(None)
    }

    async fn touch(&self, info: &ApiKeyInfo) {
        let now = Utc::now();
        let fresh = info.last_used_at.is_some_and(|at| (now - at).num_seconds() < LAST_USED_RESOLUTION_SECS);
        if fresh {
            return;
        }
        let outcome = on_pool!(&self.db, |pool, sql| {
            sqlx::query(&sql("update api_keys set last_used_at = ? where id = ?"))
                .bind(now.timestamp_micros())
                .bind(info.id.to_string())
                .execute(pool)
                .await
                .map(|_| ())
        });
        if let Err(error) = outcome {
            tracing::warn!(%error, key_id = %info.id, "could not record api key use");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_long_random_and_prefixed() {
        let one = random_key().expect("key");
        let two = random_key().expect("key");
        assert!(one.starts_with(KEY_PREFIX));
        assert_eq!(one.len(), KEY_PREFIX.len() + 43);
        assert_ne!(one, two);
    }

    #[test]
    fn grants_nest() {
        let alice = vec!["alice".to_owned()];
        let both = vec!["alice".to_owned(), "bob".to_owned()];
        assert!(within(None, Some(&alice)));
        assert!(within(Some(&both), Some(&alice)));
        assert!(!within(Some(&alice), Some(&both)));
        assert!(!within(Some(&alice), None));
    }
}
