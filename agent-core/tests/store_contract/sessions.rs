//! Conversations and sessions: creation, appends, rotation, branching, resuming, titles.

use super::*;

pub(crate) async fn conversations_are_created_once_per_key(store: Arc<dyn SessionStore>) {
    let mut new = NewConversation::new("telegram:dm:42", "telegram");
    new.chat_id = Some("42".into());
    let a = store.conversation(&new).await.expect("create");
    let b = store.conversation(&new).await.expect("get");
    assert_eq!(a.id, b.id);
    assert_eq!(b.chat_id.as_deref(), Some("42"));
    assert_eq!(b.settings, json!({}));
    let other = conversation(&store, "telegram:dm:43").await;
    assert_ne!(other.id, a.id);

    store
        .set_conversation_settings(a.id, &json!({"busy_mode": "interrupt"}))
        .await
        .expect("settings");
    let again = store
        .conversation_by_key("telegram:dm:42")
        .await
        .expect("by key")
        .expect("exists");
    assert_eq!(again.settings["busy_mode"], "interrupt");
    assert!(
        store
            .conversation_by_key("nope")
            .await
            .expect("lookup")
            .is_none()
    );
    assert!(matches!(
        store.set_conversation_settings(999_999, &json!({})).await,
        Err(StoreError::NotFound { .. })
    ));
}

pub(crate) async fn sessions_start_with_documented_ids_and_source(store: Arc<dyn SessionStore>) {
    let c = conversation(&store, "discord:dm:7").await;
    let spec = SessionSpec {
        title: None,
        model: Some("m1".into()),
        system_prompt: Some("be brief".into()),
    };
    let s = store.start_session(c.id, &spec).await.expect("start");
    let id = s.id.as_bytes();
    assert_eq!(s.id.len(), 22, "{}", s.id);
    assert!(id[..8].iter().all(u8::is_ascii_digit) && id[8] == b'_' && id[15] == b'_');
    assert!(id[16..].iter().all(u8::is_ascii_hexdigit));
    assert_eq!(s.source, "discord");
    assert_eq!(s.model.as_deref(), Some("m1"));
    assert_eq!(s.system_prompt.as_deref(), Some("be brief"));
    assert!(s.ended_at.is_none() && s.parent_session_id.is_none());
    let c = store
        .conversation_by_id(c.id)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(c.current_session_id.as_deref(), Some(s.id.as_str()));
    let loaded = store.session(&s.id).await.expect("load").expect("exists");
    assert_eq!(loaded, s);
}

pub(crate) async fn system_prompt_is_frozen_once(store: Arc<dyn SessionStore>) {
    let (_, sid) = started(&store, "api:frozen").await;
    let first = store
        .freeze_system_prompt(&sid, "prompt A")
        .await
        .expect("freeze");
    assert_eq!(first, "prompt A");
    let second = store
        .freeze_system_prompt(&sid, "prompt B")
        .await
        .expect("freeze again");
    assert_eq!(second, "prompt A", "a frozen prompt is never replaced");
    let loaded = store.session(&sid).await.expect("load").expect("exists");
    assert_eq!(loaded.system_prompt.as_deref(), Some("prompt A"));
    assert!(matches!(
        store.freeze_system_prompt("nope", "x").await,
        Err(StoreError::NotFound { .. })
    ));
}

pub(crate) async fn session_locks_exclude_other_holders_until_they_expire(
    store: Arc<dyn SessionStore>,
) {
    let (_, sid) = started(&store, "api:locks").await;
    let long = std::time::Duration::from_secs(600);
    assert!(store.try_lock_session(&sid, "a", long).await.expect("lock"));
    assert!(
        !store.try_lock_session(&sid, "b", long).await.expect("lock"),
        "held by a"
    );
    assert!(
        store
            .try_lock_session(&sid, "a", long)
            .await
            .expect("relock"),
        "a may renew"
    );
    store.unlock_session(&sid, "b").await.expect("unlock");
    assert!(
        !store.try_lock_session(&sid, "b", long).await.expect("lock"),
        "b cannot release a's lease"
    );
    store.unlock_session(&sid, "a").await.expect("unlock");
    assert!(
        store
            .try_lock_session(&sid, "b", std::time::Duration::from_millis(1))
            .await
            .expect("lock")
    );
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    assert!(
        store.try_lock_session(&sid, "a", long).await.expect("lock"),
        "an expired lease is taken over"
    );
}

pub(crate) async fn appended_messages_round_trip_with_counters(store: Arc<dyn SessionStore>) {
    let (_, sid) = started(&store, "api:alice").await;
    let mut call = NewMessage::text(Role::Assistant, "");
    call.content = None;
    call.tool_calls = Some(json!([
        {"id": "c1", "type": "function", "function": {"name": "clock", "arguments": "{}"}},
        {"id": "c2", "type": "function", "function": {"name": "todo", "arguments": "{\"op\":\"list\"}"}}
    ]));
    call.finish_reason = Some("tool_calls".into());
    let mut result = NewMessage::text(Role::Tool, "12:00");
    result.tool_call_id = Some("c1".into());
    result.tool_name = Some("clock".into());
    result.token_count = Some(3);
    let batch = vec![user("what time is it?"), call.clone(), result.clone()];
    let ids = store.append_messages(&sid, &batch).await.expect("append");
    assert_eq!(ids.len(), 3);
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    let more = store
        .append_messages(&sid, &[assistant("noon")])
        .await
        .expect("append");
    assert!(more[0] > ids[2]);

    let messages = store.messages(&sid).await.expect("load");
    let bodies: Vec<_> = messages.iter().map(|m| m.body.clone()).collect();
    assert_eq!(
        bodies,
        vec![user("what time is it?"), call, result, assistant("noon")]
    );
    assert!(messages.iter().all(|m| m.active && m.session_id == sid));
    let session = store.session(&sid).await.expect("load").expect("exists");
    assert_eq!(session.message_count, 4);
    assert_eq!(session.tool_call_count, 2);

    assert_eq!(
        store
            .deactivate_messages(&sid, &[more[0]])
            .await
            .expect("undo"),
        1
    );
    let after = store.messages(&sid).await.expect("load");
    assert_eq!(after.len(), 3);
    assert_eq!(
        store.append_messages(&sid, &[]).await.expect("empty"),
        Vec::<i64>::new()
    );
}

pub(crate) async fn append_to_unknown_session_writes_nothing(store: Arc<dyn SessionStore>) {
    let err = store
        .append_messages("19990101_000000_abcdef", &[user("lost?")])
        .await;
    assert!(err.is_err(), "appending to a missing session must fail");
    // The failed write left nothing behind on the writer: the next append commits normally.
    let (_, sid) = started(&store, "api:after-failure").await;
    let ids = store
        .append_messages(&sid, &[user("kept")])
        .await
        .expect("append after a failure");
    assert_eq!(ids.len(), 1);
    assert_eq!(store.messages(&sid).await.expect("load").len(), 1);
    store.sync_search_index().await.expect("index");
    let hits = store
        .search(&SearchQuery {
            text: "lost".into(),
            ..Default::default()
        })
        .await;
    assert!(hits.expect("search").is_empty());
}

pub(crate) async fn first_end_reason_wins(store: Arc<dyn SessionStore>) {
    let (_, sid) = started(&store, "webhook:r:c1").await;
    assert!(
        store
            .end_session(&sid, EndReason::UserReset)
            .await
            .expect("end")
    );
    assert!(
        !store
            .end_session(&sid, EndReason::Compression)
            .await
            .expect("end again")
    );
    let s = store.session(&sid).await.expect("load").expect("exists");
    assert_eq!(s.end_reason.as_deref(), Some("user_reset"));
    assert!(s.ended_at.is_some());
    assert!(matches!(
        store
            .end_session("19990101_000000_000000", EndReason::UserReset)
            .await,
        Err(StoreError::NotFound { .. })
    ));
}

pub(crate) fn compression(conversation_id: i64, from: &str, messages: Vec<NewMessage>) -> Rotation {
    Rotation {
        conversation_id,
        from_session_id: from.to_owned(),
        end_reason: EndReason::Compression,
        link_parent: true,
        spec: SessionSpec::default(),
        messages,
    }
}

pub(crate) async fn compression_rotation_links_numbers_and_repoints(store: Arc<dyn SessionStore>) {
    let c = conversation(&store, "telegram:dm:100").await;
    let title = format!("Refactor auth {}", fastrand::u32(..));
    let spec = SessionSpec {
        title: Some(title.clone()),
        ..Default::default()
    };
    let first = store.start_session(c.id, &spec).await.expect("start");
    store
        .append_messages(&first.id, &[user("a"), assistant("b")])
        .await
        .expect("append");

    let summary = vec![user("[summary] a/b"), assistant("ok")];
    let second = store
        .rotate(&compression(c.id, &first.id, summary.clone()))
        .await
        .expect("rotate");
    assert_eq!(second.parent_session_id.as_deref(), Some(first.id.as_str()));
    assert_eq!(
        second.title.as_deref(),
        Some(format!("{title} (2)").as_str())
    );
    assert_eq!(second.compression_count, 1);
    assert_eq!(second.message_count, 2);
    assert_eq!(second.source, "telegram");
    let bodies: Vec<_> = store
        .messages(&second.id)
        .await
        .expect("load")
        .into_iter()
        .map(|m| m.body)
        .collect();
    assert_eq!(bodies, summary);
    let old = store
        .session(&first.id)
        .await
        .expect("load")
        .expect("exists");
    assert_eq!(old.end_reason.as_deref(), Some("compression"));
    assert_eq!(store.messages(&first.id).await.expect("old kept").len(), 2);
    let c2 = store
        .conversation_by_id(c.id)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(c2.current_session_id.as_deref(), Some(second.id.as_str()));

    let third = store
        .rotate(&compression(c.id, &second.id, vec![]))
        .await
        .expect("rotate");
    assert_eq!(
        third.title.as_deref(),
        Some(format!("{title} (3)").as_str())
    );
    assert_eq!(third.compression_count, 2);
}

pub(crate) async fn rotation_is_atomic_when_it_fails(store: Arc<dyn SessionStore>) {
    let c = conversation(&store, "api:atomic").await;
    let taken = format!("Taken {}", fastrand::u32(..));
    let other = conversation(&store, "api:other").await;
    store
        .start_session(
            other.id,
            &SessionSpec {
                title: Some(taken.clone()),
                ..Default::default()
            },
        )
        .await
        .expect("other");
    let s = store
        .start_session(c.id, &SessionSpec::default())
        .await
        .expect("start");
    let mut rotation = compression(c.id, &s.id, vec![user("summary")]);
    rotation.end_reason = EndReason::UserReset;
    rotation.link_parent = false;
    rotation.spec.title = Some(taken.clone());
    match store.rotate(&rotation).await {
        Err(StoreError::TitleTaken(t)) => assert_eq!(t, taken),
        other => panic!("expected TitleTaken, got {other:?}"),
    }
    let unchanged = store.session(&s.id).await.expect("load").expect("exists");
    assert!(
        unchanged.end_reason.is_none(),
        "old session must not be ended by a failed rotation"
    );
    let c2 = store
        .conversation_by_id(c.id)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(c2.current_session_id.as_deref(), Some(s.id.as_str()));
    assert_eq!(
        store
            .list_sessions(&SessionFilter {
                conversation_id: Some(c.id),
                ..Default::default()
            })
            .await
            .expect("list")
            .len(),
        1
    );

    // Rotating from a session that is no longer current is refused.
    let next = store
        .rotate(&compression(c.id, &s.id, vec![]))
        .await
        .expect("rotate");
    assert!(matches!(
        store.rotate(&compression(c.id, &s.id, vec![])).await,
        Err(StoreError::Invalid(_))
    ));
    let c3 = store
        .conversation_by_id(c.id)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(c3.current_session_id.as_deref(), Some(next.id.as_str()));
}

pub(crate) async fn reset_starts_an_unlinked_session(store: Arc<dyn SessionStore>) {
    let (cid, sid) = started(&store, "discord:thread:9").await;
    let rotation = Rotation {
        conversation_id: cid,
        from_session_id: sid.clone(),
        end_reason: EndReason::UserReset,
        link_parent: false,
        spec: SessionSpec::default(),
        messages: vec![],
    };
    let fresh = store.rotate(&rotation).await.expect("reset");
    assert!(fresh.parent_session_id.is_none());
    assert_eq!(fresh.compression_count, 0);
    assert_eq!(fresh.message_count, 0);
    let old = store.session(&sid).await.expect("load").expect("exists");
    assert_eq!(old.end_reason.as_deref(), Some("user_reset"));
}

pub(crate) async fn branch_copies_messages_and_ends_source(store: Arc<dyn SessionStore>) {
    let c = conversation(&store, "webhook:r:branch").await;
    let title = format!("Plan {}", fastrand::u32(..));
    let s = store
        .start_session(
            c.id,
            &SessionSpec {
                title: Some(title.clone()),
                model: Some("m".into()),
                ..Default::default()
            },
        )
        .await
        .expect("start");
    let ids = store
        .append_messages(&s.id, &[user("one"), assistant("two"), user("three")])
        .await
        .expect("append");
    store
        .deactivate_messages(&s.id, &ids[2..])
        .await
        .expect("undo");
    let b = store.branch(&s.id, None).await.expect("branch");
    assert_eq!(b.parent_session_id.as_deref(), Some(s.id.as_str()));
    assert_eq!(b.title.as_deref(), Some(format!("{title} (2)").as_str()));
    assert_eq!(b.model.as_deref(), Some("m"));
    let copied: Vec<_> = store
        .messages(&b.id)
        .await
        .expect("load")
        .into_iter()
        .map(|m| m.body)
        .collect();
    assert_eq!(copied, vec![user("one"), assistant("two")]);
    let src = store.session(&s.id).await.expect("load").expect("exists");
    assert_eq!(src.end_reason.as_deref(), Some("branched"));
    assert_eq!(store.messages(&s.id).await.expect("source kept").len(), 2);
    let named = store.branch(&b.id, Some("Side quest")).await;
    let named = named.expect("named branch");
    assert_eq!(named.title.as_deref(), Some("Side quest"));
    let c2 = store
        .conversation_by_id(c.id)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(c2.current_session_id.as_deref(), Some(named.id.as_str()));

    // Branching an older session switches away from the current one.
    let old_branch = store
        .branch(&s.id, Some("From the start"))
        .await
        .expect("branch old");
    assert_eq!(old_branch.parent_session_id.as_deref(), Some(s.id.as_str()));
    let left = store
        .session(&named.id)
        .await
        .expect("load")
        .expect("exists");
    assert_eq!(left.end_reason.as_deref(), Some("session_switch"));
    let src = store.session(&s.id).await.expect("load").expect("exists");
    assert_eq!(
        src.end_reason.as_deref(),
        Some("branched"),
        "the first reason stays"
    );
}

pub(crate) async fn resume_reopens_and_switches(store: Arc<dyn SessionStore>) {
    let (cid, first) = started(&store, "telegram:dm:5").await;
    let reset = Rotation {
        conversation_id: cid,
        from_session_id: first.clone(),
        end_reason: EndReason::UserReset,
        link_parent: false,
        spec: SessionSpec::default(),
        messages: vec![],
    };
    let second = store.rotate(&reset).await.expect("reset");
    let resumed = store.resume(cid, &first).await.expect("resume");
    assert_eq!(resumed.id, first);
    assert!(resumed.ended_at.is_none() && resumed.end_reason.is_none());
    let s2 = store
        .session(&second.id)
        .await
        .expect("load")
        .expect("exists");
    assert_eq!(s2.end_reason.as_deref(), Some("session_switch"));
    let c = store
        .conversation_by_id(cid)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(c.current_session_id.as_deref(), Some(first.as_str()));

    let (_, foreign) = started(&store, "telegram:dm:6").await;
    assert!(matches!(
        store.resume(cid, &foreign).await,
        Err(StoreError::Invalid(_))
    ));
}

pub(crate) async fn titles_are_unique_and_resolve_to_newest_variant(store: Arc<dyn SessionStore>) {
    let (cid, sid) = started(&store, "api:titles").await;
    let title = format!("Notes {}", fastrand::u32(..));
    store.set_title(&sid, &title).await.expect("title");
    store
        .set_title(&sid, &title)
        .await
        .expect("same title again is fine");
    let (_, other) = started(&store, "api:titles2").await;
    match store.set_title(&other, &title).await {
        Err(StoreError::TitleTaken(t)) => assert_eq!(t, title),
        other => panic!("expected TitleTaken, got {other:?}"),
    }
    assert!(matches!(
        store.set_title(&other, "   ").await,
        Err(StoreError::Invalid(_))
    ));
    let second = store
        .rotate(&compression(cid, &sid, vec![]))
        .await
        .expect("rotate");
    let third = store
        .rotate(&compression(cid, &second.id, vec![]))
        .await
        .expect("rotate");
    let by_bare = store
        .session_by_title(&title)
        .await
        .expect("lookup")
        .expect("found");
    assert_eq!(
        by_bare.id, third.id,
        "a bare title names its newest numbered variant"
    );
    let by_numbered = store
        .session_by_title(&format!("{title} (2)"))
        .await
        .expect("lookup")
        .expect("found");
    assert_eq!(by_numbered.id, second.id);
    assert!(
        store
            .session_by_title("no such title at all")
            .await
            .expect("lookup")
            .is_none()
    );
    let wild = store.session_by_title("%").await.expect("lookup");
    assert!(wild.is_none(), "LIKE wildcards in a title are literal");
}

pub(crate) async fn usage_accumulates(store: Arc<dyn SessionStore>) {
    let (_, sid) = started(&store, "api:usage").await;
    let call = SessionUsage {
        input_tokens: 100,
        output_tokens: 20,
        cache_read_tokens: 50,
        cache_write_tokens: 10,
        reasoning_tokens: 5,
        estimated_cost_usd: 0.25,
        api_call_count: 1,
    };
    store.add_usage(&sid, &call).await.expect("usage");
    store.add_usage(&sid, &call).await.expect("usage");
    let s = store.session(&sid).await.expect("load").expect("exists");
    assert_eq!(s.usage.input_tokens, 200);
    assert_eq!(s.usage.output_tokens, 40);
    assert_eq!(s.usage.cache_read_tokens, 100);
    assert_eq!(s.usage.cache_write_tokens, 20);
    assert_eq!(s.usage.reasoning_tokens, 10);
    assert_eq!(s.usage.api_call_count, 2);
    assert!((s.usage.estimated_cost_usd - 0.5).abs() < 1e-9);
    assert!(
        store
            .add_usage("19990101_000000_000000", &call)
            .await
            .is_err()
    );
}

pub(crate) async fn lineage_walks_to_root_and_family(store: Arc<dyn SessionStore>) {
    let (cid, root) = started(&store, "api:lineage").await;
    let a = store
        .rotate(&compression(cid, &root, vec![]))
        .await
        .expect("rotate");
    let b = store
        .rotate(&compression(cid, &a.id, vec![]))
        .await
        .expect("rotate");
    let chain: Vec<_> = store
        .lineage(&b.id)
        .await
        .expect("lineage")
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(chain, vec![root.clone(), a.id.clone(), b.id.clone()]);
    let family: Vec<_> = store
        .lineage_family(&a.id)
        .await
        .expect("family")
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(family, vec![root.clone(), a.id.clone(), b.id.clone()]);
    let (_, unrelated) = started(&store, "api:unrelated").await;
    assert_eq!(
        store
            .lineage_family(&unrelated)
            .await
            .expect("family")
            .len(),
        1
    );
    assert!(matches!(
        store.lineage("19990101_000000_000000").await,
        Err(StoreError::NotFound { .. })
    ));
}

pub(crate) async fn sessions_list_by_conversation_and_source(store: Arc<dyn SessionStore>) {
    let (cid, s1) = started(&store, "discord:dm:list").await;
    let s2 = store
        .rotate(&compression(cid, &s1, vec![]))
        .await
        .expect("rotate");
    let (_, t1) = started(&store, "telegram:dm:list").await;
    let mine = store
        .list_sessions(&SessionFilter {
            conversation_id: Some(cid),
            ..Default::default()
        })
        .await
        .expect("list");
    let ids: Vec<_> = mine.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, vec![s2.id.as_str(), s1.as_str()], "newest first");
    let tg = store
        .list_sessions(&SessionFilter {
            source: Some("telegram".into()),
            ..Default::default()
        })
        .await
        .expect("list");
    assert_eq!(tg.len(), 1);
    assert_eq!(tg[0].id, t1);
    let one = store
        .list_sessions(&SessionFilter {
            limit: 1,
            ..Default::default()
        })
        .await
        .expect("list");
    assert_eq!(one.len(), 1);
}

pub(crate) async fn conversations_list_by_last_activity(store: Arc<dyn SessionStore>) {
    let pause = || tokio::time::sleep(std::time::Duration::from_millis(5));
    let (a, a1) = started(&store, "telegram:dm:busy").await;
    pause().await;
    let (b, _) = started(&store, "discord:dm:quiet").await;
    pause().await;
    let c = conversation(&store, "telegram:dm:new").await;
    pause().await;
    store
        .append_messages(&a1, &[user("hi"), assistant("hello")])
        .await
        .expect("append");

    let all = store
        .list_conversations(&ConversationFilter::default())
        .await
        .expect("list");
    let ids: Vec<i64> = all.iter().map(|s| s.conversation.id).collect();
    assert_eq!(ids, [a, c.id, b], "the newest message or change first");
    assert_eq!(all[0].message_count, 2);
    assert_eq!(
        all[0].conversation.current_session_id.as_deref(),
        Some(a1.as_str())
    );
    assert_eq!(all[1].message_count, 0);
    assert_eq!(all[1].conversation.current_session_id, None);
    assert!(all[0].last_active_at > all[1].last_active_at);

    let telegram = store
        .list_conversations(&ConversationFilter {
            source: Some("telegram".into()),
            ..Default::default()
        })
        .await
        .expect("list");
    let ids: Vec<i64> = telegram.iter().map(|s| s.conversation.id).collect();
    assert_eq!(ids, [a, c.id]);
    let one = store
        .list_conversations(&ConversationFilter {
            limit: 1,
            ..Default::default()
        })
        .await
        .expect("list");
    assert_eq!(one.len(), 1);

    // After a rotation the listing follows the conversation to its new session.
    let a2 = store
        .rotate(&compression(a, &a1, vec![user("[summary] hi")]))
        .await
        .expect("rotate");
    store.set_title(&a2.id, "Greetings").await.expect("title");
    let all = store
        .list_conversations(&ConversationFilter::default())
        .await
        .expect("list");
    assert_eq!(
        all[0].conversation.current_session_id.as_deref(),
        Some(a2.id.as_str())
    );
    assert_eq!(all[0].message_count, 1);
    assert_eq!(all[0].title.as_deref(), Some("Greetings"));
}
