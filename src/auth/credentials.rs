//! The API key format and its hashing.
//!
//! A key reads `dsh_<id>_<secret>`: 16 hex chars of id (how the server finds the record) and
//! 64 hex chars (256 random bits) of secret, of which only the SHA-256 is stored. A fast hash
//! is right here: the secret is random, not a password, so there is nothing to brute-force.

use sha2::{Digest, Sha256};

use crate::domain::ids::hex;

pub const KEY_PREFIX: &str = "dsh_";

/// `n` random bytes as lowercase hex, from the operating system's CSPRNG.
pub fn random_hex(n: usize) -> Result<String, String> {
    let mut bytes = vec![0u8; n];
    getrandom::fill(&mut bytes).map_err(|e| format!("no randomness available: {e}"))?;
    Ok(hex(&bytes))
}

/// The stored form of a key's secret.
pub fn hash_secret(secret: &str) -> String {
    hex(&Sha256::digest(secret.as_bytes()))
}

/// A fresh key: `(id, the whole key to hand out once, the hash to store)`.
pub fn new_key() -> Result<(String, String, String), String> {
    let id = random_hex(8)?;
    let secret = random_hex(32)?;
    let key = format!("{KEY_PREFIX}{id}_{secret}");
    Ok((id, key, hash_secret(&secret)))
}

/// Splits a presented key into `(id, secret)`; `None` when it is not shaped like one of ours.
pub fn parse_key(presented: &str) -> Option<(&str, &str)> {
    let rest = presented.strip_prefix(KEY_PREFIX)?;
    let (id, secret) = rest.split_once('_')?;
    let hexy = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    (hexy(id, 16) && hexy(secret, 64)).then_some((id, secret))
}

/// Compares two hex digests in time independent of where they differ.
pub fn digests_match(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_key_parses_back_to_its_id_and_matches_only_its_own_hash() {
        let (id, key, hash) = new_key().unwrap();
        let (pid, secret) = parse_key(&key).unwrap();
        assert_eq!(pid, id);
        assert!(digests_match(&hash_secret(secret), &hash));
        let (_, other, _) = new_key().unwrap();
        let (_, other_secret) = parse_key(&other).unwrap();
        assert!(!digests_match(&hash_secret(other_secret), &hash));
        assert!(
            !key.contains(&hash),
            "the key does not carry its stored hash"
        );
    }

    #[test]
    fn strings_not_shaped_like_a_key_are_not_keys() {
        for bad in [
            "",
            "dsh_",
            "dsh_abc_def",
            "Bearer dsh_",
            "eyJhbGciOi.x.y",
            "dsh_0123456789abcdef_short",
        ] {
            assert!(parse_key(bad).is_none(), "{bad}");
        }
    }
}
