//! The coordinator's admin routes: the JSON operators and the console read, and the console.
//!
//! - `/`: the console, one static page compiled into the binary (no build step) that polls
//!   the routes below.
//! - `/brokers`: every broker: server id, index, generation, addresses, liveness, and the
//!   segment memory it had free at its last heartbeat.
//! - `/streams`: every stream's settings and streamlets (owner, epoch, state), and per log
//!   the head segment and committed offset its owner last reported.
//! - `/leadership`: the leader (this coordinator), its term, the store, and the standbys.
//! - `/recoveries`, `/groups`: recoveries with their phase times; groups with members and lag.
//! - `/brokers/{server}/{view}`: a broker's own `streamlets` (appended and committed positions,
//!   replica placement), `memory` or `backup` view, fetched by the coordinator so the console
//!   reads one origin. Only those three views, bounded in time and size.

use crate::service::CoordinatorService;
use axum::Router;
use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tailstream_wire::{LogId, StreamletId};

/// The console page.
const CONSOLE_HTML: &str = include_str!("console/index.html");
/// The broker views the coordinator fetches on the console's behalf.
const BROKER_VIEWS: &[&str] = &["streamlets", "memory", "backup"];
/// How long a broker view may take.
const BROKER_VIEW_TIMEOUT: Duration = Duration::from_secs(2);
/// The largest broker view passed on.
const BROKER_VIEW_BYTES_MAX: usize = 8 << 20;

/// Every admin route but `/healthz` and `/metrics` (the admin crate adds those).
pub fn routes(service: Arc<CoordinatorService>) -> Router {
    let (brokers, streams, recoveries, groups, leadership, proxy) = (
        service.clone(),
        service.clone(),
        service.clone(),
        service.clone(),
        service.clone(),
        service,
    );
    Router::new()
        .route("/", get(|| async { Html(CONSOLE_HTML) }))
        .route("/brokers", get(move || ready(brokers_json(&brokers))))
        .route("/streams", get(move || ready(streams_json(&streams))))
        .route(
            "/recoveries",
            get(move || {
                let recoveries = recoveries.core().lock().metadata.recoveries.clone();
                ready(json!({ "recoveries": recoveries }))
            }),
        )
        .route("/groups", get(move || ready(groups_json(&groups))))
        .route(
            "/leadership",
            get(move || {
                let service = leadership.clone();
                async move { axum::Json(leadership_json(&service).await) }
            }),
        )
        .route(
            "/brokers/{server}/{view}",
            get(move |Path((server, view)): Path<(String, String)>| {
                let service = proxy.clone();
                async move { broker_view(&service, &server, &view).await }
            }),
        )
}

fn ready(value: Value) -> std::future::Ready<axum::Json<Value>> {
    std::future::ready(axum::Json(value))
}

async fn leadership_json(service: &CoordinatorService) -> Value {
    let described = service.describe_leadership().await;
    let info = |c: &tailstream_wire::messages::CoordinatorInfo| {
        json!({
            "rpc_addr": c.rpc_addr,
            "peer_addr": c.peer_addr,
            "admin_url": format!("http://{}", c.admin_addr),
        })
    };
    json!({
        "term": described.term.0,
        "store": described.store,
        "leader": info(&described.leader),
        "standbys": described.standbys.iter().map(info).collect::<Vec<_>>(),
        "standbys_error": (!described.standbys_error.is_empty()).then_some(described.standbys_error),
    })
}

fn brokers_json(service: &CoordinatorService) -> Value {
    let (brokers, _) = service.snapshot();
    let free = service.core().lock().memory_free_bytes.clone();
    let brokers: Vec<_> = brokers
        .brokers
        .iter()
        .map(|b| {
            json!({
                "server_id": b.server_id.to_string(),
                "index": b.server_id.index,
                "generation": b.server_id.generation,
                "rpc_addr": b.rpc_addr,
                "peer_addr": b.peer_addr,
                "kafka_addr": b.kafka_addr,
                "admin_url": format!("http://{}", b.admin_addr),
                "alive": b.alive,
                "crashed": b.crashed,
                "segment_memory_free_bytes": free.get(&b.server_id),
            })
        })
        .collect();
    json!({ "brokers": brokers })
}

fn streams_json(service: &CoordinatorService) -> Value {
    let (_, streams) = service.snapshot();
    let state = service.core().lock();
    let streams: Vec<_> = streams
        .streams
        .iter()
        .map(|s| {
            let placements: Vec<_> = s
                .streamlets
                .iter()
                .map(|p| {
                    let streamlet = StreamletId(p.streamlet.0);
                    let logs: Vec<_> = (0..s.config.logs_per_streamlet)
                        .map(|log| {
                            let key = (s.id, streamlet, LogId(log));
                            let set = p.replication.iter().find(|r| r.log == LogId(log));
                            json!({
                                "log": log,
                                "head_segment": state.heads.get(&key).map(|h| h.0),
                                "committed_offset": state.log_ends.get(&key).map(|o| o.0),
                                "in_sync_replicas": set.map(|r| r.in_sync_replicas),
                                "backups": set.map(|r| r.backups.iter().map(ToString::to_string).collect::<Vec<_>>()),
                                "in_sync": set.map(|r| r.in_sync.iter().map(ToString::to_string).collect::<Vec<_>>()),
                            })
                        })
                        .collect();
                    json!({
                        "streamlet": p.streamlet.0,
                        "owner": p.owner.to_string(),
                        "owner_addr": p.owner_addr,
                        "epoch": p.epoch,
                        "state": format!("{:?}", p.state),
                        "detail": p.detail,
                        "under_replicated_logs": p.under_replicated_logs(s.config.replicas),
                        "logs": logs,
                    })
                })
                .collect();
            json!({
                "id": s.id.0,
                "name": s.name,
                "config": s.config,
                "streamlets": placements,
            })
        })
        .collect();
    json!({ "streams": streams })
}

fn groups_json(service: &CoordinatorService) -> Value {
    let (lag, members) = service.group_lag();
    let members: Vec<_> = members
        .into_iter()
        .map(|(group, members, generation)| {
            json!({ "group": group, "members": members, "generation": generation })
        })
        .collect();
    json!({ "groups": members, "lag": lag })
}

/// A broker's own admin view, fetched from its admin port.
async fn broker_view(service: &CoordinatorService, server: &str, view: &str) -> Response {
    if !BROKER_VIEWS.contains(&view) {
        return (StatusCode::NOT_FOUND, format!("no broker view {view:?}\n")).into_response();
    }
    let (brokers, _) = service.snapshot();
    let Some(broker) = brokers
        .brokers
        .iter()
        .find(|b| b.server_id.to_string() == server)
    else {
        return (StatusCode::NOT_FOUND, format!("no broker {server:?}\n")).into_response();
    };
    let path = format!("/{view}");
    let token = service.admin_token();
    match tailstream_admin::fetch(
        &broker.admin_addr,
        &path,
        token.as_deref(),
        BROKER_VIEW_TIMEOUT,
        BROKER_VIEW_BYTES_MAX,
    )
    .await
    {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(error) => (StatusCode::BAD_GATEWAY, format!("{error}\n")).into_response(),
    }
}
