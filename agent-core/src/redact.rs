//! Secret redaction for everything Iris writes out: logs now; stored tool output and
//! compression input later.
//!
//! Two layers. Known secrets — the values Iris itself read from the environment (API keys,
//! bot tokens, the database password) — are registered with [`Redactor::with_secrets`] and
//! masked wherever they appear, whatever their shape. Pattern rules catch the shapes secrets
//! usually have (vendor key prefixes, `Authorization` values, passwords inside URLs, Telegram
//! bot tokens, `password=…`) even when Iris never knew the value.
//!
//! A long secret keeps its first 6 and last 4 characters so an operator can tell which key
//! was involved; anything shorter than 18 characters is masked whole.

use std::borrow::Cow;
use std::sync::LazyLock;

use regex::{Captures, Regex};

/// Masks a secret: `sk-abc…wxyz`-style for long values, `***` for short ones.
pub fn mask(secret: &str) -> String {
    let chars: Vec<char> = secret.chars().collect();
    if chars.len() < 18 {
        return "***".to_owned();
    }
    let head: String = chars[..6].iter().collect();
    let tail: String = chars[chars.len() - 4..].iter().collect();
    format!("{head}…{tail}")
}

/// Prefixes that vendors put in front of secret tokens. A prefix followed by at least 16
/// token characters is masked.
pub const VENDOR_PREFIXES: &[&str] = &[
    "sk-ant-",
    "sk-or-v1-",
    "sk-proj-",
    "sk-svcacct-",
    "sk-", // Anthropic, OpenRouter, OpenAI
    "sk_live_",
    "sk_test_",
    "rk_live_",
    "rk_test_", // Stripe
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_", // GitHub
    "glpat-",      // GitLab
    "xoxb-",
    "xoxp-",
    "xoxa-",
    "xoxr-",
    "xoxs-",
    "xapp-",   // Slack
    "AIza",    // Google
    "hf_",     // Hugging Face
    "gsk_",    // Groq
    "pplx-",   // Perplexity
    "r8_",     // Replicate
    "fw_",     // Fireworks
    "nvapi-",  // NVIDIA
    "xai-",    // xAI
    "tvly-",   // Tavily
    "npm_",    // npm
    "pypi-",   // PyPI
    "dop_v1_", // DigitalOcean
    "shpat_",
    "shpss_",   // Shopify
    "lin_api_", // Linear
    "SG.",      // SendGrid
    "sq0atp-",
    "sq0csp-", // Square
    "dapi",    // Databricks
];

fn vendor_pattern() -> String {
    let mut prefixes: Vec<&str> = VENDOR_PREFIXES.to_vec();
    // Longest first, so `sk-ant-` wins over `sk-`.
    prefixes.sort_by_key(|p| std::cmp::Reverse(p.len()));
    let alternatives: Vec<String> = prefixes.iter().map(|p| regex::escape(p)).collect();
    format!(
        r"(?:^|[^A-Za-z0-9_])((?:{})[A-Za-z0-9_.-]{{16,}})",
        alternatives.join("|")
    )
}

struct Rule {
    pattern: Regex,
    /// The capture group holding the secret (0 = the whole match).
    group: usize,
}

fn rule(pattern: &str, group: usize) -> Rule {
    match Regex::new(pattern) {
        Ok(pattern) => Rule { pattern, group },
        // The patterns are constants covered by tests; a typo must not take logging down.
        Err(err) => panic!("invalid redaction pattern {pattern:?}: {err}"),
    }
}

static RULES: LazyLock<Vec<Rule>> = LazyLock::new(|| {
    vec![
        // Passwords inside URLs: scheme://user:password@host
        rule(r"[a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]+:([^@\s/]+)@", 1),
        // Authorization headers and bearer tokens.
        rule(
            r"(?i)\bauthorization\b[\x22']?\s*[:=]\s*[\x22']?(?:(?:bearer|basic|token|bot)\s+)?([^\s\x22',;]+)",
            1,
        ),
        rule(r"(?i)\bbearer\s+([A-Za-z0-9._~+/=-]{8,})", 1),
        // Telegram bot tokens: <bot id>:<35 characters>, also inside /bot<token>/ URLs.
        rule(r"(\d{6,12}:[A-Za-z0-9_-]{30,})", 1),
        // Vendor key prefixes (see VENDOR_PREFIXES), then AWS key ids.
        rule(&vendor_pattern(), 1),
        rule(r"\b((?:AKIA|ASIA)[0-9A-Z]{16})\b", 1),
        // JWTs: header.payload.signature, header and payload base64url JSON.
        rule(
            r"\b(eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})",
            1,
        ),
        // PEM private keys, whole.
        rule(
            r"(-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----)",
            1,
        ),
        // NAME=value / "name": "value" where the name says it is secret.
        rule(
            r#"(?i)\b[a-z0-9_]*(?:password|passwd|secret|token|api_?key|access_?key|private_?key)[\x22']?\s*[:=]\s*[\x22']?([^\s\x22',;&]{4,})"#,
            1,
        ),
    ]
});

/// Masks secrets in text. Cheap to clone; build one per process and share it.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    /// Exact secret values, longest first so a secret containing another is masked whole.
    secrets: Vec<String>,
}

impl Redactor {
    /// A redactor that also masks these exact values (empty and very short values are
    /// ignored: masking every `a` would destroy the log).
    pub fn with_secrets<I, S>(secrets: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut secrets: Vec<String> = secrets
            .into_iter()
            .map(Into::into)
            .filter(|s| s.chars().count() >= 4)
            .collect();
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        Self { secrets }
    }

    /// The text with every secret masked; borrowed when nothing matched.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for secret in &self.secrets {
            if out.contains(secret.as_str()) {
                out = Cow::Owned(out.replace(secret.as_str(), &mask(secret)));
            }
        }
        for rule in RULES.iter() {
            if !rule.pattern.is_match(&out) {
                continue;
            }
            let replaced = rule
                .pattern
                .replace_all(&out, |caps: &Captures<'_>| {
                    let whole = &caps[0];
                    match caps.get(rule.group) {
                        Some(secret)
                            if !secret.as_str().contains('…') && secret.as_str() != "***" =>
                        {
                            let start = secret.start() - caps.get(0).map_or(0, |m| m.start());
                            let end = start + secret.len();
                            format!(
                                "{}{}{}",
                                &whole[..start],
                                mask(secret.as_str()),
                                &whole[end..]
                            )
                        }
                        _ => whole.to_owned(),
                    }
                })
                .into_owned();
            out = Cow::Owned(replaced);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redact(text: &str) -> String {
        Redactor::default().redact(text).into_owned()
    }

    #[test]
    fn masks_keep_six_and_four() {
        assert_eq!(mask("sk-abcdefghijklmnopqrstuvwxyz"), "sk-abc…wxyz");
        assert_eq!(mask("short"), "***");
    }

    #[test]
    fn table_of_secret_shapes() {
        let cases = [
            (
                "key sk-proj-AAAAAAAAAAAAAAAAAAAAAAAA1234 used",
                "AAAAAAAAAAAAAAAAAAAAAAAA",
            ),
            (
                "anthropic sk-ant-api03-BBBBBBBBBBBBBBBBBBBBBBBB",
                "BBBBBBBBBBBBBBBBBBBB",
            ),
            (
                "Authorization: Bearer abcdefghijklmnopqrstuvwxyz0123",
                "ghijklmnopqrstuvwxyz",
            ),
            (
                "authorization=\"Basic dXNlcjpwYXNzd29yZA==\"",
                "dXNlcjpwYXNzd29yZA==",
            ),
            (
                "postgres://iris:hunter2secret@db:5432/iris",
                "hunter2secret",
            ),
            (
                "GET https://api.telegram.org/bot123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw/getMe",
                "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw",
            ),
            (
                "token ghp_CCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCC",
                "CCCCCCCCCCCCCCCCCCCCCCCC",
            ),
            ("slack xoxb-1234567890-abcdefghij", "1234567890-abcdefghij"),
            (
                "google AIzaSyDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDD",
                "DDDDDDDDDDDDDDDDDDDDDDDD",
            ),
            ("hf hf_EEEEEEEEEEEEEEEEEEEEEEEEEEEE", "EEEEEEEEEEEEEEEEEEEE"),
            ("aws AKIAIOSFODNN7EXAMPLE", "IOSFODNN7EXA"),
            ("OPENAI_API_KEY=plainsecretvalue99", "plainsecretvalue99"),
            (
                "{\"password\": \"correct-horse-battery\"}",
                "correct-horse-battery",
            ),
            ("db_password=s3cr3t!", "s3cr3t!"),
        ];
        for (input, secret) in cases {
            let out = redact(input);
            assert!(!out.contains(secret), "{input:?} leaked as {out:?}");
        }
    }

    #[test]
    fn every_vendor_prefix_is_masked() {
        assert!(VENDOR_PREFIXES.len() >= 30);
        for prefix in VENDOR_PREFIXES {
            let token = format!("{prefix}Q1w2E3r4T5y6U7i8O9p0Zx");
            let out = redact(&format!("using key {token} now"));
            assert!(!out.contains("T5y6U7i8O9"), "{prefix}: {out}");
            assert!(
                out.starts_with("using key ") && out.ends_with(" now"),
                "{prefix}: {out}"
            );
        }
    }

    #[test]
    fn jwts_and_private_keys_are_masked() {
        let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";
        assert!(!redact(&format!("token={jwt}")).contains("eyJzdWIiOiIxMjM0NTY3ODkwIn0"));
        assert!(!redact(&format!("cookie {jwt};")).contains("dozjgNryP4J3jVmNHl0w5N"));
        let pem = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n-----END OPENSSH PRIVATE KEY-----";
        let out = redact(&format!("key:\n{pem}\ndone"));
        assert!(
            !out.contains("b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ"),
            "{out}"
        );
        assert!(out.ends_with("done"));
    }

    #[test]
    fn known_values_are_masked_whatever_their_shape() {
        let r = Redactor::with_secrets(["weird shape value 42", "", "ab"]);
        assert_eq!(r.redact("got weird shape value 42!"), "got weird …e 42!");
        assert_eq!(r.redact("ab stays"), "ab stays");
    }

    #[test]
    fn ordinary_text_is_left_alone() {
        let texts = [
            "session 20261130_101500_a1b2c3 started",
            "uuid 123e4567-e89b-12d3-a456-426614174000",
            "commit 9fceb02d0ae598e95dc970b74767f19372d61af8",
            "The quick brown fox jumps over the lazy dog.",
            "let token_count = tokens.len(); // count them",
            "GET /healthz 200 in 3 ms",
            "listening on 127.0.0.1:8787",
            "task-list and sk-ipping are words; so is dapper",
            "see https://example.com/docs/getting-started-guide-for-new-users",
        ];
        for text in texts {
            assert_eq!(redact(text), text);
        }
    }
}
