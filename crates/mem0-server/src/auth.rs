//! Who is calling: API keys (`X-API-Key` or `Authorization: Token <key>`), the bootstrap admin key,
//! JWT bearer tokens from the user's identity provider (HS256 secret, RS256/ES256 public key, or a
//! JWKS URL), or, for local development only, nobody (auth disabled). The result is a
//! [`mem0_core::Caller`] that the core checks on every operation.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use axum::http::{header, HeaderMap};
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use mem0_core::api_keys::ApiKeys;
use mem0_core::{Caller, Role, ScopeGrant};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::sync::RwLock;

use crate::error::{ApiError, ErrorCode};

/// JWT verification settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JwtSettings {
    /// Shared secret for HS256 tokens (env `MEM0__AUTH__JWT__HS256_SECRET`).
    #[serde(default)]
    pub hs256_secret: Option<SecretString>,
    /// PEM public key for RS256 or ES256 tokens (inline).
    #[serde(default)]
    pub public_key_pem: Option<String>,
    /// File holding that PEM key.
    #[serde(default)]
    pub public_key_file: Option<std::path::PathBuf>,
    /// `RS256` or `ES256`: the algorithm of the public key.
    #[serde(default = "default_public_key_algorithm")]
    pub public_key_algorithm: String,
    /// JWKS document of the identity provider; fetched at startup, refreshed on an unknown `kid`.
    #[serde(default)]
    pub jwks_url: Option<String>,
    /// Required `iss`, when set.
    #[serde(default)]
    pub issuer: Option<String>,
    /// Required `aud`, when set.
    #[serde(default)]
    pub audience: Option<String>,
    /// Clock skew allowed on `exp` and `nbf`, in seconds.
    #[serde(default = "default_leeway")]
    pub leeway_secs: u64,
    /// Claim naming the tenant (required in every token).
    #[serde(default = "default_tenant_claim")]
    pub tenant_claim: String,
    /// Claim naming the user; non-admin tokens may touch only this user's memories.
    #[serde(default = "default_user_claim")]
    pub user_claim: String,
    /// Claim naming the agent, when tokens are bound to one.
    #[serde(default)]
    pub agent_claim: Option<String>,
    /// Claim listing roles (`read`, `write`, `admin`), as an array or a space-separated string.
    #[serde(default = "default_roles_claim")]
    pub roles_claim: String,
    /// Role of a token that lists none.
    #[serde(default = "default_role")]
    pub default_role: Role,
    /// Shortest interval between two JWKS refreshes, in seconds.
    #[serde(default = "default_jwks_refresh")]
    pub jwks_min_refresh_secs: u64,
}

fn default_public_key_algorithm() -> String {
    "RS256".to_owned()
}
fn default_leeway() -> u64 {
    30
}
fn default_tenant_claim() -> String {
    "tenant".to_owned()
}
fn default_user_claim() -> String {
    "sub".to_owned()
}
fn default_roles_claim() -> String {
    "roles".to_owned()
}
fn default_role() -> Role {
    Role::Write
}
fn default_jwks_refresh() -> u64 {
    30
}

impl Default for JwtSettings {
    fn default() -> Self {
        Self {
            hs256_secret: None,
            public_key_pem: None,
            public_key_file: None,
            public_key_algorithm: default_public_key_algorithm(),
            jwks_url: None,
            issuer: None,
            audience: None,
            leeway_secs: default_leeway(),
            tenant_claim: default_tenant_claim(),
            user_claim: default_user_claim(),
            agent_claim: None,
            roles_claim: default_roles_claim(),
            default_role: default_role(),
            jwks_min_refresh_secs: default_jwks_refresh(),
        }
    }
}

/// Authentication settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSettings {
    /// Local development only: every request acts as the global admin of `server.default_tenant`.
    pub disabled: bool,
    /// Allow `disabled` on a non-loopback address (never do this on a network).
    #[serde(default)]
    pub allow_disabled_on_public_bind: bool,
    /// Bootstrap key of the global admin (env `ADMIN_API_KEY`); at least 32 characters.
    #[serde(default)]
    pub admin_api_key: Option<SecretString>,
    /// JWT bearer tokens.
    #[serde(default)]
    pub jwt: JwtSettings,
}

/// Verifies JWTs against the configured keys.
struct JwtVerifier {
    settings: JwtSettings,
    hs256: Option<DecodingKey>,
    public_key: Option<VerifyingKey>,
    jwks: Option<Jwks>,
}

/// A key and the one algorithm it verifies.
type VerifyingKey = (Algorithm, DecodingKey);

/// Keys by `kid`, and when they were last fetched.
#[derive(Default)]
struct JwksCache {
    keys: HashMap<String, VerifyingKey>,
    fetched_at: Option<Instant>,
}

struct Jwks {
    url: String,
    client: reqwest::Client,
    keys: RwLock<JwksCache>,
    min_refresh: Duration,
}

impl std::fmt::Debug for JwtVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtVerifier")
            .field("hs256", &self.hs256.is_some())
            .field("public_key", &self.public_key.as_ref().map(|(algorithm, _)| *algorithm))
            .field("jwks_url", &self.jwks.as_ref().map(|jwks| jwks.url.as_str()))
            .finish_non_exhaustive()
    }
}

impl Jwks {
    async fn refresh(&self) -> Result<(), String> {
        {
            let guard = self.keys.read().await;
            if guard.fetched_at.is_some_and(|at| at.elapsed() < self.min_refresh) {
                return Ok(());
            }
        }
        let mut guard = self.keys.write().await;
        if guard.fetched_at.is_some_and(|at| at.elapsed() < self.min_refresh) {
            return Ok(());
        }
        guard.fetched_at = Some(Instant::now());
        let set: JwkSet = self
            .client
            .get(&self.url)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|error| format!("jwks fetch failed: {error}"))?
            .json()
            .await
            .map_err(|error| format!("jwks document unreadable: {error}"))?;
        let mut keys = HashMap::new();
        for jwk in &set.keys {
            let (Some(kid), Ok(key)) = (jwk.common.key_id.clone(), DecodingKey::from_jwk(jwk)) else { continue };
            let algorithm = match &jwk.algorithm {
                jsonwebtoken::jwk::AlgorithmParameters::RSA(_) => Algorithm::RS256,
                jsonwebtoken::jwk::AlgorithmParameters::EllipticCurve(_) => Algorithm::ES256,
                _ => continue,
            };
            keys.insert(kid, (algorithm, key));
        }
        guard.keys = keys;
        Ok(())
    }

    async fn key(&self, kid: &str) -> Option<VerifyingKey> {
        if let Some(found) = self.keys.read().await.keys.get(kid) {
            return Some(found.clone());
        }
        if let Err(error) = self.refresh().await {
            tracing::warn!(%error, "jwks refresh failed");
        }
        self.keys.read().await.keys.get(kid).cloned()
    }
}

fn unauthenticated(message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::Unauthenticated, message)
}

impl JwtVerifier {
    fn enabled(settings: &JwtSettings) -> bool {
        settings.hs256_secret.is_some()
            || settings.public_key_pem.is_some()
            || settings.public_key_file.is_some()
            || settings.jwks_url.is_some()
    }

    fn build(settings: &JwtSettings) -> anyhow::Result<Self> {
        let hs256 = settings.hs256_secret.as_ref().map(|secret| {
            anyhow::ensure!(secret.expose_secret().len() >= 32, "auth.jwt.hs256_secret must be at least 32 characters");
            Ok(DecodingKey::from_secret(secret.expose_secret().as_bytes()))
        });
        let hs256 = hs256.transpose()?;
        let pem = match (&settings.public_key_pem, &settings.public_key_file) {
            (Some(pem), _) => Some(pem.clone()),
            (None, Some(path)) => Some(std::fs::read_to_string(path).map_err(|error| {
                anyhow::anyhow!("cannot read auth.jwt.public_key_file {}: {error}", path.display())
            })?),
            (None, None) => None,
        };
        let public_key = pem
            .map(|pem| match settings.public_key_algorithm.as_str() {
                "RS256" => DecodingKey::from_rsa_pem(pem.as_bytes())
                    .map(|key| (Algorithm::RS256, key))
                    .map_err(|error| anyhow::anyhow!("auth.jwt public key is not an RSA PEM key: {error}")),
                "ES256" => DecodingKey::from_ec_pem(pem.as_bytes())
                    .map(|key| (Algorithm::ES256, key))
                    .map_err(|error| anyhow::anyhow!("auth.jwt public key is not an EC PEM key: {error}")),
                other => Err(anyhow::anyhow!("auth.jwt.public_key_algorithm must be RS256 or ES256, got {other}")),
            })
            .transpose()?;
        let jwks = settings
            .jwks_url
            .as_ref()
            .map(|url| -> anyhow::Result<Jwks> {
                let parsed = url::Url::parse(url).map_err(|error| anyhow::anyhow!("auth.jwt.jwks_url: {error}"))?;
                anyhow::ensure!(matches!(parsed.scheme(), "http" | "https"), "auth.jwt.jwks_url must be http(s)");
                Ok(Jwks {
                    url: url.clone(),
                    client: reqwest::Client::builder()
                        .connect_timeout(Duration::from_secs(3))
                        .timeout(Duration::from_secs(5))
                        .build()?,
                    keys: RwLock::new(JwksCache::default()),
                    min_refresh: Duration::from_secs(settings.jwks_min_refresh_secs.max(1)),
                })
            })
            .transpose()?;
        Ok(Self { settings: settings.clone(), hs256, public_key, jwks })
    }

    async fn verify(&self, token: &str) -> Result<Caller, ApiError> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| unauthenticated("invalid bearer token"))?;
        // The key is chosen by what we configured for each algorithm, never by the token alone:
        // an RS/ES public key is never used as an HMAC secret.
        let (algorithm, key) = match header.alg {
            Algorithm::HS256 => {
                (Algorithm::HS256, self.hs256.clone().ok_or_else(|| unauthenticated("HS256 tokens are not accepted"))?)
            }
            Algorithm::RS256 | Algorithm::ES256 => {
                let from_jwks = match (&self.jwks, &header.kid) {
                    (Some(jwks), Some(kid)) => jwks.key(kid).await,
                    _ => None,
                };
                let chosen = from_jwks.or_else(|| self.public_key.clone());
                match chosen {
                    Some((algorithm, key)) if algorithm == header.alg => (algorithm, key),
                    _ => return Err(unauthenticated("no key for this token's algorithm or key id")),
                }
            }
            _ => return Err(unauthenticated("token algorithm not accepted")),
        };
        let mut validation = Validation::new(algorithm);
        validation.leeway = self.settings.leeway_secs;
        validation.validate_nbf = true;
        // A configured issuer or audience is required, not merely checked when present: a token
        // without the claim is refused like one with a wrong value.
        let mut required = vec!["exp"];
        match &self.settings.audience {
            Some(audience) => {
                validation.set_audience(&[audience]);
                required.push("aud");
            }
            None => validation.validate_aud = false,
        }
        if let Some(issuer) = &self.settings.issuer {
            validation.set_issuer(&[issuer]);
            required.push("iss");
        }
        validation.set_required_spec_claims(&required);
        let data = jsonwebtoken::decode::<serde_json::Map<String, serde_json::Value>>(token, &key, &validation)
            .map_err(|error| {
                use jsonwebtoken::errors::ErrorKind;
                let reason = match error.kind() {
                    ErrorKind::ExpiredSignature => "token expired",
                    ErrorKind::ImmatureSignature => "token not valid yet",
                    ErrorKind::InvalidAudience => "token audience not accepted",
                    ErrorKind::InvalidIssuer => "token issuer not accepted",
                    ErrorKind::InvalidSignature => "token signature invalid",
                    ErrorKind::MissingRequiredClaim(_) => "token lacks a required claim",
                    _ => "invalid bearer token",
                };
                unauthenticated(reason)
            })?;
        self.caller_from_claims(&data.claims)
    }

    fn caller_from_claims(&self, claims: &serde_json::Map<String, serde_json::Value>) -> Result<Caller, ApiError> {
        let settings = &self.settings;
        let text = |name: &str| claims.get(name).and_then(serde_json::Value::as_str).map(str::to_owned);
        let tenant = text(&settings.tenant_claim)
            .ok_or_else(|| unauthenticated(format!("token lacks the `{}` claim", settings.tenant_claim)))?;
        let tenant = mem0_core::scope::validate_scope_id("tenant", &tenant)
            .map_err(|_| unauthenticated("token tenant is not a valid id"))?;
        let subject = text(&settings.user_claim)
            .ok_or_else(|| unauthenticated(format!("token lacks the `{}` claim", settings.user_claim)))?;
        let roles: Vec<String> = match claims.get(&settings.roles_claim) {
            Some(serde_json::Value::Array(items)) => {
                items.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect()
            }
            Some(serde_json::Value::String(list)) => list.split_whitespace().map(str::to_owned).collect(),
            _ => Vec::new(),
        };
        let role = roles
            .iter()
            .filter_map(|role| match role.as_str() {
                "admin" | "mem0:admin" => Some(Role::Admin),
                "write" | "mem0:write" => Some(Role::Write),
                "read" | "mem0:read" => Some(Role::Read),
                _ => None,
            })
            .max()
            .unwrap_or(settings.default_role);
        // Non-admin tokens speak for one user; admins of the tenant are not bound to a user.
        let user_ids = if role == Role::Admin {
            None
        } else {
            Some(vec![mem0_core::scope::validate_scope_id("user_id", &subject)
                .map_err(|_| unauthenticated("token subject is not a valid user id"))?])
        };
        let agent_ids = match &settings.agent_claim {
            Some(claim) => text(claim).map(|agent| vec![agent]),
            None => None,
        };
        Ok(Caller {
            tenant,
            role,
            grant: ScopeGrant { user_ids, agent_ids },
            principal_id: format!("jwt:{subject}"),
            global_admin: false,
        })
    }
}

/// Turns request headers into a caller.
#[derive(Debug)]
pub struct Authenticator {
    disabled: bool,
    default_tenant: String,
    admin_key_digest: Option<[u8; 32]>,
    api_keys: ApiKeys,
    jwt: Option<JwtVerifier>,
}

impl Authenticator {
    /// Builds the authenticator; refuses unsafe combinations.
    ///
    /// # Errors
    /// Bad keys, a short admin key, or auth disabled on a public address.
    pub fn build(
        settings: &AuthSettings,
        bind: std::net::SocketAddr,
        default_tenant: &str,
        api_keys: ApiKeys,
    ) -> anyhow::Result<Self> {
        if settings.disabled {
            anyhow::ensure!(
                bind.ip().is_loopback() || settings.allow_disabled_on_public_bind,
                "auth.disabled is refused on the non-loopback address {bind}: configure ADMIN_API_KEY or JWT, or set \
                 auth.allow_disabled_on_public_bind = true if you really mean it"
            );
            tracing::warn!(
                address = %bind,
                "AUTHENTICATION IS DISABLED: every request acts as the global admin; for local development only"
            );
        }
        let admin_key_digest = match &settings.admin_api_key {
            Some(key) => {
                anyhow::ensure!(key.expose_secret().len() >= 32, "ADMIN_API_KEY must be at least 32 characters");
                Some(Sha256::digest(key.expose_secret().as_bytes()).into())
            }
            None => None,
        };
        let jwt = if JwtVerifier::enabled(&settings.jwt) { Some(JwtVerifier::build(&settings.jwt)?) } else { None };
        Ok(Self {
            disabled: settings.disabled,
            default_tenant: default_tenant.to_owned(),
            admin_key_digest,
            api_keys,
            jwt,
        })
    }

    /// Fetches the JWKS document once, so a bad URL shows at startup rather than at the first request.
    pub async fn warm_up(&self) {
        if let Some(jwks) = self.jwt.as_ref().and_then(|jwt| jwt.jwks.as_ref()) {
            if let Err(error) = jwks.refresh().await {
                tracing::warn!(%error, url = %jwks.url, "jwks not available yet; will retry on demand");
            }
        }
    }

    /// Returns the caller for these headers.
    ///
    /// # Errors
    /// 401 `unauthenticated` for missing or bad credentials (a bad credential is never ignored,
    /// even with auth disabled); 503 when the key store is unreachable.
    pub async fn authenticate(&self, headers: &HeaderMap) -> Result<Caller, ApiError> {
        let authorization = headers.get(header::AUTHORIZATION).and_then(|value| value.to_str().ok());
        if let Some(token) = authorization.and_then(|value| strip_scheme(value, "bearer")) {
            let jwt = self.jwt.as_ref().ok_or_else(|| unauthenticated("bearer tokens are not accepted here"))?;
            return jwt.verify(token).await;
        }
        let key = headers
            .get("x-api-key")
            .and_then(|value| value.to_str().ok())
            .or_else(|| authorization.and_then(|value| strip_scheme(value, "token")));
        if let Some(key) = key.map(str::trim) {
            if let Some(admin) = &self.admin_key_digest {
                let presented: [u8; 32] = Sha256::digest(key.as_bytes()).into();
                if bool::from(presented.ct_eq(admin)) {
                    return Ok(Caller {
                        principal_id: "admin".to_owned(),
                        ..Caller::local_admin(self.default_tenant.clone())
                    });
                }
            }
            return match self.api_keys.authenticate(key).await? {
                Some(caller) => Ok(caller),
                None => Err(unauthenticated("invalid or revoked api key")),
            };
        }
        if authorization.is_some() {
            return Err(unauthenticated("unsupported authorization scheme; use Bearer <jwt> or Token <api key>"));
        }
        if self.disabled {
            return Ok(Caller::local_admin(self.default_tenant.clone()));
        }
        Err(unauthenticated("authentication required: send X-API-Key, Authorization: Token <key> or a bearer token"))
    }
}

fn strip_scheme<'a>(value: &'a str, scheme: &str) -> Option<&'a str> {
    let (given, rest) = value.split_once(' ')?;
    given.eq_ignore_ascii_case(scheme).then(|| rest.trim()).filter(|rest| !rest.is_empty())
}
