//! The agent's core: everything that does not care which chat platform a message came from.
//!
//! Today this is the session store, the durable memory every conversation writes to. Later
//! issues add the message model, the model providers, the conversation loop and compression;
//! they all sit on top of [`store::SessionStore`].
//!
//! This crate never names a chat platform library or an HTTP server framework: the gateway
//! and the adapters depend on it, never the other way round.
//!
//! # Layout
//! - [`agent`]: the conversation loop: tool loop, retry chain, persistence.
//! - [`llm`]: model requests and responses, error classes, the OpenAI-compatible provider.
//! - [`redact`]: masks secrets in text before it leaves the process.
//! - [`store`]: the `SessionStore` trait, its SQLite and PostgreSQL implementations, search.
//! - [`tools`]: the `Tool` trait, the registry that runs calls safely, built-in tools.

pub mod agent;
pub mod llm;
pub mod redact;
pub mod store;
pub mod tools;
