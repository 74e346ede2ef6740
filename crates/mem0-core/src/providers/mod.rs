//! External providers behind traits: embedders and LLMs, with one HTTP policy for all of them.

pub mod embedder;
pub mod http;
pub mod llm;
pub mod reranker;
