//! Standard Webhooks signatures: `webhook-signature: v1,<base64 HMAC-SHA256>` over
//! `<webhook-id>.<webhook-timestamp>.<body>`, keyed with the endpoint's secret
//! (`whsec_<base64 of the key bytes>`).

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// What every endpoint secret starts with.
pub const SECRET_PREFIX: &str = "whsec_";
/// Random bytes in a new secret.
const SECRET_BYTES: usize = 32;

/// A fresh endpoint secret.
pub fn new_secret() -> Result<String, String> {
    let mut key = [0u8; SECRET_BYTES];
    getrandom::fill(&mut key).map_err(|e| format!("no randomness available: {e}"))?;
    Ok(format!("{SECRET_PREFIX}{}", STANDARD.encode(key)))
}

/// The key bytes of a `whsec_` secret.
pub fn secret_key(secret: &str) -> Option<Vec<u8>> {
    STANDARD
        .decode(secret.strip_prefix(SECRET_PREFIX).unwrap_or(secret))
        .ok()
}

/// The `webhook-signature` value for one attempt.
pub fn signature(key: &[u8], id: &str, timestamp: u64, body: &[u8]) -> String {
    // HMAC takes a key of any length.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) else {
        unreachable!("HMAC accepts every key length")
    };
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_matches_the_standard_webhooks_test_vector() {
        // The vector of the Standard Webhooks reference libraries.
        let key = secret_key("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let sig = signature(
            &key,
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn a_new_secret_carries_enough_random_bytes_and_reads_back() {
        let (a, b) = (new_secret().unwrap(), new_secret().unwrap());
        assert_ne!(a, b);
        assert!(a.starts_with(SECRET_PREFIX));
        assert_eq!(secret_key(&a).unwrap().len(), SECRET_BYTES);
    }
}
