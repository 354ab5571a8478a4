//! Test-only fakes of the outside world that speak the real wire protocols on 127.0.0.1, with
//! switches for faults. Tests and benchmarks point the real clients at them by base URL.
//!
//! # Layout
//! - [`anthropic`]: a scripted Anthropic Messages API server (its streaming events).
//! - [`discord`]: Discord's REST routes and a WebSocket gateway with the real opcodes.
//! - [`mcp`]: a small MCP server (official SDK) over streamable HTTP and stdio.
//! - [`openai`]: a scripted OpenAI-compatible chat-completions server (SSE framing as
//!   llama.cpp and OpenAI send it), recording every request.
//! - [`telegram`]: the Telegram Bot API methods teloxide calls, with long polling and faults.

pub mod anthropic;
pub mod discord;
pub mod mcp;
pub mod openai;
mod script;
pub mod telegram;

pub use script::{Recorded, Reply};
