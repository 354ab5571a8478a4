//! `iris doctor`: one line per check, and an exit code that says whether all passed.
//!
//! Checks: the configuration parsed (it did, or we would not be here), the data directory is
//! writable, the store is reachable, its migrations are current (looked at without applying
//! them), each enabled MCP server starts and lists its tools, each model provider answers a
//! one-token request and each enabled chat platform accepts its token (see [`remote`]). A check
//! that cannot apply (a hosted model without a key) is shown as `skip` and fails nothing.

mod remote;

use agent_core::redact::Redactor;

use crate::config::Loaded;

/// The outcome of one check.
struct Check {
    name: String,
    result: Result<String, String>,
}

/// Runs every check, prints them, and returns whether all passed.
pub async fn run(loaded: &Loaded, redactor: &Redactor) -> bool {
    let mut checks = vec![
        Check {
            name: "config".into(),
            result: Ok(match &loaded.file {
                Some(path) => format!("{} parsed", path.display()),
                None => "no file; defaults and IRIS__* environment".to_owned(),
            }),
        },
        data_dir(loaded),
        store(loaded, redactor).await,
    ];
    checks.extend(mcp_servers(loaded).await);
    checks.extend(remote::models(loaded).await);
    checks.extend(remote::platforms(loaded).await);
    let mut all = true;
    for check in &checks {
        let (mark, detail) = match &check.result {
            Ok(detail) => ("ok  ", detail.as_str()),
            Err(detail) => match detail.strip_prefix("SKIP: ") {
                Some(reason) => ("skip", reason),
                None => {
                    all = false;
                    ("FAIL", detail.as_str())
                }
            },
        };
        println!("{mark} {:<10} {}", check.name, redactor.redact(detail));
    }
    all
}

fn data_dir(loaded: &Loaded) -> Check {
    let dir = &loaded.home;
    let result = std::fs::create_dir_all(dir)
        .and_then(|()| {
            let probe = dir.join(format!(".doctor-{}", std::process::id()));
            std::fs::write(&probe, b"ok")?;
            std::fs::remove_file(&probe)
        })
        .map(|()| format!("{} is writable", dir.display()))
        .map_err(|e| format!("{} is not writable: {e}", dir.display()));
    Check {
        name: "data dir".into(),
        result,
    }
}

async fn store(loaded: &Loaded, redactor: &Redactor) -> Check {
    let url = loaded.store_url();
    let shown = redactor.redact(&url).into_owned();
    let store = match agent_core::store::connect_unmigrated(&url).await {
        Ok(store) => store,
        Err(err) => {
            return Check {
                name: "store".into(),
                result: Err(format!("{shown}: {err}")),
            };
        }
    };
    if let Err(err) = store.ping().await {
        return Check {
            name: "store".into(),
            result: Err(format!("{shown}: {err}")),
        };
    }
    let result = match store.migration_status().await {
        Ok(status) if status.is_current() => Ok(format!(
            "{shown} reachable ({}), migrations current ({} applied)",
            store.backend(),
            status.applied.len()
        )),
        Ok(status) => {
            let missing: Vec<String> = status
                .known
                .iter()
                .filter(|v| !status.applied.contains(v))
                .map(ToString::to_string)
                .collect();
            Err(format!(
                "{shown} reachable, but migrations {} are not applied; run `iris migrate`",
                missing.join(", ")
            ))
        }
        Err(err) => Err(format!("{shown}: cannot read migrations: {err}")),
    };
    Check {
        name: "store".into(),
        result,
    }
}

async fn mcp_servers(loaded: &Loaded) -> Vec<Check> {
    let mut checks = Vec::new();
    for resolved in crate::tools::mcp_servers(loaded) {
        let config = match resolved {
            Ok(config) => config,
            Err(e) => {
                checks.push(Check {
                    name: "mcp".into(),
                    result: Err(e.to_string()),
                });
                continue;
            }
        };
        let name = format!("mcp {}", config.name);
        let result = match agent_core::tools::mcp::McpServer::connect(config).await {
            Ok(server) => match server.tools().await {
                Ok(tools) => Ok(format!("connected, {} tools", tools.len())),
                Err(e) => Err(e.to_string()),
            },
            Err(e) => Err(e.to_string()),
        };
        checks.push(Check { name, result });
    }
    checks
}
