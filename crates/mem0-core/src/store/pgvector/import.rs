//! Bulk loading with `COPY` (migrations from other systems, benchmarks).

use std::time::Duration;

use super::codec::copy_row;
use super::{PgVectorStore, COLUMNS};
use crate::error::{Error, Result};
use crate::types::MemoryRecord;

/// What [`PgVectorStore::import`] did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ImportReport {
    /// Rows written.
    pub rows: usize,
    /// Time spent copying rows.
    pub load: Duration,
    /// Time spent building the HNSW index afterwards.
    pub index: Duration,
}

impl PgVectorStore {
    /// Loads many memories with `COPY`, for migrations and benchmarks. The HNSW index is dropped
    /// for the load and built afterwards with `maintenance_work_mem` (e.g. `"2GB"`; the graph
    /// should fit) and parallel workers, which is far faster than maintaining it row by row.
    /// Meanwhile searches still work, ranking exactly. The keyword postings and statistics
    /// follow (triggers); entity links are not created. Rows are committed in batches of 10,000: a failed
    /// import leaves the batches before the failure, and the index is rebuilt either way.
    ///
    /// # Errors
    /// Store errors; the first one stops the load.
    pub async fn import(&self, records: &[MemoryRecord], maintenance_work_mem: &str) -> Result<ImportReport> {
        if maintenance_work_mem.is_empty() || !maintenance_work_mem.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(Error::Config(format!("invalid maintenance_work_mem {maintenance_work_mem}")));
        }
        let mut connection = self.pool.acquire().await?;
        sqlx::query("drop index if exists memories_embedding_hnsw").execute(&mut *connection).await?;
        let started = std::time::Instant::now();
        let mut loaded = Ok(());
        for chunk in records.chunks(10_000) {
            let mut rows = String::with_capacity(chunk.len() * 4096);
            for record in chunk {
                copy_row(&mut rows, record);
            }
            let copied = async {
                let mut copy =
                    connection.copy_in_raw(&format!("copy memories ({COLUMNS}) from stdin (format text)")).await?;
                copy.send(rows.into_bytes()).await?;
                copy.finish().await
            }
            .await;
            if let Err(error) = copied {
                loaded = Err(Error::from(error));
                break;
            }
        }
        let load = started.elapsed();
        let started = std::time::Instant::now();
        // A refused setting must not leave the table without its index: build with the default.
        if let Err(error) =
            sqlx::query(&format!("set maintenance_work_mem = '{maintenance_work_mem}'")).execute(&mut *connection).await
        {
            tracing::warn!(%error, "maintenance_work_mem refused; building the index with the server default");
        }
        sqlx::query(
            "create index if not exists memories_embedding_hnsw on memories using hnsw (embedding vector_cosine_ops)",
        )
        .execute(&mut *connection)
        .await?;
        sqlx::query("reset maintenance_work_mem").execute(&mut *connection).await?;
        sqlx::query("analyze memories").execute(&mut *connection).await?;
        loaded?;
        Ok(ImportReport { rows: records.len(), load, index: started.elapsed() })
    }
}
