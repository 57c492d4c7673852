//! The `rest_client_*` metrics: a [`tower`] layer around the API client that counts and times its
//! requests.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use futures::future::BoxFuture;
use hyper::{Method, Request, Response};
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

/// Upper bounds of the request-duration buckets, in seconds: client-go's.
pub(crate) const REQUEST_DURATION_BUCKETS: [f64; 12] = [
    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RequestLabels {
    code: Code,
    method: &'static str,
    host: Arc<String>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct DurationLabels {
    verb: &'static str,
    host: Arc<String>,
}

/// An HTTP status code, or `<error>` for a request that got no response, as client-go labels it.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
struct Code(Option<u16>);

impl EncodeLabelValue for Code {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        use std::fmt::Write;
        match self.0 {
            Some(code) => write!(encoder, "{code}"),
            None => encoder.write_str("<error>"),
        }
    }
}

/// The series the layer records into.
#[derive(Clone)]
pub(crate) struct ClientSeries {
    pub(crate) requests: Family<RequestLabels, Counter>,
    pub(crate) duration: Family<DurationLabels, Histogram, fn() -> Histogram>,
}

/// Counts and times every request of the client it wraps, as `rest_client_requests_total{code,
/// method,host}` and `rest_client_request_duration_seconds{verb,host}`. Made by
/// [`Metrics::client_layer`](super::Metrics::client_layer).
#[derive(Clone)]
pub struct ClientMetricsLayer {
    series: ClientSeries,
    host: Arc<String>,
}

impl ClientMetricsLayer {
    pub(crate) fn new(series: ClientSeries, host: &str) -> Self {
        ClientMetricsLayer {
            series,
            host: Arc::new(host.to_string()),
        }
    }
}

impl<S> tower::Layer<S> for ClientMetricsLayer {
    type Service = ClientMetricsService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ClientMetricsService {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service [`ClientMetricsLayer`] makes.
#[derive(Clone)]
pub struct ClientMetricsService<S> {
    inner: S,
    layer: ClientMetricsLayer,
}

impl<S, In, Out> tower::Service<Request<In>> for ClientMetricsService<S>
where
    S: tower::Service<Request<In>, Response = Response<Out>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    Out: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<In>) -> Self::Future {
        let method = method_label(request.method());
        let layer = self.layer.clone();
        let started = Instant::now();
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await;
            let code = Code(response.as_ref().ok().map(|r| r.status().as_u16()));
            layer.observe(method, code, started);
            response
        })
    }
}

impl ClientMetricsLayer {
    fn observe(&self, method: &'static str, code: Code, started: Instant) {
        let host = self.host.clone();
        let labels = RequestLabels {
            code,
            method,
            host: host.clone(),
        };
        self.series.requests.get_or_create(&labels).inc();
        let labels = DurationLabels { verb: method, host };
        let duration = self.series.duration.get_or_create(&labels);
        duration.observe(started.elapsed().as_secs_f64());
    }
}

/// The method as a label value, without allocating.
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use tower::{Layer, Service};

    /// A service that answers every request with the status its path names (`/404`), or fails on
    /// `/fail`.
    #[derive(Clone)]
    struct Answer;

    impl Service<Request<()>> for Answer {
        type Response = Response<()>;
        type Error = &'static str;
        type Future = std::future::Ready<Result<Response<()>, &'static str>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: Request<()>) -> Self::Future {
            let path = request.uri().path().trim_start_matches('/');
            let answer = match path.parse::<u16>() {
                Ok(code) => Ok(Response::builder().status(code).body(()).unwrap()),
                Err(_) => Err("no connection"),
            };
            std::future::ready(answer)
        }
    }

    #[tokio::test]
    async fn counts_requests_by_code_method_and_host() {
        let metrics = Metrics::new();
        let mut client = metrics.client_layer("10.0.0.1:443").layer(Answer);
        let request = |method: Method, path: &str| {
            Request::builder()
                .method(method)
                .uri(path)
                .body(())
                .unwrap()
        };
        for (method, path) in [
            (Method::GET, "/200"),
            (Method::GET, "/200"),
            (Method::PATCH, "/409"),
            (Method::GET, "/fail"),
        ] {
            let _ = client.call(request(method, path)).await;
        }
        let text = metrics.encode();
        for (series, value) in [
            (
                r#"rest_client_requests_total{code="200",method="GET",host="10.0.0.1:443"}"#,
                "2",
            ),
            (
                r#"rest_client_requests_total{code="409",method="PATCH",host="10.0.0.1:443"}"#,
                "1",
            ),
            (
                r#"rest_client_requests_total{code="<error>",method="GET",host="10.0.0.1:443"}"#,
                "1",
            ),
            (
                r#"rest_client_request_duration_seconds_count{verb="GET",host="10.0.0.1:443"}"#,
                "3",
            ),
        ] {
            let found = text.lines().find_map(|l| l.strip_prefix(series));
            assert_eq!(found.map(str::trim), Some(value), "{series} in\n{text}");
        }
    }
}
