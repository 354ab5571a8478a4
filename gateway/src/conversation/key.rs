//! Conversation keys (DESIGN.md §3): the stable identity of a chat place, `source:kind:ids`.
//! Routing always goes through this key, never through a session id, so rotating a session can
//! never lose a message.
//!
//! Parts a client chooses (webhook and API conversation names) are escaped (`%` and `:`), so no
//! name can forge another conversation's key.

/// Where a message was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place<'a> {
    /// A direct message on a chat platform (`telegram`, `discord`).
    Dm { platform: &'a str, chat: &'a str },
    /// A group or guild channel, with `thread` for a forum topic.
    Group {
        platform: &'a str,
        chat: &'a str,
        thread: Option<&'a str>,
        user: &'a str,
    },
    /// A thread shared by everyone in it (Discord threads).
    SharedThread { platform: &'a str, thread: &'a str },
    Webhook {
        route: &'a str,
        conversation: &'a str,
    },
    /// The OpenAI-compatible API: the `user` field or `X-Iris-Conversation`.
    Api { conversation: &'a str },
}

/// The key of `place`. With `per_user` (the default), each user in a group or guild channel
/// has their own conversation; without it the group shares one.
pub fn conversation_key(place: Place<'_>, per_user: bool) -> String {
    match place {
        Place::Dm { platform, chat } => format!("{platform}:dm:{chat}"),
        Place::Group {
            platform,
            chat,
            thread,
            user,
        } => {
            // Telegram calls them groups, Discord guild channels (DESIGN.md §3).
            let word = if platform == "discord" {
                "channel"
            } else {
                "group"
            };
            let mut key = format!("{platform}:{word}:{chat}");
            if let Some(thread) = thread {
                key.push_str(&format!(":{thread}"));
            }
            if per_user {
                key.push_str(&format!(":{user}"));
            }
            key
        }
        Place::SharedThread { platform, thread } => format!("{platform}:thread:{thread}"),
        Place::Webhook {
            route,
            conversation,
        } => format!("webhook:{}:{}", escape(route), escape(conversation)),
        Place::Api { conversation } => format!("api:{}", escape(conversation)),
    }
}

/// The source a key belongs to (`telegram`, `webhook`…).
pub fn source_of(key: &str) -> &str {
    key.split(':').next().unwrap_or(key)
}

fn escape(part: &str) -> String {
    part.replace('%', "%25").replace(':', "%3A")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn telegram_keys() {
        let dm = Place::Dm {
            platform: "telegram",
            chat: "42",
        };
        assert_eq!(conversation_key(dm, true), "telegram:dm:42");
        let group = Place::Group {
            platform: "telegram",
            chat: "-100123",
            thread: None,
            user: "7",
        };
        assert_eq!(conversation_key(group, true), "telegram:group:-100123:7");
        assert_eq!(conversation_key(group, false), "telegram:group:-100123");
        let topic = Place::Group {
            platform: "telegram",
            chat: "-100123",
            thread: Some("5"),
            user: "7",
        };
        assert_eq!(conversation_key(topic, true), "telegram:group:-100123:5:7");
        assert_eq!(conversation_key(topic, false), "telegram:group:-100123:5");
    }

    #[test]
    fn discord_keys() {
        let dm = Place::Dm {
            platform: "discord",
            chat: "9",
        };
        assert_eq!(conversation_key(dm, true), "discord:dm:9");
        let channel = Place::Group {
            platform: "discord",
            chat: "11",
            thread: None,
            user: "3",
        };
        assert_eq!(conversation_key(channel, true), "discord:channel:11:3");
        assert_eq!(conversation_key(channel, false), "discord:channel:11");
        // A thread is shared whatever the switch says.
        for per_user in [true, false] {
            let thread = Place::SharedThread {
                platform: "discord",
                thread: "12",
            };
            assert_eq!(conversation_key(thread, per_user), "discord:thread:12");
        }
    }

    #[test]
    fn webhook_and_api_keys_escape_what_clients_choose() {
        let hook = |route, conversation| {
            conversation_key(
                Place::Webhook {
                    route,
                    conversation,
                },
                true,
            )
        };
        assert_eq!(hook("crm", "ticket-1"), "webhook:crm:ticket-1");
        // Without escaping these two would collide.
        assert_ne!(hook("a", "b:c"), hook("a:b", "c"));
        assert_eq!(hook("a", "b:c"), "webhook:a:b%3Ac");
        assert_eq!(hook("a", "100%"), "webhook:a:100%25");
        assert_eq!(
            conversation_key(
                Place::Api {
                    conversation: "alice"
                },
                true
            ),
            "api:alice"
        );
        assert_eq!(source_of("webhook:a:b"), "webhook");
    }
}
