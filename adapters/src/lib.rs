//! Chat platforms: the `Platform` trait and the Telegram and Discord adapters (each behind a
//! cargo feature), plus the platform-neutral message types the gateway and the adapters share.
//!
//! Empty for now: the foundation issue lays out the workspace, and the Telegram and Discord
//! issues fill this crate. It must never depend on `agent-core`.
