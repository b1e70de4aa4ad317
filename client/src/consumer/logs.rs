//! A consumer of a fixed set of logs: all of a stream's, a static share, or a group member's.
//!
//! Each (streamlet, log) pair has a [`Cursor`]; at most one fetch per cursor is in flight,
//! fetches of different cursors run concurrently and long-poll at the head of their log.
//!
//! When a streamlet's owner crashes, its cursors keep their positions (recovery keeps every
//! position and offset) and wait: they refresh the metadata until the streamlet serves again,
//! on its new owner under a new epoch, and go on from where they were. While any of them waits,
//! `unavailable` says which streamlet and why, so a caller never mistakes the wait for the end
//! of the stream.

use super::cursor::{Cursor, LogPosition, StartFrom, Step};
use super::decode::{self, ConsumedRecord};
use crate::cluster::Cluster;
use crate::error::ClientError;
use futures::FutureExt;
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tailstream_config::ConsumerConfig;
use tailstream_net::RpcError;
use tailstream_wire::messages::{
    FetchRequest, FetchResponse, ListGroupsRequest, ListGroupsResponse, LocateOffsetRequest,
    LocateOffsetResponse, PlacementState, StreamMetadata,
};
use tailstream_wire::{LogId, Opcode, Status, StreamletId};

/// Which share of a stream's logs a consumer reads: every `members`-th log, starting at the
/// `member`-th.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Membership {
    pub member: u32,
    pub members: u32,
}

impl Default for Membership {
    fn default() -> Self {
        Self {
            member: 0,
            members: 1,
        }
    }
}

enum Outcome {
    Groups(Result<ListGroupsResponse, RpcError>),
    Located(Result<LocateOffsetResponse, RpcError>),
    Fetched(Result<FetchResponse, RpcError>),
}

/// Reads a fixed set of logs. Not `Clone`: one consumer owns its cursors.
pub(crate) struct LogConsumer {
    cluster: Arc<Cluster>,
    metadata: Arc<StreamMetadata>,
    config: ConsumerConfig,
    cursors: Vec<Cursor>,
    /// When each idle cursor may issue its next request.
    not_before: Vec<Instant>,
    busy: Vec<bool>,
    /// Why each cursor cannot read right now (its streamlet is recovering or lost, or its
    /// owner does not answer), until it reads again.
    blocked: Vec<Option<String>>,
    last_refresh: Option<Instant>,
    in_flight: FuturesUnordered<BoxFuture<'static, (usize, Outcome)>>,
}

impl std::fmt::Debug for LogConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogConsumer")
            .field("stream", &self.metadata.name)
            .field("cursors", &self.cursors.len())
            .finish()
    }
}

impl LogConsumer {
    /// A consumer of `stream` starting at `start` in every log it owns, except those for
    /// which `resume` holds a position.
    pub(crate) async fn new(
        cluster: Arc<Cluster>,
        stream: &str,
        config: ConsumerConfig,
        start: StartFrom,
        membership: Membership,
        resume: &[LogPosition],
    ) -> Result<Self, ClientError> {
        if membership.members == 0 || membership.member >= membership.members {
            return Err(ClientError::Config(
                "consumer member must be below members".into(),
            ));
        }
        let metadata = cluster.stream(stream).await?;
        let logs = metadata.config.logs_per_streamlet;
        let mut cursors = Vec::new();
        for streamlet in 0..metadata.streamlets.len() as u32 {
            for log in 0..logs {
                // Bounded by validated metadata (4096 streamlets x 256 logs), in u64 anyway.
                let slot = u64::from(streamlet) * u64::from(logs) + u64::from(log);
                if slot % u64::from(membership.members) != u64::from(membership.member) {
                    continue;
                }
                let (streamlet, log) = (StreamletId(streamlet), LogId(log));
                let saved = resume
                    .iter()
                    .find(|p| p.streamlet == streamlet && p.log == log);
                cursors.push(match saved {
                    Some(position) => Cursor::resume(*position),
                    None => Cursor::new(streamlet, log, start),
                });
            }
        }
        Ok(Self::with_cursors(cluster, metadata, config, cursors))
    }

    /// A consumer of the logs `cursors` stand for (a consumer group member's share).
    pub(crate) fn with_cursors(
        cluster: Arc<Cluster>,
        metadata: Arc<StreamMetadata>,
        config: ConsumerConfig,
        cursors: Vec<Cursor>,
    ) -> Self {
        let now = Instant::now();
        Self {
            cluster,
            metadata,
            config,
            not_before: vec![now; cursors.len()],
            busy: vec![false; cursors.len()],
            blocked: vec![None; cursors.len()],
            last_refresh: None,
            cursors,
            in_flight: FuturesUnordered::new(),
        }
    }

    /// Where this consumer is in each of its logs: pass these to `new` to resume.
    pub(crate) fn positions(&self) -> Vec<LogPosition> {
        self.cursors.iter().filter_map(Cursor::position).collect()
    }

    /// The streamlets this consumer waits for (recovering, lost, or not answering) and why.
    /// Empty when every streamlet it reads is reachable.
    pub(crate) fn unavailable(&self) -> Vec<(StreamletId, String)> {
        let mut waiting: Vec<(StreamletId, String)> = self
            .cursors
            .iter()
            .zip(&self.blocked)
            .filter_map(|(cursor, why)| Some((cursor.streamlet, why.clone()?)))
            .collect();
        waiting.sort_by_key(|(streamlet, _)| *streamlet);
        waiting.dedup_by_key(|(streamlet, _)| *streamlet);
        waiting
    }

    /// Records skipped because retention freed them before they were read.
    pub(crate) fn records_lost_to_retention(&self) -> u64 {
        self.cursors.iter().fold(0u64, |sum, c| {
            sum.saturating_add(c.records_lost_to_retention)
        })
    }

    /// Waits up to `timeout` for records and returns those that arrived (possibly none).
    /// Records of one log come in offset order, across calls too.
    pub(crate) async fn poll(
        &mut self,
        timeout: Duration,
    ) -> Result<Vec<ConsumedRecord>, ClientError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut records = Vec::new();
        loop {
            self.refresh_if_waiting().await;
            self.launch();
            let next_launch = self.next_launch();
            let wake = match next_launch {
                Some(at) => deadline.min(at.into()),
                None => deadline,
            };
            let done = tokio::select! {
                done = self.in_flight.next(), if !self.in_flight.is_empty() => done,
                _ = tokio::time::sleep_until(wake) => None,
            };
            if let Some((index, outcome)) = done {
                self.handle(index, outcome, &mut records).await?;
                // Take whatever else already finished, without waiting.
                while let Some(Some((index, outcome))) = self.in_flight.next().now_or_never() {
                    self.handle(index, outcome, &mut records).await?;
                }
            }
            if !records.is_empty() || tokio::time::Instant::now() >= deadline {
                return Ok(records);
            }
        }
    }

    fn next_launch(&self) -> Option<Instant> {
        (0..self.cursors.len())
            .filter(|i| !self.busy[*i])
            .map(|i| self.not_before[i])
            .min()
    }

    /// While a cursor waits for its streamlet, asks for fresh metadata (at most every
    /// `group_refresh_ms`).
    async fn refresh_if_waiting(&mut self) {
        if self.blocked.iter().all(Option::is_none) {
            return;
        }
        let every = Duration::from_millis(self.config.group_refresh_ms.max(1));
        let now = Instant::now();
        if self
            .last_refresh
            .is_some_and(|at| now.duration_since(at) < every)
        {
            return;
        }
        self.last_refresh = Some(now);
        if let Ok(metadata) = self.cluster.refresh_stream(&self.metadata.name).await {
            self.metadata = metadata;
        }
    }

    /// Starts the next request of every idle cursor whose wait is over.
    fn launch(&mut self) {
        let now = Instant::now();
        let retry_later = Duration::from_millis(self.config.group_refresh_ms.max(1));
        for index in 0..self.cursors.len() {
            if self.busy[index] || now < self.not_before[index] {
                continue;
            }
            let cursor = &self.cursors[index];
            let Some(placement) = self.metadata.streamlets.get(cursor.streamlet.0 as usize) else {
                continue;
            };
            if placement.state != PlacementState::Serving {
                self.blocked[index] = Some(format!(
                    "{} is {:?}: {}",
                    cursor.streamlet, placement.state, placement.detail
                ));
                self.not_before[index] = now + retry_later;
                continue;
            }
            let epoch = placement.epoch;
            let addr = placement.owner_addr.clone();
            let cluster = self.cluster.clone();
            let stream = self.metadata.id;
            let streamlet = cursor.streamlet;
            let future: BoxFuture<'static, (usize, Outcome)> = match cursor.step() {
                Step::ListGroups => async move {
                    let request = ListGroupsRequest {
                        stream,
                        streamlet,
                        epoch,
                    };
                    let result = match cluster.broker(&addr).await {
                        Ok(client) => client.call(Opcode::ListGroups, &request).await,
                        Err(error) => Err(error),
                    };
                    (index, Outcome::Groups(result))
                }
                .boxed(),
                Step::Locate { offset } => {
                    let request = LocateOffsetRequest {
                        stream,
                        streamlet,
                        epoch,
                        log: cursor.log,
                        offset,
                    };
                    async move {
                        let result = match cluster.broker(&addr).await {
                            Ok(client) => client.call(Opcode::LocateOffset, &request).await,
                            Err(error) => Err(error),
                        };
                        (index, Outcome::Located(result))
                    }
                    .boxed()
                }
                Step::Fetch {
                    group,
                    segment,
                    position,
                } => {
                    let request = FetchRequest {
                        stream,
                        streamlet,
                        epoch,
                        log: cursor.log,
                        group,
                        segment,
                        position,
                        max_bytes: self.config.fetch_max_bytes,
                        max_wait_ms: self.config.fetch_max_wait_ms,
                    };
                    async move {
                        let result = match cluster.broker(&addr).await {
                            Ok(client) => client.call(Opcode::Fetch, &request).await,
                            Err(error) => Err(error),
                        };
                        (index, Outcome::Fetched(result))
                    }
                    .boxed()
                }
            };
            self.busy[index] = true;
            self.in_flight.push(future);
        }
    }

    async fn handle(
        &mut self,
        index: usize,
        outcome: Outcome,
        records: &mut Vec<ConsumedRecord>,
    ) -> Result<(), ClientError> {
        self.busy[index] = false;
        let retry_later = Duration::from_millis(self.config.group_refresh_ms.max(1));
        let cursor = &mut self.cursors[index];
        let log = cursor.log;
        let error = match outcome {
            Outcome::Groups(Ok(groups)) => {
                self.blocked[index] = None;
                let found = groups.logs.iter().find(|l| l.log == log);
                let ready = found.is_some_and(|groups| cursor.on_groups(groups));
                if !ready {
                    self.not_before[index] = Instant::now() + retry_later;
                }
                return Ok(());
            }
            Outcome::Located(Ok(at)) => {
                self.blocked[index] = None;
                cursor.on_located(at.group, at.segment, at.position);
                return Ok(());
            }
            Outcome::Located(Err(error)) if error.status() == Some(Status::PositionOutOfRange) => {
                self.blocked[index] = None;
                cursor.on_locate_out_of_range();
                return Ok(());
            }
            Outcome::Fetched(Ok(response)) => {
                self.blocked[index] = None;
                let next = decode::decode_entries(
                    cursor.streamlet,
                    log,
                    &response.entries,
                    cursor.next_offset(),
                    records,
                )?;
                cursor.on_fetched(&response, next);
                return Ok(());
            }
            Outcome::Groups(Err(error))
            | Outcome::Located(Err(error))
            | Outcome::Fetched(Err(error)) => error,
        };
        match error.status() {
            Some(Status::GroupRetired) => {
                let streamlet = cursor.streamlet;
                let groups = list_groups(&self.cluster, &self.metadata, streamlet).await?;
                if let Some(groups) = groups.logs.iter().find(|l| l.log == log) {
                    self.cursors[index].on_group_retired(groups);
                }
                Ok(())
            }
            _ if error.is_retryable() => {
                let stale = error.is_transport()
                    || error.status().is_some_and(|s| s.needs_metadata_refresh());
                if stale {
                    let streamlet = self.cursors[index].streamlet;
                    self.blocked[index] = Some(format!("{streamlet}: {error}"));
                    if let Ok(metadata) = self.cluster.refresh_stream(&self.metadata.name).await {
                        self.metadata = metadata;
                        self.last_refresh = Some(Instant::now());
                    }
                }
                self.not_before[index] = Instant::now() + retry_later;
                Ok(())
            }
            _ => Err(error.into()),
        }
    }
}

/// The groups of every log of `streamlet`, from its owner.
async fn list_groups(
    cluster: &Cluster,
    metadata: &StreamMetadata,
    streamlet: StreamletId,
) -> Result<ListGroupsResponse, ClientError> {
    cluster.describe_logs(metadata, streamlet).await
}
