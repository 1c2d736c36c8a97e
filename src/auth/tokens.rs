//! Browser tokens: short-lived HS256 JWTs scoped to one session, maybe one agent, and a set of
//! actions, minted with an API key for the integrator's frontend.
//!
//! The header's `kid` names the signing secret, so secrets rotate without cutting off tokens
//! already handed out: `DSH_TOKEN_KEYS=new:…,old:…` signs with the first and verifies with
//! any. A token is only as good as the key that minted it: revoking the key ends its tokens.

use std::collections::HashMap;

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

use super::Scope;
use crate::domain::{AgentId, SessionId, TenantId};

/// The longest a token may live.
pub const MAX_TTL_SECS: u64 = 3600;
const ISSUER: &str = "dsh-plan";

/// What a token says. Field names are short: the token rides in a URL on the events route.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// Who the integrator says the user is (recorded with their answers).
    pub sub: String,
    pub iss: String,
    pub iat: u64,
    pub exp: u64,
    /// The tenant and the key that minted the token.
    pub ten: TenantId,
    pub key: String,
    pub sid: SessionId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agt: Option<AgentId>,
    pub scp: Vec<Scope>,
}

/// Why a presented token is refused.
#[derive(Debug, PartialEq, Eq)]
pub enum TokenError {
    Expired,
    Invalid,
}

/// The signing secrets: the first signs, every one verifies.
pub struct Signer {
    kid: String,
    encoding: EncodingKey,
    decoding: HashMap<String, DecodingKey>,
    validation: Validation,
}

impl Signer {
    /// `keys` are `(kid, secret)` pairs, the signing one first.
    pub fn new(keys: &[(String, String)]) -> Result<Self, String> {
        let (kid, secret) = keys.first().ok_or("no token signing key")?;
        let mut decoding = HashMap::new();
        for (k, s) in keys {
            if s.len() < 32 {
                return Err(format!(
                    "token signing key `{k}` is too short: use at least 32 characters"
                ));
            }
            let key = DecodingKey::from_secret(s.as_bytes()).map_err(|e| e.to_string())?;
            decoding.insert(k.clone(), key);
        }
        let mut validation = Validation::new(Algorithm::HS256);
        validation.set_issuer(&[ISSUER]);
        validation.set_required_spec_claims(&["exp", "iss", "sub"]);
        validation.leeway = 0;
        Ok(Self {
            kid: kid.clone(),
            encoding: EncodingKey::from_secret(secret.as_bytes()).map_err(|e| e.to_string())?,
            decoding,
            validation,
        })
    }

    /// Parses `DSH_TOKEN_KEYS` (`kid:secret[,kid:secret…]`).
    pub fn parse_keys(raw: &str) -> Result<Vec<(String, String)>, String> {
        raw.split(',')
            .filter(|p| !p.trim().is_empty())
            .map(|pair| {
                let (kid, secret) = pair.trim().split_once(':').ok_or(
                    "DSH_TOKEN_KEYS must read `kid:secret[,kid:secret…]` (kid before the colon)",
                )?;
                if kid.is_empty() || !kid.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
                    return Err("a DSH_TOKEN_KEYS kid must be letters, digits or `-`".to_owned());
                }
                Ok((kid.to_owned(), secret.to_owned()))
            })
            .collect()
    }

    pub fn sign(&self, claims: &Claims) -> Result<String, String> {
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &self.encoding).map_err(|e| e.to_string())
    }

    pub fn verify(&self, token: &str) -> Result<Claims, TokenError> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| TokenError::Invalid)?;
        let key = header
            .kid
            .as_deref()
            .and_then(|k| self.decoding.get(k))
            .ok_or(TokenError::Invalid)?;
        match jsonwebtoken::decode::<Claims>(token, key, &self.validation) {
            // `exp` is the first second the token is no longer valid.
            Ok(data) if data.claims.exp <= jsonwebtoken::get_current_timestamp() => {
                Err(TokenError::Expired)
            }
            Ok(data) => Ok(data.claims),
            Err(e) if matches!(e.kind(), ErrorKind::ExpiredSignature) => Err(TokenError::Expired),
            Err(_) => Err(TokenError::Invalid),
        }
    }
}

pub fn issuer() -> String {
    ISSUER.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(exp: u64) -> Claims {
        Claims {
            sub: "user-1".into(),
            iss: issuer(),
            iat: 0,
            exp,
            ten: TenantId::parse("acme").unwrap(),
            key: "0123456789abcdef".into(),
            sid: SessionId::parse("s1").unwrap(),
            agt: None,
            scp: vec![Scope::Read],
        }
    }

    fn keys(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, s)| (k.to_string(), s.to_string()))
            .collect()
    }

    const A: &str = "a-secret-that-is-long-enough-000000";
    const B: &str = "b-secret-that-is-long-enough-111111";

    #[test]
    fn a_token_verifies_under_its_kid_after_rotation_and_not_under_another_secret() {
        let now = jsonwebtoken::get_current_timestamp();
        let old = Signer::new(&keys(&[("old", A)])).unwrap();
        let token = old.sign(&claims(now + 60)).unwrap();
        let rotated = Signer::new(&keys(&[("new", B), ("old", A)])).unwrap();
        assert_eq!(rotated.verify(&token).unwrap().sub, "user-1");
        let forged = Signer::new(&keys(&[("old", B)])).unwrap();
        assert_eq!(forged.verify(&token), Err(TokenError::Invalid));
        let dropped = Signer::new(&keys(&[("new", B)])).unwrap();
        assert_eq!(dropped.verify(&token), Err(TokenError::Invalid));
    }

    #[test]
    fn an_expired_token_is_told_apart_from_a_bad_one() {
        let now = jsonwebtoken::get_current_timestamp();
        let s = Signer::new(&keys(&[("k", A)])).unwrap();
        let expired = s.sign(&claims(now - 1)).unwrap();
        assert_eq!(s.verify(&expired), Err(TokenError::Expired));
        let mut tampered = s.sign(&claims(now + 60)).unwrap();
        tampered.push('x');
        assert_eq!(s.verify(&tampered), Err(TokenError::Invalid));
        assert_eq!(s.verify("not-a-jwt"), Err(TokenError::Invalid));
    }

    #[test]
    fn short_secrets_and_malformed_key_lists_are_refused() {
        assert!(Signer::new(&keys(&[("k", "short")])).is_err());
        assert!(Signer::parse_keys("nocolon").is_err());
        assert_eq!(
            Signer::parse_keys("a:x, b:y").unwrap(),
            keys(&[("a", "x"), ("b", "y")])
        );
    }
}
