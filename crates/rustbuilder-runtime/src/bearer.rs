//! A bearer token that can be replaced while its client runs: a fleet member's credentials rotated
//! (Cluster API's EKS provider, say, writes a new token into the kubeconfig Secret every few
//! minutes) without a new client, new connections, new watches or new lists.

use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};

use http::{HeaderValue, Request, header::AUTHORIZATION};
use serde_json::Value;

/// The token a client sends, shared with whoever may replace it. Cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct Bearer {
    header: Arc<RwLock<HeaderValue>>,
}

impl Bearer {
    /// Takes the bearer token out of `config`, if it has one: the client made from `config` then
    /// sends the token through [`Bearer::layer`] instead.
    pub(crate) fn take_from(config: &mut kube::Config) -> Option<Bearer> {
        let header = header(&token(config)?)?;
        config.auth_info.token = None;
        Some(Bearer {
            header: Arc::new(RwLock::new(header)),
        })
    }

    /// Sends `new`'s token from now on, if `new` differs from `old` by its token only (the same
    /// server, certificates and every other setting); else `false`, and nothing changes.
    pub(crate) fn rotate(&self, old: &kube::Config, new: &kube::Config) -> bool {
        let Some(header) = token(new).as_deref().and_then(header) else {
            return false;
        };
        if token(old).is_none() || settings(old) != settings(new) {
            return false;
        }
        *self.header.write().unwrap_or_else(|e| e.into_inner()) = header;
        true
    }

    fn current(&self) -> HeaderValue {
        self.header
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// `config`'s bearer token, if any.
fn token(config: &kube::Config) -> Option<String> {
    // The token is a secret string: its serialised form is the only way to read it.
    let auth = serde_json::to_value(&config.auth_info).ok()?;
    auth.get("token")?.as_str().map(str::to_string)
}

fn header(token: &str) -> Option<HeaderValue> {
    let mut header = HeaderValue::from_str(&format!("Bearer {token}")).ok()?;
    header.set_sensitive(true);
    Some(header)
}

/// Everything of `config` that reaches the server and proves who the client is, but the token.
fn settings(config: &kube::Config) -> Value {
    let mut auth = serde_json::to_value(&config.auth_info).unwrap_or_default();
    if let Some(auth) = auth.as_object_mut() {
        auth.remove("token");
    }
    let headers: Vec<(String, Option<&str>)> = config
        .headers
        .iter()
        .map(|(name, value)| (name.to_string(), value.to_str().ok()))
        .collect();
    serde_json::json!({
        "server": config.cluster_url.to_string(),
        "namespace": config.default_namespace,
        "rootCert": config.root_cert,
        "insecure": config.accept_invalid_certs,
        "serverName": config.tls_server_name,
        "proxy": config.proxy_url.as_ref().map(ToString::to_string),
        "headers": headers,
        "timeouts": [config.connect_timeout, config.read_timeout, config.write_timeout],
        "auth": auth,
    })
}

/// Sets each request's `Authorization` header to the [`Bearer`]'s current token, if there is one.
#[derive(Clone, Debug)]
pub(crate) struct BearerLayer {
    bearer: Option<Bearer>,
}

impl BearerLayer {
    pub(crate) fn new(bearer: Option<&Bearer>) -> Self {
        BearerLayer {
            bearer: bearer.cloned(),
        }
    }
}

impl<S> tower::Layer<S> for BearerLayer {
    type Service = BearerService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        BearerService {
            inner,
            bearer: self.bearer.clone(),
        }
    }
}

/// The service [`BearerLayer`] makes.
#[derive(Clone, Debug)]
pub(crate) struct BearerService<S> {
    inner: S,
    bearer: Option<Bearer>,
}

impl<S, B> tower::Service<Request<B>> for BearerService<S>
where
    S: tower::Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        if let Some(bearer) = &self.bearer {
            request
                .headers_mut()
                .insert(AUTHORIZATION, bearer.current());
        }
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(server: &str, token: Option<&str>) -> kube::Config {
        let mut config = kube::Config::new(server.parse().unwrap());
        config.auth_info = serde_json::from_value(serde_json::json!({ "token": token })).unwrap();
        config
    }

    #[test]
    fn only_a_new_token_for_the_same_server_is_rotated_in_place() {
        let mut first = config("https://10.0.0.1:6443", Some("one"));
        let sent = first.clone();
        let bearer = Bearer::take_from(&mut first).expect("a token");
        assert!(
            token(&first).is_none(),
            "the client's own config keeps the token"
        );
        assert_eq!(bearer.current(), "Bearer one");

        let other_server = config("https://10.0.0.2:6443", Some("two"));
        assert!(!bearer.rotate(&sent, &other_server));
        let mut other_user = config("https://10.0.0.1:6443", Some("two"));
        other_user.auth_info.impersonate = Some("someone".into());
        assert!(!bearer.rotate(&sent, &other_user));
        let no_token = config("https://10.0.0.1:6443", None);
        assert!(!bearer.rotate(&sent, &no_token));
        assert_eq!(
            bearer.current(),
            "Bearer one",
            "changed by a refused rotation"
        );

        let rotated = config("https://10.0.0.1:6443", Some("two"));
        assert!(bearer.rotate(&sent, &rotated));
        assert_eq!(bearer.current(), "Bearer two");
        assert!(bearer.current().is_sensitive());
    }

    #[test]
    fn a_config_without_a_token_keeps_its_credentials() {
        let mut config = config("https://10.0.0.1:6443", None);
        assert!(Bearer::take_from(&mut config).is_none());
    }
}
