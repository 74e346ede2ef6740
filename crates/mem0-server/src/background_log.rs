//! Logs written off the request path: the request log (one row per handled request), the audit
//! trail (one row per memory read or changed, and each write-policy decision) and the read log
//! (when each memory was last read, for decay by use). A request
//! only queues its entries; a background task per log writes them in batches and prunes entries
//! older than the retention period once an hour.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use mem0_core::decay::{MemoryRead, ReadSink};
use mem0_core::history::{
    AuditEntry, AuditEvent, AuditLog, AuditSink, LlmCall, RequestLog, RequestLogEntry, UsageLog, UsageSink,
};
use mem0_core::store::VectorStore;
use serde::Deserialize;
use tokio::sync::{mpsc, oneshot};

use crate::request_context::current_request_id;

/// Settings of a log kept for a while (`request_log`, `audit`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetainedLogSettings {
    /// Record at all.
    pub enabled: bool,
    /// Days entries are kept.
    pub retention_days: u32,
}

/// A log the writer task appends to and prunes.
pub trait Sink: Clone + Send + Sync + 'static {
    /// One entry.
    type Entry: Send + Sync + 'static;
    /// Its name in log lines.
    const NAME: &'static str;
    /// Appends entries in one transaction.
    fn append(&self, entries: &[Self::Entry]) -> impl Future<Output = mem0_core::Result<()>> + Send;
    /// Deletes entries older than `cutoff`; returns how many.
    fn prune(&self, cutoff: DateTime<Utc>) -> impl Future<Output = mem0_core::Result<u64>> + Send;
}

impl Sink for RequestLog {
    type Entry = RequestLogEntry;
    const NAME: &'static str = "request log";

    fn append(&self, entries: &[RequestLogEntry]) -> impl Future<Output = mem0_core::Result<()>> + Send {
        RequestLog::append(self, entries)
    }

    fn prune(&self, cutoff: DateTime<Utc>) -> impl Future<Output = mem0_core::Result<u64>> + Send {
        RequestLog::prune(self, cutoff)
    }
}

impl Sink for AuditLog {
    type Entry = AuditEntry;
    const NAME: &'static str = "audit trail";

    fn append(&self, entries: &[AuditEntry]) -> impl Future<Output = mem0_core::Result<()>> + Send {
        AuditLog::append(self, entries)
    }

    fn prune(&self, cutoff: DateTime<Utc>) -> impl Future<Output = mem0_core::Result<u64>> + Send {
        AuditLog::prune(self, cutoff)
    }
}

/// The reads of memories, written to their store for decay by use (kept with the memory, never
/// pruned by age).
#[derive(Debug, Clone)]
pub struct StoreReads(pub Arc<dyn VectorStore>);

impl Sink for StoreReads {
    type Entry = MemoryRead;
    const NAME: &'static str = "read log";

    async fn append(&self, entries: &[MemoryRead]) -> mem0_core::Result<()> {
        self.0.record_reads(entries).await
    }

    fn prune(&self, _cutoff: DateTime<Utc>) -> impl Future<Output = mem0_core::Result<u64>> + Send {
        std::future::ready(Ok(0))
    }
}

/// Most queued calls (each with its entries) waiting to be written; beyond it they are dropped
/// (and counted, and logged).
const QUEUE: usize = 10_000;
/// Most entries written in one transaction.
const BATCH: usize = 500;
/// How long the writer gathers further calls after the first before writing (unless someone
/// waits for a flush or the batch is full). Under load this turns one transaction per search
/// into one per tenth of a second: measured with `cargo bench -p mem0-core --bench logging`,
/// a search's audit and reads cost the writer ~1.9 ms of CPU written one search at a time and
/// ~0.6 ms in batches of 25 searches, on SQLite and on Postgres.
const LINGER: Duration = Duration::from_millis(100);

/// Waits before the second, third and fourth try of a write that failed (a busy database under
/// load, a Postgres failover): about 3.5 s in all before the entries are given up.
const RETRY_DELAYS: [Duration; 3] = [Duration::from_millis(100), Duration::from_millis(400), Duration::from_secs(3)];

/// Writes `entries`, trying again after a failure; entries that still cannot be written are
/// dropped with a warning (the log must not hold up the server), counted in the message.
async fn append_with_retries<S: Sink>(log: &S, entries: &[S::Entry]) {
    let mut delays = RETRY_DELAYS.iter();
    loop {
        match log.append(entries).await {
            Ok(()) => return,
            Err(error) => match delays.next() {
                Some(delay) => {
                    tracing::debug!(%error, entries = entries.len(), "could not write the {}; trying again", S::NAME);
                    tokio::time::sleep(*delay).await;
                }
                None => {
                    tracing::warn!(%error, entries = entries.len(), "could not write the {}: entries dropped", S::NAME);
                    return;
                }
            },
        }
    }
}

/// What the writer task receives.
#[derive(Debug)]
enum Command<E> {
    /// Write these entries.
    Record(Vec<E>),
    /// Answer once everything queued before has been written.
    Flush(oneshot::Sender<()>),
}

/// Hands entries to the writer task of one log.
#[derive(Debug)]
pub struct LogWriter<S: Sink> {
    sender: Option<mpsc::Sender<Command<S::Entry>>>,
    dropped: Arc<AtomicU64>,
}

impl<S: Sink> Clone for LogWriter<S> {
    fn clone(&self) -> Self {
        Self { sender: self.sender.clone(), dropped: Arc::clone(&self.dropped) }
    }
}

/// The request log's writer.
pub type RequestLogWriter = LogWriter<RequestLog>;

impl<S: Sink> LogWriter<S> {
    /// A writer that records nothing.
    pub fn disabled() -> Self {
        Self { sender: None, dropped: Arc::default() }
    }

    /// Starts the writer and the pruning task (nothing when the settings disable the log).
    pub fn spawn(log: S, settings: &RetainedLogSettings) -> Self {
        if !settings.enabled {
            return Self::disabled();
        }
        let (sender, mut receiver) = mpsc::channel::<Command<S::Entry>>(QUEUE);
        let writer_log = log.clone();
        tokio::spawn(async move {
            let mut commands = Vec::with_capacity(BATCH);
            let mut batch = Vec::with_capacity(BATCH);
            while receiver.recv_many(&mut commands, BATCH).await > 0 {
                let gathered_until = tokio::time::Instant::now() + LINGER;
                while commands.len() < BATCH && !commands.iter().any(|command| matches!(command, Command::Flush(_))) {
                    let room = BATCH - commands.len();
                    let more = receiver.recv_many(&mut commands, room);
                    match tokio::time::timeout_at(gathered_until, more).await {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {}
                    }
                }
                let mut flushed = Vec::new();
                for command in commands.drain(..) {
                    match command {
                        Command::Record(entries) => batch.extend(entries),
                        Command::Flush(done) => flushed.push(done),
                    }
                }
                for chunk in batch.chunks(BATCH) {
                    append_with_retries(&writer_log, chunk).await;
                }
                batch.clear();
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
                    Ok(pruned) => tracing::info!(pruned, "pruned the {}", S::NAME),
                    Err(error) => tracing::warn!(%error, "could not prune the {}", S::NAME),
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
    pub fn record(&self, entry: S::Entry) {
        self.record_all(vec![entry]);
    }

    /// Queues the entries of one call without waiting.
    pub fn record_all(&self, entries: Vec<S::Entry>) {
        let Some(sender) = &self.sender else { return };
        let count = entries.len() as u64;
        if sender.try_send(Command::Record(entries)).is_err() {
            let before = self.dropped.fetch_add(count, Ordering::Relaxed);
            let after = before + count;
            // Each time the total passes a power of two: a full queue under load must not flood
            // the server's own log.
            if before == 0 || after.ilog2() > before.ilog2() {
                tracing::warn!(dropped = after, "{} queue full: entries dropped", S::NAME);
            }
        }
    }
}

/// The LLM token counters (kept; never pruned by age).
impl Sink for UsageLog {
    type Entry = LlmCall;
    const NAME: &'static str = "llm usage";

    fn append(&self, entries: &[LlmCall]) -> impl Future<Output = mem0_core::Result<()>> + Send {
        UsageLog::append(self, entries)
    }

    fn prune(&self, _cutoff: DateTime<Utc>) -> impl Future<Output = mem0_core::Result<u64>> + Send {
        std::future::ready(Ok(0))
    }
}

/// The token counters' writer: the [`UsageSink`] the memory service reports LLM calls to.
pub type UsageWriter = LogWriter<UsageLog>;

impl UsageSink for LogWriter<UsageLog> {
    fn record(&self, calls: Vec<LlmCall>) {
        self.record_all(calls);
    }
}

/// The read log's writer: the [`ReadSink`] the memory service reports to.
pub type ReadWriter = LogWriter<StoreReads>;

impl ReadSink for LogWriter<StoreReads> {
    fn record(&self, reads: Vec<MemoryRead>) {
        self.record_all(reads);
    }
}

/// The audit trail's writer: the [`AuditSink`] the memory service reports to. Each event gets
/// the time and the id of the request it happened in.
pub type AuditWriter = LogWriter<AuditLog>;

impl AuditSink for LogWriter<AuditLog> {
    fn record(&self, events: Vec<AuditEvent>) {
        let at = Utc::now();
        let request_id = Some(current_request_id()).filter(|id| id != "unknown");
        self.record_all(
            events
                .into_iter()
                .map(|event| AuditEntry {
                    id: 0,
                    at,
                    tenant: event.tenant,
                    principal_id: event.principal_id,
                    action: event.action,
                    memory_id: event.memory_id.map(|id| id.to_string()),
                    request_id: request_id.clone(),
                    detail: event.detail,
                })
                .collect(),
        );
    }
}
