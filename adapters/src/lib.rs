//! Chat platforms: the `Platform` trait and the Telegram and Discord adapters (each behind a
//! cargo feature), plus the platform-neutral pieces the gateway and the adapters share. It must
//! never depend on `agent-core`.
//!
//! # Layout
//! - [`platform`]: the `Platform` trait every adapter implements, and its message types.
//! - [`media`]: files users send, as the notes the conversation keeps of them.
//! - [`split`]: long replies into parts a platform accepts (code fences kept whole, `(i/n)`).
//! - [`telegram`] (feature `telegram`): the Telegram adapter (teloxide).
//! - [`discord`] (feature `discord`): the Discord adapter (serenity's gateway, REST itself).

#[cfg(feature = "discord")]
pub mod discord;
pub mod media;
pub mod platform;
pub mod split;
#[cfg(feature = "telegram")]
pub mod telegram;
