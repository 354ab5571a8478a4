//! `todo`: a task list the agent keeps per session, so a long task survives its own
//! context (the compressor re-injects it after compression).

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{Tool, ToolContext, ToolOutput, str_arg};

/// At most this many items per session: a list, not a database.
const MAX_ITEMS: usize = 50;

/// One item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TodoItem {
    pub text: String,
    pub done: bool,
}

/// Task lists by session id (in memory; a restart empties them).
#[derive(Debug, Default)]
pub struct Todo {
    lists: Mutex<HashMap<String, Vec<TodoItem>>>,
}

impl Todo {
    /// The session's list, for re-injection after compression.
    pub fn items(&self, session_id: &str) -> Vec<TodoItem> {
        self.lists
            .lock()
            .ok()
            .and_then(|l| l.get(session_id).cloned())
            .unwrap_or_default()
    }

    /// Copies a session's list to its successor (compression moves the conversation to a new
    /// session; the task list goes with it).
    pub fn carry(&self, from: &str, to: &str) {
        if let Ok(mut lists) = self.lists.lock()
            && let Some(items) = lists.get(from).cloned()
        {
            lists.insert(to.to_owned(), items);
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
        let list = lists.entry(ctx.session_id.clone()).or_default();
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
        ToolOutput::ok(Self::render(list))
    }
}
