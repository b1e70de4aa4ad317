//! The consumer: pull records from the logs of a stream, in order per log, and resume.
//!
//! A [`Consumer`] reads one of three shares of a stream: all of its logs, a static share
//! (every `members`-th log, starting at the `member`-th), or, in a consumer group, whatever
//! the group hands it. Build one with [`crate::Client::consumer`].
//!
//! - [`builder`]: [`ConsumerBuilder`], where to start, which share, which group.
//! - `logs`: the reader of a fixed set of logs (cursors, fetches, waits for recovery).
//! - `cursor`: the position in one log and how it moves (pure).
//! - `decode`: fetched entries to records, every checksum verified.
//! - `group`: a consumer group member: consumers naming one group share a stream's logs,
//!   resume from the group's committed offsets and take over from members that leave or die.

pub mod builder;
mod cursor;
mod decode;
mod group;
mod logs;

use crate::error::ClientError;
pub use builder::ConsumerBuilder;
pub use cursor::{LogPosition, StartFrom};
pub use decode::ConsumedRecord;
use group::GroupMember;
use logs::LogConsumer;
use std::time::Duration;
use tailstream_wire::StreamletId;

/// Reads a stream: records of each log in offset order, every checksum verified.
///
/// Not `Clone`: a consumer owns its positions. Build one with [`crate::Client::consumer`].
///
/// ```no_run
/// # async fn demo() -> Result<(), tailstream_client::ClientError> {
/// use std::time::Duration;
/// let client = tailstream_client::Client::connect("127.0.0.1:7400").await?;
/// let mut consumer = client.consumer("clicks").group("billing").from_beginning().build().await?;
/// loop {
///     let records = consumer.poll(Duration::from_secs(1)).await?;
///     for record in &records {
///         println!("{:?} {:?}", record.offset, record.value);
///     }
///     // The next poll commits what this one returned: handle records before polling again.
///     if records.is_empty() {
///         break;
///     }
/// }
/// consumer.close().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Consumer {
    reader: Reader,
}

/// A consumer on its own (all logs, or a static share) or a group member.
#[derive(Debug)]
enum Reader {
    Alone(LogConsumer),
    Group(Box<GroupMember>),
}

impl Consumer {
    /// Waits up to `timeout` for records and returns those that arrived (possibly none).
    /// Records of one log come in offset order, across calls too.
    ///
    /// In a group, a poll first commits the offsets after what earlier polls returned (at
    /// most every `member_commit_interval_ms`), and joins or rejoins the group when it
    /// rebalances: handle a poll's records before the next poll.
    pub async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumedRecord>, ClientError> {
        match &mut self.reader {
            Reader::Alone(consumer) => consumer.poll(timeout).await,
            Reader::Group(member) => member.poll(timeout).await,
        }
    }

    /// The streamlets this consumer waits for (recovering after a broker crash, lost, or not
    /// answering) and why. Empty when every streamlet it reads is reachable: an empty poll
    /// with an empty `unavailable` means the consumer is at the end of its logs.
    pub fn unavailable(&self) -> Vec<(StreamletId, String)> {
        match &self.reader {
            Reader::Alone(consumer) => consumer.unavailable(),
            Reader::Group(member) => member.unavailable(),
        }
    }

    /// Records skipped because retention freed them before they were read.
    pub fn records_lost_to_retention(&self) -> u64 {
        match &self.reader {
            Reader::Alone(consumer) => consumer.records_lost_to_retention(),
            Reader::Group(member) => member.records_lost_to_retention(),
        }
    }

    /// Where this consumer is in each of its logs, to resume from later with
    /// [`ConsumerBuilder::resume_from`]. Positions are plain data (serde): store them
    /// anywhere. Empty for a group member, whose positions are the group's committed offsets.
    pub fn positions(&self) -> Vec<LogPosition> {
        match &self.reader {
            Reader::Alone(consumer) => consumer.positions(),
            Reader::Group(_) => Vec::new(),
        }
    }

    /// The group generation this member is in (`None` outside a group, `Some(0)` before it
    /// joined).
    pub fn group_generation(&self) -> Option<u32> {
        match &self.reader {
            Reader::Alone(_) => None,
            Reader::Group(member) => Some(member.generation()),
        }
    }

    /// The partitions (`streamlet * Q + log`) this member reads in the group's current
    /// generation; empty outside a group.
    pub fn assigned_partitions(&self) -> &[u32] {
        match &self.reader {
            Reader::Alone(_) => &[],
            Reader::Group(member) => member.partitions(),
        }
    }

    /// Takes back records a poll returned that were not handled (a caller that stops
    /// part-way through a poll's records), so a group does not commit their offsets. Has no
    /// effect outside a group.
    pub fn release(&mut self, unhandled: &[ConsumedRecord]) {
        if let Reader::Group(member) = &mut self.reader {
            member.release(unhandled);
        }
    }

    /// Commits the offsets after every record the polls returned, now (a poll commits them
    /// anyway, at most every `member_commit_interval_ms`). Does nothing outside a group.
    pub async fn commit(&mut self) -> Result<(), ClientError> {
        match &mut self.reader {
            Reader::Alone(_) => Ok(()),
            Reader::Group(member) => member.commit().await,
        }
    }

    /// Stops reading. A group member commits what it handed out and leaves the group, so the
    /// others take over its logs at once instead of after its session timeout.
    pub async fn close(self) -> Result<(), ClientError> {
        match self.reader {
            Reader::Alone(_) => Ok(()),
            Reader::Group(member) => member.close().await,
        }
    }
}
