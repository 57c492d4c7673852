//! The error of starting and running a manager, shared by the layers that serve for it (the
//! endpoints, the certificates, the webhook server), so none of them needs the manager itself.

use std::fmt;

use crate::lease::InvalidTiming;

/// What an [`Error`] was caused by, when something below the manager failed.
pub type Cause = Box<dyn std::error::Error + Send + Sync>;

/// Why the manager could not start, or stopped early. Its message names what failed, and
/// [`std::error::Error::source`] what caused it. `{:?}` prints the message and its causes, one
/// per line, so that a `main` returning it prints something readable; `{:#?}` the variant and its
/// fields.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An endpoint could not listen on its address.
    #[error("cannot listen on {address}")]
    Bind {
        /// The address as given.
        address: String,
        /// What the operating system said.
        source: std::io::Error,
    },

    /// The metrics serving certificate could not be made or loaded.
    #[error("metrics TLS: {context}")]
    Tls {
        /// What was being done (and with which file).
        context: String,
        /// What failed.
        source: Cause,
    },

    /// The webhook server could not start, e.g. its serving certificate is missing.
    #[error("webhook server: {reason}")]
    Webhook {
        /// What is wrong, and how to mend it.
        reason: String,
        /// What failed, if something below did.
        source: Option<Cause>,
    },

    /// A flag value or a setting is invalid (e.g. the log filter, or the kubeconfig).
    #[error("invalid configuration: {reason}")]
    Config {
        /// Which value, and why.
        reason: String,
        /// What failed, if something below did.
        source: Option<Cause>,
    },

    /// The leader-election (or shard) Lease timing is inconsistent.
    #[error("invalid lease timing")]
    LeaseTiming(#[from] InvalidTiming),

    /// The API client could not be configured, or the API server could not be reached.
    #[error("cannot reach the Kubernetes API")]
    Kube(#[from] kube::Error),

    /// A controller stopped (or panicked) before shutdown was requested.
    #[error("a controller stopped before shutdown was requested")]
    ControllerStopped,

    /// The leader-election lease was lost (not renewed in time, or taken by another process).
    #[error("leader election lost")]
    LeadershipLost,

    /// A second SIGTERM or Ctrl-C came while shutting down: the reconciles in flight were dropped.
    #[error("interrupted by a second signal")]
    Interrupted,

    /// Reconciles were still running when the graceful shutdown timeout passed: they were dropped
    /// (the Lease released first), before the kubelet's SIGKILL.
    #[error("reconciles still running {0:?} after shutdown began: stopped without them")]
    ShutdownTimedOut(std::time::Duration),
}

impl Error {
    /// An invalid setting with no error below it.
    pub(crate) fn config(reason: impl Into<String>) -> Self {
        Error::Config {
            reason: reason.into(),
            source: None,
        }
    }

    /// An invalid setting that `source` tells more about.
    pub(crate) fn config_from(reason: impl Into<String>, source: impl Into<Cause>) -> Self {
        Error::Config {
            reason: reason.into(),
            source: Some(source.into()),
        }
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.alternate() {
            return match self {
                Error::Bind { address, source } => f
                    .debug_struct("Bind")
                    .field("address", address)
                    .field("source", source)
                    .finish(),
                Error::Tls { context, source } => f
                    .debug_struct("Tls")
                    .field("context", context)
                    .field("source", source)
                    .finish(),
                Error::Webhook { reason, source } => f
                    .debug_struct("Webhook")
                    .field("reason", reason)
                    .field("source", source)
                    .finish(),
                Error::Config { reason, source } => f
                    .debug_struct("Config")
                    .field("reason", reason)
                    .field("source", source)
                    .finish(),
                Error::LeaseTiming(timing) => f.debug_tuple("LeaseTiming").field(timing).finish(),
                Error::Kube(error) => f.debug_tuple("Kube").field(error).finish(),
                Error::ControllerStopped => f.write_str("ControllerStopped"),
                Error::LeadershipLost => f.write_str("LeadershipLost"),
                Error::Interrupted => f.write_str("Interrupted"),
                Error::ShutdownTimedOut(timeout) => {
                    f.debug_tuple("ShutdownTimedOut").field(timeout).finish()
                }
            };
        }
        write!(f, "{self}")?;
        let mut cause = std::error::Error::source(self);
        while let Some(error) = cause {
            write!(f, "\n  caused by: {error}")?;
            cause = error.source();
        }
        Ok(())
    }
}
