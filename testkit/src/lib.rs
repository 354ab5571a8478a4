//! Test-only fakes of the outside world — model providers, the Telegram Bot API, Discord —
//! that speak the real wire protocols on 127.0.0.1, with switches for faults.
//!
//! Empty for now: the agent-core and platform issues add the fakes their tests need.
