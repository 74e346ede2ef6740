//! Rate limits with `governor`, keyed by principal (by client address for requests without valid
//! credentials), per route class. The clock is injectable so tests advance time instead of
//! sleeping.

use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::time::Duration;

use axum::http::HeaderMap;
use governor::clock::{Clock, DefaultClock};
use governor::middleware::StateInformationMiddleware;
use governor::state::keyed::DashMapStateStore;
use governor::{Quota, RateLimiter};
use serde::Deserialize;

/// Rate-limit settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitSettings {
    /// Switch limits off entirely.
    pub enabled: bool,
    /// Reads (get, list, search, history) per principal per minute.
    pub read_per_minute: u32,
    /// Writes (add, update, delete) per principal per minute.
    pub write_per_minute: u32,
    /// Administrative calls per principal per minute.
    pub admin_per_minute: u32,
    /// Requests per client address per minute without valid credentials (and to open routes).
    pub open_per_minute: u32,
    /// Proxies whose `X-Forwarded-For` is believed (exact addresses).
    #[serde(default)]
    pub trusted_proxies: Vec<IpAddr>,
}

/// The class of a route, each with its own quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RouteClass {
    /// Reading memories.
    Read,
    /// Changing memories.
    Write,
    /// Keys, entities, request log, reset.
    Admin,
    /// Health and docs, and failed authentication on any route (both per client address).
    Open,
}

/// The outcome of a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Go ahead; `remaining` requests are left in the current burst.
    Allowed {
        /// Requests per minute of this class.
        limit: u32,
        /// What is left right now.
        remaining: u32,
    },
    /// Too many; try again after `retry_after`.
    Limited {
        /// Requests per minute of this class.
        limit: u32,
        /// When the next request will be allowed.
        retry_after: Duration,
    },
}

type Limiter<C> = RateLimiter<String, DashMapStateStore<String>, C, StateInformationMiddleware>;

/// A limiter per route class.
#[derive(Debug)]
pub struct RateLimits<C: Clock = DefaultClock> {
    clock: C,
    classes: Vec<(RouteClass, u32, Limiter<C>)>,
}

/// Object-safe view used by the server state.
pub trait Limits: std::fmt::Debug + Send + Sync {
    /// Checks one request of `class` by `key`.
    fn check(&self, class: RouteClass, key: &str) -> Decision;
    /// Forgets keys that are back at full capacity (bounds memory).
    fn housekeeping(&self);
}

impl<C> RateLimits<C>
where
    C: Clock + Clone + std::fmt::Debug + Send + Sync,
{
    /// Builds the limiters with `clock`.
    pub fn with_clock(settings: &RateLimitSettings, clock: C) -> Self {
        let quota = |per_minute: u32| Quota::per_minute(NonZeroU32::new(per_minute.max(1)).unwrap_or(NonZeroU32::MIN));
        let classes = [
            (RouteClass::Read, settings.read_per_minute),
            (RouteClass::Write, settings.write_per_minute),
            (RouteClass::Admin, settings.admin_per_minute),
            (RouteClass::Open, settings.open_per_minute),
        ]
        .into_iter()
        .map(|(class, per_minute)| {
            let limiter = RateLimiter::dashmap_with_clock(quota(per_minute), clock.clone())
                .with_middleware::<StateInformationMiddleware>();
            (class, per_minute.max(1), limiter)
        })
        .collect();
        Self { clock, classes }
    }
}

impl<C> Limits for RateLimits<C>
where
    C: Clock + Clone + std::fmt::Debug + Send + Sync,
{
    fn check(&self, class: RouteClass, key: &str) -> Decision {
        let Some((_, limit, limiter)) = self.classes.iter().find(|(candidate, _, _)| *candidate == class) else {
            return Decision::Allowed { limit: 0, remaining: 0 };
        };
        match limiter.check_key(&key.to_owned()) {
            Ok(snapshot) => Decision::Allowed { limit: *limit, remaining: snapshot.remaining_burst_capacity() },
            Err(not_until) => {
                Decision::Limited { limit: *limit, retry_after: not_until.wait_time_from(self.clock.now()) }
            }
        }
    }

    fn housekeeping(&self) {
        for (_, _, limiter) in &self.classes {
            limiter.retain_recent();
            limiter.shrink_to_fit();
        }
    }
}

/// Returns the client address: the peer, or, when the peer is a trusted proxy, the right-most
/// address in `X-Forwarded-For` that is not itself a trusted proxy.
pub fn client_ip(peer: Option<SocketAddr>, headers: &HeaderMap, trusted: &[IpAddr]) -> Option<IpAddr> {
    let peer_ip = peer.map(|peer| peer.ip())?;
    if !trusted.contains(&peer_ip) {
        return Some(peer_ip);
    }
    let forwarded = headers.get_all("x-forwarded-for").iter().filter_map(|value| value.to_str().ok());
    let hops: Vec<IpAddr> =
        forwarded.flat_map(|value| value.split(',')).filter_map(|hop| hop.trim().parse().ok()).collect();
    hops.into_iter().rev().find(|hop| !trusted.contains(hop)).or(Some(peer_ip))
}

#[cfg(test)]
mod tests {
    use governor::clock::FakeRelativeClock;

    use super::*;

    fn settings(per_minute: u32) -> RateLimitSettings {
        RateLimitSettings {
            enabled: true,
            read_per_minute: per_minute,
            write_per_minute: per_minute,
            admin_per_minute: 1,
            open_per_minute: per_minute,
            trusted_proxies: vec![],
        }
    }

    #[test]
    fn limits_per_key_and_recovers_with_time() {
        let clock = FakeRelativeClock::default();
        let limits = RateLimits::with_clock(&settings(3), clock.clone());
        for remaining in [2, 1, 0] {
            assert_eq!(limits.check(RouteClass::Read, "key:a"), Decision::Allowed { limit: 3, remaining });
        }
        let Decision::Limited { retry_after, .. } = limits.check(RouteClass::Read, "key:a") else {
            panic!("fourth request in a minute must be limited");
        };
        assert!(retry_after > Duration::ZERO && retry_after <= Duration::from_secs(20), "{retry_after:?}");
        assert!(matches!(limits.check(RouteClass::Read, "key:b"), Decision::Allowed { .. }), "other keys unaffected");
        assert!(
            matches!(limits.check(RouteClass::Write, "key:a"), Decision::Allowed { .. }),
            "other classes unaffected"
        );
        clock.advance(retry_after);
        assert!(matches!(limits.check(RouteClass::Read, "key:a"), Decision::Allowed { .. }));
        clock.advance(Duration::from_secs(60));
        limits.housekeeping();
        assert_eq!(limits.check(RouteClass::Read, "key:a"), Decision::Allowed { limit: 3, remaining: 2 });
    }

    #[test]
    fn forwarded_for_is_believed_only_from_trusted_proxies() {
        let proxy: IpAddr = "10.0.0.1".parse().expect("ip");
        let mut headers = HeaderMap::new();
        headers.insert("x-forwarded-for", "203.0.113.9, 198.51.100.7, 10.0.0.1".parse().expect("header"));
        let from_proxy = Some(SocketAddr::new(proxy, 4000));
        assert_eq!(client_ip(from_proxy, &headers, &[proxy]), "198.51.100.7".parse().ok());
        let direct = Some(SocketAddr::new("192.0.2.5".parse().expect("ip"), 4000));
        assert_eq!(client_ip(direct, &headers, &[proxy]), "192.0.2.5".parse().ok(), "spoofed header ignored");
    }
}
