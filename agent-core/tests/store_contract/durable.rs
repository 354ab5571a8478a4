//! The inbox (dedup, attempts) and the outbox (one row per turn and target).

use super::*;

pub(crate) async fn inbox_deduplicates_and_tracks_attempts(store: Arc<dyn SessionStore>) {
    let item = NewInboxItem {
        source: "telegram".into(),
        platform_message_id: "update-1".into(),
        conversation_key: "telegram:dm:1".into(),
        payload: json!({"text": "hi"}),
    };
    let first = store.inbox_accept(&item).await.expect("accept");
    assert!(first.fresh);
    assert_eq!(first.item.state, InboxState::Accepted);
    assert_eq!(first.item.payload, json!({"text": "hi"}));
    let again = store.inbox_accept(&item).await.expect("accept again");
    assert!(!again.fresh, "a repeated platform id must not run twice");
    assert_eq!(again.item.id, first.item.id);
    let other_source = NewInboxItem {
        source: "discord".into(),
        ..item.clone()
    };
    assert!(
        store
            .inbox_accept(&other_source)
            .await
            .expect("accept")
            .fresh
    );

    assert_eq!(
        store
            .inbox_begin_attempt(first.item.id)
            .await
            .expect("attempt"),
        1
    );
    assert_eq!(
        store
            .inbox_begin_attempt(first.item.id)
            .await
            .expect("attempt"),
        2
    );
    let unfinished = store.inbox_unfinished().await.expect("unfinished");
    assert_eq!(unfinished.len(), 2);
    assert_eq!(unfinished[0].state, InboxState::Processing);
    assert_eq!(unfinished[0].attempts, 2);
    store
        .inbox_set_state(first.item.id, InboxState::Done)
        .await
        .expect("done");
    store
        .inbox_set_state(unfinished[1].id, InboxState::Failed)
        .await
        .expect("failed");
    assert!(
        store
            .inbox_unfinished()
            .await
            .expect("unfinished")
            .is_empty()
    );
    assert!(
        store
            .inbox_set_state(999_999, InboxState::Done)
            .await
            .is_err()
    );
}

pub(crate) async fn outbox_reuses_rows_per_turn_and_target(store: Arc<dyn SessionStore>) {
    let inbox = store
        .inbox_accept(&NewInboxItem {
            source: "webhook".into(),
            platform_message_id: "m1".into(),
            conversation_key: "webhook:r:c".into(),
            payload: json!({}),
        })
        .await
        .expect("accept");
    let reply = NewOutboxItem {
        inbox_id: Some(inbox.item.id),
        target: "webhook:r:c".into(),
        payload: json!({"text": "answer"}),
    };
    let row = store.outbox_enqueue(&reply).await.expect("enqueue");
    assert_eq!(row.state, OutboxState::Pending);
    let retry = NewOutboxItem {
        payload: json!({"text": "a second answer"}),
        ..reply.clone()
    };
    let reused = store.outbox_enqueue(&retry).await.expect("enqueue again");
    assert_eq!(reused.id, row.id, "a retried turn reuses its outbox row");
    assert_eq!(
        reused.payload,
        json!({"text": "answer"}),
        "the first answer is the one delivered"
    );
    let callback = NewOutboxItem {
        target: "https://example.invalid/cb".into(),
        ..reply.clone()
    };
    assert_ne!(
        store
            .outbox_enqueue(&callback)
            .await
            .expect("second target")
            .id,
        row.id
    );
    let answers = store
        .outbox_for_inbox(inbox.item.id)
        .await
        .expect("by inbox");
    let targets: Vec<&str> = answers.iter().map(|o| o.target.as_str()).collect();
    assert_eq!(targets, ["webhook:r:c", "https://example.invalid/cb"]);
    assert!(
        store
            .outbox_for_inbox(inbox.item.id + 1000)
            .await
            .expect("none")
            .is_empty()
    );

    assert_eq!(
        store.outbox_begin_attempt(row.id).await.expect("attempt"),
        1
    );
    store
        .outbox_mark_delivered(row.id, &["501".into(), "502".into()])
        .await
        .expect("delivered");
    let pending = store.outbox_pending().await.expect("pending");
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].target, "https://example.invalid/cb");
    store
        .outbox_mark_failed(pending[0].id)
        .await
        .expect("failed");
    assert!(store.outbox_pending().await.expect("pending").is_empty());
    let delivered = store.outbox_enqueue(&reply).await.expect("lookup");
    assert_eq!(delivered.state, OutboxState::Delivered);
    assert_eq!(
        delivered.platform_message_ids,
        vec!["501".to_owned(), "502".to_owned()]
    );
    assert!(delivered.delivered_at.is_some());
}

pub(crate) async fn answering_an_inbox_row_is_one_step(store: Arc<dyn SessionStore>) {
    let inbox = store
        .inbox_accept(&NewInboxItem {
            source: "api".into(),
            platform_message_id: "a1".into(),
            conversation_key: "api:x".into(),
            payload: json!({}),
        })
        .await
        .expect("accept");
    let reply = NewOutboxItem {
        inbox_id: Some(inbox.item.id),
        target: "api".into(),
        payload: json!({"reply": "first"}),
    };
    let row = store
        .answer_inbox(&reply, true, InboxState::Done)
        .await
        .expect("answer");
    assert_eq!(
        (row.state, row.payload["reply"].as_str()),
        (OutboxState::Delivered, Some("first"))
    );
    assert!(row.delivered_at.is_some());
    assert!(
        store.inbox_unfinished().await.expect("inbox").is_empty(),
        "the inbox row is done"
    );
    assert!(store.outbox_pending().await.expect("outbox").is_empty());
    // Again (a retried turn): the first answer stands.
    let again = store
        .answer_inbox(
            &NewOutboxItem {
                payload: json!({"reply": "second"}),
                ..reply.clone()
            },
            true,
            InboxState::Done,
        )
        .await
        .expect("answer again");
    assert_eq!(
        (again.id, again.payload["reply"].as_str()),
        (row.id, Some("first"))
    );
    // A pushed reply stays pending for its deliverer.
    let pushed = store
        .answer_inbox(
            &NewOutboxItem {
                target: "callback:r|http://x".into(),
                ..reply.clone()
            },
            false,
            InboxState::Failed,
        )
        .await
        .expect("pushed");
    assert_eq!(pushed.state, OutboxState::Pending);
    assert_eq!(store.outbox_pending().await.expect("outbox").len(), 1);
    let read = store
        .inbox_accept(&NewInboxItem {
            source: "api".into(),
            platform_message_id: "a1".into(),
            conversation_key: "api:x".into(),
            payload: json!({}),
        })
        .await
        .expect("read back");
    assert_eq!(read.item.state, InboxState::Failed);
    assert!(matches!(
        store
            .answer_inbox(
                &NewOutboxItem {
                    inbox_id: Some(999_999),
                    ..reply.clone()
                },
                true,
                InboxState::Done
            )
            .await,
        Err(StoreError::NotFound { .. })
    ));
}

pub(crate) async fn pairing_requests_are_limited_and_approved_once(store: Arc<dyn SessionStore>) {
    let limits = PairingLimits {
        ttl: std::time::Duration::from_secs(3600),
        max_pending: 3,
        per_user_interval: std::time::Duration::from_secs(600),
    };
    let ask_on = |platform: &str, user: &str, hash: &str| NewPairing {
        platform: platform.into(),
        user_id: user.into(),
        username: Some(format!("name{user}")),
        code_hash: hash.into(),
    };
    let request = |pairing: NewPairing, limits: PairingLimits| {
        let store = store.clone();
        async move { store.pairing_request(&pairing, limits).await.expect("ask") }
    };
    let approve = |platform: &'static str, hash: &'static str| {
        let store = store.clone();
        async move {
            store
                .pairing_approve(platform, hash)
                .await
                .expect("approve")
        }
    };
    let paired = |platform: &'static str, user: &'static str| {
        let store = store.clone();
        async move { store.is_paired(platform, user).await.expect("paired?") }
    };
    let ask = |user: &str, hash: &str| ask_on("telegram", user, hash);

    assert_eq!(
        request(ask("1", "h1"), limits).await,
        PairingOutcome::Created
    );
    assert_eq!(
        request(ask("1", "h1b"), limits).await,
        PairingOutcome::TooSoon,
        "one request per user per interval"
    );
    assert_eq!(
        request(ask("2", "h2"), limits).await,
        PairingOutcome::Created
    );
    assert_eq!(
        request(ask("3", "h3"), limits).await,
        PairingOutcome::Created
    );
    assert_eq!(
        request(ask("4", "h4"), limits).await,
        PairingOutcome::TooMany,
        "at most three pending"
    );
    // Another platform has its own limit.
    assert_eq!(
        request(ask_on("discord", "4", "h4"), limits).await,
        PairingOutcome::Created
    );

    assert!(!paired("telegram", "2").await);
    assert_eq!(approve("telegram", "nope").await, None);
    assert_eq!(
        approve("discord", "h2").await,
        None,
        "codes are per platform"
    );
    let user = approve("telegram", "h2").await.expect("found");
    assert_eq!(
        (user.user_id.as_str(), user.username.as_deref()),
        ("2", Some("name2"))
    );
    assert!(paired("telegram", "2").await);
    assert!(!paired("discord", "2").await);
    assert_eq!(approve("telegram", "h2").await, None, "a code works once");
    assert_eq!(
        request(ask("2", "h2c"), limits).await,
        PairingOutcome::AlreadyPaired
    );
    // Approval freed a pending slot.
    assert_eq!(
        request(ask("4", "h4"), limits).await,
        PairingOutcome::Created
    );

    // Expired codes neither approve nor count as pending.
    let short = PairingLimits {
        ttl: std::time::Duration::from_millis(1),
        per_user_interval: std::time::Duration::from_millis(1),
        ..limits
    };
    assert_eq!(
        request(ask_on("other", "9", "h9"), short).await,
        PairingOutcome::Created
    );
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    assert_eq!(approve("other", "h9").await, None, "expired");
}
