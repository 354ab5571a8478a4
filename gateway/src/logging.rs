//! Logging: `tracing` to stderr (pretty or JSON), optionally to rotating files, and to the live
//! [`stream`] `iris logs --follow` reads — with every line passed through the [`Redactor`] at
//! each sink.
//!
//! Redaction sits in the writer, not in the code that logs, so no field, span, error message or
//! third-party crate's log line can carry a secret past it. The formatter hands the writer one
//! whole event per write, so a secret is never split across two redaction passes.

use std::io::{self, Write};
use std::path::Path;
use std::sync::Arc;

use agent_core::redact::Redactor;
use anyhow::{Context, Result};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::config::{LogConfig, LogFormat, LogRotation};

/// A `MakeWriter` that redacts everything written through it.
#[derive(Clone)]
pub struct Redacting<M> {
    inner: M,
    redactor: Arc<Redactor>,
}

impl<M> Redacting<M> {
    pub fn new(inner: M, redactor: Arc<Redactor>) -> Self {
        Self { inner, redactor }
    }
}

/// One event's writer: redacts each buffer it is given, then writes it whole.
pub struct RedactingWriter<W> {
    inner: W,
    redactor: Arc<Redactor>,
}

impl<W: Write> Write for RedactingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        let clean = self.redactor.redact(&text);
        self.inner.write_all(clean.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl<'a, M: MakeWriter<'a>> MakeWriter<'a> for Redacting<M> {
    type Writer = RedactingWriter<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        RedactingWriter {
            inner: self.inner.make_writer(),
            redactor: self.redactor.clone(),
        }
    }
}

/// Capacity of the live log stream; a follower slower than this misses lines (and is told).
const STREAM_CAPACITY: usize = 4096;

/// The live log stream `iris logs --follow` reads (through `GET /admin/logs`): every event as a
/// JSON line, redacted like every other sink. Formatting for it happens only while someone
/// follows.
pub fn stream() -> &'static tokio::sync::broadcast::Sender<Arc<str>> {
    static STREAM: std::sync::OnceLock<tokio::sync::broadcast::Sender<Arc<str>>> =
        std::sync::OnceLock::new();
    STREAM.get_or_init(|| tokio::sync::broadcast::channel(STREAM_CAPACITY).0)
}

/// Writes events into [`stream`].
#[derive(Clone, Copy)]
struct StreamWriter;

/// One event's bytes, sent as one line when the formatter is done with it.
struct StreamLine(Vec<u8>);

impl Write for StreamLine {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for StreamLine {
    fn drop(&mut self) {
        let line = String::from_utf8_lossy(&self.0);
        let line = line.trim_end();
        if !line.is_empty() {
            let _ = stream().send(Arc::from(line));
        }
    }
}

impl<'a> MakeWriter<'a> for StreamWriter {
    type Writer = StreamLine;

    fn make_writer(&'a self) -> Self::Writer {
        StreamLine(Vec::new())
    }
}

type LevelHandle = tracing_subscriber::reload::Handle<EnvFilter, tracing_subscriber::Registry>;

/// The live log filter, for [`set_level`].
static LEVEL: std::sync::OnceLock<LevelHandle> = std::sync::OnceLock::new();

/// Replaces the log filter (`log.level` on SIGHUP); `RUST_LOG`, when set, keeps priority.
pub fn set_level(level: &str) -> Result<()> {
    if std::env::var("RUST_LOG").is_ok_and(|v| !v.is_empty()) {
        anyhow::bail!("RUST_LOG is set and takes priority over log.level");
    }
    let filter =
        EnvFilter::try_new(level).with_context(|| format!("invalid log.level {level:?}"))?;
    LEVEL
        .get()
        .context("logging is not initialised")?
        .reload(filter)
        .context("cannot change the log level")
}

/// Keeps the file writer's background thread alive; drop it last.
pub struct LogGuard(#[allow(dead_code)] Option<tracing_appender::non_blocking::WorkerGuard>);

/// Installs the global subscriber. `RUST_LOG`, when set, overrides `config.level`.
pub fn init(config: &LogConfig, home: &Path, redactor: Redactor) -> Result<LogGuard> {
    let redactor = Arc::new(redactor);
    let filter = match std::env::var("RUST_LOG").ok().filter(|v| !v.is_empty()) {
        Some(env) => {
            EnvFilter::try_new(&env).with_context(|| format!("invalid RUST_LOG {env:?}"))?
        }
        None => EnvFilter::try_new(&config.level)
            .with_context(|| format!("invalid log.level {:?}", config.level))?,
    };
    let stderr = Redacting::new(io::stderr, redactor.clone());
    let (file_writer, guard) = if config.file {
        let dir = home.join("logs");
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create log directory {}", dir.display()))?;
        let rotation = match config.rotation {
            LogRotation::Hourly => tracing_appender::rolling::Rotation::HOURLY,
            LogRotation::Daily => tracing_appender::rolling::Rotation::DAILY,
            LogRotation::Never => tracing_appender::rolling::Rotation::NEVER,
        };
        let appender = tracing_appender::rolling::Builder::new()
            .rotation(rotation)
            .filename_prefix("iris")
            .filename_suffix("log")
            .max_log_files(config.max_files.max(1))
            .build(&dir)
            .with_context(|| format!("cannot open log files in {}", dir.display()))?;
        let (writer, guard) = tracing_appender::non_blocking(appender);
        (Some(Redacting::new(writer, redactor.clone())), Some(guard))
    } else {
        (None, None)
    };

    // The live stream: JSON (followers filter on its fields), only while someone follows.
    let streamed = {
        use tracing_subscriber::Layer as _;
        tracing_subscriber::fmt::layer()
            .json()
            .with_writer(Redacting::new(StreamWriter, redactor.clone()))
            .with_filter(tracing_subscriber::filter::filter_fn(|_| {
                stream().receiver_count() > 0
            }))
    };
    let (filter, handle) = tracing_subscriber::reload::Layer::new(filter);
    let _ = LEVEL.set(handle);
    let registry = tracing_subscriber::registry().with(filter).with(streamed);
    // Colour only for a person at a terminal: redirected logs (systemd, files, pipes) stay plain.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let result = match config.format {
        LogFormat::Pretty => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(colour)
                    .with_writer(stderr),
            )
            .with(file_writer.map(|w| {
                tracing_subscriber::fmt::layer()
                    .with_ansi(false)
                    .with_writer(w)
            }))
            .try_init(),
        LogFormat::Json => registry
            .with(tracing_subscriber::fmt::layer().json().with_writer(stderr))
            .with(file_writer.map(|w| tracing_subscriber::fmt::layer().json().with_writer(w)))
            .try_init(),
    };
    result.context("logging was already initialised")?;
    Ok(LogGuard(guard))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A writer into shared memory, to read back what the sink received.
    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<u8>>>);

    impl Write for Capture {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0
                .lock()
                .map_err(|_| io::Error::other("poisoned"))?
                .extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Capture {
        type Writer = Capture;
        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }

    fn captured(capture: &Capture) -> String {
        String::from_utf8(capture.0.lock().map(|b| b.clone()).unwrap_or_default())
            .unwrap_or_default()
    }

    #[test]
    fn secrets_never_reach_the_sink_in_either_format() {
        let bot = "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw";
        let key = "sk-proj-0123456789abcdefghijklmnop";
        let known = "an-odd-secret-value-from-env";
        for json in [false, true] {
            let capture = Capture::default();
            let writer = Redacting::new(capture.clone(), Arc::new(Redactor::with_secrets([known])));
            let layer = tracing_subscriber::fmt::layer()
                .with_writer(writer)
                .with_ansi(false);
            let subscriber: Box<dyn tracing::Subscriber + Send + Sync> = if json {
                Box::new(tracing_subscriber::registry().with(layer.json()))
            } else {
                Box::new(tracing_subscriber::registry().with(layer))
            };
            tracing::subscriber::with_default(subscriber, || {
                let span = tracing::info_span!("turn", conversation = "telegram:dm:1");
                let _enter = span.enter();
                tracing::info!(url = %format!("https://api.telegram.org/bot{bot}/getMe"), "calling telegram");
                tracing::warn!(
                    header = "Authorization: Bearer abcdefghijklmnopqrstuvwx",
                    "request failed"
                );
                tracing::error!(error = %format!("connect postgres://iris:pa55w0rd-xyz@db/iris failed with key {key}"), "store down");
                tracing::info!("configured value {known}");
            });
            let out = captured(&capture);
            for secret in [
                &bot[10..],
                &key[8..],
                "abcdefghijklmnopqrstuvwx",
                "pa55w0rd-xyz",
                known,
            ] {
                assert!(
                    !out.contains(secret),
                    "json={json}: {secret} leaked in\n{out}"
                );
            }
            assert!(
                out.contains("calling telegram") && out.contains("store down"),
                "{out}"
            );
        }
    }
}
