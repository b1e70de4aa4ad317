//! Producer ids: unique for the cluster's whole life, and not guessable.
//!
//! Unique: a counter hands them out below a ceiling persisted in blocks, so a restarted
//! coordinator starts above every id it may have given before.
//!
//! Not guessable: a broker accepts any producer id in a batch, so with ids handed out in
//! sequence one client could write under the ids the next clients will get, and make their
//! batches clash with its own (issue 20, case 5). The counter is therefore enciphered with a
//! key kept in the metadata: a keyed Feistel permutation of 62-bit values, so distinct
//! counters give distinct ids, and the coordinator can tell an id it issued (it deciphers to
//! a counter below the ceiling) from any other. Enciphered ids have bit 62 set, so they never
//! equal an id handed out in sequence before the key existed, and stay positive as Kafka's
//! signed 64-bit producer ids must.

use tailstream_wire::{ProducerEpoch, ProducerId};

/// Counters (and the enciphered part of ids) are 62-bit values.
const COUNTER_BITS: u32 = 62;
const HALF_BITS: u32 = COUNTER_BITS / 2;
const HALF_MASK: u64 = (1 << HALF_BITS) - 1;
/// Set in every enciphered id: above any id handed out in sequence.
const ENCIPHERED_TAG: u64 = 1 << COUNTER_BITS;
/// The largest counter (the ceiling never grows past it; `Metadata::validate` checks).
pub const COUNTER_MAX: u64 = (1 << COUNTER_BITS) - 1;
const ROUNDS: u64 = 6;

/// A Feistel round function: a keyed mix (splitmix64's finaliser) of one half.
fn round(key: u64, round: u64, half: u64) -> u64 {
    let mut z =
        key ^ half.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ round.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) & HALF_MASK
}

fn encipher(key: u64, counter: u64) -> u64 {
    let (mut left, mut right) = (counter >> HALF_BITS & HALF_MASK, counter & HALF_MASK);
    for r in 0..ROUNDS {
        (left, right) = (right, left ^ round(key, r, right));
    }
    ENCIPHERED_TAG | left << HALF_BITS | right
}

fn decipher(key: u64, id: u64) -> Option<u64> {
    if id & !COUNTER_MAX != ENCIPHERED_TAG {
        return None;
    }
    let (mut left, mut right) = (id >> HALF_BITS & HALF_MASK, id & HALF_MASK);
    for r in (0..ROUNDS).rev() {
        (left, right) = (right ^ round(key, r, left), left);
    }
    Some(left << HALF_BITS | right)
}

/// Hands out producer ids below the persisted ceiling, in memory; a restart starts at the
/// ceiling, so an id is never handed out twice.
#[derive(Debug, Default)]
pub struct ProducerIds {
    next: Option<u64>,
}

impl ProducerIds {
    /// The next id, if its counter lies below `ceiling`; `Err(next)` when the ceiling must
    /// first be raised (durably) past `next`.
    pub fn take(&mut self, ceiling: u64, key: u64) -> Result<ProducerId, u64> {
        let next = *self.next.get_or_insert(ceiling.max(1));
        if next >= ceiling {
            return Err(next);
        }
        self.next = Some(next + 1);
        Ok(ProducerId(encipher(key, next)))
    }
}

/// Whether `id` is one this coordinator handed out (under `key`, below `ceiling`).
pub fn issued(id: ProducerId, ceiling: u64, key: u64) -> bool {
    decipher(key, id.0).is_some_and(|counter| counter >= 1 && counter < ceiling)
}

/// The session a client that held `previous` continues with: the same id at the next epoch,
/// if the id is one this coordinator issued and has epochs left; otherwise `None` (the
/// client gets a fresh id). The coordinator keeps no epochs: a client naming an older epoch
/// than the newest gets a session the brokers fence, never another client's.
pub fn bumped(
    previous: (ProducerId, ProducerEpoch),
    ceiling: u64,
    key: u64,
) -> Option<(ProducerId, ProducerEpoch)> {
    let (id, epoch) = previous;
    if !issued(id, ceiling, key) {
        return None;
    }
    epoch.next().map(|next| (id, next))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn enciphering_is_a_permutation_that_deciphers_back() {
        let key = 0x1234_5678_9abc_def0;
        let mut seen = HashSet::new();
        for counter in (1..5000).chain([COUNTER_MAX - 1, COUNTER_MAX]) {
            let id = encipher(key, counter);
            assert!(id & ENCIPHERED_TAG != 0 && id < 1 << 63, "positive, tagged");
            assert!(seen.insert(id), "distinct counters give distinct ids");
            assert_eq!(decipher(key, id), Some(counter));
        }
        assert_eq!(decipher(key, 42), None, "an id handed out in sequence");
    }

    #[test]
    fn ids_do_not_follow_each_other_and_depend_on_the_key() {
        let mut ids = ProducerIds::default();
        assert_eq!(ids.take(0, 7), Err(1));
        let a = ids.take(100, 7).unwrap();
        let b = ids.take(100, 7).unwrap();
        let gap = a.0.abs_diff(b.0);
        assert!(gap > 1 << 20, "consecutive ids {a} and {b} are far apart");
        assert_ne!(encipher(7, 1), encipher(8, 1));
    }

    #[test]
    fn only_issued_ids_are_bumped() {
        let key = 99;
        let mut ids = ProducerIds::default();
        assert_eq!(ids.take(0, key), Err(1), "the ceiling must be raised first");
        let id = ids.take(10, key).unwrap();
        assert!(issued(id, 10, key));
        assert_eq!(
            bumped((id, ProducerEpoch(4)), 10, key),
            Some((id, ProducerEpoch(5)))
        );
        assert_eq!(bumped((id, ProducerEpoch(i16::MAX)), 10, key), None);
        assert_eq!(
            bumped((ProducerId(id.0 ^ 1), ProducerEpoch(0)), 10, key),
            None
        );
        assert_eq!(bumped((id, ProducerEpoch(0)), 10, key ^ 1), None);
        assert!(
            !issued(ProducerId(encipher(key, 10)), 10, key),
            "above the ceiling"
        );
    }
}
