//! Who is calling, and what they may do to which session.
//!
//! Two credentials: a tenant's **API key** (a server-side secret of the integrator's backend)
//! and a **browser token** minted with a key for one session, maybe one agent, and a set of
//! actions. [`Auth::authenticate`] turns a presented credential into a [`Caller`];
//! [`Caller::authorize`] decides one action on one session. Across tenants a session does not
//! exist (404, never 403), so a caller learns nothing about sessions that are not theirs.
//!
//! Key records are cached per replica for [`KEY_CACHE`], so a hot path costs no store round
//! trip, and a revoked key (and every token it minted) stops working within that time.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::config::AuthMode;
use crate::domain::{AgentId, SessionId, TenantId};
use crate::store::{KeyRecord, KeyStore, StoreError};

pub mod credentials;
pub mod tokens;

pub use tokens::{Claims, Signer, MAX_TTL_SECS};

/// How long a replica trusts what it read about a key (and whether any key exists).
pub const KEY_CACHE: Duration = Duration::from_secs(2);
/// Store lookups per second a replica spends on key ids it does not know (see `Auth::misses`).
const MISS_LOOKUPS: f64 = 5.0;

/// The ids of every key, and when they were read.
type KeyIds = (Arc<HashSet<String>>, Instant);

/// An action a browser token may carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Read the session: its state, log, questions, projections and event stream.
    Read,
    /// Turn plan mode on or off, run commands.
    Plan,
    /// Send messages, cancel turns.
    Prompt,
    /// Answer or dismiss questions (e.g. approve a plan).
    Answer,
}

/// Read from its name. (serde_json reports anything but a string where a unit-only enum is
/// expected, e.g. `[1]`, as a JSON syntax error, which a client would be told is malformed
/// JSON; reading a string first makes it a body that does not fit, as it is.)
impl<'de> Deserialize<'de> for Scope {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        const NAMES: &[&str] = &["read", "plan", "prompt", "answer"];
        let name = String::deserialize(d)?;
        match name.as_str() {
            "read" => Ok(Self::Read),
            "plan" => Ok(Self::Plan),
            "prompt" => Ok(Self::Prompt),
            "answer" => Ok(Self::Answer),
            other => Err(serde::de::Error::unknown_variant(other, NAMES)),
        }
    }
}

/// What a request wants to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Needs the token scope.
    Scoped(Scope),
    /// API keys only: create, fork, compact or delete sessions, spawn agents, mint tokens.
    Manage,
}

/// The actions by name, so a handler's check reads as one line.
pub const READ: Action = Action::Scoped(Scope::Read);
pub const PLAN: Action = Action::Scoped(Scope::Plan);
pub const PROMPT: Action = Action::Scoped(Scope::Prompt);
pub const ANSWER: Action = Action::Scoped(Scope::Answer);
pub const MANAGE: Action = Action::Manage;

/// The authenticated caller of one request.
#[derive(Clone, Debug)]
pub enum Caller {
    /// Auth is off (or nothing is configured on a loopback bind): anyone may do anything.
    Open,
    Key {
        id: String,
        tenant: TenantId,
        rate: u32,
    },
    Token {
        claims: Arc<Claims>,
        rate: u32,
    },
}

/// Why a request is refused, before the HTTP layer picks a status.
#[derive(Debug, PartialEq, Eq)]
pub enum Denied {
    /// 401: no credential, or one that is not valid.
    Unauthenticated(&'static str),
    /// 401: a token past its expiry.
    Expired,
    /// 404: as if the session did not exist.
    Hidden,
    /// 403: the credential does not carry this action.
    Forbidden(String),
}

impl Caller {
    /// The tenant new sessions of this caller belong to (`None` on an open server).
    pub fn tenant(&self) -> Option<&TenantId> {
        match self {
            Caller::Open => None,
            Caller::Key { tenant, .. } => Some(tenant),
            Caller::Token { claims, .. } => Some(&claims.ten),
        }
    }

    /// Who to record as the author of an answer.
    pub fn principal(&self) -> Option<String> {
        match self {
            Caller::Open => None,
            Caller::Key { id, .. } => Some(format!("key:{id}")),
            Caller::Token { claims, .. } => Some(format!("token:{}", claims.sub)),
        }
    }

    /// The key whose request rate this request counts against, and that rate.
    pub fn rate_key(&self) -> Option<(&str, u32)> {
        match self {
            Caller::Open => None,
            Caller::Key { id, rate, .. } => Some((id, *rate)),
            Caller::Token { claims, rate } => Some((&claims.key, *rate)),
        }
    }

    /// May this caller do `action` on session `sid`, owned by `owner`, touching `agent`?
    pub fn authorize(
        &self,
        sid: &SessionId,
        owner: Option<&TenantId>,
        agent: Option<&AgentId>,
        action: Action,
    ) -> Result<(), Denied> {
        match self {
            Caller::Open => Ok(()),
            Caller::Key { tenant, .. } => match owner {
                Some(o) if o == tenant => Ok(()),
                _ => Err(Denied::Hidden),
            },
            Caller::Token { claims, .. } => {
                if &claims.sid != sid || owner != Some(&claims.ten) {
                    return Err(Denied::Hidden);
                }
                let scope = match action {
                    Action::Manage => {
                        return Err(Denied::Forbidden(
                            "this route takes an API key; a browser token cannot use it".into(),
                        ))
                    }
                    Action::Scoped(s) => s,
                };
                if !claims.scp.contains(&scope) {
                    return Err(Denied::Forbidden(format!(
                        "the token does not carry the `{}` scope",
                        scope.name()
                    )));
                }
                match (&claims.agt, agent) {
                    (Some(mine), Some(theirs)) if mine != theirs => Err(Denied::Forbidden(
                        format!("the token is for agent `{mine}`, not `{theirs}`"),
                    )),
                    _ => Ok(()),
                }
            }
        }
    }
}

impl Scope {
    pub fn name(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Plan => "plan",
            Scope::Prompt => "prompt",
            Scope::Answer => "answer",
        }
    }
}

/// A key record as last read, and when.
type Cached = (Option<KeyRecord>, Instant);

/// Authentication for one replica: the key store, a short-lived cache, the token signer.
pub struct Auth {
    mode: AuthMode,
    store: Arc<dyn KeyStore>,
    signer: Signer,
    default_rate: u32,
    keys: quick_cache::sync::Cache<String, Cached>,
    /// Tokens whose signature this replica already checked (a browser repeats its token on
    /// every request): their claims, so a hit costs a lookup and an expiry check.
    verified: quick_cache::sync::Cache<String, Arc<Claims>>,
    /// The ids of every key, and when they were read: an id not among them is refused without
    /// a store lookup (made-up keys cost nothing), and `auto` turns on when it is not empty.
    ids: std::sync::Mutex<Option<KeyIds>>,
    /// Store lookups this replica may still spend on ids it does not know (refilled at
    /// [`MISS_LOOKUPS`] per second): a key created a moment ago is found on first use, while a
    /// flood of made-up keys costs the store a few lookups a second.
    misses: std::sync::Mutex<(f64, Instant)>,
    /// One refresh of `ids` at a time.
    refreshing: tokio::sync::Mutex<()>,
    /// Set once credentials were required: they stay on for the life of the process, even if
    /// the keys vanish (a keys file deleted, a Redis restarted empty).
    latched: std::sync::atomic::AtomicBool,
}

impl Auth {
    pub fn new(
        mode: AuthMode,
        store: Arc<dyn KeyStore>,
        signer: Signer,
        default_rate: u32,
    ) -> Self {
        Self {
            mode,
            store,
            signer,
            default_rate: default_rate.max(1),
            keys: quick_cache::sync::Cache::new(10_000),
            verified: quick_cache::sync::Cache::new(10_000),
            ids: std::sync::Mutex::new(None),
            misses: std::sync::Mutex::new((MISS_LOOKUPS, Instant::now())),
            refreshing: tokio::sync::Mutex::new(()),
            latched: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The known key ids, read again when older than `max_age`.
    async fn ids(&self, max_age: Duration) -> Result<Arc<HashSet<String>>, StoreError> {
        let fresh = |ids: &std::sync::Mutex<Option<KeyIds>>| {
            ids.lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
                .filter(|(_, at)| at.elapsed() < max_age)
                .map(|(set, _)| set.clone())
        };
        if let Some(set) = fresh(&self.ids) {
            return Ok(set);
        }
        let _one = self.refreshing.lock().await;
        if let Some(set) = fresh(&self.ids) {
            return Ok(set);
        }
        let set: Arc<HashSet<String>> = Arc::new(self.store.ids().await?.into_iter().collect());
        *self.ids.lock().unwrap_or_else(|p| p.into_inner()) = Some((set.clone(), Instant::now()));
        Ok(set)
    }

    pub fn store(&self) -> &Arc<dyn KeyStore> {
        &self.store
    }

    /// Whether requests must carry a credential right now.
    pub async fn required(&self) -> Result<bool, StoreError> {
        match self.mode {
            AuthMode::Off => Ok(false),
            AuthMode::Keys => Ok(true),
            AuthMode::Auto => {
                use std::sync::atomic::Ordering;
                if self.latched.load(Ordering::Relaxed) {
                    return Ok(true);
                }
                let on = !self.ids(KEY_CACHE).await?.is_empty();
                if on {
                    self.latched.store(true, Ordering::Relaxed);
                }
                Ok(on)
            }
        }
    }

    /// The caller behind a presented credential (a key or a token; `None` when none was sent).
    pub async fn authenticate(
        &self,
        presented: Option<&str>,
    ) -> Result<Result<Caller, Denied>, StoreError> {
        if !self.required().await? {
            return Ok(Ok(Caller::Open));
        }
        let Some(presented) = presented.map(str::trim).filter(|p| !p.is_empty()) else {
            return Ok(Err(Denied::Unauthenticated(
                "this route needs a credential: `Authorization: Bearer <API key or token>`",
            )));
        };
        if let Some((id, secret)) = credentials::parse_key(presented) {
            let record = self.key(id).await?;
            return Ok(match record {
                Some(r)
                    if r.revoked_at.is_none()
                        && credentials::digests_match(
                            &credentials::hash_secret(secret),
                            &r.hash,
                        ) =>
                {
                    Ok(Caller::Key {
                        id: r.id,
                        tenant: r.tenant,
                        rate: r.rate.unwrap_or(self.default_rate),
                    })
                }
                _ => Err(Denied::Unauthenticated(
                    "the API key is not valid (unknown or revoked)",
                )),
            });
        }
        let claims = match self.verified.get(presented) {
            Some(c) if c.exp > jsonwebtoken::get_current_timestamp() => c,
            Some(_) => return Ok(Err(Denied::Expired)),
            None => match self.signer.verify(presented) {
                Ok(c) => {
                    let c = Arc::new(c);
                    self.verified.insert(presented.to_owned(), c.clone());
                    c
                }
                Err(tokens::TokenError::Expired) => return Ok(Err(Denied::Expired)),
                Err(tokens::TokenError::Invalid) => {
                    return Ok(Err(Denied::Unauthenticated(
                        "the credential is neither a valid API key nor a valid token",
                    )))
                }
            },
        };
        // A token lives only as long as the key that minted it.
        Ok(match self.key(&claims.key).await? {
            Some(r) if r.revoked_at.is_none() && r.tenant == claims.ten => Ok(Caller::Token {
                rate: r.rate.unwrap_or(self.default_rate),
                claims,
            }),
            _ => Err(Denied::Unauthenticated(
                "the key that minted this token was revoked",
            )),
        })
    }

    /// A key record, from the per-replica cache when it is fresh. An id not among the keys this
    /// replica knows is looked up only while the miss budget lasts.
    async fn key(&self, id: &str) -> Result<Option<KeyRecord>, StoreError> {
        if let Some((record, at)) = self.keys.get(id) {
            if at.elapsed() < KEY_CACHE {
                return Ok(record);
            }
        }
        if !self.ids(KEY_CACHE).await?.contains(id) && !self.spend_miss() {
            return Ok(None);
        }
        let record = self.store.get(id).await?;
        self.keys
            .insert(id.to_owned(), (record.clone(), Instant::now()));
        Ok(record)
    }

    /// Whether a caller authenticated earlier still would be (its key not revoked, its token
    /// not expired); `None` when the store cannot say right now.
    pub async fn still_valid(&self, caller: &Caller) -> Option<bool> {
        let (key, tenant) = match caller {
            Caller::Open => return Some(true),
            Caller::Key { id, tenant, .. } => (id, tenant),
            Caller::Token { claims, .. } => {
                if claims.exp <= jsonwebtoken::get_current_timestamp() {
                    return Some(false);
                }
                (&claims.key, &claims.ten)
            }
        };
        match self.key(key).await {
            Ok(Some(r)) => Some(r.revoked_at.is_none() && &r.tenant == tenant),
            Ok(None) => Some(false),
            Err(_) => None,
        }
    }

    /// Takes one lookup from the budget for unknown ids; false when it is spent.
    fn spend_miss(&self) -> bool {
        let mut budget = self.misses.lock().unwrap_or_else(|p| p.into_inner());
        let (tokens, at) = *budget;
        let tokens = (tokens + at.elapsed().as_secs_f64() * MISS_LOOKUPS).min(MISS_LOOKUPS);
        let ok = tokens >= 1.0;
        *budget = (if ok { tokens - 1.0 } else { tokens }, Instant::now());
        ok
    }

    /// Creates a key for `tenant`: stores its hash, returns the record and the key (the only
    /// time the key exists in clear).
    pub async fn create_key(
        store: &dyn KeyStore,
        tenant: TenantId,
        rate: Option<u32>,
    ) -> Result<(KeyRecord, String), StoreError> {
        let (id, key, hash) = credentials::new_key().map_err(StoreError::Unavailable)?;
        let record = KeyRecord {
            id,
            tenant,
            hash,
            rate: rate.map(|r| r.max(1)),
            created_at: crate::store::now_ms(),
            revoked_at: None,
        };
        store.put(&record).await?;
        Ok((record, key))
    }

    /// Mints a token for `claims` (the caller fills in everything but the times).
    pub fn mint(&self, mut claims: Claims, ttl: Duration) -> Result<(String, u64), String> {
        let now = jsonwebtoken::get_current_timestamp();
        let ttl = ttl.as_secs().clamp(1, MAX_TTL_SECS);
        claims.iat = now;
        claims.exp = now + ttl;
        claims.iss = tokens::issuer();
        let token = self.signer.sign(&claims)?;
        Ok((token, claims.exp))
    }
}
