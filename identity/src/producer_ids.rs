//! Whether a batch's producer id is its writer's: ids carry their owner's mark
//! (`tailstream_auth::producer_binding`), checked here with the cluster's binding key, which
//! the broker learns once from the coordinator (it never changes).

use std::sync::OnceLock;
use tailstream_auth::producer_binding::BindingKey;
use tailstream_wire::ProducerId;
use tailstream_wire::batch::{peek_producer_id, read_batch_header};

/// What a batch's producer id says about its writer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProducerIdCheck {
    /// No producer id, an anonymous writer, or the writer's own id.
    Allowed,
    /// An id bound to someone else (or to no one this cluster knows), in a sound header.
    Refused(ProducerId),
    /// The binding key is not known yet: the writer should retry.
    KeyUnknown,
}

/// The binding key, once learnt.
#[derive(Debug, Default)]
pub struct ProducerIdOwners {
    key: OnceLock<BindingKey>,
}

impl ProducerIdOwners {
    /// Whether the key is known.
    pub fn known(&self) -> bool {
        self.key.get().is_some()
    }

    /// Takes the key as the coordinator sent it; false if it is not a key.
    pub fn learn(&self, bytes: &[u8]) -> bool {
        match BindingKey::from_bytes(bytes) {
            Some(key) => {
                // A second answer is the same key (it never changes): keep the first.
                let _ = self.key.set(key);
                true
            }
            None => false,
        }
    }

    /// Whether `user` (`None`: an anonymous connection, which owns nothing) may write `batch`.
    /// One keyed hash for a batch with a producer id; the header's CRC is checked only
    /// before a refusal, so a refusal is never made on a damaged field (storage refuses a
    /// damaged batch as such).
    pub fn check(&self, user: Option<&str>, batch: &[u8]) -> ProducerIdCheck {
        let (Some(user), Some(id)) = (user, peek_producer_id(batch)) else {
            return ProducerIdCheck::Allowed;
        };
        let Some(key) = self.key.get() else {
            return ProducerIdCheck::KeyUnknown;
        };
        if key.owned_by(id, Some(user)).is_some() {
            return ProducerIdCheck::Allowed;
        }
        match read_batch_header(batch) {
            Ok(info) if info.producer.is_some_and(|p| p.producer_id == id) => {
                ProducerIdCheck::Refused(id)
            }
            _ => ProducerIdCheck::Allowed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailstream_wire::batch::BATCH_HEADER_BYTES;
    use tailstream_wire::records::RecordBatchBuilder;
    use tailstream_wire::{BatchSequence, ProducerEpoch};

    fn batch(producer: Option<ProducerId>) -> Vec<u8> {
        let mut builder = RecordBatchBuilder::new(64);
        builder.push(0, None, Some(b"v"), &[]);
        match producer {
            Some(id) => builder.finish(id, ProducerEpoch(0), BatchSequence(0)),
            None => builder.finish_without_producer(),
        }
        .to_vec()
    }

    #[test]
    fn a_batch_under_another_users_id_is_refused() {
        let key = BindingKey::derive(&[9; 32]);
        let owners = ProducerIdOwners::default();
        let alices = key.bind(77, Some("alice"));
        assert_eq!(
            owners.check(Some("alice"), &batch(Some(alices))),
            ProducerIdCheck::KeyUnknown
        );
        assert!(!owners.learn(&[0; 31]));
        assert!(owners.learn(key.as_bytes()));
        assert_eq!(
            owners.check(Some("alice"), &batch(Some(alices))),
            ProducerIdCheck::Allowed
        );
        assert_eq!(
            owners.check(Some("mallory"), &batch(Some(alices))),
            ProducerIdCheck::Refused(alices)
        );
        let made_up = ProducerId(12345);
        assert_eq!(
            owners.check(Some("mallory"), &batch(Some(made_up))),
            ProducerIdCheck::Refused(made_up)
        );
        assert_eq!(
            owners.check(Some("mallory"), &batch(None)),
            ProducerIdCheck::Allowed
        );
        assert_eq!(
            owners.check(None, &batch(Some(alices))),
            ProducerIdCheck::Allowed,
            "an anonymous listener checks nothing"
        );
    }

    #[test]
    fn a_damaged_header_is_left_to_storage() {
        let key = BindingKey::derive(&[9; 32]);
        let owners = ProducerIdOwners::default();
        owners.learn(key.as_bytes());
        let mut damaged = batch(Some(key.bind(5, Some("alice"))));
        damaged[50] ^= 1; // the id's last byte: the CRC no longer matches
        assert_eq!(
            owners.check(Some("alice"), &damaged),
            ProducerIdCheck::Allowed
        );
        assert_eq!(
            owners.check(Some("alice"), &damaged[..BATCH_HEADER_BYTES - 1]),
            ProducerIdCheck::Allowed
        );
    }
}
