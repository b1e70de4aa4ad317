//! The broker's native client service (its `rpc_addr` listener): produce, fetch, list groups,
//! decoded from Tailstream's frames and answered in them, over the front-end-neutral
//! `DataPlane`. What other brokers and the coordinator call is on the peer listener
//! (`peer_service`).
//!
//! Produce runs entirely in `dispatch`, on the connection's reader task, so batches pipelined
//! on one connection are appended in the order they were sent; its answer waits (later) for
//! the commit. A fetch with nothing to return long-polls the log's commit point.
//!
//! Where clients authenticate (`security.client_authentication`), the listener serves a
//! connection nothing but Ping and `Authenticate` until it proved a user, and each request is
//! then checked against the access control rules: write on the stream to produce, read to
//! fetch or locate. An authenticated user's produced and fetched bytes are held to
//! `broker.quota_*_bytes_per_second` on this broker: past them, the connection is not read for
//! the time the excess takes to drain at the rate (as the Kafka listener's quotas do).

use crate::data_plane::{DataError, DataPlane, Fetched, StreamletRef};
use crate::metrics as m;
use crate::storage::{ProducerOwner, ReadOutcome};
use bytes::Bytes;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tailstream_config::BrokerConfig;
use tailstream_identity::{Authorizer, ProducerIdCheck};
use tailstream_net::pace::PrincipalDebts;
use tailstream_net::{Reply, Request, Response, Service, Session};
use tailstream_wire::compression::decompressed_on_this_thread;
use tailstream_wire::messages::AclOperation;
use tailstream_wire::messages::{
    FetchRequest, FetchResponse, ListGroupsRequest, ListGroupsResponse, LocateOffsetRequest,
    LocateOffsetResponse, ProduceRequest, ProduceResponse,
};
use tailstream_wire::{Decode, Opcode, Status, StreamId};

#[derive(Debug)]
pub struct BrokerService {
    plane: Arc<DataPlane>,
    config: BrokerConfig,
    /// Where clients authenticate (`security.client_authentication`): the rules each request
    /// is checked against.
    authorizer: Option<Arc<Authorizer>>,
    /// Produced bytes per user (`broker.quota_produce_bytes_per_second`).
    produce_quota: Arc<PrincipalDebts>,
    /// Fetched bytes per user (`broker.quota_fetch_bytes_per_second`).
    fetch_quota: Arc<PrincipalDebts>,
}

/// Charges `session`'s user `bytes` against `quota`, and mutes the connection for the time the
/// excess takes to drain. Anonymous sessions (authentication off) have no one to charge.
fn throttle(session: &Session, quota: &PrincipalDebts, kind: &'static str, bytes: usize) {
    let Some(user) = session.user() else {
        return;
    };
    let wait = quota.charge(user, bytes as u64, tokio::time::Instant::now());
    if !wait.is_zero() {
        let millis = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
        metrics::counter!(m::THROTTLED_MILLISECONDS, "kind" => kind).increment(millis);
        session.mute_for(wait);
    }
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
        Self {
            produce_quota: Arc::new(PrincipalDebts::new(config.quota_produce_bytes_per_second)),
            fetch_quota: Arc::new(PrincipalDebts::new(config.quota_fetch_bytes_per_second)),
            plane,
            config,
            authorizer: None,
        }
    }

    /// Checks every request against `authorizer`'s rules, as its connection's user.
    pub fn with_authorizer(mut self, authorizer: Arc<Authorizer>) -> Self {
        self.authorizer = Some(authorizer);
        self
    }

    /// Refuses a request of `session` on `stream` unless its user may do `operation` on it.
    /// Checked without waiting, on the connection's reader: produce order stays arrival order.
    fn authorize(
        &self,
        session: &Session,
        stream: StreamId,
        operation: AclOperation,
    ) -> Result<(), Response> {
        let Some(authorizer) = &self.authorizer else {
            return Ok(());
        };
        // The listener lets no request of an unauthenticated connection through; if one came,
        // it is refused all the same.
        let Some(user) = session.user() else {
            return Err(Response::error(
                Status::AuthenticationRequired,
                "this listener requires authentication",
            ));
        };
        let access = match authorizer.access_now(user) {
            None => {
                return Err(Response::error(
                    Status::Busy,
                    "this broker has not listed the access control rules yet: retry",
                ));
            }
            // Rules too old to trust allow nothing; the client is told to retry, not that it
            // may not (the coordinator is out of reach, the rules may well allow it).
            Some(tailstream_identity::Access::Nothing) => {
                return Err(Response::error(
                    Status::Busy,
                    "this broker could not list the access control rules for too long: retry",
                ));
            }
            Some(access) => access,
        };
        let Some(name) = self.plane.stream_name(stream) else {
            return Err(Response::error(
                Status::NotOwner,
                format!("stream {} is not served by this broker", stream.0),
            ));
        };
        if access.topic(operation, &name) {
            return Ok(());
        }
        metrics::counter!(m::REQUESTS_FORBIDDEN).increment(1);
        Err(Response::error(
            Status::Forbidden,
            format!(
                "not authorized: no access control rule allows {user:?} {} on stream {name:?} (tailstream acl add)",
                operation.name()
            ),
        ))
    }

    /// Refuses a batch under a producer id not issued to the session's user (an anonymous
    /// session, where authentication is off, owns none and is not checked).
    fn authorize_producer(&self, session: &Session, batch: &[u8]) -> Result<(), Response> {
        let Some(authorizer) = &self.authorizer else {
            return Ok(());
        };
        match authorizer.check_producer(session.user(), batch) {
            ProducerIdCheck::Allowed => Ok(()),
            ProducerIdCheck::KeyUnknown => Err(Response::error(
                Status::Busy,
                "this broker has not learnt the producer id binding key yet: retry",
            )),
            ProducerIdCheck::Refused(id) => {
                metrics::counter!(m::REQUESTS_FORBIDDEN).increment(1);
                Err(Response::error(
                    Status::Forbidden,
                    format!(
                        "not authorized: producer id {} was not issued to {:?} (a producer takes its own from the coordinator)",
                        id.0,
                        session.user().unwrap_or_default()
                    ),
                ))
            }
        }
    }

    fn produce(&self, body: Bytes, session: &Session) -> Reply {
        let started = Instant::now();
        let request = match ProduceRequest::decode_exact(body) {
            Ok(request) => request,
            Err(error) => return malformed("produce request", error),
        };
        if let Err(refused) = self
            .authorize(session, request.stream, AclOperation::Write)
            .and_then(|()| self.authorize_producer(session, &request.batch))
        {
            return Reply::Ready(refused);
        }
        throttle(session, &self.produce_quota, "produce", request.batch.len());
        let at = StreamletRef {
            stream: request.stream,
            streamlet: request.streamlet,
            epoch: request.epoch,
        };
        let owner = session
            .user()
            .map_or(ProducerOwner::ANYONE, ProducerOwner::user);
        // While this connection owes decompression, it is told to retry: a produce is handled
        // on the reader, in arrival order, so it is refused rather than held.
        let rate = self.config.decompressed_bytes_per_second_per_connection;
        let owed = session.pace_decompression(rate, 0, tokio::time::Instant::now());
        if !owed.is_zero() {
            metrics::counter!(m::PRODUCES_PACED).increment(1);
            return Reply::Ready(Response::error(
                Status::Busy,
                format!(
                    "this connection's batches decompress to more than broker.decompressed_bytes_per_second_per_connection: retry in {} ms",
                    owed.as_millis()
                ),
            ));
        }
        // The append runs on this thread without a pause: the meter's difference is its.
        let meter = decompressed_on_this_thread();
        let produced = self.plane.produce(at, &request.batch, owner, started);
        let decompressed = decompressed_on_this_thread().saturating_sub(meter);
        session.pace_decompression(rate, decompressed, tokio::time::Instant::now());
        let produced = match produced {
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

    fn fetch(&self, body: Bytes, session: &Arc<Session>) -> Reply {
        let request = match FetchRequest::decode_exact(body) {
            Ok(request) => request,
            Err(error) => return malformed("fetch request", error),
        };
        if let Err(refused) = self.authorize(session, request.stream, AclOperation::Read) {
            return Reply::Ready(refused);
        }
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
            return Reply::Ready(charged_fetch(outcome, session, &self.fetch_quota));
        }
        let session = session.clone();
        let quota = self.fetch_quota.clone();
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
                        return charged_fetch(fetched.outcome, &session, &quota);
                    }
                    Ok(_) => {}
                }
            }
        }))
    }

    fn list_groups(&self, body: Bytes, session: &Session) -> Reply {
        let request = match ListGroupsRequest::decode_exact(body) {
            Ok(request) => request,
            Err(error) => return malformed("list groups request", error),
        };
        if let Err(refused) = self.authorize(session, request.stream, AclOperation::Read) {
            return Reply::Ready(refused);
        }
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

    fn locate_offset(&self, body: Bytes, session: &Session) -> Reply {
        let request = match LocateOffsetRequest::decode_exact(body) {
            Ok(request) => request,
            Err(error) => return malformed("locate offset request", error),
        };
        if let Err(refused) = self.authorize(session, request.stream, AclOperation::Read) {
            return Reply::Ready(refused);
        }
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

/// A fetch's answer, its bytes charged to the session's user.
fn charged_fetch(outcome: ReadOutcome, session: &Session, quota: &PrincipalDebts) -> Response {
    let response = fetch_response(outcome);
    let fetched = response.parts.iter().map(Bytes::len).sum();
    throttle(session, quota, "fetch", fetched);
    response
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
            Opcode::Produce => self.produce(request.body, &request.session),
            Opcode::Fetch => self.fetch(request.body, &request.session),
            Opcode::ListGroups => self.list_groups(request.body, &request.session),
            Opcode::LocateOffset => self.locate_offset(request.body, &request.session),
            other => Reply::Ready(Response::error(
                Status::UnknownOpcode,
                format!("{other:?} is not a broker operation on its client listener"),
            )),
        }
    }
}
