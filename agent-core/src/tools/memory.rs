//! `memory`: what the agent keeps between sessions — its own notes (`MEMORY.md`, 2,200
//! characters) and what it learned about the user (`USER.md`, 1,375 characters).
//!
//! Memory belongs to one conversation: files live under `<dir>/<conversation id>/`, so what
//! one user told the agent can never surface in another user's chat. Entries are separated by
//! a line holding `§`. The limits are hard: an edit that would pass them is refused with the
//! room left, so the agent consolidates instead of silently losing the oldest facts.
//!
//! The system prompt carries a [`MemoryStore::snapshot`] taken when a session starts; edits
//! during the session change the files, not the prompt (a byte-stable prompt keeps the
//! provider's prompt cache), and reach the prompt at the next session or compression.

use std::path::PathBuf;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{Tool, ToolContext, ToolOutput, str_arg};

/// Between two entries of a memory file.
const SEPARATOR: &str = "\n§\n";

/// The two memory files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryFile {
    /// The agent's own notes.
    Memory,
    /// What the agent knows about the user.
    User,
}

impl MemoryFile {
    pub fn file_name(self) -> &'static str {
        match self {
            Self::Memory => "MEMORY.md",
            Self::User => "USER.md",
        }
    }

    /// The most characters the file may hold.
    pub fn limit(self) -> usize {
        match self {
            Self::Memory => 2200,
            Self::User => 1375,
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text {
            "memory" | "MEMORY.md" => Some(Self::Memory),
            "user" | "USER.md" => Some(Self::User),
            _ => None,
        }
    }
}

/// Memory files under a data directory, one folder per conversation.
#[derive(Debug, Clone)]
pub struct MemoryStore {
    dir: PathBuf,
}

impl MemoryStore {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    fn path(&self, conversation_id: i64, file: MemoryFile) -> PathBuf {
        self.dir
            .join(conversation_id.to_string())
            .join(file.file_name())
    }

    /// The entries of one file (none when it does not exist yet).
    pub async fn entries(
        &self,
        conversation_id: i64,
        file: MemoryFile,
    ) -> std::io::Result<Vec<String>> {
        match tokio::fs::read_to_string(self.path(conversation_id, file)).await {
            Ok(text) => Ok(text
                .split(SEPARATOR)
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .map(str::to_owned)
                .collect()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }

    async fn write(
        &self,
        conversation_id: i64,
        file: MemoryFile,
        entries: &[String],
    ) -> std::io::Result<()> {
        let path = self.path(conversation_id, file);
        if let Some(parent) = path.parent() {
            tokio::fs::create_dir_all(parent).await?;
        }
        // Write then rename: a crash mid-write never leaves half a file.
        let tmp = path.with_extension("md.tmp");
        tokio::fs::write(&tmp, entries.join(SEPARATOR)).await?;
        tokio::fs::rename(&tmp, &path).await
    }

    /// Both files as one block for the system prompt (empty when there is no memory).
    pub async fn snapshot(&self, conversation_id: i64) -> std::io::Result<String> {
        let mut out = String::new();
        for (file, heading) in [
            (MemoryFile::Memory, "Your notes (MEMORY.md)"),
            (MemoryFile::User, "About the user (USER.md)"),
        ] {
            let entries = self.entries(conversation_id, file).await?;
            if !entries.is_empty() {
                out.push_str(&format!("## {heading}\n{}\n\n", entries.join("\n§\n")));
            }
        }
        Ok(out.trim_end().to_owned())
    }
}

fn size(entries: &[String]) -> usize {
    entries.join(SEPARATOR).chars().count()
}

#[async_trait::async_trait]
impl Tool for MemoryStore {
    fn name(&self) -> &str {
        "memory"
    }

    fn description(&self) -> &str {
        "Durable memory across sessions. file: memory (your notes, 2200 chars) or user (about \
         the user, 1375 chars). op: read | add (text) | replace (old, new) | remove (old); `old` \
         is a unique piece of the entry to change. Keep entries short; consolidate when full."
    }

    fn parameters(&self) -> Value {
        json!({"type": "object", "required": ["op", "file"], "properties": {
            "op": {"type": "string", "enum": ["read", "add", "replace", "remove"]},
            "file": {"type": "string", "enum": ["memory", "user"]},
            "text": {"type": "string"},
            "old": {"type": "string"},
            "new": {"type": "string"}
        }})
    }

    async fn call(
        &self,
        args: Value,
        ctx: &ToolContext,
        _cancel: &CancellationToken,
    ) -> ToolOutput {
        let (op, file) = match (str_arg(&args, "op"), str_arg(&args, "file")) {
            (Ok(op), Ok(file)) => (op, file),
            (Err(e), _) | (_, Err(e)) => return e,
        };
        let Some(file) = MemoryFile::parse(file) else {
            return ToolOutput::error("file must be \"memory\" or \"user\"");
        };
        let mut entries = match self.entries(ctx.conversation_id, file).await {
            Ok(entries) => entries,
            Err(e) => return ToolOutput::error(format!("cannot read {}: {e}", file.file_name())),
        };
        let find = |entries: &[String], old: &str| -> Result<usize, ToolOutput> {
            let hits: Vec<usize> = entries
                .iter()
                .enumerate()
                .filter(|(_, e)| e.contains(old))
                .map(|(i, _)| i)
                .collect();
            match hits.as_slice() {
                [one] => Ok(*one),
                [] => Err(ToolOutput::error(format!("no entry contains {old:?}"))),
                _ => Err(ToolOutput::error(format!(
                    "{} entries contain {old:?}; quote more of the one you mean",
                    hits.len()
                ))),
            }
        };
        match op {
            "read" => {
                return ToolOutput::ok(if entries.is_empty() {
                    "(empty)".to_owned()
                } else {
                    entries.join(SEPARATOR)
                });
            }
            "add" => match str_arg(&args, "text").map(str::trim) {
                Ok(text) if !text.is_empty() => entries.push(text.to_owned()),
                Ok(_) => return ToolOutput::error("text is empty"),
                Err(e) => return e,
            },
            "replace" => {
                let (old, new) = match (str_arg(&args, "old"), str_arg(&args, "new")) {
                    (Ok(old), Ok(new)) => (old, new.trim()),
                    (Err(e), _) | (_, Err(e)) => return e,
                };
                match find(&entries, old) {
                    Ok(i) if new.is_empty() => {
                        entries.remove(i);
                    }
                    Ok(i) => entries[i] = new.to_owned(),
                    Err(e) => return e,
                }
            }
            "remove" => match str_arg(&args, "old").map(|old| find(&entries, old)) {
                Ok(Ok(i)) => {
                    entries.remove(i);
                }
                Ok(Err(e)) | Err(e) => return e,
            },
            other => return ToolOutput::error(format!("unknown op {other:?}")),
        }
        let used = size(&entries);
        if used > file.limit() {
            return ToolOutput::error(format!(
                "{} would hold {used} of {} characters; shorten or remove entries first",
                file.file_name(),
                file.limit()
            ));
        }
        match self.write(ctx.conversation_id, file, &entries).await {
            Ok(()) => ToolOutput::ok(format!(
                "saved; {} now holds {used} of {} characters",
                file.file_name(),
                file.limit()
            )),
            Err(e) => ToolOutput::error(format!("cannot write {}: {e}", file.file_name())),
        }
    }
}
