//! The producer's sender task: the async shell around the lanes.
//!
//! It owns every lane and every broker connection of one producer. It numbers sealed
//! batches, starts requests (in sequence order, synchronously, so they reach the broker in
//! that order), routes answers back to their lane, refreshes metadata when a broker says it
//! is not the owner, seals batches whose linger time is up, and fails batches past the
//! delivery timeout. Bounds: `max_in_flight` requests per broker; the producer's buffer
//! (enforced in `send`) bounds what can be queued.

use super::accumulator::Accumulator;
use super::ack::BatchCell;
use super::lane::{AnswerEffect, Backoff, BatchKey, Lane};
use crate::cluster::Cluster;
use crate::error::ClientError;
use bytes::Bytes;
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tailstream_config::ProducerConfig;
use tailstream_net::{RpcClient, RpcError};
use tailstream_wire::messages::{PlacementState, ProduceRequest, ProduceResponse, StreamMetadata};
use tailstream_wire::{Decode, Opcode, StreamletId};
use tokio::sync::{Notify, mpsc, oneshot};

/// How often delivery timeouts are checked.
const EXPIRY_CHECK: Duration = Duration::from_millis(100);
/// How often metadata is asked for again while a streamlet with batches waiting is not serving.
const METADATA_POLL: Duration = Duration::from_millis(100);

#[derive(Debug)]
pub(crate) enum Command {
    /// Seal everything now and report the cells to wait for.
    Flush(oneshot::Sender<Vec<Arc<BatchCell>>>),
}

#[derive(Debug)]
enum Event {
    Answer {
        addr: String,
        streamlet: StreamletId,
        key: BatchKey,
        answer: Result<Bytes, RpcError>,
    },
    Connected {
        addr: String,
        result: Result<RpcClient, RpcError>,
    },
    Metadata(Result<Arc<StreamMetadata>, ClientError>),
}

#[derive(Debug, Default)]
struct Broker {
    client: Option<RpcClient>,
    connecting: bool,
    in_flight: usize,
}

#[derive(Debug)]
pub(crate) struct Sender {
    cluster: Arc<Cluster>,
    metadata: Arc<StreamMetadata>,
    accumulator: Arc<Mutex<Accumulator>>,
    config: ProducerConfig,
    lanes: Vec<Lane>,
    brokers: HashMap<String, Broker>,
    refreshing: bool,
    last_refresh: Option<Instant>,
    events_tx: mpsc::UnboundedSender<Event>,
    events: mpsc::UnboundedReceiver<Event>,
    /// Requests in flight, polled by this task itself: an answer wakes the sender directly,
    /// with no task per request in between (one wake-up less per request on the ack path).
    answers: FuturesUnordered<BoxFuture<'static, Event>>,
    next_lane: usize,
}

impl Sender {
    pub fn new(
        cluster: Arc<Cluster>,
        metadata: Arc<StreamMetadata>,
        accumulator: Arc<Mutex<Accumulator>>,
        config: ProducerConfig,
        producer: tailstream_wire::ProducerId,
    ) -> Self {
        let lanes = (0..metadata.streamlets.len() as u32)
            .map(|s| Lane::new(StreamletId(s), producer))
            .collect();
        // Unbounded, yet bounded in practice: at most one event per request in flight or
        // connection attempt, and those are bounded by `max_in_flight` per broker.
        let (events_tx, events) = mpsc::unbounded_channel();
        let sender = Self {
            cluster,
            metadata,
            accumulator,
            config,
            lanes,
            brokers: HashMap::new(),
            refreshing: false,
            last_refresh: None,
            events_tx,
            events,
            answers: FuturesUnordered::new(),
            next_lane: 0,
        };
        sender.publish_unavailable();
        sender
    }

    fn lock_accumulator(&self) -> std::sync::MutexGuard<'_, Accumulator> {
        self.accumulator.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn backoff(&self) -> Backoff {
        Backoff {
            initial: Duration::from_millis(self.config.retry_backoff_ms.max(1)),
            max: Duration::from_millis(self.config.retry_backoff_ms_max.max(1)),
        }
    }

    /// Runs until every `Producer` handle is dropped and everything queued is settled. `wake`
    /// is notified by `send` whenever it sealed or opened a batch.
    pub async fn run(mut self, mut commands: mpsc::Receiver<Command>, wake_up: Arc<Notify>) {
        let linger = Duration::from_millis(self.config.linger_ms);
        let mut open = true;
        let mut expiry = tokio::time::interval(EXPIRY_CHECK);
        loop {
            let wake = self.next_wake(linger);
            tokio::select! {
                command = commands.recv(), if open => match command {
                    Some(command) => self.on_command(command),
                    None => {
                        // Every handle is gone: deliver what is buffered, then stop.
                        open = false;
                        self.lock_accumulator().seal_all();
                    }
                },
                _ = wake_up.notified() => {}
                Some(event) = self.answers.next(), if !self.answers.is_empty() => {
                    self.on_event(event);
                }
                Some(event) = self.events.recv() => self.on_event(event),
                _ = tokio::time::sleep_until(wake.into()), if wake > Instant::now() => {}
                _ = expiry.tick() => self.expire(),
            }
            self.take_sealed(linger);
            self.pump();
            if !open && self.lanes.iter().all(Lane::is_idle) {
                return;
            }
        }
    }

    fn next_wake(&self, linger: Duration) -> Instant {
        let far = Instant::now() + Duration::from_secs(3600);
        let now = Instant::now();
        let linger_deadline = self
            .lock_accumulator()
            .next_deadline(now, linger)
            .unwrap_or(far);
        let pause = self
            .lanes
            .iter()
            .filter_map(Lane::paused_until)
            .filter(|t| *t > now)
            .min()
            .unwrap_or(far);
        linger_deadline.min(pause)
    }

    fn on_command(&mut self, command: Command) {
        match command {
            Command::Flush(reply) => {
                self.lock_accumulator().seal_all();
                self.take_sealed(Duration::MAX);
                let cells = self.lanes.iter().flat_map(|l| l.cells().cloned()).collect();
                let _ = reply.send(cells);
            }
        }
    }

    /// Seals batches whose linger is up, then numbers every sealed batch into its lane, in
    /// the order the batches were sealed.
    fn take_sealed(&mut self, linger: Duration) {
        let sealed = {
            let now = Instant::now();
            let can_send = |streamlet: StreamletId| self.can_send_now(streamlet, now);
            let mut accumulator = self.lock_accumulator();
            if linger != Duration::MAX {
                accumulator.seal_expired(now, linger, can_send);
            }
            accumulator.take_ready()
        };
        for batch in sealed {
            if let Some(lane) = self.lanes.get_mut(batch.streamlet.0 as usize) {
                lane.push(batch);
            }
        }
    }

    /// Whether a partial batch of `streamlet` whose linger is up should be sealed and sent
    /// now: its lane has nothing queued and nothing in flight, and its owner has a free
    /// request slot (or no connection yet, which starts one). While a request of the streamlet
    /// is in flight, the partial batch keeps filling and goes when the answer comes (full
    /// batches still use the whole window): under moderate load a request then carries every
    /// record that arrived during one round trip instead of a few, so the brokers handle far
    /// fewer requests and the ack comes sooner.
    fn can_send_now(&self, streamlet: StreamletId, now: Instant) -> bool {
        let Some(placement) = self.metadata.streamlets.get(streamlet.0 as usize) else {
            return true;
        };
        let lane_ready = self
            .lanes
            .get(streamlet.0 as usize)
            .is_some_and(|lane| lane.would_send_now(now) && !lane.has_in_flight());
        let max_in_flight = self.config.max_in_flight.max(1) as usize;
        let slot_free = self
            .brokers
            .get(&placement.owner_addr)
            .is_none_or(|broker| broker.in_flight < max_in_flight);
        placement.state == PlacementState::Serving && lane_ready && slot_free
    }

    fn expire(&mut self) {
        let timeout = Duration::from_millis(self.config.delivery_timeout_ms);
        let now = Instant::now();
        for lane in &mut self.lanes {
            lane.expire(now, timeout);
        }
    }

    fn on_event(&mut self, event: Event) {
        match event {
            Event::Answer {
                addr,
                streamlet,
                key,
                answer,
            } => {
                if let Some(broker) = self.brokers.get_mut(&addr) {
                    broker.in_flight = broker.in_flight.saturating_sub(1);
                    if answer.as_ref().is_err_and(RpcError::is_transport) {
                        broker.client = None;
                    }
                }
                let answer = answer.and_then(|body| Ok(ProduceResponse::decode_exact(body)?));
                let backoff = self.backoff();
                let Some(lane) = self.lanes.get_mut(streamlet.0 as usize) else {
                    return;
                };
                if lane.on_answer(key, answer, Instant::now(), backoff)
                    == AnswerEffect::RefreshMetadata
                {
                    self.refresh_metadata();
                }
            }
            Event::Connected { addr, result } => {
                let broker = self.brokers.entry(addr).or_default();
                broker.connecting = false;
                match result {
                    Ok(client) => broker.client = Some(client),
                    Err(error) => {
                        tracing::debug!(%error, "producer could not connect to broker");
                        // Whoever owns the streamlet now may be elsewhere.
                        self.refresh_metadata();
                        self.pause_all();
                    }
                }
            }
            Event::Metadata(result) => {
                self.refreshing = false;
                match result {
                    Ok(metadata) => {
                        self.metadata = metadata;
                        self.publish_unavailable();
                    }
                    Err(error) => tracing::debug!(%error, "metadata refresh failed"),
                }
            }
        }
    }

    /// Tells the accumulator which streamlets do not serve, so keyless records avoid them.
    fn publish_unavailable(&self) {
        let unavailable = self
            .metadata
            .streamlets
            .iter()
            .enumerate()
            .filter(|(_, p)| p.state != PlacementState::Serving)
            .map(|(index, _)| StreamletId(index as u32))
            .collect();
        self.accumulator
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .set_unavailable(unavailable);
    }

    /// Pauses every lane briefly (a broker is unreachable): avoids a tight reconnect loop.
    fn pause_all(&mut self) {
        let backoff = self.backoff();
        let now = Instant::now();
        for lane in &mut self.lanes {
            lane.pause(now + backoff.initial);
        }
    }

    /// Refreshes metadata unless that happened within the last `METADATA_POLL`.
    fn refresh_metadata_soon(&mut self, now: Instant) {
        if self
            .last_refresh
            .is_none_or(|at| now.duration_since(at) >= METADATA_POLL)
        {
            self.refresh_metadata();
        }
    }

    fn refresh_metadata(&mut self) {
        if self.refreshing {
            return;
        }
        self.refreshing = true;
        self.last_refresh = Some(Instant::now());
        let cluster = self.cluster.clone();
        let name = self.metadata.name.clone();
        let events = self.events_tx.clone();
        tokio::spawn(async move {
            let result = cluster.refresh_stream(&name).await;
            let _ = events.send(Event::Metadata(result));
        });
    }

    /// Starts every request the lanes and windows allow, lanes in rotation for fairness.
    fn pump(&mut self) {
        let now = Instant::now();
        let lanes = self.lanes.len();
        let max_in_flight = self.config.max_in_flight.max(1) as usize;
        for step in 0..lanes {
            let index = (self.next_lane + step) % lanes;
            let Some(placement) = self.metadata.streamlets.get(index) else {
                continue;
            };
            if placement.state != PlacementState::Serving {
                // Being recovered (or lost): its batches wait, buffered, until it serves again
                // (or their delivery timeout ends them).
                if !self.lanes[index].is_idle() {
                    self.refresh_metadata_soon(now);
                }
                continue;
            }
            let addr = placement.owner_addr.clone();
            let epoch = placement.epoch;
            let stream = self.metadata.id;
            loop {
                let lane = &mut self.lanes[index];
                let Some((key, bytes)) = lane.peek_sendable(now) else {
                    break;
                };
                let broker = self.brokers.entry(addr.clone()).or_default();
                if broker.in_flight >= max_in_flight {
                    break;
                }
                let Some(client) = broker.client.as_ref().filter(|c| !c.is_closed()) else {
                    if !broker.connecting {
                        broker.connecting = true;
                        let cluster = self.cluster.clone();
                        let events = self.events_tx.clone();
                        let addr = addr.clone();
                        tokio::spawn(async move {
                            let result = cluster.broker(&addr).await;
                            let _ = events.send(Event::Connected { addr, result });
                        });
                    }
                    break;
                };
                let request = ProduceRequest {
                    stream,
                    streamlet: lane.streamlet,
                    epoch,
                    batch: Bytes::new(),
                };
                let prefix = Bytes::copy_from_slice(&request.encode_prefix());
                match client.try_start(Opcode::Produce, vec![prefix, bytes.clone()]) {
                    Ok(pending) => {
                        lane.mark_sent();
                        broker.in_flight += 1;
                        let (addr, streamlet) = (addr.clone(), lane.streamlet);
                        self.answers.push(Box::pin(async move {
                            Event::Answer {
                                addr,
                                streamlet,
                                key,
                                answer: pending.wait().await,
                            }
                        }));
                    }
                    Err(RpcError::Busy { .. }) => break,
                    Err(_) => {
                        broker.client = None;
                        break;
                    }
                }
            }
        }
        self.next_lane = (self.next_lane + 1) % lanes.max(1);
    }
}
