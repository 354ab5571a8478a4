//! Group commit for the SQLite store's hot writes.
//!
//! A turn writes a handful of small rows (the inbox row, its attempt, the user message, the
//! usage, the answer, the reply). Each one as its own sqlx transaction cost several hops to
//! sqlx's worker thread and one WAL commit, and every conversation queued behind the single
//! writer: the gateway managed ~600 turns/s on two cores with the CPU half idle.
//!
//! Here the hot writes are closures over a plain `rusqlite` connection owned by one writer
//! thread. The thread takes everything that queued while it was busy, holds the store's write
//! gate for the batch (the store's other, rarer writes go through sqlx and take the same gate,
//! so this process never has two writers contending for SQLite's lock; the gate is a fair
//! semaphore, so neither side starves), runs the whole batch in one `BEGIN IMMEDIATE … COMMIT`,
//! each closure inside its own savepoint (one failing write rolls back only itself), and only
//! after the commit hands each caller its result: nothing is reported written before it is
//! durable. Under load a batch holds the writes of dozens of conversations; idle, a batch is
//! one write and costs what it did before.
//!
//! The gate is not sqlx's writer pool (of one) itself: a pooled connection goes back to its pool
//! on a tokio task, and waiting for that task between batches was half the writer's time.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc, oneshot};

use super::{StoreError, StoreResult};

/// Writes taken into one transaction at most: bounds how long one commit holds the writer.
const MAX_BATCH: usize = 512;
/// Queued writes before callers wait for room.
const QUEUE: usize = 4096;

/// One queued write: runs inside the batch's transaction, answers after the commit.
trait Job: Send {
    /// Runs the write inside its savepoint; keeps its result for [`Job::finish`].
    fn run(&mut self, db: &rusqlite::Connection);
    /// Answers the caller: its own result when the batch committed, the commit's error if not.
    fn finish(self: Box<Self>, committed: Result<(), &str>);
}

struct Pending<T, F> {
    work: Option<F>,
    result: Option<StoreResult<T>>,
    reply: oneshot::Sender<StoreResult<T>>,
}

impl<T, F> Job for Pending<T, F>
where
    T: Send,
    F: FnOnce(&rusqlite::Connection) -> StoreResult<T> + Send,
{
    fn run(&mut self, db: &rusqlite::Connection) {
        let Some(work) = self.work.take() else {
            return;
        };
        let result = in_savepoint(db, work);
        self.result = Some(result);
    }

    fn finish(self: Box<Self>, committed: Result<(), &str>) {
        let answer = match (committed, self.result) {
            (Ok(()), Some(result)) => result,
            (Ok(()), None) => Err(StoreError::Invalid("write was not run".into())),
            (Err(reason), _) => Err(StoreError::sqlite(reason)),
        };
        // The caller may have gone away (a cancelled turn); the write stands either way.
        let _ = self.reply.send(answer);
    }
}

/// Runs `work` in a savepoint, rolled back if it fails.
fn in_savepoint<T>(
    db: &rusqlite::Connection,
    work: impl FnOnce(&rusqlite::Connection) -> StoreResult<T>,
) -> StoreResult<T> {
    db.execute_batch("SAVEPOINT job")?;
    match work(db) {
        Ok(value) => {
            db.execute_batch("RELEASE job")?;
            Ok(value)
        }
        Err(err) => {
            db.execute_batch("ROLLBACK TO job; RELEASE job")?;
            Err(err)
        }
    }
}

/// The handle callers queue writes on. Dropping every clone stops the writer thread once the
/// queue is drained.
#[derive(Debug, Clone)]
pub(crate) struct GroupCommit {
    jobs: mpsc::Sender<Box<dyn Job>>,
}

impl GroupCommit {
    /// Opens the writer's connection to `path` and starts its thread. `gate` (one permit) is
    /// held for each batch.
    pub(crate) fn start(path: &Path, gate: Arc<Semaphore>) -> StoreResult<Self> {
        let db = rusqlite::Connection::open(path)?;
        // What sqlx sets on its connections (see `SqliteStore::connect`).
        db.busy_timeout(Duration::from_secs(5))?;
        db.pragma_update(None, "journal_mode", "WAL")?;
        db.pragma_update(None, "synchronous", "NORMAL")?;
        db.pragma_update(None, "foreign_keys", "ON")?;
        db.set_prepared_statement_cache_capacity(32);
        let (jobs, queue) = mpsc::channel(QUEUE);
        let runtime = tokio::runtime::Handle::current();
        std::thread::Builder::new()
            .name("iris-sqlite-writer".into())
            .spawn(move || writer(&runtime, &db, &gate, queue))
            .map_err(|e| StoreError::sqlite(format!("cannot start the writer thread: {e}")))?;
        Ok(Self { jobs })
    }

    /// Runs `work` in the next batch's transaction and returns its result once committed.
    pub(crate) async fn write<T, F>(&self, work: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&rusqlite::Connection) -> StoreResult<T> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let job: Box<dyn Job> = Box::new(Pending {
            work: Some(work),
            result: None,
            reply,
        });
        self.jobs
            .send(job)
            .await
            .map_err(|_| StoreError::sqlite("the store's writer has stopped"))?;
        answer
            .await
            .map_err(|_| StoreError::sqlite("the store's writer stopped mid-write"))?
    }
}

/// The writer thread: one batch per loop, until every [`GroupCommit`] handle is gone.
fn writer(
    runtime: &tokio::runtime::Handle,
    db: &rusqlite::Connection,
    gate: &Semaphore,
    mut queue: mpsc::Receiver<Box<dyn Job>>,
) {
    while let Some(first) = queue.blocking_recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let committed = commit_with_retries(runtime, db, gate, &mut batch);
        let reason = committed.as_ref().err().map(ToString::to_string);
        for job in batch {
            job.finish(reason.as_deref().map_or(Ok(()), Err));
        }
    }
}

/// Commits `batch`, retrying while another process holds the database's write lock (before any
/// job has run: a job runs once).
fn commit_with_retries(
    runtime: &tokio::runtime::Handle,
    db: &rusqlite::Connection,
    gate: &Semaphore,
    batch: &mut [Box<dyn Job>],
) -> StoreResult<()> {
    let mut attempt = 0;
    loop {
        match commit(runtime, db, gate, batch) {
            Err(Busy(err))
                if attempt < super::common::MAX_WRITE_RETRIES
                    && super::SqliteStore::is_retryable(&err) =>
            {
                attempt += 1;
                tracing::debug!(attempt, error = %err, "store busy, retrying batch");
                std::thread::sleep(super::common::retry_delay(attempt));
            }
            Err(Busy(err)) => return Err(err),
            Ok(result) => return result,
        }
    }
}

/// An error before any job of the batch ran: the batch may be tried again.
struct Busy(StoreError);

/// One attempt: take the process's write gate, `BEGIN IMMEDIATE`, run every job, `COMMIT`.
fn commit(
    runtime: &tokio::runtime::Handle,
    db: &rusqlite::Connection,
    gate: &Semaphore,
    batch: &mut [Box<dyn Job>],
) -> Result<StoreResult<()>, Busy> {
    let held = match gate.try_acquire() {
        Ok(held) => held,
        Err(_) => runtime
            .block_on(gate.acquire())
            .map_err(|_| Busy(StoreError::sqlite("the store's write gate is closed")))?,
    };
    db.execute_batch("BEGIN IMMEDIATE")
        .map_err(|e| Busy(e.into()))?;
    for job in batch.iter_mut() {
        job.run(db);
    }
    let result = db.execute_batch("COMMIT").map_err(StoreError::from);
    if result.is_err() {
        // Leave no transaction open: the next batch begins its own.
        let _ = db.execute_batch("ROLLBACK");
    }
    drop(held);
    Ok(result)
}
