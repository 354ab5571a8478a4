//! Session-store benchmark: sustained append throughput with the search index keeping up, and
//! search latency on a large store — for SQLite, PostgreSQL, and a raw-SQLite baseline that
//! does the same inserts into the same schema and indexes with rusqlite, in one process,
//! without the store layer.
//!
//! ```text
//! cargo bench -p agent-core --bench store -- append [--seconds 60] [--batch 1|50] [--writers N] [--backends sqlite,raw,postgres]
//! cargo bench -p agent-core --bench store -- search [--messages 1000000] [--queries 2000] [--backends sqlite,postgres]
//! ```
//! PostgreSQL comes from `DATABASE_URL` (eval "$(scripts/pg-start.sh)"). Results are printed as
//! Markdown rows for BENCHMARKS.md.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_core::store::{
    NewConversation, NewMessage, Role, SearchQuery, SessionSpec, SessionStore, SqliteStore,
};

const MIGRATION: &str = include_str!("../../migrations/sqlite/0001_initial.sql");

struct Args {
    mode: String,
    seconds: u64,
    batch: usize,
    writers: usize,
    messages: usize,
    queries: usize,
    backends: Vec<String>,
}

fn args() -> Args {
    let mut args = Args {
        mode: String::new(),
        seconds: 60,
        batch: 50,
        writers: 1,
        messages: 1_000_000,
        queries: 2000,
        backends: vec!["sqlite".into(), "raw".into(), "postgres".into()],
    };
    let mut it = std::env::args().skip(1).filter(|a| a != "--bench");
    while let Some(arg) = it.next() {
        let mut value = || it.next().unwrap_or_default();
        match arg.as_str() {
            "--seconds" => args.seconds = value().parse().unwrap_or(60),
            "--batch" => args.batch = value().parse().unwrap_or(50),
            "--writers" => args.writers = value().parse().unwrap_or(1),
            "--messages" => args.messages = value().parse().unwrap_or(1_000_000),
            "--queries" => args.queries = value().parse().unwrap_or(2000),
            "--backends" => args.backends = value().split(',').map(str::to_owned).collect(),
            mode if !mode.starts_with('-') => args.mode = mode.to_owned(),
            other => eprintln!("ignoring unknown argument {other}"),
        }
    }
    args
}

/// Deterministic text: ~250 characters of words from a Zipf-ish vocabulary; 1 % of messages
/// also carry CJK text so the trigram path is exercised.
struct TextGen {
    rng: fastrand::Rng,
    words: Vec<String>,
}

const CJK: &[&str] = &[
    "数据库",
    "部署",
    "服务器",
    "迁移脚本",
    "配置",
    "日志",
    "サーバー",
    "再起動",
];

impl TextGen {
    fn new(seed: u64) -> Self {
        let mut rng = fastrand::Rng::with_seed(42);
        let words = (0..20_000)
            .map(|_| {
                let len = rng.usize(3..10);
                (0..len)
                    .map(|_| rng.alphabetic().to_ascii_lowercase())
                    .collect()
            })
            .collect();
        Self {
            rng: fastrand::Rng::with_seed(seed),
            words,
        }
    }

    fn word(&mut self) -> &str {
        // Squaring a uniform draw skews towards the front: a few common words, a long tail.
        let u = self.rng.f64();
        let i = ((u * u) * self.words.len() as f64) as usize;
        &self.words[i.min(self.words.len() - 1)]
    }

    fn message(&mut self) -> String {
        let mut text = String::with_capacity(270);
        while text.len() < 250 {
            if !text.is_empty() {
                text.push(' ');
            }
            let w = self.word().to_owned();
            text.push_str(&w);
        }
        if self.rng.u8(..100) == 0 {
            text.push(' ');
            text.push_str(CJK[self.rng.usize(..CJK.len())]);
        }
        text
    }
}

fn messages(texts: &mut TextGen, n: usize) -> Vec<NewMessage> {
    (0..n)
        .map(|i| {
            NewMessage::text(
                if i % 2 == 0 {
                    Role::User
                } else {
                    Role::Assistant
                },
                texts.message(),
            )
        })
        .collect()
}

async fn open(backend: &str, dir: &std::path::Path) -> Option<Arc<dyn SessionStore>> {
    match backend {
        "sqlite" => Some(Arc::new(
            SqliteStore::open(dir.join("bench.db"))
                .await
                .expect("open sqlite"),
        )),
        "postgres" => {
            let Ok(url) = std::env::var("DATABASE_URL") else {
                eprintln!("postgres: skipped (no DATABASE_URL)");
                return None;
            };
            // A fresh schema per run, so runs do not see each other's rows.
            let admin = sqlx::PgPool::connect(&url).await.expect("connect");
            let schema = format!("bench_{:08x}", fastrand::u32(..));
            sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_trgm")
                .execute(&admin)
                .await
                .expect("ext");
            sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
                .execute(&admin)
                .await
                .expect("schema");
            let options: sqlx::postgres::PgConnectOptions = url.parse().expect("url");
            let options = options.options([("search_path", format!("{schema},public"))]);
            Some(Arc::new(
                agent_core::store::PostgresStore::connect_with(options)
                    .await
                    .expect("open postgres"),
            ))
        }
        _ => None,
    }
}

/// Appends for `seconds` from `writers` tasks, then waits for the index to catch up.
/// Returns (messages, seconds including catch-up, catch-up seconds).
async fn append_store(store: Arc<dyn SessionStore>, args: &Args) -> (usize, f64, f64) {
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..args.writers {
        let store = store.clone();
        let batch = args.batch;
        tasks.push(tokio::spawn(async move {
            let mut texts = TextGen::new(w as u64 + 1);
            let c = store
                .conversation(&NewConversation::new(format!("api:bench-{w}"), "api"))
                .await
                .expect("conv");
            let s = store
                .start_session(c.id, &SessionSpec::default())
                .await
                .expect("session");
            let mut written = 0;
            while Instant::now() < deadline {
                let batch = messages(&mut texts, batch);
                store.append_messages(&s.id, &batch).await.expect("append");
                written += batch.len();
            }
            written
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.expect("join");
    }
    let appended = start.elapsed();
    store.sync_search_index().await.expect("index");
    let elapsed = start.elapsed().as_secs_f64();
    (total, elapsed, elapsed - appended.as_secs_f64())
}

/// The raw baseline: rusqlite, the same schema, each batch one transaction that inserts the
/// messages, indexes them in FTS5 (and trigram for CJK rows) and bumps the session counters.
fn append_raw(dir: &std::path::Path, args: &Args) -> (usize, f64) {
    let conn = rusqlite::Connection::open(dir.join("raw.db")).expect("open raw");
    conn.execute_batch(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;",
    )
    .expect("pragmas");
    conn.execute_batch(MIGRATION).expect("schema");
    let now = "2026-11-30T00:00:00Z";
    conn.execute(
        "INSERT INTO conversations (key, source, created_at, updated_at) VALUES ('api:raw', 'api', ?1, ?1)",
        [now],
    )
    .expect("conv");
    conn.execute(
        "INSERT INTO sessions (id, conversation_id, source, started_at) VALUES ('s', 1, 'api', ?1)",
        [now],
    )
    .expect("session");
    let mut texts = TextGen::new(1);
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let start = Instant::now();
    let mut total = 0;
    while Instant::now() < deadline {
        let batch = messages(&mut texts, args.batch);
        let tx = conn.unchecked_transaction().expect("begin");
        {
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO messages (session_id, role, content, created_at) VALUES ('s', ?1, ?2, ?3)",
                )
                .expect("prepare");
            let mut fts = tx
                .prepare_cached("INSERT INTO messages_fts (rowid, content, tool_name, tool_calls) VALUES (?1, ?2, NULL, NULL)")
                .expect("prepare");
            let mut tri = tx
                .prepare_cached("INSERT INTO messages_trigram (rowid, content, tool_name, tool_calls) VALUES (?1, ?2, NULL, NULL)")
                .expect("prepare");
            for m in &batch {
                let content = m.content.as_deref().unwrap_or("");
                insert
                    .execute(rusqlite::params![m.role.as_str(), content, now])
                    .expect("insert");
                let id = tx.last_insert_rowid();
                fts.execute(rusqlite::params![id, content]).expect("fts");
                if content.chars().any(|c| c as u32 >= 0x3040) {
                    tri.execute(rusqlite::params![id, content])
                        .expect("trigram");
                }
            }
        }
        tx.execute(
            "UPDATE sessions SET message_count = message_count + ?1 WHERE id = 's'",
            [batch.len() as i64],
        )
        .expect("counters");
        tx.commit().expect("commit");
        total += batch.len();
    }
    (total, start.elapsed().as_secs_f64())
}

async fn bench_append(args: &Args) {
    println!(
        "| backend | batch | writers | messages | seconds (incl. index catch-up) | messages/s | catch-up s |"
    );
    println!("|---|---|---|---|---|---|---|");
    let mut raw_rate = None;
    let mut sqlite_rate = None;
    for backend in &args.backends {
        let dir = tempfile::tempdir().expect("dir");
        if backend == "raw" {
            let (n, secs) = append_raw(dir.path(), args);
            let rate = n as f64 / secs;
            raw_rate = Some(rate);
            println!(
                "| raw rusqlite | {} | 1 | {n} | {secs:.1} | {rate:.0} | 0 |",
                args.batch
            );
            continue;
        }
        let Some(store) = open(backend, dir.path()).await else {
            continue;
        };
        let (n, secs, catch_up) = append_store(store, args).await;
        let rate = n as f64 / secs;
        if backend == "sqlite" {
            sqlite_rate = Some(rate);
        }
        println!(
            "| {backend} store | {} | {} | {n} | {secs:.1} | {rate:.0} | {catch_up:.2} |",
            args.batch, args.writers
        );
    }
    if let (Some(s), Some(r)) = (sqlite_rate, raw_rate) {
        println!("\nSQLite store / raw baseline: {:.0} %", 100.0 * s / r);
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

async fn bench_search(args: &Args) {
    for backend in &args.backends {
        let dir = tempfile::tempdir().expect("dir");
        let Some(store) = open(backend, dir.path()).await else {
            continue;
        };
        let load = Instant::now();
        let mut texts = TextGen::new(7);
        let per_session = 1000;
        let mut written = 0;
        let mut conv = 0;
        while written < args.messages {
            let source = ["telegram", "discord", "webhook", "api"][conv % 4];
            let c = store
                .conversation(&NewConversation::new(
                    format!("{source}:bench:{conv}"),
                    source,
                ))
                .await
                .expect("conv");
            let s = store
                .start_session(c.id, &SessionSpec::default())
                .await
                .expect("session");
            let mut in_session = 0;
            while in_session < per_session && written < args.messages {
                let n = 500
                    .min(per_session - in_session)
                    .min(args.messages - written);
                store
                    .append_messages(&s.id, &messages(&mut texts, n))
                    .await
                    .expect("append");
                in_session += n;
                written += n;
            }
            conv += 1;
        }
        store.sync_search_index().await.expect("index");
        eprintln!(
            "{backend}: loaded {written} messages in {:.1} s",
            load.elapsed().as_secs_f64()
        );

        // Query kinds: a common word, a rare word, two words, a half-typed prefix, a CJK
        // term, a filtered query, and a query that matches nothing.
        let mut qgen = TextGen::new(99);
        let kinds = [
            "common word",
            "rare word",
            "two words",
            "prefix",
            "cjk",
            "word + source filter",
            "no match",
        ];
        println!("\n{backend}, {written} messages:\n");
        println!("| query kind | queries | p50 ms | p99 ms | max ms | mean hits |");
        println!("|---|---|---|---|---|---|");
        let mut all = Vec::new();
        for (k, kind) in kinds.iter().enumerate() {
            let mut times = Vec::new();
            let mut hits = 0usize;
            for i in 0..args.queries / kinds.len() {
                let mut query = SearchQuery::default();
                query.text = match k {
                    0 => qgen.words[qgen.rng.usize(..20)].clone(),
                    1 => qgen.words[qgen.rng.usize(10_000..20_000)].clone(),
                    2 => format!("{} {}", qgen.word().to_owned(), qgen.word().to_owned()),
                    3 => {
                        let w = qgen.word().to_owned();
                        w[..3.min(w.len())].to_owned()
                    }
                    4 => CJK[i % CJK.len()].to_owned(),
                    5 => {
                        query.source = Some("discord".into());
                        qgen.word().to_owned()
                    }
                    _ => format!("zzzq{i}"),
                };
                let t = Instant::now();
                hits += store.search(&query).await.expect("search").len();
                times.push(t.elapsed().as_secs_f64() * 1000.0);
            }
            times.sort_by(f64::total_cmp);
            println!(
                "| {kind} | {} | {:.2} | {:.2} | {:.2} | {:.1} |",
                times.len(),
                percentile(&times, 0.50),
                percentile(&times, 0.99),
                times.last().copied().unwrap_or(0.0),
                hits as f64 / times.len().max(1) as f64
            );
            all.extend(times);
        }
        all.sort_by(f64::total_cmp);
        println!(
            "| **all** | {} | {:.2} | {:.2} | {:.2} | |",
            all.len(),
            percentile(&all, 0.50),
            percentile(&all, 0.99),
            all.last().copied().unwrap_or(0.0)
        );
    }
}

fn main() {
    let args = args();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    match args.mode.as_str() {
        "append" => runtime.block_on(bench_append(&args)),
        "search" => runtime.block_on(bench_search(&args)),
        _ => eprintln!(
            "usage: cargo bench -p agent-core --bench store -- append|search [options]; see the file's docs"
        ),
    }
}
