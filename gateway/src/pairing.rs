//! DM pairing: how an unknown user gets access without the operator editing the config.
//!
//! The user writes to the bot in a DM and gets a one-time code; the operator runs
//! `iris pairing approve <platform> <CODE>`. Codes are 8 characters from an alphabet without
//! look-alikes (no 0/O, 1/I/L), drawn from the OS's secure random source, valid for an hour,
//! stored only as a SHA-256 hash; at most 3 wait at a time per platform and a user can ask
//! once per 10 minutes, so a stranger cannot flood the operator or the store.

use std::time::Duration;

use agent_core::store::{PairingLimits, SessionStore};
use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};

use crate::cli::PairingCommand;
use crate::config::Loaded;

/// Characters a code is made of: no 0/O, 1/I/L.
const ALPHABET: &[u8] = b"ABCDEFGHJKMNPQRSTUVWXYZ23456789";
const CODE_LEN: usize = 8;

/// The limits of DESIGN and issue #6.
pub const LIMITS: PairingLimits = PairingLimits {
    ttl: Duration::from_secs(3600),
    max_pending: 3,
    per_user_interval: Duration::from_secs(600),
};

/// A fresh code.
pub fn new_code() -> Result<String> {
    let mut code = String::with_capacity(CODE_LEN);
    let mut bytes = [0u8; 32];
    while code.len() < CODE_LEN {
        getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no secure randomness: {e}"))?;
        // Rejection sampling: only bytes below a multiple of the alphabet size, so every
        // character is equally likely.
        let limit = 256 - 256 % ALPHABET.len();
        for b in bytes.iter().filter(|b| usize::from(**b) < limit) {
            if code.len() == CODE_LEN {
                break;
            }
            code.push(char::from(ALPHABET[usize::from(*b) % ALPHABET.len()]));
        }
    }
    Ok(code)
}

/// The stored form of a code as a user or operator typed it (case, spaces and dashes ignored).
pub fn hash(code: &str) -> String {
    let normalized: String = code
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_uppercase())
        .collect();
    hex::encode(Sha256::digest(normalized.as_bytes()))
}

/// `iris pairing …`.
pub async fn run(loaded: &Loaded, command: PairingCommand) -> Result<()> {
    let url = loaded.store_url();
    let store = agent_core::store::open(&url)
        .await
        .with_context(|| "cannot open the store")?;
    match command {
        PairingCommand::Approve { platform, code } => {
            approve(store.as_ref(), &platform, &code).await
        }
    }
}

async fn approve(store: &dyn SessionStore, platform: &str, code: &str) -> Result<()> {
    if !matches!(platform, "telegram" | "discord") {
        bail!("unknown platform {platform:?}: use telegram or discord");
    }
    match store.pairing_approve(platform, &hash(code)).await? {
        Some(user) => {
            let name = user.username.map(|u| format!("@{u} ")).unwrap_or_default();
            println!("approved {name}(id {}) on {platform}", user.user_id);
            Ok(())
        }
        None => bail!(
            "no pending {platform} pairing request has code {code:?} (codes expire after an hour; the user can ask again)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_use_the_unambiguous_alphabet_and_differ() {
        let a = new_code().expect("code");
        let b = new_code().expect("code");
        assert_eq!(a.len(), CODE_LEN);
        assert!(a.bytes().all(|c| ALPHABET.contains(&c)), "{a}");
        assert!(!a.contains(['0', 'O', '1', 'I', 'L']));
        assert_ne!(a, b);
    }

    #[test]
    fn the_hash_ignores_case_spaces_and_dashes() {
        assert_eq!(hash("abcd-2345"), hash("ABCD 2345"));
        assert_ne!(hash("ABCD2345"), hash("ABCD2346"));
        assert_eq!(hash("ABCD2345").len(), 64);
    }
}
