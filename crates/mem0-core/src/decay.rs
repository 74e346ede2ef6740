//! Decay by use: memories that are read stay strong, memories nobody has read for long fade. Reads
//! (a memory fetched by id, or returned by a search; listing does not count) are reported to a
//! [`ReadSink`] on the request path and written in batches elsewhere ([`crate::store::AccessLog`]);
//! a search that asks for decay (or whose tenant has it on) multiplies each fused score by
//! [`factor`] of the memory's idle time, shown as `explain.decay_factor`.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Strongest multiplier: a memory read a moment ago.
pub const MAX_FACTOR: f32 = 1.5;
/// Weakest multiplier: a memory idle for very long.
pub const MIN_FACTOR: f32 = 0.3;

/// Decay settings (`memory.decay`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecayConfig {
    /// Tenants whose searches apply decay unless a request says otherwise; `"*"` for every
    /// tenant. Empty (the default): only requests with `decay: true`.
    #[serde(default)]
    pub tenants: Vec<String>,
    /// Days of idleness over which a memory's multiplier falls from 1.5 towards 0.3 (the time
    /// constant: after this many idle days it is about 0.74, after three times as many 0.36).
    #[serde(default = "default_idle_days")]
    pub idle_days: f64,
}

fn default_idle_days() -> f64 {
    30.0
}

impl Default for DecayConfig {
    fn default() -> Self {
        Self { tenants: Vec::new(), idle_days: default_idle_days() }
    }
}

impl DecayConfig {
    /// Checks the settings.
    ///
    /// # Errors
    /// A message naming the bad key under `prefix`.
    pub fn validate(&self, prefix: &str) -> Result<(), String> {
        if !(self.idle_days.is_finite() && self.idle_days >= 1.0 && self.idle_days <= 3650.0) {
            return Err(format!("{prefix}.idle_days must be between 1 and 3650"));
        }
        Ok(())
    }

    /// True when searches of `tenant` apply decay by default.
    pub fn applies_to(&self, tenant: &str) -> bool {
        self.tenants.iter().any(|listed| listed == "*" || listed == tenant)
    }
}

/// The multiplier of a memory idle for `idle_days` (since its last read, or since it was stored
/// when never read): `0.3 + 1.2 · e^(−idle/idle_days)`, from 1.5 (just read) down to 0.3.
pub fn factor(idle_days: f64, time_constant_days: f64) -> f32 {
    let idle = idle_days.max(0.0);
    let strength = (-idle / time_constant_days.max(1.0)).exp();
    (f64::from(MIN_FACTOR) + f64::from(MAX_FACTOR - MIN_FACTOR) * strength) as f32
}

/// One read of a memory.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryRead {
    /// The memory's tenant.
    pub tenant: String,
    /// The memory.
    pub memory_id: Uuid,
    /// When it was read.
    pub at: DateTime<Utc>,
}

/// Where the service reports reads. `record` is called on the request path: it must not wait.
pub trait ReadSink: Send + Sync + fmt::Debug {
    /// Takes the reads of one operation.
    fn record(&self, reads: Vec<MemoryRead>);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_factor_falls_from_one_and_a_half_to_a_third() {
        assert!((factor(0.0, 30.0) - 1.5).abs() < 1e-6);
        assert!((factor(30.0, 30.0) - 0.741).abs() < 1e-3);
        assert!((factor(90.0, 30.0) - 0.360).abs() < 1e-3);
        assert!((factor(10_000.0, 30.0) - 0.3).abs() < 1e-6);
        assert!((factor(-5.0, 30.0) - 1.5).abs() < 1e-6, "a read in the future counts as now");
    }

    #[test]
    fn tenants_opt_in() {
        let config = DecayConfig { tenants: vec!["acme".into()], ..DecayConfig::default() };
        assert!(config.applies_to("acme") && !config.applies_to("globex"));
        assert!(DecayConfig { tenants: vec!["*".into()], ..DecayConfig::default() }.applies_to("globex"));
        assert!(!DecayConfig::default().applies_to("acme"));
        assert!(DecayConfig { idle_days: 0.5, ..DecayConfig::default() }.validate("memory.decay").is_err());
    }
}
