//! `todo`: a task list the agent keeps per session, so a long task survives its own
//! context (the compressor re-injects it after compression and carries it to the next
//! session). With a directory ([`Todo::durable`]) every list is also a small JSON file,
//! written on each change, so a restart loses nothing.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{Tool, ToolContext, ToolOutput, str_arg};

/// At most this many items per session: a list, not a database.
const MAX_ITEMS: usize = 50;

/// One item.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TodoItem {
    pub text: String,
    pub done: bool,
}

/// Task lists by session id: in memory, and in `dir` when durable.
#[derive(Debug, Default)]
pub struct Todo {
    lists: Mutex<HashMap<String, Vec<TodoItem>>>,
    dir: Option<PathBuf>,
}

impl Todo {
    /// Lists kept in memory only (a restart empties them).
    pub fn new() -> Self {
        Self::default()
    }

    /// Lists also kept as `<dir>/<session id>.json`.
    pub fn durable(dir: impl Into<PathBuf>) -> Self {
        Self {
            lists: Mutex::default(),
            dir: Some(dir.into()),
        }
    }

    /// The session's list, for re-injection after compression.
    pub fn items(&self, session_id: &str) -> Vec<TodoItem> {
        self.lists
            .lock()
            .map(|mut lists| self.list(&mut lists, session_id).clone())
            .unwrap_or_default()
    }

    /// Copies a session's list to its successor (compression moves the conversation to a new
    /// session; the task list goes with it).
    pub fn carry(&self, from: &str, to: &str) {
        if let Ok(mut lists) = self.lists.lock() {
            let items = self.list(&mut lists, from).clone();
            if !items.is_empty() {
                self.save(to, &items);
                lists.insert(to.to_owned(), items);
            }
        }
    }

    /// The session's list, loaded from disk on first use.
    fn list<'a>(
        &self,
        lists: &'a mut HashMap<String, Vec<TodoItem>>,
        session_id: &str,
    ) -> &'a mut Vec<TodoItem> {
        lists
            .entry(session_id.to_owned())
            .or_insert_with(|| self.load(session_id))
    }

    fn path(&self, session_id: &str) -> Option<PathBuf> {
        let safe: String = session_id
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        self.dir.as_ref().map(|d| d.join(format!("{safe}.json")))
    }

    fn load(&self, session_id: &str) -> Vec<TodoItem> {
        let Some(path) = self.path(session_id) else {
            return Vec::new();
        };
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|error| {
                tracing::warn!(path = %path.display(), %error, "unreadable todo list ignored");
                Vec::new()
            }),
            Err(_) => Vec::new(),
        }
    }

    /// Writes the list (a tiny file, under the lock, so writes land in order); a failure is
    /// logged, the in-memory list stays.
    fn save(&self, session_id: &str, items: &[TodoItem]) {
        let Some(path) = self.path(session_id) else {
            return;
        };
        if let Err(error) = write_atomically(&path, items) {
            tracing::warn!(path = %path.display(), %error, "todo list not saved");
        }
    }

    /// The list as the model reads it.
    pub fn render(items: &[TodoItem]) -> String {
        if items.is_empty() {
            return "(the todo list is empty)".into();
        }
        items
            .iter()
            .enumerate()
            .map(|(i, t)| format!("{}. [{}] {}", i + 1, if t.done { "x" } else { " " }, t.text))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

#[async_trait::async_trait]
impl Tool for Todo {
    fn name(&self) -> &str {
        "todo"
    }

    fn description(&self) -> &str {
        "Your task list for this session. op: list | add (text) | done (n) | remove (n) | clear. \
         Items are numbered from 1."
    }

    fn parameters(&self) -> Value {
        json!({"type": "object", "required": ["op"], "properties": {
            "op": {"type": "string", "enum": ["list", "add", "done", "remove", "clear"]},
            "text": {"type": "string"},
            "n": {"type": "integer", "minimum": 1}
        }})
    }

    async fn call(
        &self,
        args: Value,
        ctx: &ToolContext,
        _cancel: &CancellationToken,
    ) -> ToolOutput {
        let op = match str_arg(&args, "op") {
            Ok(op) => op,
            Err(e) => return e,
        };
        let Ok(mut lists) = self.lists.lock() else {
            return ToolOutput::error("the todo list is unavailable");
        };
        let list = self.list(&mut lists, &ctx.session_id);
        let index = || -> Result<usize, ToolOutput> {
            let n = args
                .get("n")
                .and_then(Value::as_u64)
                .ok_or_else(|| ToolOutput::error("missing item number n"))?;
            usize::try_from(n)
                .ok()
                .filter(|n| (1..=list.len()).contains(n))
                .map(|n| n - 1)
                .ok_or_else(|| {
                    ToolOutput::error(format!("no item {n}; the list has {}", list.len()))
                })
        };
        match op {
            "list" => {}
            "add" => {
                let text = match str_arg(&args, "text") {
                    Ok(t) if !t.trim().is_empty() => t.trim().to_owned(),
                    Ok(_) => return ToolOutput::error("text is empty"),
                    Err(e) => return e,
                };
                if list.len() >= MAX_ITEMS {
                    return ToolOutput::error(format!(
                        "the list is full ({MAX_ITEMS} items); remove some first"
                    ));
                }
                list.push(TodoItem { text, done: false });
            }
            "done" => match index() {
                Ok(i) => list[i].done = true,
                Err(e) => return e,
            },
            "remove" => match index() {
                Ok(i) => {
                    list.remove(i);
                }
                Err(e) => return e,
            },
            "clear" => list.clear(),
            other => return ToolOutput::error(format!("unknown op {other:?}")),
        }
        if op != "list" {
            self.save(&ctx.session_id, list);
        }
        ToolOutput::ok(Self::render(list))
    }
}

/// Write then rename: a crash mid-write never leaves half a file.
fn write_atomically(path: &Path, items: &[TodoItem]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_vec(items)?)?;
    std::fs::rename(&tmp, path)
}
