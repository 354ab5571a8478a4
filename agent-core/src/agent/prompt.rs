//! The system prompt of a session: the deployment's base prompt plus a snapshot of the
//! conversation's memory (MEMORY.md, USER.md), built once when the session starts and frozen
//! on the session row.
//!
//! Frozen because a prompt that stays byte-identical across turns is what provider prompt
//! caches key on, and because memory the agent writes mid-session must not silently change
//! the instructions it is following. The snapshot is taken again only for a new session —
//! after compression, `/new` or a restart into a fresh session.

use std::sync::Arc;

use crate::tools::memory::MemoryStore;

/// Builds session prompts for one deployment.
#[derive(Clone, Default)]
pub struct PromptBuilder {
    base: String,
    memory: Option<Arc<MemoryStore>>,
}

impl PromptBuilder {
    pub fn new(base: impl Into<String>) -> Self {
        Self {
            base: base.into(),
            memory: None,
        }
    }

    /// Includes the memory snapshot of the conversation.
    pub fn with_memory(mut self, memory: Arc<MemoryStore>) -> Self {
        self.memory = Some(memory);
        self
    }

    /// The prompt for a new session of `conversation_id`. Unreadable memory is logged and left
    /// out: a broken file must not stop the conversation.
    pub async fn build(&self, conversation_id: i64) -> String {
        let mut prompt = self.base.trim_end().to_owned();
        let Some(memory) = &self.memory else {
            return prompt;
        };
        match memory.snapshot(conversation_id).await {
            Ok(snapshot) if !snapshot.is_empty() => {
                if !prompt.is_empty() {
                    prompt.push_str("\n\n");
                }
                prompt.push_str("# Memory (as of the start of this session)\n\n");
                prompt.push_str(&snapshot);
            }
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(conversation_id, %error, "memory unreadable; prompt built without it");
            }
        }
        prompt
    }
}
