//! The agent's core: everything that does not care which chat platform a message came from.
//!
//! The session store (the durable memory every conversation writes to), the model providers,
//! the conversation loop, its tools and context compression; all of it sits on top of
//! [`store::SessionStore`].
//!
//! This crate never names a chat platform library or an HTTP server framework: the gateway
//! and the adapters depend on it, never the other way round.
//!
//! # Layout
//! - [`agent`]: the conversation loop: tool loop, retry chain, persistence, compaction.
//! - [`compress`]: context compression's four phases.
//! - [`llm`]: model requests and responses, error classes, the OpenAI and Anthropic providers.
//! - [`redact`]: masks secrets in text before it leaves the process.
//! - [`store`]: the `SessionStore` trait, its SQLite and PostgreSQL implementations, search.
//! - [`tools`]: the `Tool` trait, the registry that runs calls safely, built-in tools.

pub mod agent;
pub mod compress;
pub mod llm;
pub mod redact;
pub mod store;
pub mod tools;
