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

/// Writes from many tasks at once (SQLite commits them together): a write that fails — here
/// appends to a session that does not exist — fails alone and leaves nothing behind, every
/// other write lands, and the rarer writes running beside them (titles, new sessions) finish.
pub(crate) async fn a_failing_write_among_concurrent_ones_fails_alone(
    store: Arc<dyn SessionStore>,
) {
    let mut tasks = Vec::new();
    for w in 0..24 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let (cid, sid) = started(&store, &format!("api:mixed-{w}")).await;
            let mut failed = 0;
            for i in 0..10 {
                let target = if (w + i) % 3 == 0 {
                    "no-such-session".to_owned()
                } else {
                    sid.clone()
                };
                match store
                    .append_messages(&target, &[user(&format!("mixed {w} {i}")), assistant("ok")])
                    .await
                {
                    Ok(ids) => assert_eq!(ids.len(), 2, "one id per message"),
                    Err(_) if target != sid => failed += 1,
                    Err(err) => panic!("a valid append failed: {err}"),
                }
                if i == 5 {
                    store
                        .set_title(&sid, &format!("mixed title {w}"))
                        .await
                        .expect("a title beside the appends");
                    store
                        .start_session(cid, &SessionSpec::default())
                        .await
                        .expect("a new session beside the appends");
                }
            }
            (sid, failed)
        }));
    }
    let mut expected_total = 0;
    for task in tasks {
        let (sid, failed) = task.await.expect("join");
        let landed = 10 - failed;
        expected_total += landed * 2;
        let s = store.session(&sid).await.expect("load").expect("exists");
        assert_eq!(
            s.message_count,
            landed * 2,
            "counters count only what landed"
        );
        assert_eq!(
            store.messages(&sid).await.expect("messages").len() as i64,
            landed * 2
        );
        assert!(s.title.is_some_and(|t| t.starts_with("mixed title")));
    }
    assert!(expected_total < 24 * 20, "some appends were meant to fail");
    let hits = search(
        &store,
        SearchQuery {
            limit: 1000,
            ..text("mixed")
        },
    )
    .await;
    assert_eq!(
        hits.len() as i64,
        expected_total / 2,
        "one user message per landed append"
    );
}
