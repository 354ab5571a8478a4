//! Test-only fakes of the outside world that speak the real wire protocols on 127.0.0.1, with
//! switches for faults. Tests and benchmarks point the real clients at them by base URL.
//!
//! # Layout
//! - [`anthropic`]: a scripted Anthropic Messages API server (its streaming events).
//! - [`mcp`]: a small MCP server (official SDK) over streamable HTTP and stdio.
//! - [`openai`]: a scripted OpenAI-compatible chat-completions server (SSE framing as
//!   llama.cpp and OpenAI send it), recording every request.
//!
//! The Telegram Bot API and Discord fakes come with their adapters.

pub mod anthropic;
pub mod mcp;
pub mod openai;
mod script;

pub use script::{Recorded, Reply};
