//! Authentication and authorization of metrics requests through the API server, with a cache.
//!
//! A request's bearer token is checked with a TokenReview (invalid: 401), and its user's right to `get`
//! the path with a SubjectAccessReview (denied: 403). Answers are cached like controller-runtime's
//! filter caches them, so a Prometheus scraping every few seconds costs the API server a review now
//! and then rather than two per scrape: token reviews for [`TOKEN_TTL`], allowed requests for
//! [`ALLOWED_TTL`], denied ones for [`DENIED_TTL`]. Each review gets [`REVIEW_TIMEOUT`]; a failed
//! or timed-out review is not cached and answers 500.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hyper::StatusCode;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};
use tracing::{debug, warn};

/// How long the outcome of a TokenReview is reused.
pub const TOKEN_TTL: Duration = Duration::from_secs(60);
/// How long an allowed SubjectAccessReview is reused.
pub const ALLOWED_TTL: Duration = Duration::from_secs(300);
/// How long a denied SubjectAccessReview is reused (short, so a new RoleBinding takes effect soon).
pub const DENIED_TTL: Duration = Duration::from_secs(30);
/// How long a review may take before the request fails with 500.
pub const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);
/// At most this many entries per cache; expired ones go first, then the oldest.
pub const MAX_ENTRIES: usize = 1024;

/// Checks metrics requests against the API server, caching the answers.
pub struct Authorizer {
    client: Client,
    tokens: Mutex<TtlCache<String, Option<UserInfo>>>,
    access: Mutex<TtlCache<(String, String, String), bool>>,
}

impl std::fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authorizer").finish_non_exhaustive()
    }
}

impl Authorizer {
    /// An authorizer asking the API server of `client`, with empty caches.
    pub fn new(client: Client) -> Self {
        Authorizer {
            client,
            tokens: Mutex::new(TtlCache::new(MAX_ENTRIES)),
            access: Mutex::new(TtlCache::new(MAX_ENTRIES)),
        }
    }

    /// `Ok` if `token` is valid (else 401) and its user may use `verb` on the non-resource URL `path`
    /// (else 403). A review that fails or times out gives 500.
    pub async fn authorize(
        &self,
        token: Option<&str>,
        path: &str,
        verb: &str,
    ) -> Result<(), StatusCode> {
        let token = token
            .filter(|t| !t.is_empty())
            .ok_or(StatusCode::UNAUTHORIZED)?;
        let user = self.authenticate(token).await?;
        let Some(user) = user else {
            return Err(StatusCode::UNAUTHORIZED);
        };
        let key = (token.to_string(), path.to_string(), verb.to_string());
        let cached = lock(&self.access).get(&key, Instant::now());
        let allowed = match cached {
            Some(allowed) => allowed,
            None => {
                let allowed = self.review_access(&user, path, verb).await?;
                let ttl = if allowed { ALLOWED_TTL } else { DENIED_TTL };
                lock(&self.access).insert(key, allowed, ttl, Instant::now());
                allowed
            }
        };
        if !allowed {
            debug!(user = ?user.username, path, verb, "metrics request forbidden");
            return Err(StatusCode::FORBIDDEN);
        }
        Ok(())
    }

    /// The user `token` belongs to, `None` if the API server does not accept it.
    async fn authenticate(&self, token: &str) -> Result<Option<UserInfo>, StatusCode> {
        if let Some(user) = lock(&self.tokens).get(token, Instant::now()) {
            return Ok(user);
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_string(),
                ..Default::default()
            },
            ..Default::default()
        };
        let reviews: Api<TokenReview> = Api::all(self.client.clone());
        let params = PostParams::default();
        let reviewed = reviews.create(&params, &review);
        let status = within_timeout("TokenReview", reviewed).await?.status;
        let status = status.unwrap_or_default();
        let user = if status.authenticated == Some(true) {
            Some(status.user.unwrap_or_default())
        } else {
            debug!(error = ?status.error, "metrics request with an invalid token");
            None
        };
        let now = Instant::now();
        lock(&self.tokens).insert(token.to_string(), user.clone(), TOKEN_TTL, now);
        Ok(user)
    }

    async fn review_access(
        &self,
        user: &UserInfo,
        path: &str,
        verb: &str,
    ) -> Result<bool, StatusCode> {
        let access = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username.clone(),
                groups: user.groups.clone(),
                uid: user.uid.clone(),
                extra: user.extra.clone(),
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.to_string()),
                    verb: Some(verb.to_string()),
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let accesses: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let params = PostParams::default();
        let reviewed = accesses.create(&params, &access);
        let reviewed = within_timeout("SubjectAccessReview", reviewed).await?;
        Ok(reviewed.status.is_some_and(|s| s.allowed))
    }
}

async fn within_timeout<T>(
    what: &'static str,
    request: impl Future<Output = kube::Result<T>>,
) -> Result<T, StatusCode> {
    match tokio::time::timeout(REVIEW_TIMEOUT, request).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(error)) => {
            warn!(%error, "metrics authorization: {what} failed");
            Err(StatusCode::INTERNAL_SERVER_ERROR)
        }
        Err(_) => {
            warn!("metrics authorization: {what} timed out after {REVIEW_TIMEOUT:?}");
            Err(StatusCode::INTERNAL_SERVER_ERROR)
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// A map whose entries expire, holding at most a fixed number of them. Time is passed in, so that
/// it can be tested without waiting.
#[derive(Debug)]
pub struct TtlCache<K, V> {
    entries: HashMap<K, Entry<V>>,
    capacity: usize,
}

#[derive(Debug)]
struct Entry<V> {
    value: V,
    stored: Instant,
    expires: Instant,
}

impl<K: Eq + Hash + Clone, V: Clone> TtlCache<K, V> {
    /// An empty cache of at most `capacity` entries (at least one).
    pub fn new(capacity: usize) -> Self {
        TtlCache {
            entries: HashMap::new(),
            capacity: capacity.max(1),
        }
    }

    /// The value of `key` if stored and not expired at `now`.
    pub fn get<Q>(&self, key: &Q, now: Instant) -> Option<V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        let entry = self.entries.get(key)?;
        (now < entry.expires).then(|| entry.value.clone())
    }

    /// Stores `value` for `ttl` from `now`. When full, drops the expired entries, and if that frees
    /// nothing, the oldest one.
    pub fn insert(&mut self, key: K, value: V, ttl: Duration, now: Instant) {
        if self.entries.len() >= self.capacity && !self.entries.contains_key(&key) {
            self.entries.retain(|_, entry| now < entry.expires);
            if self.entries.len() >= self.capacity {
                let oldest = self
                    .entries
                    .iter()
                    .min_by_key(|(_, entry)| entry.stored)
                    .map(|(key, _)| key.clone());
                if let Some(oldest) = oldest {
                    self.entries.remove(&oldest);
                }
            }
        }
        let entry = Entry {
            value,
            stored: now,
            expires: now + ttl,
        };
        self.entries.insert(key, entry);
    }

    /// How many entries are stored (expired ones included until they are dropped).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn entries_expire_after_their_ttl() {
        let start = Instant::now();
        let mut cache = TtlCache::new(10);
        cache.insert("allowed", true, ALLOWED_TTL, start);
        cache.insert("denied", false, DENIED_TTL, start);
        cache.insert("token", true, TOKEN_TTL, start);
        let at = |seconds: u32| start + S * seconds;
        assert_eq!(cache.get("denied", at(29)), Some(false));
        assert_eq!(cache.get("denied", at(30)), None);
        assert_eq!(cache.get("token", at(59)), Some(true));
        assert_eq!(cache.get("token", at(60)), None);
        assert_eq!(cache.get("allowed", at(299)), Some(true));
        assert_eq!(cache.get("allowed", at(300)), None);
        assert_eq!(cache.get("missing", at(0)), None);
    }

    #[test]
    fn the_ttls_are_controller_runtimes() {
        assert_eq!(TOKEN_TTL, Duration::from_secs(60));
        assert_eq!(ALLOWED_TTL, Duration::from_secs(300));
        assert_eq!(DENIED_TTL, Duration::from_secs(30));
        assert!(REVIEW_TIMEOUT <= Duration::from_secs(10));
    }

    #[test]
    fn a_full_cache_drops_expired_entries_then_the_oldest() {
        let start = Instant::now();
        let mut cache = TtlCache::new(3);
        cache.insert(1, "a", S, start);
        cache.insert(2, "b", S * 100, start + S);
        cache.insert(3, "c", S * 100, start + S * 2);
        // 1 has expired: it goes.
        cache.insert(4, "d", S * 100, start + S * 5);
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.get(&1, start), None);
        // Nothing expired: the oldest (2) goes.
        cache.insert(5, "e", S * 100, start + S * 6);
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.get(&2, start + S * 6), None);
        for key in [3, 4, 5] {
            assert!(cache.get(&key, start + S * 6).is_some(), "{key} dropped");
        }
        // Replacing a stored key drops nothing.
        cache.insert(5, "f", S * 100, start + S * 7);
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.get(&5, start + S * 7), Some("f"));
    }
}
