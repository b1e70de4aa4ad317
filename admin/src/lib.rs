//! tailstream-admin: the HTTP admin endpoint of a Tailstream process.
//!
//! [`install_metrics`] installs the process-wide Prometheus recorder (latency histograms get
//! fixed buckets); [`serve`] answers `/healthz`, `/metrics` and whatever JSON routes the
//! process adds, until shutdown. One file: it is glue, not logic.

use axum::Router;
use axum::routing::get;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Latency buckets in seconds: 10 µs to 10 s.
const LATENCY_BUCKETS_SECONDS: &[f64] = &[
    0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025,
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

/// Installs the Prometheus recorder for this process. Call once, before any metric is
/// recorded; later metrics go nowhere if it fails (the error says why).
pub fn install_metrics() -> Result<PrometheusHandle, String> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS_SECONDS)
        .map_err(|e| e.to_string())?
        .install_recorder()
        .map_err(|e| e.to_string())?;
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

/// Serves `/healthz`, `/metrics` and `routes` on `listener` until `shutdown` turns true.
pub async fn serve(
    listener: TcpListener,
    metrics: PrometheusHandle,
    routes: Router,
    mut shutdown: watch::Receiver<bool>,
) {
    let app = routes.route("/healthz", get(|| async { "ok\n" })).route(
        "/metrics",
        get(move || std::future::ready(metrics.render())),
    );
    let stop = async move {
        while !*shutdown.borrow_and_update() {
            if shutdown.changed().await.is_err() {
                return;
            }
        }
    };
    if let Err(error) = axum::serve(listener, app)
        .with_graceful_shutdown(stop)
        .await
    {
        tracing::warn!(%error, "admin endpoint stopped");
    }
}
