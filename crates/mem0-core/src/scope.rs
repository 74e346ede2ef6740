//! Scopes (`user_id`, `agent_id`, `run_id`) and the caller context every core operation receives.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Longest scope id we accept, in bytes.
pub const MAX_SCOPE_ID_LEN: usize = 255;

/// Characters that act as wildcards somewhere (glob, SQL LIKE) and are never part of a scope id.
const WILDCARD_CHARS: [char; 3] = ['*', '?', '%'];

/// The names of the three scope keys, also reserved in caller metadata.
pub const SCOPE_KEYS: [&str; 3] = ["user_id", "agent_id", "run_id"];

/// Who a memory belongs to: at least one of the three ids, immutable after creation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Scope {
    /// The end user.
    pub user_id: Option<String>,
    /// The agent.
    pub agent_id: Option<String>,
    /// One run or session.
    pub run_id: Option<String>,
}

impl Scope {
    /// Validates and normalises the three ids (trimmed; no whitespace, no wildcard) and requires
    /// at least one of them.
    ///
    /// # Errors
    /// [`Error::Validation`] naming the offending field.
    pub fn new(user_id: Option<&str>, agent_id: Option<&str>, run_id: Option<&str>) -> Result<Self> {
        let scope = Self::optional(user_id, agent_id, run_id)?;
        if scope.is_empty() {
            return Err(Error::validation("user_id", "at least one of user_id, agent_id or run_id is required"));
        }
        Ok(scope)
    }

    /// Like [`Scope::new`] but allows all three ids to be absent.
    ///
    /// # Errors
    /// [`Error::Validation`] naming the offending field.
    pub fn optional(user_id: Option<&str>, agent_id: Option<&str>, run_id: Option<&str>) -> Result<Self> {
        Ok(Self {
            user_id: user_id.map(|id| validate_scope_id("user_id", id)).transpose()?,
            agent_id: agent_id.map(|id| validate_scope_id("agent_id", id)).transpose()?,
            run_id: run_id.map(|id| validate_scope_id("run_id", id)).transpose()?,
        })
    }

    /// Returns true when no id is set.
    pub fn is_empty(&self) -> bool {
        self.user_id.is_none() && self.agent_id.is_none() && self.run_id.is_none()
    }

    /// Returns true when every id set in `self` equals the same id of `other`
    /// (the scope matches the memory owned by `other`).
    pub fn matches(&self, other: &Scope) -> bool {
        fn same(wanted: &Option<String>, actual: &Option<String>) -> bool {
            wanted.as_ref().is_none_or(|wanted| actual.as_ref() == Some(wanted))
        }
        same(&self.user_id, &other.user_id)
            && same(&self.agent_id, &other.agent_id)
            && same(&self.run_id, &other.run_id)
    }

    /// Returns the `(key, value)` pairs of the ids that are set.
    pub fn pairs(&self) -> Vec<(&'static str, &str)> {
        [
            ("user_id", self.user_id.as_deref()),
            ("agent_id", self.agent_id.as_deref()),
            ("run_id", self.run_id.as_deref()),
        ]
        .into_iter()
        .filter_map(|(key, value)| value.map(|value| (key, value)))
        .collect()
    }
}

/// Validates one scope id and returns it trimmed.
///
/// # Errors
/// [`Error::Validation`] when empty, too long, containing whitespace or control characters, or a wildcard.
pub fn validate_scope_id(field: &str, raw: &str) -> Result<String> {
    let id = raw.trim();
    if id.is_empty() {
        return Err(Error::validation(field, "cannot be empty"));
    }
    if id.len() > MAX_SCOPE_ID_LEN {
        return Err(Error::validation(field, format!("must be at most {MAX_SCOPE_ID_LEN} bytes")));
    }
    if id.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(Error::validation(field, "cannot contain whitespace or control characters"));
    }
    if id.chars().any(|c| WILDCARD_CHARS.contains(&c)) {
        return Err(Error::validation(field, "cannot contain a wildcard (`*`, `?` or `%`)"));
    }
    Ok(id.to_owned())
}

/// What a caller may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = RoleName))]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Read memories (get, list, search, history).
    Read,
    /// Read and write memories of its scopes.
    Write,
    /// Everything in its tenant, including keys, scope-wide deletes and reset.
    Admin,
}

/// Which scopes a caller may touch within its tenant.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ScopeGrant {
    /// `None`: any user of the tenant; `Some(list)`: only these user ids (and then a user id is required).
    pub user_ids: Option<Vec<String>>,
    /// `None`: any agent; `Some(list)`: only these agent ids (and then an agent id is required).
    pub agent_ids: Option<Vec<String>>,
}

/// The caller of a core operation: its tenant, role and the scopes it may touch.
/// Built by the transport (API key, JWT, or the local-development default) and checked by the core.
/// Serialisable so a queued job runs as the caller that queued it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Caller {
    /// Tenant every row read or written belongs to; never taken from request bodies.
    pub tenant: String,
    /// What the caller may do.
    pub role: Role,
    /// Which scopes it may touch.
    pub grant: ScopeGrant,
    /// Stable identifier for logs (key id, JWT subject, or `local`).
    pub principal_id: String,
    /// May act across tenants (manage every tenant's keys, reset everything). Only the bootstrap
    /// admin key and the local-development caller have it.
    pub global_admin: bool,
}

impl Caller {
    /// A caller with every right in `tenant`: for local development without authentication and
    /// for embedding the library in a single-tenant program.
    pub fn local_admin(tenant: impl Into<String>) -> Self {
        Self {
            tenant: tenant.into(),
            role: Role::Admin,
            grant: ScopeGrant::default(),
            principal_id: "local".to_owned(),
            global_admin: true,
        }
    }

    /// Returns true when the caller is an admin of its whole tenant (not bound to scopes).
    pub fn is_tenant_admin(&self) -> bool {
        self.role == Role::Admin && self.grant == ScopeGrant::default()
    }

    /// Fails unless the caller has at least `role`.
    ///
    /// # Errors
    /// [`Error::Forbidden`].
    pub fn require(&self, role: Role) -> Result<()> {
        if self.role >= role {
            Ok(())
        } else {
            Err(Error::Forbidden(format!("this operation needs the {role:?} role").to_lowercase()))
        }
    }

    /// Fails unless `scope` lies within what the caller may touch. Restricted grants require the
    /// restricted id to be present, so a query can never reach beyond the grant.
    ///
    /// # Errors
    /// [`Error::Forbidden`] naming the field.
    pub fn check_scope(&self, scope: &Scope) -> Result<()> {
        check_grant("user_id", self.grant.user_ids.as_deref(), scope.user_id.as_deref())?;
        check_grant("agent_id", self.grant.agent_ids.as_deref(), scope.agent_id.as_deref())
    }

    /// Returns true when the caller may see a memory owned by `tenant` and `scope`.
    pub fn can_see(&self, tenant: &str, scope: &Scope) -> bool {
        tenant == self.tenant && self.check_scope(scope).is_ok()
    }
}

fn check_grant(field: &str, allowed: Option<&[String]>, requested: Option<&str>) -> Result<()> {
    match (allowed, requested) {
        (None, _) => Ok(()),
        (Some(allowed), Some(id)) if allowed.iter().any(|allowed| allowed == id) => Ok(()),
        (Some(_), Some(_)) => Err(Error::Forbidden(format!("{field} is outside this caller's scope"))),
        (Some(_), None) => Err(Error::Forbidden(format!("{field} is required for this caller"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_and_requires_one_id() {
        let scope = Scope::new(Some("  alice "), None, None).expect("valid");
        assert_eq!(scope.user_id.as_deref(), Some("alice"));
        assert!(Scope::new(None, None, None).is_err());
    }

    #[test]
    fn rejects_whitespace_empty_and_wildcards() {
        for bad in ["", "   ", "al ice", "a\tb", "*", "user*", "us?r", "100%", "a\u{0}b"] {
            let error = Scope::new(Some(bad), None, None).expect_err(bad);
            assert!(matches!(error, Error::Validation { ref field, .. } if field == "user_id"), "{bad}: {error}");
        }
        assert!(Scope::new(None, Some("*"), None).is_err());
        assert!(Scope::new(None, None, Some("r *")).is_err());
        assert!(Scope::new(Some(&"x".repeat(256)), None, None).is_err());
    }

    #[test]
    fn scope_matching_is_per_present_id() {
        let owner = Scope::new(Some("u"), Some("a"), Some("r")).expect("valid");
        assert!(Scope::new(Some("u"), None, None).expect("valid").matches(&owner));
        assert!(Scope::new(Some("u"), Some("a"), None).expect("valid").matches(&owner));
        assert!(!Scope::new(Some("u"), Some("b"), None).expect("valid").matches(&owner));
        assert!(!Scope::new(None, None, Some("x")).expect("valid").matches(&owner));
    }

    #[test]
    fn restricted_grants_require_their_id() {
        let caller = Caller {
            grant: ScopeGrant { user_ids: Some(vec!["alice".into()]), agent_ids: None },
            ..Caller::local_admin("t")
        };
        assert!(caller.check_scope(&Scope::new(Some("alice"), None, None).expect("valid")).is_ok());
        assert!(caller.check_scope(&Scope::new(Some("bob"), None, None).expect("valid")).is_err());
        assert!(caller.check_scope(&Scope::new(None, Some("a"), None).expect("valid")).is_err());
        assert!(!caller.can_see("other-tenant", &Scope::new(Some("alice"), None, None).expect("valid")));
    }

    #[test]
    fn roles_are_ordered() {
        let reader = Caller { role: Role::Read, ..Caller::local_admin("t") };
        assert!(reader.require(Role::Read).is_ok());
        assert!(reader.require(Role::Write).is_err());
        assert!(Caller::local_admin("t").require(Role::Admin).is_ok());
    }
}
