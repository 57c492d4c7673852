//! Whether a member's API server answers at all: a probe of `GET /version`, apart from the
//! controllers' own requests.
//!
//! A member that accepts connections and never replies (a hung API server, a load balancer with no
//! backend, a network that drops the replies) fails nothing: every request waits for kube's read
//! timeout (almost five minutes), a watch that stops receiving is not told, and a list in flight
//! holds its cache for as long. The fleet probes each member instead: one that has left every
//! probe unanswered for [`SILENCE_BOUND`] is disengaged (its controllers cancelled, its
//! connections closed), and engaged again, on fresh connections, as soon as it answers.

use std::time::Duration;

use tokio::time::Instant;

/// How long a member's API server may leave every probe unanswered before the fleet disengages it
/// (see [`Fleet::disengage_silent_after`](super::Fleet::disengage_silent_after)).
pub const SILENCE_BOUND: Duration = Duration::from_secs(30);

/// How often, and how long each probe may take: three probes per bound.
fn probe_period(bound: Duration) -> Duration {
    (bound / 3).max(Duration::from_millis(100))
}

/// Whether `client`'s API server answered within `period`: with anything, a version, an error
/// status or a refused connection (a server that refuses is away, not silent: a watch sees
/// that at once and retries on its own).
async fn answers(client: &kube::Client, period: Duration) -> bool {
    tokio::time::timeout(period, client.apiserver_version())
        .await
        .is_ok()
}

/// Resolves once `client`'s API server has left every probe unanswered for `bound`; never while
/// it answers.
pub(super) async fn silent_for(client: kube::Client, bound: Duration) {
    let period = probe_period(bound);
    let mut silent_since = None;
    loop {
        let probed = Instant::now();
        match answers(&client, period).await {
            true => silent_since = None,
            false => {
                let since = *silent_since.get_or_insert(probed);
                if since.elapsed() >= bound {
                    return;
                }
            }
        }
        tokio::time::sleep_until(probed + period).await;
    }
}

/// Resolves once `client`'s API server answers a probe with a version or an error status: it
/// serves requests again.
pub(super) async fn until_it_answers(client: kube::Client, bound: Duration) {
    let period = probe_period(bound);
    loop {
        let probed = Instant::now();
        match tokio::time::timeout(period, client.apiserver_version()).await {
            Ok(Ok(_)) | Ok(Err(kube::Error::Api(_))) => return,
            Ok(Err(_)) | Err(_) => {}
        }
        tokio::time::sleep_until(probed + period).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A loopback listener that accepts every connection and never replies.
    fn silent_server() -> kube::Client {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let held: Vec<_> = listener.incoming().collect();
            drop(held);
        });
        let config = kube::Config::new(format!("http://{address}").parse().unwrap());
        kube::Client::try_from(config).unwrap()
    }

    /// A loopback address nothing listens on: every connection refused.
    fn refusing_server() -> kube::Client {
        let address = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let config = kube::Config::new(format!("http://{address}").parse().unwrap());
        kube::Client::try_from(config).unwrap()
    }

    #[tokio::test]
    async fn a_server_that_accepts_and_never_replies_is_silent_after_the_bound() {
        let bound = Duration::from_millis(600);
        let started = Instant::now();
        let silent = tokio::time::timeout(bound * 3, silent_for(silent_server(), bound)).await;
        assert!(silent.is_ok(), "not silent within three bounds");
        assert!(started.elapsed() >= bound, "silent before the bound");
    }

    #[tokio::test]
    async fn a_server_that_refuses_is_away_not_silent() {
        let bound = Duration::from_millis(300);
        let silent = tokio::time::timeout(bound * 4, silent_for(refusing_server(), bound)).await;
        assert!(silent.is_err(), "a refusing server counted as silent");
        let answered = tokio::time::timeout(bound * 4, until_it_answers(refusing_server(), bound));
        assert!(answered.await.is_err(), "a refusal counted as an answer");
    }
}
