//! Which streamlet a record goes to.
//!
//! Keyed records go to `hash(key) mod streamlets`, so one key always lands in one streamlet
//! (and, since a producer appends to one log per streamlet, stays in order). Records without a
//! key go round-robin *by batch*: they stick to one streamlet until its batch is sealed, then
//! move to the next, which fills batches instead of spreading single records thin (Kafka's
//! "sticky" partitioner does the same).

use tailstream_wire::StreamletId;

/// Stable across processes and versions: CRC32 (IEEE) of the key.
pub fn streamlet_for_key(key: &[u8], streamlets: u32) -> StreamletId {
    StreamletId(crc32fast::hash(key) % streamlets.max(1))
}

/// The sticky round-robin cursor for keyless records.
#[derive(Clone, Debug, Default)]
pub struct RoundRobin {
    next: u32,
}

impl RoundRobin {
    pub fn starting_at(start: u32) -> Self {
        Self { next: start }
    }

    /// The streamlet keyless records currently go to.
    pub fn current(&self, streamlets: u32) -> StreamletId {
        StreamletId(self.next % streamlets.max(1))
    }

    /// The streamlet keyless records currently go to, skipping those `usable` refuses (being
    /// recovered, or lost); the plain cursor if it refuses every one.
    pub fn current_usable(
        &self,
        streamlets: u32,
        usable: impl Fn(StreamletId) -> bool,
    ) -> StreamletId {
        let streamlets = streamlets.max(1);
        (0..streamlets)
            .map(|step| StreamletId(self.next.wrapping_add(step) % streamlets))
            .find(|s| usable(*s))
            .unwrap_or_else(|| self.current(streamlets))
    }

    /// The batch of `streamlet` (the current one) was sealed: move on past it.
    pub fn advance_past(&mut self, streamlet: StreamletId) {
        self.next = streamlet.0.wrapping_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_always_routes_to_the_same_streamlet() {
        for key in [&b"alpha"[..], b"beta", b""] {
            let first = streamlet_for_key(key, 7);
            assert!(first.0 < 7);
            assert_eq!(streamlet_for_key(key, 7), first);
        }
    }

    #[test]
    fn keyless_records_move_on_only_when_a_batch_is_sealed() {
        let mut rr = RoundRobin::default();
        assert_eq!(rr.current(3), StreamletId(0));
        assert_eq!(rr.current(3), StreamletId(0));
        for _ in 0..3 {
            rr.advance_past(rr.current(3));
        }
        assert_eq!(rr.current(3), StreamletId(0));
    }

    #[test]
    fn keyless_records_skip_streamlets_that_do_not_serve() {
        let mut rr = RoundRobin::default();
        let serving = |s: StreamletId| s != StreamletId(0) && s != StreamletId(2);
        assert_eq!(rr.current_usable(4, serving), StreamletId(1));
        rr.advance_past(StreamletId(1));
        assert_eq!(rr.current_usable(4, serving), StreamletId(3));
        rr.advance_past(StreamletId(3));
        assert_eq!(rr.current_usable(4, serving), StreamletId(1));
        // None serves: keep the plain rotation (the batch waits there).
        assert_eq!(rr.current_usable(4, |_| false), StreamletId(0));
    }
}
