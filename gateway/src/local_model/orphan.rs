//! The local model server's pid file. The server is a child of the daemon and dies with it on
//! every clean stop, but a daemon killed with SIGKILL (the OOM killer, `kill -9`) cannot take
//! it down, and the orphan would hold its memory and port forever. So its pid is written next
//! to the model, and the next start stops a process still running under that pid — only if its
//! command line names this home's model file, since pids are reused.

use std::path::Path;

const PID_FILE: &str = "server.pid";

/// Records the server's pid in `dir`.
pub fn record(dir: &Path, pid: Option<u32>) {
    if let Some(pid) = pid
        && let Err(error) = std::fs::write(dir.join(PID_FILE), pid.to_string())
    {
        tracing::warn!(%error, "cannot write the local model server's pid file");
    }
}

/// Forgets the pid (the server was stopped).
pub fn forget(dir: &Path) {
    let _ = std::fs::remove_file(dir.join(PID_FILE));
}

/// Stops a server an earlier daemon left running: the pid in `dir`'s pid file, if that process
/// is still running with `model` on its command line. Returns whether one was stopped.
pub fn reap(dir: &Path, model: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(dir.join(PID_FILE)) else {
        return false;
    };
    forget(dir);
    let Ok(pid) = text.trim().parse::<i32>() else {
        return false;
    };
    if !runs_with(pid, model) {
        return false;
    }
    tracing::warn!(
        pid,
        "stopping the local model server an earlier run left behind"
    );
    stop(pid)
}

/// Whether process `pid` runs with `model` as one of its arguments.
fn runs_with(pid: i32, model: &Path) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let wanted = model.as_os_str().as_encoded_bytes();
    cmdline.split(|b| *b == 0).any(|arg| arg == wanted)
}

#[cfg(unix)]
fn stop(pid: i32) -> bool {
    use nix::sys::signal::{Signal, kill};
    kill(nix::unistd::Pid::from_raw(pid), Signal::SIGTERM).is_ok()
}

#[cfg(not(unix))]
fn stop(_pid: i32) -> bool {
    false
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::process::{Child, Command};
    use std::time::Duration;

    /// A process that stays up with `arg` on its command line (returned once its command line
    /// shows it: right after the fork it is still the test's own).
    fn holding(arg: &Path) -> Child {
        // Its `sleep` outlives a stopped `sh` for a while: no shared output to hold open.
        let child = Command::new("sh")
            .args(["-c", "sleep 10; :", "sh"])
            .arg(arg)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("sh");
        let pid = i32::try_from(child.id()).expect("pid");
        for _ in 0..100 {
            if runs_with(pid, arg) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        child
    }

    fn exited(child: &mut Child) -> bool {
        for _ in 0..100 {
            if child.try_wait().expect("wait").is_some() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    #[test]
    fn a_left_over_server_is_stopped_and_an_unrelated_pid_is_not() {
        let dir = tempfile::tempdir().expect("dir");
        let model = dir.path().join("model/SmolLM2.gguf");

        let mut orphan = holding(&model);
        record(dir.path(), Some(orphan.id()));
        assert!(reap(dir.path(), &model));
        assert!(exited(&mut orphan), "the orphan was stopped");
        assert!(!dir.path().join(PID_FILE).exists());

        // Same pid file, but the process runs something else: left alone.
        let mut other = holding(&dir.path().join("another.gguf"));
        record(dir.path(), Some(other.id()));
        assert!(!reap(dir.path(), &model));
        assert!(other.try_wait().expect("wait").is_none(), "still running");
        let _ = other.kill();
        let _ = other.wait();

        // No pid file, or a broken one: nothing to do.
        assert!(!reap(dir.path(), &model));
        std::fs::write(dir.path().join(PID_FILE), "not a pid").expect("write");
        assert!(!reap(dir.path(), &model));
    }
}
