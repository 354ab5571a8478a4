//! `clock`: the current date and time, so the model need not guess it.

use chrono::{FixedOffset, Utc};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{Tool, ToolContext, ToolOutput};

/// The current time in UTC or at a fixed offset.
#[derive(Debug, Default)]
pub struct Clock;

#[async_trait::async_trait]
impl Tool for Clock {
    fn name(&self) -> &str {
        "clock"
    }

    fn description(&self) -> &str {
        "The current date and time (RFC 3339). Optional utc_offset_minutes, e.g. 120 for UTC+2."
    }

    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {
            "utc_offset_minutes": {"type": "integer", "minimum": -1439, "maximum": 1439}
        }})
    }

    async fn call(
        &self,
        args: Value,
        _ctx: &ToolContext,
        _cancel: &CancellationToken,
    ) -> ToolOutput {
        let minutes = match args.get("utc_offset_minutes") {
            None | Some(Value::Null) => 0,
            Some(v) => match v.as_i64().and_then(|m| i32::try_from(m).ok()) {
                Some(m) => m,
                None => return ToolOutput::error("utc_offset_minutes must be an integer"),
            },
        };
        match FixedOffset::east_opt(minutes * 60) {
            Some(offset) => ToolOutput::ok(Utc::now().with_timezone(&offset).to_rfc3339()),
            None => ToolOutput::error("utc_offset_minutes must be between -1439 and 1439"),
        }
    }
}
