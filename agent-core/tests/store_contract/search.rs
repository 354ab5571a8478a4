//! Full-text search: words, tools, filters, CJK, any user text, lineage roots.

use super::*;

pub(crate) async fn search(
    store: &Arc<dyn SessionStore>,
    query: SearchQuery,
) -> Vec<agent_core::store::SearchHit> {
    store.sync_search_index().await.expect("index");
    store.search(&query).await.expect("search")
}

pub(crate) fn text(q: &str) -> SearchQuery {
    SearchQuery {
        text: q.into(),
        ..Default::default()
    }
}

pub(crate) async fn search_finds_words_tools_and_filters(store: Arc<dyn SessionStore>) {
    let (tg, tg_sid) = started(&store, "telegram:dm:search").await;
    let (_, dc_sid) = started(&store, "discord:dm:search").await;
    let mut call = NewMessage::text(Role::Assistant, "");
    call.content = None;
    call.tool_calls = Some(
        json!([{"id": "c", "function": {"name": "shell", "arguments": "{\"cmd\":\"kubectl rollout\"}"}}]),
    );
    let mut result = NewMessage::text(Role::Tool, "deployment finished");
    result.tool_name = Some("deploy_tracker".into());
    store
        .append_messages(
            &tg_sid,
            &[
                user("Please deploy the billing service tonight"),
                call,
                result,
            ],
        )
        .await
        .expect("append");
    store
        .append_messages(
            &dc_sid,
            &[assistant("I will deploy nothing; billing is frozen")],
        )
        .await
        .expect("append");

    let hits = search(&store, text("deploy billing")).await;
    assert_eq!(hits.len(), 2);
    assert!(hits[0].message_id > hits[1].message_id, "newest first");
    assert_eq!(
        hits[1].snippet,
        "Please [deploy] the [billing] service tonight"
    );
    assert_eq!(hits[1].source, "telegram");
    assert_eq!(hits[1].conversation_id, tg);

    let by_source = search(
        &store,
        SearchQuery {
            source: Some("discord".into()),
            ..text("billing")
        },
    )
    .await;
    assert_eq!(by_source.len(), 1);
    assert_eq!(by_source[0].session_id, dc_sid);
    let by_role = search(
        &store,
        SearchQuery {
            role: Some(Role::User),
            ..text("billing")
        },
    )
    .await;
    assert_eq!(by_role.len(), 1);
    assert_eq!(by_role[0].role, Role::User);
    let by_conv = search(
        &store,
        SearchQuery {
            conversation_id: Some(tg),
            ..text("billing")
        },
    )
    .await;
    assert_eq!(by_conv.len(), 1);

    let args = search(&store, text("kubectl")).await;
    assert_eq!(args.len(), 1, "tool-call arguments are searchable");
    assert!(args[0].snippet.contains("[kubectl]"), "{}", args[0].snippet);
    let tool = search(&store, text("deploy_tracker")).await;
    assert_eq!(tool.len(), 1, "tool names are searchable");
    assert_eq!(tool[0].role, Role::Tool);
    let prefix = search(&store, text("bill")).await;
    assert_eq!(prefix.len(), 2, "the last word matches as a prefix");
    assert!(search(&store, text("nonexistentword")).await.is_empty());
    let limited = search(
        &store,
        SearchQuery {
            limit: 1,
            ..text("billing")
        },
    )
    .await;
    assert_eq!(limited.len(), 1);
}

pub(crate) async fn search_handles_cjk_substrings(store: Arc<dyn SessionStore>) {
    let (_, sid) = started(&store, "telegram:dm:cjk").await;
    store
        .append_messages(
            &sid,
            &[
                user("我们明天部署数据库服务器"),
                assistant("好的，用Rust写迁移脚本"),
                user("サーバーを再起動してください"),
            ],
        )
        .await
        .expect("append");
    let three = search(&store, text("数据库")).await;
    assert_eq!(three.len(), 1);
    assert_eq!(three[0].snippet, "我们明天部署[数据库]服务器");
    let two = search(&store, text("部署")).await;
    assert_eq!(two.len(), 1, "two-character CJK terms match as substrings");
    let one = search(&store, text("好")).await;
    assert_eq!(one.len(), 1);
    let kana = search(&store, text("再起動")).await;
    assert_eq!(kana.len(), 1);
    let mixed = search(&store, text("Rust 迁移")).await;
    assert_eq!(mixed.len(), 1, "Latin and CJK terms combine");
    assert_eq!(mixed[0].role, Role::Assistant);
    assert!(search(&store, text("数据仓库")).await.is_empty());
}

pub(crate) async fn search_accepts_any_user_text(store: Arc<dyn SessionStore>) {
    let (_, sid) = started(&store, "api:hostile").await;
    store
        .append_messages(
            &sid,
            &[user(
                "error: NOT found (code 42) in path/to/file.rs — AND more",
            )],
        )
        .await
        .expect("append");
    let hostile = [
        "\"",
        "\"unbalanced",
        "-",
        "--",
        "-found",
        ":",
        "a:b",
        "*",
        "found*",
        "AND",
        "OR",
        "NOT",
        "found AND",
        "NOT found",
        "(",
        ")",
        "((found",
        "found)",
        "🎉",
        "🎉 found",
        "数据",
        "' OR 1=1 --",
        "%",
        "_",
        "\\",
        "NEAR(found code)",
        "code:42",
        "^found",
        "{found}",
        "found\u{0}",
        "",
        "   ",
        "path/to/file.rs",
        "😀😀😀",
        "ÅÄÖ",
        "𠀀𠀁",
    ];
    for q in hostile {
        let result = store.search(&text(q)).await;
        assert!(result.is_ok(), "query {q:?} failed: {result:?}");
    }
    store.sync_search_index().await.expect("index");
    assert_eq!(
        store
            .search(&text("NOT found"))
            .await
            .expect("search")
            .len(),
        1,
        "operators are words"
    );
    assert_eq!(
        store
            .search(&text("path/to/file.rs"))
            .await
            .expect("search")
            .len(),
        1
    );
    assert_eq!(
        store
            .search(&text("(code 42)"))
            .await
            .expect("search")
            .len(),
        1
    );
}

pub(crate) async fn search_resolves_hits_to_lineage_root(store: Arc<dyn SessionStore>) {
    let (cid, root) = started(&store, "api:roots").await;
    store
        .append_messages(&root, &[user("the secret ingredient is cardamom")])
        .await
        .expect("append");
    let child = store
        .rotate(&compression(cid, &root, vec![user("summary: spice talk")]))
        .await
        .expect("rotate");
    let grandchild = store
        .rotate(&compression(cid, &child.id, vec![]))
        .await
        .expect("rotate");
    store
        .append_messages(&grandchild.id, &[user("more cardamom please")])
        .await
        .expect("append");
    let (_, elsewhere) = started(&store, "api:roots-other").await;
    store
        .append_messages(&elsewhere, &[user("cardamom elsewhere")])
        .await
        .expect("append");

    let hits = search(&store, text("cardamom")).await;
    assert_eq!(hits.len(), 3);
    for hit in &hits {
        if hit.session_id == elsewhere {
            assert_eq!(hit.root_session_id, elsewhere);
        } else {
            assert_eq!(
                hit.root_session_id, root,
                "hit in {} must resolve to the root",
                hit.session_id
            );
        }
    }
    let scoped = search(
        &store,
        SearchQuery {
            lineage_of: Some(grandchild.id.clone()),
            ..text("cardamom")
        },
    )
    .await;
    let sessions: Vec<_> = scoped.iter().map(|h| h.session_id.as_str()).collect();
    assert_eq!(sessions, vec![grandchild.id.as_str(), root.as_str()]);
}

/// PostgreSQL searches the newest messages first and the older ones through the indexes; the
/// two steps together must give exactly what one ordered query would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_two_step_search_matches_a_single_ordered_query() {
    let Some(mut small) = postgres_store().await else {
        return;
    };
    small.set_search_window(7);
    let small: Arc<dyn SessionStore> = Arc::new(small);
    let (_, a) = started(&small, "telegram:dm:steps-a").await;
    let (_, b) = started(&small, "discord:dm:steps-b").await;
    for i in 0..40 {
        let sid = if i % 3 == 0 { &b } else { &a };
        let text = if i % 4 == 0 {
            format!("alpha beta {i}")
        } else {
            format!("gamma {i} 数据库")
        };
        small
            .append_messages(sid, &[user(&text)])
            .await
            .expect("append");
    }
    let all_alpha = small
        .search(&SearchQuery {
            limit: 100,
            ..text("alpha")
        })
        .await
        .expect("search");
    assert_eq!(all_alpha.len(), 10);
    assert!(
        all_alpha
            .windows(2)
            .all(|w| w[0].message_id > w[1].message_id),
        "newest first"
    );
    for limit in [1, 3, 5, 9, 10] {
        let page = small
            .search(&SearchQuery {
                limit,
                ..text("alpha")
            })
            .await
            .expect("search");
        let ids: Vec<_> = page.iter().map(|h| h.message_id).collect();
        let expected: Vec<_> = all_alpha
            .iter()
            .take(limit as usize)
            .map(|h| h.message_id)
            .collect();
        assert_eq!(ids, expected, "limit {limit}");
    }
    let filtered = small
        .search(&SearchQuery {
            source: Some("discord".into()),
            limit: 100,
            ..text("alpha")
        })
        .await
        .expect("search");
    assert_eq!(filtered.len(), 4, "i = 0, 12, 24, 36");
    let cjk = small
        .search(&SearchQuery {
            limit: 100,
            ..text("数据库")
        })
        .await
        .expect("search");
    assert_eq!(cjk.len(), 30);
}
