//! The HTTP API tests, one binary: real servers on 127.0.0.1 with real stores (SQLite in a temp
//! dir, Postgres + pgvector from `DATABASE_URL`), the real local embedder, and wiremock fakes
//! for the providers this machine cannot reach. One binary links the server (and candle) once.
//! Run one area with e.g. `cargo test -p mem0-http-tests --test api security::`.

mod audit;
mod configure;
mod decay;
mod extraction;
mod failures;
mod filters;
mod hybrid;
mod idempotency;
mod jobs;
mod mem0_compat;
mod memories;
mod metrics;
mod openapi;
mod pagination;
mod pgvector;
mod policy;
mod provenance;
mod reindex;
mod replicas;
mod rerank;
mod rollout;
mod search;
mod security;
mod startup;
mod state;
mod transfer;
mod ui;
mod usage;
mod webhooks;
