//! The request log: one row per handled request (method, route template, status, latency,
//! principal, tenant) in the SQLite history volume, written by a background task in batches so
//! the request path never waits for it, and pruned after the retention period.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use mem0_core::history::{RequestLog, RequestLogEntry};
use serde::Deserialize;
use tokio::sync::{mpsc, oneshot};

/// Request log settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestLogSettings {
    /// Record requests at all.
    pub enabled: bool,
    /// Days entries are kept.
    pub retention_days: u32,
}

/// Largest number of entries waiting to be written; beyond it entries are dropped (and counted).
const QUEUE: usize = 10_000;
/// Most entries written in one transaction.
const BATCH: usize = 500;

/// What the writer task receives.
#[derive(Debug)]
enum Command {
    /// Write this entry.
    Record(RequestLogEntry),
    /// Answer once everything queued before has been written.
    Flush(oneshot::Sender<()>),
}

/// Hands entries to the writer task.
#[derive(Debug, Clone)]
pub struct RequestLogWriter {
    sender: Option<mpsc::Sender<Command>>,
    dropped: Arc<AtomicU64>,
}

impl RequestLogWriter {
    /// A writer that records nothing.
    pub fn disabled() -> Self {
        Self { sender: None, dropped: Arc::default() }
    }

    /// Starts the writer and the pruning task.
    pub fn spawn(log: RequestLog, settings: &RequestLogSettings) -> Self {
        if !settings.enabled {
            return Self::disabled();
        }
        let (sender, mut receiver) = mpsc::channel::<Command>(QUEUE);
        let writer_log = log.clone();
        tokio::spawn(async move {
            let mut commands = Vec::with_capacity(BATCH);
            let mut batch = Vec::with_capacity(BATCH);
            while receiver.recv_many(&mut commands, BATCH).await > 0 {
                let mut flushed = Vec::new();
                for command in commands.drain(..) {
                    match command {
                        Command::Record(entry) => batch.push(entry),
                        Command::Flush(done) => flushed.push(done),
                    }
                }
                if !batch.is_empty() {
                    if let Err(error) = writer_log.append(&batch).await {
                        tracing::warn!(%error, entries = batch.len(), "could not write the request log");
                    }
                    batch.clear();
                }
                for done in flushed {
                    let _ = done.send(());
                }
            }
        });
        let retention = chrono::Duration::days(i64::from(settings.retention_days.max(1)));
        tokio::spawn(async move {
            let mut every_hour = tokio::time::interval(Duration::from_secs(3600));
            loop {
                every_hour.tick().await;
                match log.prune(Utc::now() - retention).await {
                    Ok(0) => {}
                    Ok(pruned) => tracing::info!(pruned, "pruned the request log"),
                    Err(error) => tracing::warn!(%error, "could not prune the request log"),
                }
            }
        });
        Self { sender: Some(sender), dropped: Arc::default() }
    }

    /// Waits until every entry queued before this call has been written (or failed to be).
    pub async fn flush(&self) {
        let Some(sender) = &self.sender else { return };
        let (done, written) = oneshot::channel();
        if sender.send(Command::Flush(done)).await.is_ok() {
            let _ = written.await;
        }
    }

    /// Queues one entry without waiting.
    pub fn record(&self, entry: RequestLogEntry) {
        let Some(sender) = &self.sender else { return };
        if sender.try_send(Command::Record(entry)).is_err() {
            let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if dropped.is_power_of_two() {
                tracing::warn!(dropped, "request log queue full: entries dropped");
            }
        }
    }
}
