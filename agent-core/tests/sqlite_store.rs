//! What only the SQLite backend has to prove: clear errors for unusable paths, the background
//! indexer, and no `SQLITE_BUSY` when several store instances (as several processes would)
//! write to one file.

use std::sync::Arc;
use std::time::Duration;

use agent_core::store::{
    NewConversation, NewMessage, Role, SearchQuery, SessionSpec, SessionStore, SqliteStore,
    StoreError,
};

#[tokio::test]
async fn an_unwritable_path_is_named_in_the_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let blocker = dir.path().join("not-a-dir");
    std::fs::write(&blocker, b"file").expect("write");
    let path = blocker.join("state.db");
    let err = SqliteStore::open(&path).await.expect_err("must fail");
    assert!(matches!(err, StoreError::Unwritable { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains(&path.display().to_string()), "{text}");
}

#[tokio::test]
async fn open_by_url_creates_the_file_and_its_directory() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("nested/deeper/state.db");
    let store = agent_core::store::open(&format!("sqlite://{}", path.display()))
        .await
        .expect("open");
    assert_eq!(store.backend(), "sqlite");
    assert!(path.exists());
    let err = agent_core::store::open("mysql://nope")
        .await
        .expect_err("must fail");
    assert!(matches!(err, StoreError::BadUrl(_)), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_background_indexer_catches_up_without_being_asked() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open(dir.path().join("state.db"))
        .await
        .expect("open");
    let c = store
        .conversation(&NewConversation::new("api:idx", "api"))
        .await
        .expect("conv");
    let s = store
        .start_session(c.id, &SessionSpec::default())
        .await
        .expect("session");
    store
        .append_messages(&s.id, &[NewMessage::text(Role::User, "zanzibar logistics")])
        .await
        .expect("append");
    let query = SearchQuery {
        text: "zanzibar".into(),
        ..Default::default()
    };
    // Functional, not a timing goal: the indexer runs within a second; allow ten.
    let mut found = 0;
    for _ in 0..100 {
        found = store.search(&query).await.expect("search").len();
        if found > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(found, 1, "the indexer never indexed the message");
    assert_eq!(
        store.sync_search_index().await.expect("sync"),
        0,
        "nothing left to index"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_instances_on_one_file_never_surface_busy() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("state.db");
    let mut stores: Vec<Arc<dyn SessionStore>> = Vec::new();
    for _ in 0..3 {
        stores.push(Arc::new(SqliteStore::open(&path).await.expect("open")));
    }
    let mut tasks = Vec::new();
    for (i, store) in stores.iter().cycle().take(12).enumerate() {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let key = format!("api:proc-{i}");
            let c = store
                .conversation(&NewConversation::new(key, "api"))
                .await?;
            let s = store.start_session(c.id, &SessionSpec::default()).await?;
            for n in 0..25 {
                let msg = NewMessage::text(Role::User, format!("instance message {n}"));
                store.append_messages(&s.id, &[msg]).await?;
            }
            Ok::<_, StoreError>(s.id)
        }));
    }
    for task in tasks {
        let sid = task
            .await
            .expect("join")
            .expect("a write surfaced an error");
        let s = stores[0]
            .session(&sid)
            .await
            .expect("load")
            .expect("exists");
        assert_eq!(s.message_count, 25);
    }
    stores[0].sync_search_index().await.expect("sync");
    for store in &stores {
        store.sync_search_index().await.expect("sync");
    }
    let hits = stores[1]
        .search(&SearchQuery {
            text: "instance".into(),
            limit: 1000,
            ..Default::default()
        })
        .await
        .expect("search");
    assert_eq!(hits.len(), 300, "every message indexed exactly once");
}
