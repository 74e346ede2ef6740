//! `GET /export` and `POST /import`: a scope's (or a tenant's) memories as JSON lines, streamed
//! both ways so that neither end holds a whole export in memory (see
//! [`mem0_core::memory::ExportLine`] for the format).
//!
//! The export is read page by page while it is sent; a failure half way ends the body without
//! its end line, which the import refuses. The import reads its body line by line (not buffered
//! by the body layer, and with its own timeout `server.import_timeout_secs`), stores it in
//! batches of at most [`IMPORT_BATCH`] memories or [`IMPORT_BATCH_BYTES`], and answers with a
//! report. A malformed line stops it with 400 `invalid_import`; what came before is stored, and
//! sending the file again stores the rest (memories already there are skipped by id).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use futures::StreamExt as _;
use http_body_util::BodyExt as _;
use mem0_core::memory::{ExportLine, ExportPage, ExportedMemory, ImportOutcome};
use mem0_core::{Caller, Memory, Scope};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::{ApiError, AppJson, AppQuery, ErrorBody, ErrorCode};
use crate::state::{AppState, RequestCaller};

/// Memories per page read for an export.
const EXPORT_PAGE: usize = 200;
/// Most memories stored by one import transaction.
pub const IMPORT_BATCH: usize = 100;
/// Most bytes of lines gathered for one import transaction.
pub const IMPORT_BATCH_BYTES: usize = 8 * 1024 * 1024;
/// Longest line of an import.
pub const MAX_IMPORT_LINE_BYTES: usize = 8 * 1024 * 1024;
/// Most refused lines listed in an import's report (all are counted).
const MAX_REPORTED_ERRORS: usize = 100;
/// The media type of export files.
const NDJSON: &str = "application/x-ndjson";

/// Reading: a caller may export what it may list.
pub(super) fn read_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(export_memories))
}

/// Importing (admins): a streamed body, so not behind the body layer, and its own time limit.
pub(super) fn streamed_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(import_memories))
}

/// Query of `GET /export`.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ExportQuery {
    /// Only this user's memories.
    pub user_id: Option<String>,
    /// Only this agent's memories.
    pub agent_id: Option<String>,
    /// Only this run's memories.
    pub run_id: Option<String>,
    /// Include each memory's embedding (default false): an import into a server with the same
    /// embedding model then stores them instead of embedding every text again.
    pub embeddings: Option<bool>,
    /// Another tenant (the global admin only).
    #[param(min_length = 1, max_length = 128)]
    pub tenant: Option<String>,
}

/// Query of `POST /import`.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ImportQuery {
    /// Import into another tenant (the global admin only).
    #[param(min_length = 1, max_length = 128)]
    pub tenant: Option<String>,
}

/// One refused line of an import.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ImportLineError {
    /// Its line number (the header is line 1).
    pub line: usize,
    /// The memory's id.
    pub id: Option<uuid::Uuid>,
    /// Why, as an error code.
    pub code: ErrorCode,
    /// Why, in words.
    pub message: String,
}

/// What an import did.
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct ImportResponse {
    /// Memories stored, with their history.
    pub imported: u64,
    /// Memories skipped because the tenant has them already (by id).
    pub existing: u64,
    /// Lines refused (their memories were not stored).
    pub failed: u64,
    /// The first refused lines, with the reason.
    pub errors: Vec<ImportLineError>,
    /// `reused` when the file's embeddings were stored as they are (same model and dimension),
    /// `recomputed` when every text was embedded again.
    pub embeddings: String,
}

impl ImportResponse {
    fn add(&mut self, outcome: ImportOutcome) {
        self.imported += outcome.imported.len() as u64;
        self.existing += outcome.existing.len() as u64;
        for (line, id, error) in outcome.failed {
            self.failed += 1;
            if self.errors.len() < MAX_REPORTED_ERRORS {
                let error = ApiError::from(error);
                self.errors.push(ImportLineError { line, id, code: error.code(), message: error.message().to_owned() });
            }
        }
    }

    /// A malformed file at `line`: 400 with what was stored before it.
    fn invalid(&self, line: usize, message: impl std::fmt::Display) -> ApiError {
        ApiError::new(ErrorCode::InvalidImport, format!("line {line}: {message}")).with_details(serde_json::json!({
            "line": line,
            "imported": self.imported,
            "existing": self.existing,
            "failed": self.failed,
        }))
    }
}

/// The caller acting in `tenant` (another tenant needs the global admin).
fn in_tenant(caller: Caller, tenant: Option<String>, what: &str) -> Result<Caller, ApiError> {
    match tenant {
        None => Ok(caller),
        Some(tenant) => {
            let tenant = super::policy::whole_tenant(&caller, Some(tenant), what)?;
            Ok(Caller { tenant, ..caller })
        }
    }
}

/// Export memories as JSON lines, with their history
#[utoipa::path(
    get,
    path = "/export",
    tag = "memories",
    params(ExportQuery),
    responses(
        (status = 200, description = "A header line (`{\"type\":\"header\", \"format\":\"mem0-rs.export\", \"version\":1, \
            \"embedding_model\", \"dimension\", \"embeddings\", …}`), one line per memory (`{\"type\":\"memory\", \"id\", \
            \"user_id\", \"memory\", \"hash\", \"metadata\", \"created_at\", \"updated_at\", provenance, state, \"history\": [...], \
            \"embedding\"?}`), then `{\"type\":\"end\",\"count\":N}`. Expired and superseded memories are included. A body \
            without its end line was cut short.", content_type = "application/x-ndjson", body = String),
        (status = 400, description = "Invalid scope id, or another tenant's name", body = ErrorBody),
        (status = 401, description = "No valid credentials", body = ErrorBody),
        (status = 403, description = "Scope outside the caller's reach; a whole tenant needs an admin", body = ErrorBody),
    )
)]
#[tracing::instrument(skip_all)]
pub async fn export_memories(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    AppQuery(query): AppQuery<ExportQuery>,
) -> Result<Response, ApiError> {
    let caller = in_tenant(caller, query.tenant, "an export")?;
    let scope = Scope::optional(query.user_id.as_deref(), query.agent_id.as_deref(), query.run_id.as_deref())?;
    let embeddings = query.embeddings.unwrap_or(false);
    let memory = state.memory();
    // The first page here: refusals (rights, scope) are answered with their status, not a cut
    // body.
    let first = memory.export_page(&caller, &scope, None, EXPORT_PAGE, embeddings).await?;
    let header = line(&ExportLine::Header(memory.export_header(&scope, embeddings)));
    let exporting = Exporting { memory, caller, scope, embeddings, count: 0 };
    let pages = futures::stream::unfold((Step::Page(first), exporting), |(step, mut exporting)| async move {
        match step {
            Step::Done => None,
            Step::End => {
                let end = line(&ExportLine::End(mem0_core::memory::ExportEnd { count: exporting.count }));
                Some((Ok(end), (Step::Done, exporting)))
            }
            Step::Next(cursor) => match exporting.page(&cursor).await {
                Ok(page) => {
                    let (chunk, next) = exporting.lines(page);
                    Some((Ok(chunk), (next, exporting)))
                }
                Err(error) => {
                    tracing::error!(%error, exported = exporting.count, "export failed part way; its body ends without the end line");
                    Some((Err(std::io::Error::other(error.to_string())), (Step::Done, exporting)))
                }
            },
            Step::Page(page) => {
                let (chunk, next) = exporting.lines(page);
                Some((Ok(chunk), (next, exporting)))
            }
        }
    });
    let body = futures::stream::once(async move { Ok::<Bytes, std::io::Error>(header) }).chain(pages);
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(NDJSON));
    headers.insert(header::CONTENT_DISPOSITION, HeaderValue::from_static("attachment; filename=\"mem0-export.jsonl\""));
    Ok((headers, Body::from_stream(body)).into_response())
}

/// Where an export stands.
enum Step {
    /// A page read, to be sent.
    Page(ExportPage),
    /// The next page to read.
    Next(String),
    /// Every page sent: the end line is next.
    End,
    /// Finished.
    Done,
}

struct Exporting {
    memory: Arc<Memory>,
    caller: Caller,
    scope: Scope,
    embeddings: bool,
    count: u64,
}

impl Exporting {
    async fn page(&self, cursor: &str) -> mem0_core::Result<ExportPage> {
        self.memory.export_page(&self.caller, &self.scope, Some(cursor), EXPORT_PAGE, self.embeddings).await
    }

    /// The lines of `page`, and what comes after it.
    fn lines(&mut self, page: ExportPage) -> (Bytes, Step) {
        let mut chunk = Vec::new();
        for memory in page.memories {
            self.count += 1;
            chunk.extend_from_slice(&line(&ExportLine::Memory(Box::new(memory))));
        }
        (Bytes::from(chunk), page.next.map_or(Step::End, Step::Next))
    }
}

fn line(value: &ExportLine) -> Bytes {
    let mut text = serde_json::to_vec(value).unwrap_or_default();
    text.push(b'\n');
    Bytes::from(text)
}

/// Import memories from an export (admin)
#[utoipa::path(
    post,
    path = "/import",
    tag = "admin",
    params(ImportQuery),
    request_body(content = String, content_type = "application/x-ndjson",
        description = "An export file (`GET /export`), streamed: any size, lines of at most 8 MiB. Memories keep their \
            ids, timestamps, provenance, state and history; those the tenant has already (by id) are skipped, so an \
            interrupted import is finished by sending the file again. Embeddings are stored as they are when the file \
            says they come from this server's embedding model; otherwise every text is embedded again. Imports \
            publish no webhook events."),
    responses(
        (status = 200, description = "The report; refused lines (scope outside the caller's reach, invalid fields, \
            texts the write policy would change) are listed and their memories not stored", body = ImportResponse),
        (status = 400, description = "A malformed file (`invalid_import`: not JSON, not the format, no header or end \
            line, a wrong count), or `Idempotency-Key` given", body = ErrorBody),
        (status = 401, description = "No valid credentials", body = ErrorBody),
        (status = 403, description = "Not an admin", body = ErrorBody),
        (status = 408, description = "A part of the body did not arrive within `server.body_read_timeout_secs`", body = ErrorBody),
        (status = 413, description = "A line longer than 8 MiB", body = ErrorBody),
        (status = 415, description = "Not `application/x-ndjson`", body = ErrorBody),
    )
)]
#[tracing::instrument(skip_all)]
pub async fn import_memories(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    AppQuery(query): AppQuery<ImportQuery>,
    headers: HeaderMap,
    body: Body,
) -> Result<AppJson<ImportResponse>, ApiError> {
    if headers.contains_key(crate::idempotency::HEADER) {
        let message = "not accepted on POST /import: an import is idempotent by memory id, and its body is streamed";
        return Err(ApiError::validation("Idempotency-Key", message));
    }
    let caller = in_tenant(caller, query.tenant, "an import")?;
    caller.require(mem0_core::Role::Admin)?;
    let media = headers.get(header::CONTENT_TYPE).and_then(|value| value.to_str().ok()).unwrap_or_default();
    let media = media.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    if !matches!(media.as_str(), NDJSON | "application/jsonl" | "application/jsonlines") {
        return Err(ApiError::new(
            ErrorCode::UnsupportedMediaType,
            "an import is sent as application/x-ndjson (the lines of an export)",
        ));
    }
    let memory = state.memory();
    let idle = Duration::from_secs(state.settings.server.body_read_timeout_secs);
    let mut lines = Lines::new(body, idle);
    let mut report = ImportResponse::default();
    let Some((number, first)) = lines.next().await? else {
        return Err(report.invalid(1, "the body is empty; an import starts with the export's header line"));
    };
    let header = match serde_json::from_slice::<ExportLine>(&first) {
        Ok(ExportLine::Header(header)) => header,
        Ok(_) => return Err(report.invalid(number, "an import starts with the export's header line")),
        Err(error) => return Err(report.invalid(number, format!("not a header line: {error}"))),
    };
    let reuse = memory.check_import(&caller, &header)?;
    report.embeddings = if reuse { "reused" } else { "recomputed" }.to_owned();
    tracing::info!(
        tenant = %caller.tenant,
        embedding_model = %header.embedding_model,
        reuse_embeddings = reuse,
        "import started"
    );
    let mut batch: Vec<(usize, ExportedMemory)> = Vec::new();
    let mut batch_bytes = 0usize;
    let mut memory_lines = 0u64;
    let mut end: Option<(usize, u64)> = None;
    while let Some((number, text)) = lines.next().await? {
        if text.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if let Some((end_line, _)) = end {
            return Err(report.invalid(number, format!("nothing may follow the end line (line {end_line})")));
        }
        match serde_json::from_slice::<ExportLine>(&text) {
            Ok(ExportLine::Memory(line)) => {
                memory_lines += 1;
                batch_bytes += text.len();
                batch.push((number, *line));
                if batch.len() >= IMPORT_BATCH || batch_bytes >= IMPORT_BATCH_BYTES {
                    report.add(memory.import_batch(&caller, reuse, std::mem::take(&mut batch)).await?);
                    batch_bytes = 0;
                }
            }
            Ok(ExportLine::End(count)) => end = Some((number, count.count)),
            Ok(ExportLine::Header(_)) => {
                flush(&memory, &caller, reuse, &mut batch, &mut report).await?;
                return Err(report.invalid(number, "a second header line"));
            }
            Err(error) => {
                flush(&memory, &caller, reuse, &mut batch, &mut report).await?;
                return Err(report.invalid(number, format!("not a line of an export: {error}")));
            }
        }
    }
    flush(&memory, &caller, reuse, &mut batch, &mut report).await?;
    match end {
        None => Err(report.invalid(
            lines.number + 1,
            "the file ends without its end line: it was cut short (send the whole file again; what is stored is skipped)",
        )),
        Some((number, count)) if count != memory_lines => {
            Err(report.invalid(number, format!("the end line counts {count} memories, the file has {memory_lines}")))
        }
        Some(_) => {
            tracing::info!(
                tenant = %caller.tenant,
                imported = report.imported,
                existing = report.existing,
                failed = report.failed,
                "import finished"
            );
            Ok(AppJson(report))
        }
    }
}

async fn flush(
    memory: &Memory,
    caller: &Caller,
    reuse: bool,
    batch: &mut Vec<(usize, ExportedMemory)>,
    report: &mut ImportResponse,
) -> Result<(), ApiError> {
    if !batch.is_empty() {
        report.add(memory.import_batch(caller, reuse, std::mem::take(batch)).await?);
    }
    Ok(())
}

/// The lines of a streamed body, each within [`MAX_IMPORT_LINE_BYTES`], each part of the body
/// within `idle`.
struct Lines {
    body: Body,
    buffer: Vec<u8>,
    /// Bytes of `buffer` known to hold no newline.
    scanned: usize,
    ready: VecDeque<Vec<u8>>,
    finished: bool,
    idle: Duration,
    /// Number of the last line returned.
    number: usize,
}

impl Lines {
    fn new(body: Body, idle: Duration) -> Self {
        Self { body, buffer: Vec::new(), scanned: 0, ready: VecDeque::new(), finished: false, idle, number: 0 }
    }

    /// The next line (without its newline) and its number; `None` at the end of the body.
    async fn next(&mut self) -> Result<Option<(usize, Vec<u8>)>, ApiError> {
        loop {
            if let Some(line) = self.ready.pop_front() {
                self.number += 1;
                return Ok(Some((self.number, line)));
            }
            if self.finished {
                if self.buffer.is_empty() {
                    return Ok(None);
                }
                self.number += 1;
                return Ok(Some((self.number, std::mem::take(&mut self.buffer))));
            }
            match tokio::time::timeout(self.idle, self.body.frame()).await {
                Err(_) => {
                    return Err(ApiError::new(
                        ErrorCode::RequestBodyTimeout,
                        format!("no part of the import arrived within {} s", self.idle.as_secs()),
                    ))
                }
                Ok(None) => self.finished = true,
                Ok(Some(Err(error))) => {
                    return Err(ApiError::new(ErrorCode::InvalidJson, format!("the body could not be read: {error}")))
                }
                Ok(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        self.take(&data)?;
                    }
                }
            }
        }
    }

    /// Adds received bytes, splitting off complete lines.
    fn take(&mut self, data: &[u8]) -> Result<(), ApiError> {
        self.buffer.extend_from_slice(data);
        while let Some(at) = self.buffer[self.scanned..].iter().position(|byte| *byte == b'\n') {
            let end = self.scanned + at;
            let mut line: Vec<u8> = self.buffer.drain(..=end).collect();
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            self.ready.push_back(line);
            self.scanned = 0;
        }
        self.scanned = self.buffer.len();
        if self.buffer.len() > MAX_IMPORT_LINE_BYTES {
            let number = self.number + self.ready.len() + 1;
            return Err(ApiError::new(
                ErrorCode::PayloadTooLarge,
                format!("line {number} of the import is longer than {MAX_IMPORT_LINE_BYTES} bytes"),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_split_across_parts_and_without_a_final_newline() {
        let parts: Vec<Result<Bytes, std::io::Error>> =
            vec![Ok(Bytes::from_static(b"ab")), Ok(Bytes::from_static(b"c\r\nd\n\ne")), Ok(Bytes::from_static(b"f"))];
        let body = Body::from_stream(futures::stream::iter(parts));
        let mut lines = Lines::new(body, Duration::from_secs(1));
        let mut seen = Vec::new();
        while let Some((number, line)) = lines.next().await.unwrap() {
            seen.push((number, String::from_utf8(line).unwrap()));
        }
        let expected: Vec<(usize, String)> =
            [(1, "abc"), (2, "d"), (3, ""), (4, "ef")].into_iter().map(|(n, s)| (n, s.to_owned())).collect();
        assert_eq!(seen, expected);
    }
}
