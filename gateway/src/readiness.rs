//! What `/readyz` checks besides the store: each enabled chat platform says whether it is
//! connected (Telegram: its last `getUpdates` worked, or its webhook is set; Discord: its
//! gateway session is up). A load balancer or orchestrator stops sending traffic to a process
//! that is not ready, and the body names the part that is not.

use std::sync::{Arc, Mutex};

/// A readiness check: `Ok`, or why not.
pub type Check = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// The checks of one process. Cheap to clone; clones share the checks.
#[derive(Clone, Default)]
pub struct Readiness(Arc<Mutex<Vec<(String, Check)>>>);

impl Readiness {
    /// Adds the check `name` (replacing one of that name).
    pub fn add(&self, name: &str, check: Check) {
        if let Ok(mut checks) = self.0.lock() {
            checks.retain(|(n, _)| n != name);
            checks.push((name.to_owned(), check));
        }
    }

    /// Every check's outcome, by name.
    pub fn run(&self) -> Vec<(String, Result<(), String>)> {
        let checks: Vec<(String, Check)> = self.0.lock().map(|c| c.clone()).unwrap_or_default();
        checks
            .into_iter()
            .map(|(name, check)| {
                let outcome = check();
                (name, outcome)
            })
            .collect()
    }
}
