//! The broker's native client service (its `rpc_addr` listener): produce, fetch, list groups,
//! decoded from Tailstream's frames and answered in them, over the front-end-neutral
//! `DataPlane`. What other brokers and the coordinator call is on the peer listener
//! (`peer_service`).
//!
//! Produce runs entirely in `dispatch`, on the connection's reader task, so batches pipelined
//! on one connection are appended in the order they were sent; its answer waits (later) for
//! the commit. A fetch with nothing to return long-polls the log's commit point.

use crate::data_plane::{DataError, DataPlane, Fetched, StreamletRef};
use crate::metrics as m;
use crate::storage::ReadOutcome;
use bytes::Bytes;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tailstream_config::BrokerConfig;
use tailstream_net::{Reply, Request, Response, Service};
use tailstream_wire::messages::{
    FetchRequest, FetchResponse, ListGroupsRequest, ListGroupsResponse, LocateOffsetRequest,
    LocateOffsetResponse, ProduceRequest, ProduceResponse,
};
use tailstream_wire::{Decode, Opcode, Status};

#[derive(Debug)]
pub struct BrokerService {
    plane: Arc<DataPlane>,
    config: BrokerConfig,
}

fn refuse(error: DataError) -> Response {
    Response::error(error.status(), error.to_string())
}

fn malformed(what: &str, error: impl std::fmt::Display) -> Reply {
    Reply::Ready(Response::error(
        Status::Malformed,
        format!("{what}: {error}"),
    ))
}

impl BrokerService {
    pub fn new(plane: Arc<DataPlane>, config: BrokerConfig) -> Self {
        Self { plane, config }
    }

    fn produce(&self, body: Bytes) -> Reply {
        let started = Instant::now();
        let request = match ProduceRequest::decode_exact(body) {
            Ok(request) => request,
            Err(error) => return malformed("produce request", error),
        };
        let at = StreamletRef {
            stream: request.stream,
            streamlet: request.streamlet,
            epoch: request.epoch,
        };
        let produced = match self.plane.produce(at, &request.batch, started) {
            Ok(produced) => produced,
            Err(error) => return Reply::Ready(refuse(error)),
        };
        let location = produced.location;
        let response = ProduceResponse {
            log: location.log,
            group: location.group,
            segment: location.segment,
            position: location.position,
            base_offset: location.base_offset,
            duplicate: produced.duplicate,
        };
        if produced.commit.is_committed() {
            metrics::histogram!(m::PRODUCE_LATENCY).record(started.elapsed().as_secs_f64());
            return Reply::Ready(Response::ok(&response));
        }
        // Waiting for the commit holds nothing and does nothing: the writer may drive it.
        Reply::Awaiting(Box::pin(async move {
            match produced.commit.wait().await {
                Ok(()) => {
                    metrics::histogram!(m::PRODUCE_LATENCY).record(started.elapsed().as_secs_f64());
                    Response::ok(&response)
                }
                Err(error) => refuse(error),
            }
        }))
    }

    fn fetch(&self, body: Bytes) -> Reply {
        let request = match FetchRequest::decode_exact(body) {
            Ok(request) => request,
            Err(error) => return malformed("fetch request", error),
        };
        metrics::counter!(m::FETCH_REQUESTS).increment(1);
        let at = StreamletRef {
            stream: request.stream,
            streamlet: request.streamlet,
            epoch: request.epoch,
        };
        let max_bytes = request.max_bytes.clamp(1, self.config.fetch_bytes_max) as usize;
        let wait_ms = request.max_wait_ms.min(self.config.fetch_wait_ms_max);
        let read = {
            let plane = self.plane.clone();
            move || {
                plane.fetch(
                    at,
                    request.log,
                    request.group,
                    request.segment,
                    request.position,
                    max_bytes,
                )
            }
        };
        let Fetched {
            outcome,
            mut commits,
            ..
        } = match read() {
            Ok(fetched) => fetched,
            Err(error) => return Reply::Ready(refuse(error)),
        };
        if !outcome.parts.is_empty() || outcome.end_of_group || wait_ms == 0 {
            return Reply::Ready(fetch_response(outcome));
        }
        Reply::Later(Box::pin(async move {
            let deadline = tokio::time::Instant::now() + Duration::from_millis(wait_ms.into());
            loop {
                let woke = tokio::time::timeout_at(deadline, commits.changed()).await;
                // Read (and admit) again: the streamlet may have moved meanwhile.
                match read() {
                    Err(error) => return refuse(error),
                    Ok(fetched)
                        if !fetched.outcome.parts.is_empty()
                            || fetched.outcome.end_of_group
                            || !matches!(woke, Ok(Ok(()))) =>
                    {
                        return fetch_response(fetched.outcome);
                    }
                    Ok(_) => {}
                }
            }
        }))
    }

    fn list_groups(&self, body: Bytes) -> Reply {
        let request = match ListGroupsRequest::decode_exact(body) {
            Ok(request) => request,
            Err(error) => return malformed("list groups request", error),
        };
        let at = StreamletRef {
            stream: request.stream,
            streamlet: request.streamlet,
            epoch: request.epoch,
        };
        match self.plane.list_groups(at) {
            Ok(logs) => Reply::Ready(Response::ok(&ListGroupsResponse { logs })),
            Err(error) => Reply::Ready(refuse(error)),
        }
    }

    fn locate_offset(&self, body: Bytes) -> Reply {
        let request = match LocateOffsetRequest::decode_exact(body) {
            Ok(request) => request,
            Err(error) => return malformed("locate offset request", error),
        };
        let at = StreamletRef {
            stream: request.stream,
            streamlet: request.streamlet,
            epoch: request.epoch,
        };
        match self.plane.locate_offset(at, request.log, request.offset) {
            Ok((group, segment, position)) => Reply::Ready(Response::ok(&LocateOffsetResponse {
                group,
                segment,
                position,
            })),
            Err(error) => Reply::Ready(refuse(error)),
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
            Opcode::LocateOffset => self.locate_offset(request.body),
            other => Reply::Ready(Response::error(
                Status::UnknownOpcode,
                format!("{other:?} is not a broker operation on its client listener"),
            )),
        }
    }
}
