//! tailstream-admin: the HTTP admin endpoint of a Tailstream process.
//!
//! [`install_metrics`] installs the process-wide Prometheus recorder (latency histograms get
//! fixed buckets); [`serve`] answers `/healthz`, `/metrics` and whatever JSON routes the
//! process adds, until shutdown. Connections come through the accept loop every listener
//! shares (bounded in total and per address); each serves one HTTP/1 request whose header must
//! arrive within the request read timeout, and the whole exchange is bounded in time, so an
//! admin port cannot be pinned. [`fetch`] is the other side: a bounded GET of another
//! process's admin route (the coordinator's console reads the brokers' through it). One file:
//! it is glue, not logic.

use axum::Router;
use axum::routing::get;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
pub use metrics_exporter_prometheus::PrometheusHandle;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use std::sync::Arc;
use std::time::Duration;
use tailstream_net::{Closed, ConnectionLimits, accept_loop};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Latency buckets in seconds: 10 µs to 10 s.
const LATENCY_BUCKETS_SECONDS: &[f64] = &[
    0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025,
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

/// Largest request head (request line and headers) an admin connection buffers.
const REQUEST_HEAD_BYTES_MAX: usize = 16 * 1024;
/// Time an admin route has to answer, on top of the request read timeout.
const RESPONSE_TIME: Duration = Duration::from_secs(10);

/// Installs the Prometheus recorder for this process. Call once, before any metric is
/// recorded; later metrics go nowhere if it fails (the error says why).
pub fn install_metrics() -> Result<PrometheusHandle, String> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS_SECONDS)
        .map_err(|e| e.to_string())?
        .install_recorder()
        .map_err(|e| e.to_string())?;
    tailstream_net::metrics::describe();
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tick.tick().await;
            upkeep.run_upkeep();
        }
    });
    Ok(handle)
}

/// GETs `path` from the admin port at `addr` and returns the body of a 200 answer. The whole
/// exchange takes at most `timeout`, and a body over `body_bytes_max` is refused, not read.
pub async fn fetch(
    addr: &str,
    path: &str,
    token: Option<&str>,
    timeout: Duration,
    body_bytes_max: usize,
) -> Result<bytes::Bytes, String> {
    use http_body_util::{BodyExt, Limited};
    let exchange = async {
        // HTTPS where this process speaks TLS (`tls.enabled`): the admin ports do too.
        let stream = tailstream_net::tls::connect(addr)
            .await
            .map_err(|e| format!("connecting to {addr}: {e}"))?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| format!("{addr}: {e}"))?;
        // The connection task lives for this one exchange, whatever its outcome (the guard
        // also ends it when the timeout below drops the exchange).
        let _driver = AbortOnDrop(tokio::spawn(connection).abort_handle());
        async {
            let mut request = hyper::Request::get(path).header(hyper::header::HOST, addr);
            if let Some(token) = token {
                request = request.header(hyper::header::AUTHORIZATION, format!("Bearer {token}"));
            }
            let request = request
                .body(String::new())
                .map_err(|e| format!("{path}: {e}"))?;
            let response = sender
                .send_request(request)
                .await
                .map_err(|e| format!("{addr}{path}: {e}"))?;
            let status = response.status();
            let body = Limited::new(response.into_body(), body_bytes_max)
                .collect()
                .await
                .map_err(|e| format!("{addr}{path}: {e}"))?
                .to_bytes();
            if status != hyper::StatusCode::OK {
                return Err(format!("{addr}{path}: HTTP {status}"));
            }
            Ok(body)
        }
        .await
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| format!("{addr}{path}: no answer within {} ms", timeout.as_millis()))?
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Bounds of the admin listener.
#[derive(Clone, Copy, Debug)]
pub struct AdminLimits {
    pub connections: ConnectionLimits,
    /// The request head must arrive within this long of the connection's start.
    pub request_read_timeout: Duration,
}

impl AdminLimits {
    /// From the `listeners` section every process shares.
    pub fn from_config(listeners: &tailstream_config::ListenersConfig) -> Self {
        Self {
            connections: ConnectionLimits {
                connections_max: listeners.admin_connections_max as usize,
                connections_per_address_max: listeners.connections_per_address_max as usize,
            },
            request_read_timeout: listeners.request_read_timeout(),
        }
    }
}

/// Metrics text appended to the recorder's on every scrape: series that must disappear when
/// what they describe does (the recorder keeps every series it saw for good).
pub type ExtraMetrics = Arc<dyn Fn() -> String + Send + Sync>;

/// The cluster's admin token (`security.admin_token`), when one is required.
pub type AdminToken = Option<Arc<str>>;

/// The admin token of a configuration (`None` when it sets none).
pub fn admin_token(config: &tailstream_config::SecurityConfig) -> AdminToken {
    (!config.admin_token.is_empty()).then(|| Arc::from(config.admin_token.as_str()))
}

/// Serves `/healthz`, `/metrics` and `routes` on `listener` until `shutdown` turns true.
/// With a `token`, every route but `/healthz` answers 401 to a request that does not carry
/// it (`Authorization: Bearer TOKEN`, or `?token=TOKEN` for a browser).
pub async fn serve(
    listener: TcpListener,
    metrics: PrometheusHandle,
    routes: Router,
    limits: AdminLimits,
    token: AdminToken,
    shutdown: watch::Receiver<bool>,
) {
    serve_with(listener, metrics, None, routes, limits, token, shutdown).await
}

/// Whether `request` carries `expected`.
fn carries_token(request: &axum::extract::Request, expected: &str) -> bool {
    let bearer = request
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    let query = request.uri().query().and_then(|query| {
        query
            .split('&')
            .find_map(|pair| pair.strip_prefix("token="))
    });
    [bearer, query]
        .into_iter()
        .flatten()
        .any(|given| tailstream_auth::token_matches(given, expected))
}

/// [`serve`], with `extra` appended to `/metrics`.
pub async fn serve_with(
    listener: TcpListener,
    metrics: PrometheusHandle,
    extra: Option<ExtraMetrics>,
    routes: Router,
    limits: AdminLimits,
    token: AdminToken,
    shutdown: watch::Receiver<bool>,
) {
    let guarded = routes.route(
        "/metrics",
        get(move || {
            let mut page = metrics.render();
            if let Some(extra) = &extra {
                page.push_str(&extra());
            }
            std::future::ready(page)
        }),
    );
    let guarded = match token {
        None => guarded,
        Some(expected) => guarded.layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                let allowed = carries_token(&request, &expected);
                async move {
                    use axum::response::IntoResponse;
                    if allowed {
                        next.run(request).await
                    } else {
                        (
                            hyper::StatusCode::UNAUTHORIZED,
                            "this endpoint needs the cluster's admin token \
                             (Authorization: Bearer TOKEN, or ?token=TOKEN)\n",
                        )
                            .into_response()
                    }
                }
            },
        )),
    };
    // Health stays open: load balancers and orchestrators probe it without secrets.
    let app = guarded.route("/healthz", get(|| async { "ok\n" }));
    let tls = tailstream_net::tls::listener(tailstream_net::tls::Facing::Clients);
    accept_loop(
        listener,
        "admin",
        limits.connections,
        shutdown,
        move |tcp, _peer| {
            let service = TowerToHyperService::new(app.clone());
            let tls = tls.clone();
            async move {
                let stream = match tailstream_net::tls::accept(
                    tls.as_ref(),
                    tcp,
                    limits.request_read_timeout,
                )
                .await
                {
                    Ok(stream) => stream,
                    Err(refused) => return Closed::Tls(refused.to_string()),
                };
                let connection = http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(limits.request_read_timeout)
                    .max_buf_size(REQUEST_HEAD_BYTES_MAX)
                    // One request per connection: nothing to keep idle.
                    .keep_alive(false)
                    .serve_connection(TokioIo::new(stream), service);
                let bound = limits.request_read_timeout + RESPONSE_TIME;
                match tokio::time::timeout(bound, connection).await {
                    Ok(Ok(())) => Closed::ByPeer,
                    Ok(Err(error)) if error.is_timeout() => Closed::RequestTimeout,
                    Ok(Err(error)) => Closed::BadInput(error.to_string()),
                    Err(_) => Closed::RequestTimeout,
                }
            }
        },
    )
    .await;
}
