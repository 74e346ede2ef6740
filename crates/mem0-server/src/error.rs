//! The HTTP error envelope `{"code", "message", "request_id", "details"?}`, the closed catalogue of
//! codes, the mapping of every core error to a status, and extractors whose rejections use it.

use std::time::Duration;

use axum::extract::rejection::PathRejection;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use mem0_core::{Error as CoreError, ProviderErrorKind};
use serde::de::DeserializeOwned;
use serde::Serialize;
use utoipa::ToSchema;

use crate::request_context::current_request_id;

/// Stable, snake_case error codes: the API contract for programmatic handling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// A field of the request is invalid; `details.field` names it.
    ValidationFailed,
    /// The body is not valid JSON or does not fit the schema.
    InvalidJson,
    /// A query-string parameter is invalid.
    InvalidQuery,
    /// A memory id in the path is not a UUID.
    InvalidMemoryId,
    /// A filter uses an operator that does not exist; `details.operator` names it.
    UnsupportedFilterOperator,
    /// The body is not `application/json`.
    UnsupportedMediaType,
    /// The body is larger than the configured limit.
    PayloadTooLarge,
    /// No such memory (or not visible to the caller).
    MemoryNotFound,
    /// No such route.
    RouteNotFound,
    /// The route exists but not with this method.
    MethodNotAllowed,
    /// Credentials are missing or invalid.
    Unauthenticated,
    /// The caller may not do this.
    Forbidden,
    /// Too many requests; see `Retry-After`.
    RateLimited,
    /// The `Host` header names a host this server does not answer for (DNS rebinding defence).
    HostNotAllowed,
    /// A browser request from another site tried to change something while authentication is
    /// disabled.
    CrossSiteRequest,
    /// No such API key (or not in the caller's tenant).
    ApiKeyNotFound,
    /// The memory changed while the request was working on it; retry.
    Conflict,
    /// The write policy refuses to store the text; `details.rule` names the rule and
    /// `details.field` the input (400). Nothing was stored.
    PolicyRejected,
    /// The `Idempotency-Key` was used for a different request (422).
    IdempotencyKeyReused,
    /// A request with this `Idempotency-Key` is still running (409); retry once it finished.
    IdempotencyKeyInProgress,
    /// A configuration change was refused; nothing changed.
    ConfigurationRejected,
    /// `infer=true` needs an LLM and none is configured.
    LlmNotConfigured,
    /// The provider rejected our credentials.
    ProviderAuthFailed,
    /// The provider throttled us.
    ProviderRateLimited,
    /// The provider did not answer in time.
    ProviderTimeout,
    /// The provider could not be reached.
    ProviderUnavailable,
    /// The provider rejected the request.
    ProviderBadRequest,
    /// The provider answered with something unusable.
    ProviderBadResponse,
    /// A store could not be reached.
    StoreUnavailable,
    /// The server is shutting down (`/ready` while draining); send requests to another replica.
    Draining,
    /// The request took longer than the configured timeout.
    RequestTimeout,
    /// The request body did not arrive within `server.body_read_timeout_secs` (408).
    RequestBodyTimeout,
    /// Something unexpected failed; the log has the details under the request id.
    InternalError,
    /// A feature of Mem0's API this server does not have (501); `details.feature` names it.
    NotImplemented,
    /// No such job (or not the caller's).
    JobNotFound,
    /// No such webhook in the tenant.
    WebhookNotFound,
    /// An import file is malformed (a line that is not JSON or not of the format, no header, no
    /// end line, a wrong count); `details.line` names the line. Memories of the lines before it
    /// were stored (`details.imported`): an import is idempotent, so fix the file and send it again.
    InvalidImport,
}

impl ErrorCode {
    /// The code as it appears in bodies (`memory_not_found`).
    pub fn name(self) -> String {
        serde_json::to_value(self).ok().and_then(|value| value.as_str().map(str::to_owned)).unwrap_or_default()
    }

    /// The one status each code is answered with.
    pub fn status(self) -> StatusCode {
        match self {
            Self::ValidationFailed
            | Self::InvalidJson
            | Self::InvalidQuery
            | Self::InvalidMemoryId
            | Self::UnsupportedFilterOperator
            | Self::ConfigurationRejected
            | Self::PolicyRejected
            | Self::InvalidImport
            | Self::LlmNotConfigured => StatusCode::BAD_REQUEST,
            Self::Unauthenticated => StatusCode::UNAUTHORIZED,
            Self::Forbidden | Self::HostNotAllowed | Self::CrossSiteRequest => StatusCode::FORBIDDEN,
            Self::MemoryNotFound
            | Self::RouteNotFound
            | Self::ApiKeyNotFound
            | Self::JobNotFound
            | Self::WebhookNotFound => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::RequestBodyTimeout => StatusCode::REQUEST_TIMEOUT,
            Self::Conflict | Self::IdempotencyKeyInProgress => StatusCode::CONFLICT,
            Self::IdempotencyKeyReused => StatusCode::UNPROCESSABLE_ENTITY,
            Self::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            Self::InternalError => StatusCode::INTERNAL_SERVER_ERROR,
            Self::NotImplemented => StatusCode::NOT_IMPLEMENTED,
            Self::ProviderAuthFailed | Self::ProviderBadRequest | Self::ProviderBadResponse => StatusCode::BAD_GATEWAY,
            Self::ProviderRateLimited | Self::ProviderUnavailable | Self::StoreUnavailable | Self::Draining => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Self::ProviderTimeout | Self::RequestTimeout => StatusCode::GATEWAY_TIMEOUT,
        }
    }
}

/// The body of every error response.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorBody {
    /// Stable machine-readable code.
    pub code: ErrorCode,
    /// Human-readable explanation.
    pub message: String,
    /// The request id, also in the `X-Request-ID` header.
    pub request_id: String,
    /// Structured context, e.g. `{"field": "user_id"}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub details: Option<serde_json::Value>,
}

/// An error on its way to becoming a response.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: ErrorCode,
    message: String,
    details: Option<serde_json::Value>,
    retry_after: Option<Duration>,
}

impl ApiError {
    /// Builds an error with a code (its status comes from [`ErrorCode::status`]) and a message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self { status: code.status(), code, message: message.into(), details: None, retry_after: None }
    }

    /// A validation error naming `field`.
    pub fn validation(field: &str, message: impl std::fmt::Display) -> Self {
        let mut error = Self::new(ErrorCode::ValidationFailed, format!("invalid {field}: {message}"));
        error.details = Some(serde_json::json!({ "field": field }));
        error
    }

    /// Adds structured context (`details`).
    #[must_use]
    pub fn with_details(mut self, details: serde_json::Value) -> Self {
        self.details = Some(details);
        self
    }

    /// Adds a `Retry-After` header.
    #[must_use]
    pub fn with_retry_after(mut self, retry_after: Duration) -> Self {
        self.retry_after = Some(retry_after);
        self
    }

    /// The error's code.
    pub fn code(&self) -> ErrorCode {
        self.code
    }

    /// The error's code, as it appears in the body (`memory_not_found`).
    pub fn code_name(&self) -> String {
        self.code.name()
    }

    /// The error's message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Returns the status this error answers with.
    pub fn status(&self) -> StatusCode {
        self.status
    }
}

impl From<CoreError> for ApiError {
    fn from(error: CoreError) -> Self {
        match error {
            CoreError::Validation { field, message } => Self::validation(&field, message),
            CoreError::UnsupportedOperator { operator } => {
                let mut api = Self::new(ErrorCode::UnsupportedFilterOperator,
                    format!("unsupported filter operator `{operator}`; use one of eq, ne, gt, gte, lt, lte, in, nin, contains, icontains"),
                );
                api.details = Some(serde_json::json!({ "field": "filters", "operator": operator }));
                api
            }
            CoreError::MemoryNotFound { id } => Self::new(ErrorCode::MemoryNotFound, format!("memory {id} not found")),
            CoreError::Forbidden(message) => Self::new(ErrorCode::Forbidden, message),
            CoreError::Conflict(message) => Self::new(ErrorCode::Conflict, message),
            CoreError::PolicyRejected { field, rule } => {
                let mut api = Self::new(
                    ErrorCode::PolicyRejected,
                    format!("{field} matches the write policy rule `{rule}`; nothing was stored"),
                );
                api.details = Some(serde_json::json!({ "field": field, "rule": rule }));
                api
            }
            CoreError::ApiKeyNotFound { id } => Self::new(ErrorCode::ApiKeyNotFound, format!("api key {id} not found")),
            CoreError::LlmNotConfigured => {
                Self::new(ErrorCode::LlmNotConfigured, CoreError::LlmNotConfigured.to_string())
            }
            CoreError::Provider(provider) => {
                let code = match provider.kind {
                    ProviderErrorKind::AuthFailed => ErrorCode::ProviderAuthFailed,
                    ProviderErrorKind::RateLimited => ErrorCode::ProviderRateLimited,
                    ProviderErrorKind::Timeout => ErrorCode::ProviderTimeout,
                    ProviderErrorKind::Unavailable => ErrorCode::ProviderUnavailable,
                    ProviderErrorKind::BadRequest => ErrorCode::ProviderBadRequest,
                    ProviderErrorKind::BadResponse => ErrorCode::ProviderBadResponse,
                };
                tracing::warn!(provider = %provider.provider, kind = provider.kind.code(), error = %provider.message, "provider call failed");
                let mut api = Self::new(code, provider.to_string());
                api.retry_after = provider
                    .retry_after
                    .or((provider.kind == ProviderErrorKind::RateLimited).then_some(Duration::from_secs(1)));
                api
            }
            CoreError::StoreUnavailable(message) => {
                tracing::error!(error = %message, "store unavailable");
                let mut api = Self::new(ErrorCode::StoreUnavailable, "a store is unavailable; try again shortly");
                api.retry_after = Some(Duration::from_secs(1));
                api
            }
            CoreError::Config(message) | CoreError::Internal(message) => {
                tracing::error!(error = %message, "internal error");
                Self::new(ErrorCode::InternalError, "internal error; see the server log for this request id")
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            code: self.code,
            message: self.message,
            request_id: current_request_id(),
            details: self.details,
        };
        let challenge = self.code == ErrorCode::Unauthenticated;
        let mut response = (self.status, axum::Json(body)).into_response();
        if challenge {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"mem0\", Token"));
        }
        if let Some(retry_after) = self.retry_after {
            let seconds = retry_after.as_secs().max(1).to_string();
            if let Ok(value) = HeaderValue::from_str(&seconds) {
                response.headers_mut().insert(header::RETRY_AFTER, value);
            }
        }
        response
    }
}

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> Self {
        Self::new(ErrorCode::InvalidMemoryId, rejection.body_text())
    }
}

/// `Json` whose rejections use the error envelope. A body that is not JSON at all is
/// `invalid_json`; JSON of the wrong shape (a missing field, a wrong type, a number out of its
/// type's range, an unknown field) is `validation_failed` with `details.field` naming the field,
/// like every other bad value.
#[derive(Debug, Clone, Copy, Default)]
pub struct AppJson<T>(pub T);

impl<T, S> FromRequest<S> for AppJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        if !json_content_type(request.headers()) {
            return Err(Self::Rejection::new(
                ErrorCode::UnsupportedMediaType,
                "expected a body with content-type application/json",
            ));
        }
        let bytes = axum::body::Bytes::from_request(request, state).await.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(ErrorCode::PayloadTooLarge, "request body is larger than the configured limit")
            } else {
                ApiError::new(ErrorCode::InvalidJson, rejection.body_text())
            }
        })?;
        let mut deserializer = serde_json::Deserializer::from_slice(&bytes);
        let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
            let field = error_field(&error.path().to_string(), &error.inner().to_string());
            shape_error(error.inner().classify(), field, error.inner())
        })?;
        deserializer.end().map_err(|error| shape_error(error.classify(), None, &error))?;
        Ok(Self(value))
    }
}

fn json_content_type(headers: &axum::http::HeaderMap) -> bool {
    let Some(value) = headers.get(header::CONTENT_TYPE).and_then(|value| value.to_str().ok()) else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// The field a deserialisation error is about: the path where it happened, extended by the
/// field a "missing field", "unknown field" or "field `x`: …" message names.
fn error_field(path: &str, message: &str) -> Option<String> {
    let named = ["missing field `", "unknown field `"]
        .iter()
        .find_map(|prefix| message.find(prefix).map(|start| start + prefix.len()))
        // What `routes::ScopeIds` says of its own fields: "field `user_id`: …".
        .or_else(|| message.starts_with("field `").then_some("field `".len()))
        .and_then(|start| Some(message[start..message[start..].find('`')? + start].to_owned()));
    let path = (path != ".").then(|| path.to_owned());
    match (path, named) {
        (Some(path), Some(named)) if path == named || path.ends_with(&format!(".{named}")) => Some(path),
        (Some(path), Some(named)) => Some(format!("{path}.{named}")),
        (path, named) => path.or(named),
    }
}

fn shape_error(category: serde_json::error::Category, field: Option<String>, error: &serde_json::Error) -> ApiError {
    // serde_json appends " at line L column C"; the field says more to a caller than the position.
    let text = error.to_string();
    let detail = text.rsplit_once(" at line ").map_or(text.as_str(), |(detail, _)| detail);
    match (category, field) {
        (serde_json::error::Category::Data, Some(field)) => ApiError::validation(&field, detail),
        (serde_json::error::Category::Data, None) => {
            ApiError::new(ErrorCode::ValidationFailed, format!("invalid body: {detail}"))
        }
        _ => ApiError::new(ErrorCode::InvalidJson, format!("the body is not valid JSON: {text}")),
    }
}

impl<T: Serialize> IntoResponse for AppJson<T> {
    fn into_response(self) -> Response {
        axum::Json(self.0).into_response()
    }
}

/// `Query` whose rejections use the error envelope.
#[derive(Debug, Clone, Copy, Default)]
pub struct AppQuery<T>(pub T);

impl<T, S> FromRequestParts<S> for AppQuery<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let query = parts.uri.query().unwrap_or_default();
        let deserializer = serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
        serde_path_to_error::deserialize(deserializer).map(Self).map_err(|error| {
            let message = error.inner().to_string();
            match error_field(&error.path().to_string(), &message) {
                Some(field) => ApiError::validation(&field, message),
                None => ApiError::new(ErrorCode::InvalidQuery, format!("invalid query string: {message}")),
            }
        })
    }
}

/// Parses a memory id from the path.
///
/// # Errors
/// 400 `invalid_memory_id` when it is not a UUID.
pub fn parse_memory_id(raw: &str) -> Result<uuid::Uuid, ApiError> {
    uuid::Uuid::parse_str(raw).map_err(|_| {
        let mut error = ApiError::new(
            ErrorCode::InvalidMemoryId,
            format!("invalid memory_id `{}`: expected a UUID", raw.chars().take(64).collect::<String>()),
        );
        error.details = Some(serde_json::json!({ "field": "memory_id" }));
        error
    })
}

/// `Path` whose rejections use the error envelope.
#[derive(Debug, Clone, Copy, Default)]
pub struct AppPath<T>(pub T);

impl<T, S> FromRequestParts<S> for AppPath<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let axum::extract::Path(value) = axum::extract::Path::<T>::from_request_parts(parts, state).await?;
        Ok(Self(value))
    }
}
