//! What the user is told when a turn cannot answer: short, honest, and saying whether trying
//! again can help. The details go to the log, never the provider's raw error.

use agent_core::agent::TurnError;
use agent_core::llm::ErrorClass;

/// The reply for a failed turn.
pub fn turn_failed(error: &TurnError) -> String {
    match error {
        TurnError::Cancelled => "Stopped.".into(),
        TurnError::Store(_) => {
            "Sorry — I could not save this conversation just now, so I did not answer. Please try again in a moment.".into()
        }
        TurnError::Model(e) => match e.class {
            ErrorClass::ContentPolicy => {
                "The model's provider declined to answer this message (content policy).".into()
            }
            ErrorClass::Auth | ErrorClass::Billing => {
                "The model provider refused the request (credentials or billing). The operator needs to fix the configuration.".into()
            }
            ErrorClass::ModelNotFound => {
                "The configured model is not available. The operator needs to fix the configuration.".into()
            }
            ErrorClass::ContextOverflow | ErrorClass::PayloadTooLarge => {
                "This message does not fit in the model's context, even after compressing the conversation. Try a shorter message, or /new to start fresh.".into()
            }
            _ => "Sorry — the model could not be reached right now. Please try again in a moment.".into(),
        },
    }
}

/// The reply when a message failed on every attempt (crashes or restarts mid-turn).
pub const GAVE_UP: &str =
    "Sorry — I could not answer this message after several attempts. Please send it again.";
