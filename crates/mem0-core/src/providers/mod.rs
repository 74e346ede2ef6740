//! External providers behind traits: embedders now, LLMs and rerankers later.

pub mod embedder;
