//! Conversation keys (DESIGN.md §3): the stable identity of a chat place, `source:kind:ids`.
//! Routing always goes through this key, never through a session id, so rotating a session can
//! never lose a message.
//!
//! Parts a client chooses (webhook and API conversation names) are escaped (`%` and `:`), so no
//! name can forge another conversation's key.

/// Where a message was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place<'a> {
    TelegramDm {
        chat_id: i64,
    },
    /// A group or supergroup; `topic_id` for forum topics.
    TelegramGroup {
        chat_id: i64,
        topic_id: Option<i64>,
        user_id: i64,
    },
    DiscordDm {
        channel_id: u64,
    },
    DiscordChannel {
        channel_id: u64,
        user_id: u64,
    },
    /// Threads are shared by everyone in them.
    DiscordThread {
        thread_id: u64,
    },
    Webhook {
        route: &'a str,
        conversation: &'a str,
    },
    /// The OpenAI-compatible API: the `user` field or `X-Iris-Conversation`.
    Api {
        conversation: &'a str,
    },
}

/// The key of `place`. With `per_user` (the default), each user in a group or guild channel
/// has their own conversation; without it the group shares one.
pub fn conversation_key(place: Place<'_>, per_user: bool) -> String {
    match place {
        Place::TelegramDm { chat_id } => format!("telegram:dm:{chat_id}"),
        Place::TelegramGroup {
            chat_id,
            topic_id,
            user_id,
        } => {
            let mut key = format!("telegram:group:{chat_id}");
            if let Some(topic) = topic_id {
                key.push_str(&format!(":{topic}"));
            }
            if per_user {
                key.push_str(&format!(":{user_id}"));
            }
            key
        }
        Place::DiscordDm { channel_id } => format!("discord:dm:{channel_id}"),
        Place::DiscordChannel {
            channel_id,
            user_id,
        } => {
            if per_user {
                format!("discord:channel:{channel_id}:{user_id}")
            } else {
                format!("discord:channel:{channel_id}")
            }
        }
        Place::DiscordThread { thread_id } => format!("discord:thread:{thread_id}"),
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
        assert_eq!(
            conversation_key(Place::TelegramDm { chat_id: 42 }, true),
            "telegram:dm:42"
        );
        let group = Place::TelegramGroup {
            chat_id: -100_123,
            topic_id: None,
            user_id: 7,
        };
        assert_eq!(conversation_key(group, true), "telegram:group:-100123:7");
        assert_eq!(conversation_key(group, false), "telegram:group:-100123");
        let topic = Place::TelegramGroup {
            chat_id: -100_123,
            topic_id: Some(5),
            user_id: 7,
        };
        assert_eq!(conversation_key(topic, true), "telegram:group:-100123:5:7");
        assert_eq!(conversation_key(topic, false), "telegram:group:-100123:5");
    }

    #[test]
    fn discord_keys() {
        assert_eq!(
            conversation_key(Place::DiscordDm { channel_id: 9 }, true),
            "discord:dm:9"
        );
        let channel = Place::DiscordChannel {
            channel_id: 11,
            user_id: 3,
        };
        assert_eq!(conversation_key(channel, true), "discord:channel:11:3");
        assert_eq!(conversation_key(channel, false), "discord:channel:11");
        // A thread is shared whatever the switch says.
        for per_user in [true, false] {
            assert_eq!(
                conversation_key(Place::DiscordThread { thread_id: 12 }, per_user),
                "discord:thread:12"
            );
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
