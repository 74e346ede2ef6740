//! Defences against web pages the developer visits: DNS rebinding and cross-site requests.
//!
//! With authentication disabled (local development, the default on loopback) the server trusts
//! every request, so a page on another site must not be able to reach it through the browser:
//! - **Host allow list.** A rebound name (`attacker.example` resolving to 127.0.0.1) reaches the
//!   server with its own name in `Host`. Only loopback names and addresses (`localhost`,
//!   `*.localhost`, `127.0.0.0/8`, `::1`) and `server.allowed_hosts` are answered. The list also
//!   applies with authentication on, when it is configured.
//! - **Cross-site writes.** A state-changing request (anything but GET, HEAD, OPTIONS) is refused
//!   when the browser says it comes from another site (`Sec-Fetch-Site` other than `same-origin`
//!   or `none`), when its `Origin` is not the server's own, or when it carries a form content
//!   type (an HTML form can post `application/x-www-form-urlencoded`, `multipart/form-data` and
//!   `text/plain` without asking; the API only reads JSON). curl and SDKs send none of these.

use std::net::IpAddr;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::{ApiError, ErrorCode};

/// What the middleware checks.
#[derive(Debug, Clone)]
pub struct BrowserGuard {
    /// Authentication is disabled: cross-site checks apply, and the Host check always applies.
    pub auth_disabled: bool,
    /// Host names (lower case, without port) answered besides loopback ones.
    pub allowed_hosts: Vec<String>,
}

impl BrowserGuard {
    /// Builds the guard; host names are matched case-insensitively, with or without a port.
    pub fn new(auth_disabled: bool, allowed_hosts: &[String]) -> Self {
        Self {
            auth_disabled,
            allowed_hosts: allowed_hosts.iter().map(|host| host.trim().to_ascii_lowercase()).collect(),
        }
    }

    /// Returns the refusal for a request with these method and headers, if any.
    pub fn check(&self, method: &Method, authority: Option<&str>, headers: &HeaderMap) -> Option<ApiError> {
        if self.auth_disabled || !self.allowed_hosts.is_empty() {
            // Every browser sends a Host; without one (or with one that is not text) the request
            // is refused rather than waved through.
            if authority.is_none() && self.auth_disabled {
                return Some(ApiError::new(ErrorCode::HostNotAllowed, "a Host header naming this server is required"));
            }
            if let Some(authority) = authority {
                if !self.host_allowed(authority) {
                    return Some(ApiError::new(
                        ErrorCode::HostNotAllowed,
                        format!(
                            "host `{}` is not served here; use a loopback address, or add the name to \
                             server.allowed_hosts",
                            authority.chars().take(100).collect::<String>()
                        ),
                    ));
                }
            }
        }
        if !self.auth_disabled || matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
            return None;
        }
        let text = |name: header::HeaderName| headers.get(name).and_then(|value| value.to_str().ok());
        if let Some(site) = text(header::HeaderName::from_static("sec-fetch-site")) {
            if !matches!(site.trim().to_ascii_lowercase().as_str(), "same-origin" | "none") {
                return Some(ApiError::new(
                    ErrorCode::CrossSiteRequest,
                    format!("a {site} request cannot change anything while authentication is disabled"),
                ));
            }
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let same =
                origin.to_str().ok().zip(authority).is_some_and(|(origin, authority)| same_origin(origin, authority));
            if !same {
                return Some(ApiError::new(
                    ErrorCode::CrossSiteRequest,
                    "requests from another origin cannot change anything while authentication is disabled",
                ));
            }
        }
        if let Some(content_type) = text(header::CONTENT_TYPE) {
            let essence = content_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
            if matches!(essence.as_str(), "application/x-www-form-urlencoded" | "multipart/form-data" | "text/plain") {
                return Some(ApiError::new(
                    ErrorCode::CrossSiteRequest,
                    format!("`{essence}` bodies are what HTML forms send; send JSON (or no body) instead"),
                ));
            }
        }
        None
    }

    fn host_allowed(&self, authority: &str) -> bool {
        let host = host_of(authority);
        is_loopback_name(&host) || self.allowed_hosts.contains(&host)
    }
}

/// The host of an authority (`name:port`, `[v6]:port`, `name`), lower case, without port or brackets.
fn host_of(authority: &str) -> String {
    let authority = authority.trim().to_ascii_lowercase();
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or_default().to_owned();
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|byte| byte.is_ascii_digit()) => host.to_owned(),
        _ => authority,
    }
    .trim_end_matches('.')
    .to_owned()
}

fn is_loopback_name(host: &str) -> bool {
    if host == "localhost" || host.ends_with(".localhost") {
        return true;
    }
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V4(v4)) => v4.is_loopback(),
        Ok(IpAddr::V6(v6)) => v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
        Err(_) => false,
    }
}

/// True when `origin` (`scheme://host[:port]`) names the same host and port as `authority`.
fn same_origin(origin: &str, authority: &str) -> bool {
    let Ok(origin) = url::Url::parse(origin) else { return false };
    let Some(origin_host) = origin.host_str() else { return false };
    let origin_port = origin.port_or_known_default();
    let (host, port) = split_authority(authority);
    host_of(origin_host) == host && origin_port == port.or(origin_port)
}

fn split_authority(authority: &str) -> (String, Option<u16>) {
    let host = host_of(authority);
    let port = authority.trim().rsplit_once(':').and_then(|(_, port)| port.parse::<u16>().ok());
    // `[::1]` alone has colons but no port.
    let port = if authority.trim().ends_with(']') { None } else { port };
    (host, port)
}

/// Middleware: refuse requests the [`BrowserGuard`] says no to.
pub async fn guard(State(guard): State<BrowserGuard>, request: Request, next: Next) -> Response {
    let authority = request
        .headers()
        .get(header::HOST)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
        .or_else(|| request.uri().authority().map(ToString::to_string));
    match guard.check(request.method(), authority.as_deref(), request.headers()) {
        Some(refused) => {
            tracing::warn!(host = ?authority, method = %request.method(), "refused a browser request");
            refused.into_response()
        }
        None => next.run(request).await,
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).expect("header"));
        }
        map
    }

    #[test]
    fn loopback_hosts_pass_and_rebound_names_do_not() {
        let local = BrowserGuard::new(true, &[]);
        for host in ["127.0.0.1:8000", "localhost:8000", "LOCALHOST", "app.localhost:3000", "[::1]:8000", "127.1.2.3"] {
            assert!(local.check(&Method::GET, Some(host), &HeaderMap::new()).is_none(), "{host}");
        }
        for host in ["rebind.attacker.example:8000", "192.168.1.5:8000", "localhost.attacker.example", "[::2]:80"] {
            assert!(local.check(&Method::GET, Some(host), &HeaderMap::new()).is_some(), "{host}");
        }
        let listed = BrowserGuard::new(true, &["mem0.internal".to_owned()]);
        assert!(listed.check(&Method::GET, Some("MEM0.internal:8000"), &HeaderMap::new()).is_none());
        assert!(local.check(&Method::GET, None, &HeaderMap::new()).is_some(), "no Host: refused");
        let production = BrowserGuard::new(false, &[]);
        assert!(production.check(&Method::POST, Some("mem0.example.com"), &HeaderMap::new()).is_none());
        let pinned = BrowserGuard::new(false, &["mem0.example.com".to_owned()]);
        assert!(pinned.check(&Method::GET, Some("evil.example"), &HeaderMap::new()).is_some());
    }

    #[test]
    fn cross_site_writes_are_refused_without_auth() {
        let local = BrowserGuard::new(true, &[]);
        let host = Some("127.0.0.1:8000");
        let refused = [
            headers(&[("sec-fetch-site", "cross-site")]),
            headers(&[("sec-fetch-site", "same-site")]),
            headers(&[("origin", "https://attacker.example")]),
            headers(&[("origin", "null")]),
            headers(&[("origin", "http://localhost:8000")]),
            headers(&[("origin", "http://127.0.0.1:9999")]),
            headers(&[("content-type", "application/x-www-form-urlencoded")]),
            headers(&[("content-type", "text/plain;charset=UTF-8")]),
            headers(&[("content-type", "multipart/form-data; boundary=x")]),
        ];
        for headers in &refused {
            assert!(local.check(&Method::POST, host, headers).is_some(), "{headers:?}");
            assert!(local.check(&Method::GET, host, headers).is_none(), "reads stay open: {headers:?}");
        }
        let allowed = [
            HeaderMap::new(),
            headers(&[("content-type", "application/json")]),
            headers(&[("origin", "http://127.0.0.1:8000"), ("sec-fetch-site", "same-origin")]),
            headers(&[("sec-fetch-site", "none")]),
        ];
        for headers in &allowed {
            assert!(local.check(&Method::DELETE, host, headers).is_none(), "{headers:?}");
        }
        // With authentication the credential is a header a foreign page cannot attach.
        let production = BrowserGuard::new(false, &[]);
        assert!(production.check(&Method::POST, host, &refused[2]).is_none());
    }

    #[test]
    fn origins_compare_host_and_port() {
        assert!(same_origin("http://127.0.0.1:8000", "127.0.0.1:8000"));
        assert!(same_origin("http://localhost", "localhost:80"));
        assert!(same_origin("https://mem0.example.com", "mem0.example.com"));
        assert!(same_origin("http://[::1]:8000", "[::1]:8000"));
        assert!(!same_origin("http://127.0.0.1:8001", "127.0.0.1:8000"));
        assert!(!same_origin("http://evil.example:8000", "127.0.0.1:8000"));
        assert!(!same_origin("null", "127.0.0.1:8000"));
    }
}
