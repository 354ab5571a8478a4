//! The deploy files, checked as far as this machine can without Docker or systemd: the compose
//! file is valid YAML with the expected services, every path the Dockerfile copies exists,
//! and the commands the unit, the image and compose run are commands `iris` accepts.

use std::path::{Path, PathBuf};

use clap::Parser;
use gateway::cli::Cli;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

#[test]
fn compose_runs_iris_with_postgres_and_waits_for_it() {
    let compose: serde_norway::Value =
        serde_norway::from_str(&read("docker-compose.yml")).expect("valid YAML");
    let services = &compose["services"];
    let pg = &services["postgres"];
    assert!(
        pg["image"]
            .as_str()
            .is_some_and(|i| i.starts_with("postgres:15")),
        "{pg:?}"
    );
    assert!(
        pg["healthcheck"]["test"].is_sequence(),
        "postgres needs a health check"
    );
    assert!(pg["volumes"].is_sequence(), "postgres data needs a volume");
    let iris = &services["iris"];
    assert_eq!(
        iris["depends_on"]["postgres"]["condition"].as_str(),
        Some("service_healthy")
    );
    let url = iris["environment"]["DATABASE_URL"]
        .as_str()
        .expect("DATABASE_URL");
    assert!(
        url.starts_with("postgres://") && url.contains("@postgres:5432/"),
        "{url}"
    );
    let dockerfile = iris["build"]["dockerfile"].as_str().expect("dockerfile");
    assert!(repo().join(dockerfile).is_file(), "{dockerfile} exists");
}

#[test]
fn the_dockerfile_copies_paths_that_exist_and_runs_a_valid_command() {
    let text = read("deploy/Dockerfile");
    let mut copies = 0;
    for line in text
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("COPY ") && !l.contains("--from="))
    {
        let parts: Vec<&str> = line.split_whitespace().skip(1).collect();
        for source in &parts[..parts.len() - 1] {
            assert!(
                repo().join(source).exists(),
                "Dockerfile copies missing {source}"
            );
            copies += 1;
        }
    }
    assert!(copies >= 5, "expected the workspace to be copied");
    assert!(
        text.contains("USER iris"),
        "the final image runs as non-root"
    );
    assert!(text.matches("FROM ").count() >= 2, "multi-stage build");
    let cmd = text.lines().find(|l| l.starts_with("CMD ")).expect("CMD");
    let args: Vec<String> =
        serde_json::from_str(cmd.trim_start_matches("CMD ")).expect("CMD is a JSON array");
    let argv = std::iter::once("iris".to_owned()).chain(args);
    Cli::try_parse_from(argv).expect("the image's command is one iris accepts");
}

#[test]
fn the_systemd_unit_is_hardened_and_runs_a_valid_command() {
    let unit = read("deploy/iris.service");
    for directive in [
        "User=iris",
        "ProtectSystem=strict",
        "NoNewPrivileges=true",
        "Restart=on-failure",
    ] {
        assert!(
            unit.lines().any(|l| l.trim() == directive),
            "missing {directive}"
        );
    }
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    let argv: Vec<&str> = exec.split_whitespace().collect();
    assert!(argv[0].ends_with("/iris"));
    Cli::try_parse_from(argv).expect("the unit's command is one iris accepts");
    // systemd-analyze is not on every machine; when it is, let it judge the unit too.
    if let Ok(out) = std::process::Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(repo().join("deploy/iris.service"))
        .output()
    {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stderr.contains("Unknown key") && !stderr.contains("Invalid"),
            "{stderr}"
        );
    }
}

#[test]
fn the_kubernetes_example_probes_health_and_readiness_and_runs_a_valid_command() {
    use serde::Deserialize;
    let text = read("deploy/kubernetes.yaml");
    let documents: Vec<serde_norway::Value> = serde_norway::Deserializer::from_str(&text)
        .map(serde_norway::Value::deserialize)
        .collect::<Result<_, _>>()
        .expect("valid YAML documents");
    let kind = |k: &str| {
        documents
            .iter()
            .find(|d| d["kind"].as_str() == Some(k))
            .unwrap_or_else(|| panic!("no {k}"))
    };
    let deployment = kind("Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(
        container["livenessProbe"]["httpGet"]["path"].as_str(),
        Some("/healthz")
    );
    assert_eq!(
        container["readinessProbe"]["httpGet"]["path"].as_str(),
        Some("/readyz")
    );
    assert_eq!(pod["securityContext"]["runAsNonRoot"].as_bool(), Some(true));
    let secret = kind("Secret")["metadata"]["name"]
        .as_str()
        .expect("secret name");
    assert_eq!(
        container["envFrom"][0]["secretRef"]["name"].as_str(),
        Some(secret),
        "secrets come from the Secret"
    );
    let service = kind("Service");
    assert_eq!(
        service["spec"]["selector"]["app"],
        deployment["spec"]["selector"]["matchLabels"]["app"]
    );
    let claim = kind("PersistentVolumeClaim")["metadata"]["name"].as_str();
    assert_eq!(
        pod["volumes"][0]["persistentVolumeClaim"]["claimName"].as_str(),
        claim
    );
    let args: Vec<String> = container["args"]
        .as_sequence()
        .expect("args")
        .iter()
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect();
    let argv = std::iter::once("iris".to_owned()).chain(args);
    Cli::try_parse_from(argv).expect("the container's command is one iris accepts");
    assert!(
        pod["terminationGracePeriodSeconds"].as_u64() > Some(30),
        "longer than the drain's grace period"
    );
}
