//! mem0-server command line: `serve` (default), `mcp --stdio`, `openapi`, `check-config`,
//! `migrate`, `reindex`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use mem0_server::config::{LogFormat, Settings};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer, Registry};

#[derive(Debug, Parser)]
#[command(name = "mem0-server", version, about = "Self-hosted long-term memory server for AI agents")]
struct Cli {
    /// A TOML file layered over the built-in defaults (environment variables MEM0__* override both).
    #[arg(long, short, env = "MEM0_CONFIG", global = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the HTTP server (the default).
    Serve,
    /// Print the OpenAPI document.
    Openapi,
    /// Load and validate the configuration, print it (secrets redacted) and exit.
    CheckConfig,
    /// Apply the Postgres migrations (memory.vector_store.pgvector.url or DATABASE_URL) and exit.
    Migrate,
    /// Build the keyword index and entity links of memories written before they existed, and exit.
    Reindex,
    /// Serve the memory tools over the Model Context Protocol on stdin/stdout, for clients that
    /// launch a process (the HTTP server offers them at /mcp). Acts as the key in MEM0_API_KEY.
    Mcp {
        /// Speak MCP on stdin and stdout (the only transport of this command).
        #[arg(long)]
        stdio: bool,
        /// The API key every call acts with (not needed with authentication disabled).
        #[arg(long, env = "MEM0_API_KEY", hide_env_values = true)]
        api_key: Option<String>,
    },
}

fn main() -> anyhow::Result<()> {
    // First thing in the process, before the runtime or anything else starts a thread.
    mem0_core::providers::embedder::pin_thread_count();
    tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(run(Cli::parse()))
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command.unwrap_or(Command::Serve) {
        Command::Openapi => {
            print!("{}", mem0_server::openapi::document_json());
            Ok(())
        }
        Command::CheckConfig => {
            let settings = Settings::load(cli.config.as_deref())?;
            println!("{settings:#?}");
            Ok(())
        }
        Command::Migrate => {
            let settings = Settings::load(cli.config.as_deref())?;
            let pgvector = &settings.memory.vector_store.pgvector;
            let url = pgvector
                .url
                .as_ref()
                .ok_or_else(|| anyhow::anyhow!("set memory.vector_store.pgvector.url or DATABASE_URL"))?;
            let config = mem0_core::store::PgVectorConfig { run_migrations: false, ..pgvector.clone() };
            let store =
                mem0_core::store::PgVectorStore::connect(secrecy::ExposeSecret::expose_secret(url), &config).await?;
            store.migrate().await?;
            println!("migrations applied");
            Ok(())
        }
        Command::Reindex => {
            let settings = Settings::load(cli.config.as_deref())?;
            init_tracing(settings.log.format);
            let memory = mem0_core::Memory::from_config(&settings.memory)
                .await
                .map_err(|error| anyhow::anyhow!("cannot open the stores: {error}"))?;
            let analysed = memory.reindex(500).await?;
            println!("reindexed {analysed} memories");
            Ok(())
        }
        Command::Serve => serve(cli.config).await,
        Command::Mcp { stdio, api_key } => {
            if !stdio {
                anyhow::bail!("mcp needs --stdio (over HTTP the tools are at /mcp of `serve`)");
            }
            let mut settings = Settings::load(cli.config.as_deref())?;
            // stdout carries the protocol: the log goes to stderr.
            init_tracing_to(settings.log.format, std::io::stderr);
            let _lock = lock_embedded_store(&settings)?;
            // A tool process: queued adds are the server's to run.
            settings.jobs.workers = 0;
            let state = mem0_server::build_state(settings).await?;
            mem0_server::mcp::serve_stdio(state, api_key.as_deref()).await
        }
    }
}

/// The embedded store keeps caches in its process, and the SQLite history volume holds the queue
/// of adds its process alone runs: a second process on the same files would serve stale caches
/// or run queued adds twice. `serve` and `mcp --stdio` therefore take a lock beside each SQLite
/// file they use and refuse to start while another process holds it (the operating system
/// releases it when a process dies).
fn lock_embedded_store(settings: &Settings) -> anyhow::Result<Vec<std::fs::File>> {
    use mem0_core::config::VectorStoreProvider;
    use mem0_core::HistoryProvider;
    let mut files = Vec::new();
    if settings.memory.vector_store.provider == VectorStoreProvider::Sqlite {
        files.push(lock_beside(&settings.memory.vector_store.sqlite.path)?);
    }
    if settings.memory.history.provider == HistoryProvider::Sqlite {
        files.push(lock_beside(&settings.memory.history.path)?);
    }
    Ok(files)
}

fn lock_beside(path: &std::path::Path) -> anyhow::Result<std::fs::File> {
    if let Some(parent) = path.parent().filter(|parent| !parent.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .map_err(|error| anyhow::anyhow!("cannot create {}: {error}", parent.display()))?;
    }
    let lock_path = path.with_extension("lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|error| anyhow::anyhow!("cannot open {}: {error}", lock_path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => anyhow::bail!(
            "another mem0-server process (serve or mcp --stdio) is using {}: stop it, or point this client at its \
             /mcp endpoint instead",
            path.display()
        ),
        Err(std::fs::TryLockError::Error(error)) => {
            anyhow::bail!("cannot lock {}: {error}", lock_path.display())
        }
    }
}

async fn serve(config: Option<PathBuf>) -> anyhow::Result<()> {
    let settings = Settings::load(config.as_deref())?;
    let traces = if settings.traces.enabled { Some(mem0_server::traces::layer(&settings.traces)?) } else { None };
    let (layer, provider) = traces.map_or((None, None), |(layer, provider)| (Some(layer), Some(provider)));
    init_tracing_with(settings.log.format, std::io::stdout, layer);
    if provider.is_some() {
        tracing::info!(endpoint = %settings.traces.endpoint, "exporting traces (OTLP/HTTP)");
    }
    let _lock = lock_embedded_store(&settings)?;
    let bind = settings.server.bind;
    tracing::info!(
        embedder = ?settings.memory.embedder.provider,
        vector_store = ?settings.memory.vector_store.provider,
        "starting mem0-server"
    );
    let state = mem0_server::build_state(settings).await?;
    tracing::info!(
        model = state.memory().embedder().model_id(),
        dimension = state.memory().embedder().dimension(),
        "embedder ready"
    );
    match state.memory().llm() {
        Some(llm) => tracing::info!(provider = llm.provider(), model = llm.model(), "llm ready (infer=true enabled)"),
        None => tracing::warn!(
            "no llm configured: infer=true requests get 400 llm_not_configured; set OPENAI_API_KEY, OPENAI_BASE_URL, \
             ANTHROPIC_API_KEY or memory.llm.* to enable fact extraction"
        ),
    }
    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .map_err(|error| anyhow::anyhow!("cannot listen on {bind}: {error}"))?;
    tracing::info!(address = %bind, docs = %format!("http://{bind}/docs"), "listening");
    if let Some(address) = state.settings.metrics.listen.filter(|_| state.settings.metrics.enabled) {
        let metrics = tokio::net::TcpListener::bind(address)
            .await
            .map_err(|error| anyhow::anyhow!("cannot listen on {address} (metrics.listen): {error}"))?;
        tracing::info!(%address, "serving /metrics without credentials");
        let metrics_state = state.clone();
        tokio::spawn(async move {
            if let Err(error) = mem0_server::metrics::serve_open(metrics, metrics_state).await {
                tracing::error!(%error, "the metrics listener failed");
            }
        });
    }
    mem0_server::serve(listener, state, shutdown_signal()).await?;
    if let Some(provider) = provider {
        // Sends the spans still buffered (blocking: off the runtime's worker threads).
        let flushed = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        if let Ok(Err(error)) = flushed {
            tracing::warn!(%error, "could not send the last traces");
        }
    }
    tracing::info!("stopped");
    Ok(())
}

fn init_tracing(format: LogFormat) {
    init_tracing_with(format, std::io::stdout, None);
}

fn init_tracing_to<W>(format: LogFormat, writer: fn() -> W)
where
    W: std::io::Write + std::io::IsTerminal + Send + Sync + 'static,
{
    init_tracing_with(format, writer, None);
}

/// The log (filtered by `RUST_LOG`) and, when given, another layer with its own filter (the
/// OpenTelemetry exporter, which sees our spans whatever the log level).
fn init_tracing_with<W>(format: LogFormat, writer: fn() -> W, traces: Option<Box<dyn Layer<Registry> + Send + Sync>>)
where
    W: std::io::Write + std::io::IsTerminal + Send + Sync + 'static,
{
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("mem0_server=info,mem0_core=info,warn"));
    // Colours only on a terminal: a log file or a container log keeps plain text to grep.
    let colours = std::io::IsTerminal::is_terminal(&writer());
    let log = tracing_subscriber::fmt::layer().with_ansi(colours).with_writer(writer);
    let log: Box<dyn Layer<Registry> + Send + Sync> = match format {
        LogFormat::Json => log.json().with_filter(filter).boxed(),
        LogFormat::Pretty => log.with_filter(filter).boxed(),
    };
    tracing_subscriber::registry().with(vec![Some(log), traces].into_iter().flatten().collect::<Vec<_>>()).init();
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::error!(%error, "cannot listen for ctrl-c");
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => tracing::error!(%error, "cannot listen for SIGTERM"),
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutdown signal received");
}
