//! Set-up shared by the integration tests: a real SQLite store in a temporary directory with
//! one conversation and its first session.

use std::sync::Arc;

use agent_core::store::{NewConversation, SessionSpec, SessionStore, SqliteStore};

/// A store with one conversation (`key`, source `api`) and its current session. The
/// directory lives as long as this value.
pub struct Fresh {
    /// Kept for its lifetime (dropping it deletes the store); some tests also write beside it.
    #[allow(dead_code)]
    pub dir: tempfile::TempDir,
    pub store: Arc<dyn SessionStore>,
    pub conversation_id: i64,
    pub session_id: String,
}

pub async fn fresh_session(key: &str) -> Fresh {
    let dir = tempfile::tempdir().expect("temp dir");
    let store: Arc<dyn SessionStore> = Arc::new(
        SqliteStore::open(dir.path().join("s.db"))
            .await
            .expect("open store"),
    );
    let conversation = store
        .conversation(&NewConversation::new(key, "api"))
        .await
        .expect("conversation");
    let session = store
        .start_session(conversation.id, &SessionSpec::default())
        .await
        .expect("session");
    Fresh {
        dir,
        store,
        conversation_id: conversation.id,
        session_id: session.id,
    }
}
