//! Concurrent writers and migrations.

use super::*;

pub(crate) async fn concurrent_writers_never_fail(store: Arc<dyn SessionStore>) {
    let mut tasks = Vec::new();
    for w in 0..16 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let (cid, sid) = started(&store, &format!("api:writer-{w}")).await;
            for i in 0..20 {
                store
                    .append_messages(
                        &sid,
                        &[user(&format!("writer {w} message {i}")), assistant("ack")],
                    )
                    .await?;
                store
                    .add_usage(
                        &sid,
                        &SessionUsage {
                            input_tokens: 1,
                            ..Default::default()
                        },
                    )
                    .await?;
            }
            Ok::<_, StoreError>((cid, sid))
        }));
    }
    for task in tasks {
        let (_, sid) = task
            .await
            .expect("join")
            .expect("no write may fail under contention");
        let s = store.session(&sid).await.expect("load").expect("exists");
        assert_eq!(s.message_count, 40);
        assert_eq!(s.usage.input_tokens, 20);
    }
    let hits = search(
        &store,
        SearchQuery {
            limit: 1000,
            ..text("writer")
        },
    )
    .await;
    assert_eq!(hits.len(), 320);
}

pub(crate) async fn migrations_are_current(store: Arc<dyn SessionStore>) {
    let status = store.migration_status().await.expect("status");
    assert!(!status.known.is_empty());
    assert!(status.is_current(), "{status:?}");
    store.migrate().await.expect("migrating again is a no-op");
    store.ping().await.expect("ping");
}
