//! Helpers shared by the core's integration tests.

use uuid::Uuid;

/// A fresh database on the test Postgres (`DATABASE_URL`, started by `scripts/test.sh`), dropped
/// with the guard.
pub struct PgDatabase {
    /// URL of the server's maintenance database.
    pub admin_url: String,
    /// Name of the fresh database.
    pub name: String,
}

impl PgDatabase {
    /// Creates the database.
    ///
    /// # Panics
    /// When `DATABASE_URL` is unset or the server unreachable.
    pub async fn create() -> Self {
        let admin_url = std::env::var("DATABASE_URL")
            .expect("DATABASE_URL must point at a Postgres with pgvector: run scripts/test.sh, which starts one");
        let name = format!("mem0_test_{}", Uuid::new_v4().simple());
        let admin = sqlx::PgPool::connect(&admin_url).await.expect("connect to the test postgres");
        sqlx::query(&format!("create database {name}")).execute(&admin).await.expect("create test database");
        admin.close().await;
        Self { admin_url, name }
    }

    /// URL of the fresh database.
    pub fn url(&self) -> String {
        let (base, _) = self.admin_url.rsplit_once('/').expect("database url with a database name");
        format!("{base}/{}", self.name)
    }
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        let admin_url = self.admin_url.clone();
        let name = self.name.clone();
        // Dropping needs a runtime; the test's own is shutting down, so use a short-lived one.
        let _ = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
            runtime.block_on(async {
                if let Ok(pool) = sqlx::PgPool::connect(&admin_url).await {
                    let _ = sqlx::query(&format!("drop database if exists {name} with (force)")).execute(&pool).await;
                }
            });
        })
        .join();
    }
}

/// Polls `operation` `polls` times (letting the runtime work in between) and drops it, the way a
/// disconnecting client or a request timeout cancels a request.
#[allow(dead_code)] // not every test binary that includes this module uses it
pub async fn cancel_after<F: std::future::Future>(operation: F, polls: usize) {
    let mut operation = std::pin::pin!(operation);
    for _ in 0..polls {
        if futures::poll!(operation.as_mut()).is_ready() {
            return;
        }
        tokio::task::yield_now().await;
    }
}
