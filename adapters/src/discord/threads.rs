//! Where a guild message was written, as far as conversations go: a thread is one shared
//! conversation, and in a thread the bot takes part in (it is a member: it posted there, or
//! started it) every message is for it, mention or not. With auto-threading, a mention in a
//! channel starts a thread from that message and the conversation moves there.
//!
//! Channel kinds and memberships come from REST (`GET /channels/{id}`,
//! `GET /channels/{id}/thread-members/@me`) and are remembered; a bot that posts in a thread
//! becomes a member of it.

use std::collections::HashMap;
use std::sync::Mutex;

use super::rest::Rest;
use crate::platform::{InboundMessage, Origin};

/// Discord's thread channel types (announcement, public, private).
const THREAD_TYPES: [u64; 3] = [10, 11, 12];
/// Channels whose kind is remembered; past it the memory restarts.
const REMEMBERED: usize = 10_000;

/// Remembered channel kinds and thread memberships.
#[derive(Default)]
pub struct Threads {
    /// Channel id → its parent channel when it is a thread, `None` when it is not.
    kinds: Mutex<HashMap<String, Option<String>>>,
    /// Thread id → whether the bot is a member.
    member: Mutex<HashMap<String, bool>>,
}

impl Threads {
    /// Sets `message`'s place: a thread's messages are a shared conversation there, addressed
    /// when the bot is a member; with `auto_thread`, an addressed message in a channel starts
    /// a thread for its answer.
    pub async fn place(&self, rest: &Rest, message: &mut InboundMessage, auto_thread: bool) {
        if message.origin == Origin::Private {
            return;
        }
        if let Some(parent) = self.thread_parent(rest, &message.chat).await {
            message.parent_chat = Some(parent);
            message.origin = Origin::SharedThread;
            message.thread = Some(message.chat.clone());
            if !message.addressed {
                message.addressed = self.is_member(rest, &message.chat).await;
            } else {
                // Mentioned in it: it answers there, which makes it a member.
                self.joined(&message.chat);
            }
            return;
        }
        if auto_thread && message.addressed {
            let name = thread_name(&message.text);
            match rest.start_thread(&message.chat, &message.id, &name).await {
                Ok(thread) => {
                    self.joined(&thread);
                    remember(&self.kinds, &thread, Some(message.chat.clone()));
                    message.parent_chat = Some(message.chat.clone());
                    message.origin = Origin::SharedThread;
                    message.thread = Some(thread);
                }
                Err(error) => {
                    tracing::warn!(%error, channel = %message.chat, "discord: could not start a thread; answering in the channel");
                }
            }
        }
    }

    /// The bot posted in (or started) `thread`.
    pub fn joined(&self, thread: &str) {
        remember(&self.member, thread, true);
    }

    /// The parent channel when `channel` is a thread.
    async fn thread_parent(&self, rest: &Rest, channel: &str) -> Option<String> {
        if let Some(known) = recall(&self.kinds, channel) {
            return known;
        }
        match rest.channel(channel).await {
            Ok(info) => {
                let thread = info["type"]
                    .as_u64()
                    .is_some_and(|t| THREAD_TYPES.contains(&t));
                let parent =
                    thread.then(|| info["parent_id"].as_str().unwrap_or_default().to_owned());
                remember(&self.kinds, channel, parent.clone());
                parent
            }
            Err(error) => {
                tracing::debug!(%error, %channel, "discord: channel kind unknown; taken as a channel");
                None
            }
        }
    }

    async fn is_member(&self, rest: &Rest, thread: &str) -> bool {
        if let Some(known) = recall(&self.member, thread) {
            return known;
        }
        let member = rest.is_thread_member(thread).await.unwrap_or(false);
        remember(&self.member, thread, member);
        member
    }
}

fn recall<T: Clone>(map: &Mutex<HashMap<String, T>>, key: &str) -> Option<T> {
    map.lock().ok().and_then(|m| m.get(key).cloned())
}

fn remember<T>(map: &Mutex<HashMap<String, T>>, key: &str, value: T) {
    if let Ok(mut m) = map.lock() {
        if m.len() >= REMEMBERED {
            m.clear();
        }
        m.insert(key.to_owned(), value);
    }
}

/// A thread's name from the message that starts it: its first line, at most 60 characters.
fn thread_name(text: &str) -> String {
    let first = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("Iris");
    let name: String = first.trim().chars().take(60).collect();
    if name.is_empty() { "Iris".into() } else { name }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_names_come_from_the_first_line() {
        assert_eq!(thread_name("\n  What is Rust?\nmore"), "What is Rust?");
        assert_eq!(thread_name(""), "Iris");
        assert_eq!(thread_name(&"x".repeat(100)).len(), 60);
    }
}
