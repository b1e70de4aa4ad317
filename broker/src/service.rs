//! The broker's client service (its `rpc_addr` listener): produce, fetch, list groups. What
//! other brokers and the coordinator call is on the peer listener (`peer_service`).
//!
//! Every handler decodes its body with the wire crate (never trusting a field it has not
//! bounded), answers a typed status on failure, and touches storage only through `Store`.
//! Produce runs entirely in `dispatch`, on the connection's reader task, so batches pipelined
//! on one connection are appended in the order they were sent.

use crate::metrics as m;
use crate::storage::{ReadOutcome, StorageError, Store, Streamlet};
use bytes::Bytes;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tailstream_config::BrokerConfig;
use tailstream_net::{Reply, Request, Response, Service};
use tailstream_wire::batch::{BatchError, validate_batch};
use tailstream_wire::messages::{
    FetchRequest, FetchResponse, ListGroupsRequest, ListGroupsResponse, ProduceRequest,
    ProduceResponse,
};
use tailstream_wire::{Decode, Opcode, Status};

#[derive(Debug)]
pub struct BrokerService {
    store: Arc<Store>,
    config: BrokerConfig,
    /// How long a produce on a replicated stream waits for its replicas.
    ack_timeout: Duration,
}

fn refuse(error: StorageError) -> Reply {
    Reply::Ready(Response::error(error.status(), error.to_string()))
}

fn malformed(what: &str, error: impl std::fmt::Display) -> Reply {
    Reply::Ready(Response::error(
        Status::Malformed,
        format!("{what}: {error}"),
    ))
}

impl BrokerService {
    pub fn new(store: Arc<Store>, config: BrokerConfig, ack_timeout: Duration) -> Self {
        Self {
            store,
            config,
            ack_timeout,
        }
    }

    fn produce(&self, body: Bytes) -> Reply {
        let started = Instant::now();
        let request = match ProduceRequest::decode_exact(body) {
            Ok(request) => request,
            Err(error) => return malformed("produce request", error),
        };
        let info = match validate_batch(&request.batch) {
            Ok(info) => info,
            Err(error @ BatchError::UnsupportedAttributes(_)) => {
                return Reply::Ready(Response::error(Status::UnsupportedBatch, error.to_string()));
            }
            Err(error) => {
                metrics::counter!(m::INVALID_BATCHES).increment(1);
                return Reply::Ready(Response::error(Status::InvalidBatch, error.to_string()));
            }
        };
        let streamlet = match self.store.get(request.stream, request.streamlet) {
            Ok(streamlet) => streamlet,
            Err(error) => return refuse(error),
        };
        let appended = match self
            .store
            .append(&streamlet, &request.batch, &info, started)
        {
            Ok(appended) => appended,
            Err(error) => {
                if matches!(error, StorageError::Backpressure { .. }) {
                    metrics::counter!(m::PRODUCE_BACKPRESSURE).increment(1);
                }
                return refuse(error);
            }
        };
        if appended.duplicate {
            metrics::counter!(m::DUPLICATE_BATCHES).increment(1);
        } else {
            metrics::counter!(m::APPENDED_RECORDS).increment(u64::from(info.record_count));
            metrics::counter!(m::APPENDED_BYTES).increment(request.batch.len() as u64);
        }
        let location = appended.location;
        let response = ProduceResponse {
            log: location.log,
            group: location.group,
            segment: location.segment,
            position: location.position,
            base_offset: location.base_offset,
            duplicate: appended.duplicate,
        };
        // Acknowledged only once committed: at once without replication, after every backup
        // holds the bytes with it. A retried batch waits for its first append's commit.
        let mut commits = match streamlet.log(location.log) {
            Ok(log) => log.subscribe_commits(),
            Err(error) => return refuse(error),
        };
        let target = location.commit_point();
        if *commits.borrow() >= target {
            metrics::histogram!(m::PRODUCE_LATENCY).record(started.elapsed().as_secs_f64());
            return Reply::Ready(Response::ok(&response));
        }
        let ack_timeout = self.ack_timeout;
        Reply::Later(Box::pin(async move {
            let committed =
                tokio::time::timeout(ack_timeout, commits.wait_for(|p| *p >= target)).await;
            match committed {
                Ok(Ok(_)) => {
                    metrics::histogram!(m::PRODUCE_LATENCY).record(started.elapsed().as_secs_f64());
                    Response::ok(&response)
                }
                Ok(Err(_)) => Response::error(Status::ShuttingDown, "the log is gone"),
                Err(_) => Response::error(
                    Status::Timeout,
                    format!(
                        "not replicated within {} ms; retry",
                        ack_timeout.as_millis()
                    ),
                ),
            }
        }))
    }

    fn fetch(&self, body: Bytes) -> Reply {
        let request = match FetchRequest::decode_exact(body) {
            Ok(request) => request,
            Err(error) => return malformed("fetch request", error),
        };
        metrics::counter!(m::FETCH_REQUESTS).increment(1);
        let streamlet = match self.store.get(request.stream, request.streamlet) {
            Ok(streamlet) => streamlet,
            Err(error) => return refuse(error),
        };
        let max_bytes = request.max_bytes.clamp(1, self.config.fetch_bytes_max) as usize;
        let wait_ms = request.max_wait_ms.min(self.config.fetch_wait_ms_max);
        let log = match streamlet.log(request.log) {
            Ok(log) => log,
            Err(error) => return refuse(error),
        };
        // Subscribe before reading, so a commit between the read and the wait is not missed.
        let mut commits = log.subscribe_commits();
        let read = move |streamlet: &Streamlet| -> Result<ReadOutcome, StorageError> {
            let log = streamlet.log(request.log)?;
            log.read(request.group, request.segment, request.position, max_bytes)
        };
        match read(&streamlet) {
            Err(error) => refuse(error),
            Ok(outcome) if !outcome.parts.is_empty() || outcome.end_of_group || wait_ms == 0 => {
                Reply::Ready(fetch_response(outcome))
            }
            Ok(_) => Reply::Later(Box::pin(async move {
                let deadline = tokio::time::Instant::now() + Duration::from_millis(wait_ms.into());
                loop {
                    let woke = tokio::time::timeout_at(deadline, commits.changed()).await;
                    match read(&streamlet) {
                        Err(error) => return Response::error(error.status(), error.to_string()),
                        Ok(outcome)
                            if !outcome.parts.is_empty()
                                || outcome.end_of_group
                                || !matches!(woke, Ok(Ok(()))) =>
                        {
                            return fetch_response(outcome);
                        }
                        Ok(_) => {}
                    }
                }
            })),
        }
    }

    fn list_groups(&self, body: Bytes) -> Reply {
        let request = match ListGroupsRequest::decode_exact(body) {
            Ok(request) => request,
            Err(error) => return malformed("list groups request", error),
        };
        match self.store.get(request.stream, request.streamlet) {
            Ok(streamlet) => Reply::Ready(Response::ok(&ListGroupsResponse {
                logs: streamlet.list_groups(),
            })),
            Err(error) => refuse(error),
        }
    }
}

fn fetch_response(outcome: ReadOutcome) -> Response {
    let fetched: usize = outcome.parts.iter().map(Bytes::len).sum();
    metrics::counter!(m::FETCHED_BYTES).increment(fetched as u64);
    let prefix = FetchResponse {
        segment: outcome.segment,
        position: outcome.position,
        next_segment: outcome.next_segment,
        next_position: outcome.next_position,
        end_of_group: outcome.end_of_group,
        next_group: outcome.next_group,
        entries: Bytes::new(),
    }
    .encode_prefix()
    .freeze();
    let mut parts = Vec::with_capacity(outcome.parts.len() + 1);
    parts.push(prefix);
    parts.extend(outcome.parts);
    Response::ok_parts(parts)
}

impl Service for BrokerService {
    fn dispatch(&self, request: Request) -> Reply {
        match request.opcode {
            Opcode::Ping => Reply::Ready(Response::empty()),
            Opcode::Produce => self.produce(request.body),
            Opcode::Fetch => self.fetch(request.body),
            Opcode::ListGroups => self.list_groups(request.body),
            other => Reply::Ready(Response::error(
                Status::UnknownOpcode,
                format!("{other:?} is not a broker operation on its client listener"),
            )),
        }
    }
}
