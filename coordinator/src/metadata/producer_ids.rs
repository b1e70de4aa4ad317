//! Producer ids: unique for the cluster's whole life, not guessable, and bound to the user
//! who obtained them.
//!
//! Unique: a counter hands them out below a ceiling persisted in blocks, so a restarted
//! coordinator starts above every id it may have given before.
//!
//! Not guessable: with ids handed out in sequence one client could write under the ids the
//! next clients will get, and make their batches clash with its own (issue 20, case 5). The
//! counter is therefore enciphered with a key kept in the metadata: a keyed Feistel
//! permutation of 40-bit values, so distinct counters give distinct ids, and the coordinator
//! can tell an id it issued (it deciphers to a counter below the ceiling) from any other.
//!
//! Bound: the enciphered counter goes into an id with its owner's tag
//! (`tailstream_auth::producer_binding`), so brokers refuse a batch under another user's id,
//! and the coordinator gives a new epoch of an id only to its owner.
use tailstream_auth::producer_binding::{BindingKey, SEALED_BITS, SEALED_MAX};
use tailstream_wire::{ProducerEpoch, ProducerId};

const HALF_BITS: u32 = SEALED_BITS / 2;
const HALF_MASK: u64 = (1 << HALF_BITS) - 1;

/// The largest counter (the ceiling never grows past it; `Metadata::validate` checks).
pub const COUNTER_MAX: u64 = SEALED_MAX;
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
    left << HALF_BITS | right
}

fn decipher(key: u64, sealed: u64) -> u64 {
    let (mut left, mut right) = (sealed >> HALF_BITS & HALF_MASK, sealed & HALF_MASK);
    for r in (0..ROUNDS).rev() {
        (left, right) = (right ^ round(key, r, left), left);
    }
    left << HALF_BITS | right
}

/// What an id is made with: the cipher key for the counter, and the binding key for the tag.
#[derive(Clone, Debug)]
pub struct IdKeys {
    pub cipher: u64,
    pub binding: BindingKey,
}

/// Hands out producer ids below the persisted ceiling, in memory; a restart starts at the
/// ceiling, so an id is never handed out twice. Fresh ids are paced (`admit`): the counter's
/// space is finite, and no client may use it up.
#[derive(Debug, Default)]
pub struct ProducerIds {
    next: Option<u64>,
    pace: Option<Pace>,
}

/// A token bucket: `per_second` fresh ids, ten seconds' worth at once.
#[derive(Debug)]
struct Pace {
    per_second: f64,
    tokens: f64,
    at: Option<std::time::Instant>,
}

impl ProducerIds {
    /// Ids handed out at most `per_second` (0: not limited), ten seconds' worth at once.
    pub fn paced(per_second: u32) -> Self {
        let pace = (per_second > 0).then(|| Pace {
            per_second: f64::from(per_second),
            tokens: f64::from(per_second) * 10.0,
            at: None,
        });
        ProducerIds { next: None, pace }
    }

    /// Whether a fresh id may be handed out at `now` (taking its token if so).
    pub fn admit(&mut self, now: std::time::Instant) -> bool {
        let Some(pace) = &mut self.pace else {
            return true;
        };
        let burst = pace.per_second * 10.0;
        if let Some(at) = pace.at {
            let refill = now.saturating_duration_since(at).as_secs_f64() * pace.per_second;
            pace.tokens = (pace.tokens + refill).min(burst);
        }
        pace.at = Some(pace.at.map_or(now, |at| at.max(now)));
        if pace.tokens >= 1.0 {
            pace.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// The next id, for `owner` (`None`: an anonymous client), if its counter lies below
    /// `ceiling`; `Err(next)` when the ceiling must first be raised (durably) past `next`.
    pub fn take(
        &mut self,
        ceiling: u64,
        keys: &IdKeys,
        owner: Option<&str>,
    ) -> Result<ProducerId, u64> {
        let next = *self.next.get_or_insert(ceiling.max(1));
        if next >= ceiling {
            return Err(next);
        }
        self.next = Some(next + 1);
        Ok(keys.binding.bind(encipher(keys.cipher, next), owner))
    }
}

/// Whether `id` is one this coordinator handed out (under `keys`, below `ceiling`) to `owner`.
pub fn issued(id: ProducerId, ceiling: u64, keys: &IdKeys, owner: Option<&str>) -> bool {
    keys.binding
        .owned_by(id, owner)
        .map(|sealed| decipher(keys.cipher, sealed))
        .is_some_and(|counter| counter >= 1 && counter < ceiling)
}

/// The session `owner`, who held `previous`, continues with: the same id at the next epoch,
/// if the id is one this coordinator issued to `owner` and has epochs left; otherwise `None`
/// (the client gets a fresh id). The coordinator keeps no epochs: a client naming an older
/// epoch than the newest gets a session the brokers fence, never another client's.
pub fn bumped(
    previous: (ProducerId, ProducerEpoch),
    ceiling: u64,
    keys: &IdKeys,
    owner: Option<&str>,
) -> Option<(ProducerId, ProducerEpoch)> {
    let (id, epoch) = previous;
    if !issued(id, ceiling, keys, owner) {
        return None;
    }
    epoch.next().map(|next| (id, next))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn binding() -> BindingKey {
        BindingKey::derive(&[3; 32])
    }

    #[test]
    fn enciphering_is_a_permutation_that_deciphers_back() {
        let key = 0x1234_5678_9abc_def0;
        let mut seen = HashSet::new();
        for counter in (1..5000).chain([COUNTER_MAX - 1, COUNTER_MAX]) {
            let sealed = encipher(key, counter);
            assert!(sealed <= SEALED_MAX, "fits its bits");
            assert!(seen.insert(sealed), "distinct counters give distinct ids");
            assert_eq!(decipher(key, sealed), counter);
        }
    }

    #[test]
    fn ids_do_not_follow_each_other_and_depend_on_the_key() {
        let binding = binding();
        let keys = &IdKeys { cipher: 7, binding };
        let mut ids = ProducerIds::default();
        assert_eq!(ids.take(0, keys, None), Err(1));
        let a = ids.take(100, keys, None).unwrap();
        let b = ids.take(100, keys, None).unwrap();
        assert!(a.0 >> 62 == 1 && b.0 >> 62 == 1, "positive, bound");
        let gap = a.0.abs_diff(b.0);
        assert!(gap > 1 << 20, "consecutive ids {a} and {b} are far apart");
        assert_ne!(encipher(7, 1), encipher(8, 1));
    }

    #[test]
    fn fresh_ids_are_paced_with_ten_seconds_of_burst() {
        let start = std::time::Instant::now();
        let mut ids = ProducerIds::paced(2);
        let admitted = (0..25).filter(|_| ids.admit(start)).count();
        assert_eq!(admitted, 20, "ten seconds' worth at once");
        assert!(!ids.admit(start + std::time::Duration::from_millis(400)));
        assert!(ids.admit(start + std::time::Duration::from_millis(600)));
        let mut open = ProducerIds::paced(0);
        assert!((0..10_000).all(|_| open.admit(start)), "0: not limited");
    }

    #[test]
    fn only_ids_issued_to_the_asker_are_bumped() {
        let binding = binding();
        let keys = &IdKeys {
            cipher: 99,
            binding: binding.clone(),
        };
        let alice = Some("alice");
        let mut ids = ProducerIds::default();
        assert_eq!(
            ids.take(0, keys, alice),
            Err(1),
            "the ceiling must be raised first"
        );
        let id = ids.take(10, keys, alice).unwrap();
        assert!(issued(id, 10, keys, alice));
        assert!(!issued(id, 10, keys, Some("mallory")), "another user's");
        assert!(!issued(id, 10, keys, None), "not an anonymous client's");
        assert_eq!(
            bumped((id, ProducerEpoch(4)), 10, keys, alice),
            Some((id, ProducerEpoch(5)))
        );
        assert_eq!(
            bumped((id, ProducerEpoch(4)), 10, keys, Some("mallory")),
            None
        );
        assert_eq!(bumped((id, ProducerEpoch(i16::MAX)), 10, keys, alice), None);
        assert_eq!(
            bumped((ProducerId(id.0 ^ 1), ProducerEpoch(0)), 10, keys, alice),
            None
        );
        assert!(
            !issued(binding.bind(encipher(99, 10), alice), 10, keys, alice),
            "above the ceiling"
        );
    }
}
