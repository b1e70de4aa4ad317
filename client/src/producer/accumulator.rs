//! Open batches, one per streamlet, filled by `send` and sealed by size or linger time.
//!
//! Shared (behind a mutex) between the tasks that call `send` and the producer's sender task:
//! `send` appends and seals full batches itself, the sender seals batches whose linger time is
//! up. Either way a sealed batch joins the `ready` queue *under the same lock*, so batches of a
//! streamlet are numbered by the sender in exactly the order they were sealed.

use super::ack::{AckFuture, BatchCell};
use crate::routing::{RoundRobin, streamlet_for_key};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tailstream_wire::StreamletId;
use tailstream_wire::records::RecordBatchBuilder;
use tokio::sync::OwnedSemaphorePermit;

/// How long past its linger time a batch that cannot be sent yet stays open.
const SEAL_ANYWAY: Duration = Duration::from_millis(100);

/// A batch that takes no more records; the sender gives it a sequence number.
#[derive(Debug)]
pub(crate) struct SealedBatch {
    pub streamlet: StreamletId,
    pub builder: RecordBatchBuilder,
    pub cell: Arc<BatchCell>,
    pub opened_at: Instant,
    /// The producer buffer bytes this batch holds until it is settled.
    pub permit: Option<OwnedSemaphorePermit>,
}

#[derive(Debug)]
struct OpenBatch {
    builder: RecordBatchBuilder,
    cell: Arc<BatchCell>,
    opened_at: Instant,
    /// Wall-clock time the batch was opened: the timestamp of its records.
    timestamp_ms: i64,
    /// Producer buffer bytes its records take, still inside the accumulator's credit.
    reserved_bytes: usize,
}

/// One record, as `send` was given it.
#[derive(Debug)]
pub(crate) struct PendingRecord<'a> {
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
}

#[derive(Debug)]
pub(crate) struct Accumulator {
    open: BTreeMap<StreamletId, OpenBatch>,
    /// Sealed, in sealing order, waiting for the sender.
    ready: Vec<SealedBatch>,
    streamlets: u32,
    batch_size_bytes: usize,
    round_robin: RoundRobin,
    /// Streamlets that do not serve (recovering or lost): keyless records go elsewhere.
    unavailable: BTreeSet<StreamletId>,
    /// Producer buffer bytes taken from the buffer's semaphore in chunks, so that a record
    /// costs no semaphore operation: records reserve from it, and a batch takes its records'
    /// bytes out of it as its own permit when sealed.
    credit: Option<OwnedSemaphorePermit>,
    /// The part of `credit` reserved by open batches.
    credit_reserved: usize,
}

/// What appending one record did.
#[derive(Debug)]
pub(crate) struct Appended {
    pub ack: AckFuture,
    /// A batch was sealed or opened: the sender must look (ship it, or arm its linger timer).
    pub wake_sender: bool,
}

impl Accumulator {
    pub fn new(streamlets: u32, batch_size_bytes: usize, round_robin_start: u32) -> Self {
        Self {
            open: BTreeMap::new(),
            ready: Vec::new(),
            streamlets: streamlets.max(1),
            batch_size_bytes,
            round_robin: RoundRobin::starting_at(round_robin_start),
            unavailable: BTreeSet::new(),
            credit: None,
            credit_reserved: 0,
        }
    }

    /// Buffer bytes held and not reserved by any open batch.
    pub fn credit_free(&self) -> usize {
        self.credit.as_ref().map_or(0, |c| c.num_permits()) - self.credit_reserved
    }

    /// Gives the credit no open batch holds back to the producer's semaphore.
    pub fn release_free_credit(&mut self) {
        let free = self.credit_free();
        if let Some(credit) = self.credit.as_mut() {
            drop(credit.split(free));
        }
    }

    /// Adds buffer bytes taken from the producer's semaphore.
    pub fn add_credit(&mut self, permit: OwnedSemaphorePermit) {
        match &mut self.credit {
            Some(credit) => credit.merge(permit),
            slot @ None => *slot = Some(permit),
        }
    }

    /// Which streamlets do not serve now (from fresh metadata). Keyed records keep their
    /// streamlet (and wait for it); keyless ones go round the others.
    pub fn set_unavailable(&mut self, unavailable: BTreeSet<StreamletId>) {
        self.unavailable = unavailable;
    }

    fn keyless_streamlet(&self) -> StreamletId {
        self.round_robin
            .current_usable(self.streamlets, |s| !self.unavailable.contains(&s))
    }

    /// The producer buffer bytes `record` takes.
    pub fn record_bytes(key: Option<&[u8]>, value: Option<&[u8]>) -> usize {
        RecordBatchBuilder::record_len_bound(
            key.map_or(0, <[u8]>::len),
            value.map_or(0, <[u8]>::len),
            0,
        )
    }

    /// Appends `record` to its streamlet's open batch, reserving its bytes from the credit;
    /// without enough credit it changes nothing and says how many bytes are missing. `clock`
    /// (monotonic and wall-clock time) is read only when a batch is opened: records take their
    /// batch's opening time as their timestamp (within `linger_ms` of when they were sent),
    /// which keeps clock reads off the per-record path.
    pub fn append(
        &mut self,
        record: PendingRecord<'_>,
        clock: impl FnOnce() -> (Instant, i64),
    ) -> Result<Appended, usize> {
        let bound = Self::record_bytes(record.key, record.value);
        if self.credit_free() < bound {
            return Err(bound - self.credit_free());
        }
        let ready_before = self.ready.len();
        let mut streamlet = self.route(record.key);
        // A record that would overflow a non-empty open batch seals it first.
        if let Some(open) = self.open.get(&streamlet)
            && !open.builder.is_empty()
            && (open.builder.encoded_len() + bound > self.batch_size_bytes
                || open.builder.is_full())
        {
            self.seal(streamlet);
            streamlet = self.route(record.key);
        }
        let opened = !self.open.contains_key(&streamlet);
        let batch_size_bytes = self.batch_size_bytes;
        let open = self.open.entry(streamlet).or_insert_with(|| {
            let (opened_at, timestamp_ms) = clock();
            OpenBatch {
                // Room for a full batch up front: growing by doubling would copy the records
                // again.
                builder: RecordBatchBuilder::new(batch_size_bytes + bound),
                cell: BatchCell::new(),
                opened_at,
                timestamp_ms,
                reserved_bytes: 0,
            }
        });
        let index = open.builder.record_count();
        open.builder
            .push(open.timestamp_ms, record.key, record.value, &[]);
        open.reserved_bytes += bound;
        self.credit_reserved += bound;
        let ack = AckFuture::new(open.cell.clone(), index);
        if open.builder.encoded_len() >= self.batch_size_bytes {
            self.seal(streamlet);
        }
        Ok(Appended {
            ack,
            wake_sender: opened || self.ready.len() > ready_before,
        })
    }

    fn route(&self, key: Option<&[u8]>) -> StreamletId {
        match key {
            Some(key) => streamlet_for_key(key, self.streamlets),
            None => self.keyless_streamlet(),
        }
    }

    fn seal(&mut self, streamlet: StreamletId) {
        let Some(open) = self.open.remove(&streamlet) else {
            return;
        };
        if streamlet == self.keyless_streamlet() {
            self.round_robin.advance_past(streamlet);
        }
        // Invariant: open batches' bytes are inside the credit (`append` reserved them).
        self.credit_reserved -= open.reserved_bytes;
        let permit = self
            .credit
            .as_mut()
            .and_then(|credit| credit.split(open.reserved_bytes));
        self.ready.push(SealedBatch {
            streamlet,
            builder: open.builder,
            cell: open.cell,
            opened_at: open.opened_at,
            permit,
        });
    }

    /// Seals every batch whose first record has waited `linger` or longer and whose streamlet
    /// `can_send` at once. A batch that could not be sent stays open and keeps filling (as
    /// Kafka's producer does: with `linger_ms = 0` records go out as soon as a request slot is
    /// free, in one batch per slot), unless it has waited `linger + SEAL_ANYWAY`: then it is
    /// sealed so that its delivery timeout starts counting.
    pub fn seal_expired(
        &mut self,
        now: Instant,
        linger: Duration,
        can_send: impl Fn(StreamletId) -> bool,
    ) {
        let expired: Vec<StreamletId> = self
            .open
            .iter()
            .filter(|(streamlet, b)| {
                let waited = now.saturating_duration_since(b.opened_at);
                waited >= linger && (can_send(**streamlet) || waited >= linger + SEAL_ANYWAY)
            })
            .map(|(s, _)| *s)
            .collect();
        for streamlet in expired {
            self.seal(streamlet);
        }
    }

    pub fn seal_all(&mut self) {
        let all: Vec<StreamletId> = self.open.keys().copied().collect();
        for streamlet in all {
            self.seal(streamlet);
        }
    }

    /// The sealed batches, in sealing order.
    pub fn take_ready(&mut self) -> Vec<SealedBatch> {
        std::mem::take(&mut self.ready)
    }

    /// The next instant after `now` at which an open batch must be looked at: its linger time
    /// is up, or, for one held open past it (its streamlet could not send), the moment it is
    /// sealed anyway.
    pub fn next_deadline(&self, now: Instant, linger: Duration) -> Option<Instant> {
        self.open
            .values()
            .map(|b| {
                let due = b.opened_at + linger;
                if due > now { due } else { due + SEAL_ANYWAY }
            })
            .filter(|due| *due > now)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::Semaphore;

    fn record<'a>(key: Option<&'a [u8]>, value: &'a [u8]) -> PendingRecord<'a> {
        PendingRecord {
            key,
            value: Some(value),
        }
    }

    /// An accumulator holding all of `budget` as credit.
    fn with_credit(mut acc: Accumulator, budget: &Arc<Semaphore>) -> Accumulator {
        let all = budget.available_permits() as u32;
        acc.add_credit(budget.clone().try_acquire_many_owned(all).unwrap());
        acc
    }

    #[test]
    fn batches_seal_by_size_and_keyless_records_stick_to_one_streamlet_per_batch() {
        let budget = Arc::new(Semaphore::new(1 << 20));
        let mut acc = with_credit(Accumulator::new(3, 1024, 0), &budget);
        let now = Instant::now();
        for _ in 0..100 {
            acc.append(record(None, &[7; 100]), || (now, 0)).unwrap();
        }
        let sealed = acc.take_ready();
        assert!(sealed.len() >= 8);
        for batch in &sealed {
            assert!(batch.builder.encoded_len() <= 1024 + 200);
        }
        let streamlets: Vec<u32> = sealed.iter().map(|b| b.streamlet.0).collect();
        assert_eq!(&streamlets[..4], &[0, 1, 2, 0], "round-robin by batch");
    }

    #[test]
    fn keyed_records_follow_their_key_and_linger_seals_partial_batches() {
        let budget = Arc::new(Semaphore::new(1 << 20));
        let mut acc = with_credit(Accumulator::new(4, 1 << 16, 0), &budget);
        let now = Instant::now();
        let a = acc.append(record(Some(b"k"), b"v1"), || (now, 0)).unwrap();
        assert!(a.wake_sender && acc.take_ready().is_empty());
        let b = acc.append(record(Some(b"k"), b"v2"), || (now, 0)).unwrap();
        assert!(!b.wake_sender);
        assert!(a.ack.same_batch(&b.ack), "one open batch");
        let linger = Duration::from_millis(5);
        assert_eq!(acc.next_deadline(now, linger), Some(now + linger));
        acc.seal_expired(now, linger, |_| true);
        assert!(acc.take_ready().is_empty());
        acc.seal_expired(now + linger, linger, |_| true);
        let sealed = acc.take_ready();
        assert_eq!(sealed.len(), 1);
        assert_eq!(sealed[0].builder.record_count(), 2);
        assert_eq!(sealed[0].streamlet, streamlet_for_key(b"k", 4));
        assert_eq!(acc.next_deadline(now + linger, linger), None);
        let c = acc.append(record(Some(b"k"), b"v3"), || (now, 0)).unwrap();
        assert!(!c.ack.same_batch(&b.ack), "a new batch after sealing");
    }

    #[test]
    fn an_expired_batch_waits_open_while_its_streamlet_cannot_send() {
        let budget = Arc::new(Semaphore::new(1 << 20));
        let mut acc = with_credit(Accumulator::new(1, 1 << 16, 0), &budget);
        let now = Instant::now();
        acc.append(record(None, b"a"), || (now, 0)).unwrap();
        let linger = Duration::ZERO;
        acc.seal_expired(now, linger, |_| false);
        assert!(acc.take_ready().is_empty(), "no slot: stays open");
        assert_eq!(
            acc.next_deadline(now, linger),
            Some(now + SEAL_ANYWAY),
            "the timer still fires when it must be sealed anyway"
        );
        acc.append(record(None, b"b"), || (now, 0)).unwrap();
        acc.seal_expired(now, linger, |_| true);
        let sealed = acc.take_ready();
        assert_eq!(sealed.len(), 1);
        assert_eq!(sealed[0].builder.record_count(), 2, "filled while waiting");
        acc.append(record(None, b"c"), || (now, 0)).unwrap();
        acc.seal_expired(now + SEAL_ANYWAY, linger, |_| false);
        assert_eq!(
            acc.take_ready().len(),
            1,
            "sealed anyway once it waited too long"
        );
    }

    #[test]
    fn records_reserve_credit_and_a_sealed_batch_takes_exactly_its_bytes() {
        let budget = Arc::new(Semaphore::new(1000));
        let mut acc = Accumulator::new(1, 1 << 16, 0);
        let now = Instant::now();
        assert!(
            acc.append(record(None, b"a"), || (now, 0)).is_err(),
            "no credit"
        );
        acc.add_credit(budget.clone().try_acquire_many_owned(1000).unwrap());
        acc.append(record(None, b"a"), || (now, 0)).unwrap();
        let one = Accumulator::record_bytes(None, Some(b"a"));
        assert_eq!(acc.credit_free(), 1000 - one);
        acc.seal_all();
        let sealed = acc.take_ready();
        assert_eq!(
            sealed[0].permit.as_ref().map(|p| p.num_permits()),
            Some(one)
        );
        assert_eq!(acc.credit_free(), 1000 - one);
        acc.release_free_credit();
        assert_eq!(acc.credit_free(), 0);
        assert_eq!(budget.available_permits(), 1000 - one);
        drop(sealed);
        assert_eq!(
            budget.available_permits(),
            1000,
            "a settled batch gives its bytes back"
        );
        let missing = acc
            .append(record(None, &[0; 2000]), || (now, 0))
            .expect_err("not enough credit");
        assert_eq!(
            missing,
            Accumulator::record_bytes(None, Some(&[0; 2000])) - acc.credit_free()
        );
    }
}
