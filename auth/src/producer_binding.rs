//! Producer ids bound to the user who obtained them.
//!
//! The coordinator hands out producer ids; a broker then sees them only in batches. For a
//! broker to refuse a batch under another user's producer id without asking anyone, each id
//! carries its owner's mark: a tag, keyed with the cluster's binding key, over the rest of the
//! id and the owner's name. The layout of a bound id (a positive `i64`, as Kafka needs):
//!
//! ```text
//!  bit 63   62        61 ..................... 22   21 ........ 0
//!  [ 0 ][ 1: bound ][ sealed counter: 40 bits   ][ tag: 22 bits ]
//! ```
//!
//! - the sealed counter is the coordinator's counter, enciphered (only the coordinator can
//!   read it back; it keeps ids unguessable and tells ids it issued from others);
//! - the tag is the first 22 bits of HMAC-SHA256(binding key, sealed counter, owner).
//!
//! Another user holding the id (read from a batch header, say) gets a batch under it refused
//! unless the tag happens to fit their name too: a 1 in 4 million chance per id, fixed by the
//! id and the two names, which retrying the same id cannot improve (a reader who collected N
//! ids has about N in 4 million that fit). Forging a tag for one's own name over someone
//! else's sealed counter gains nothing: it is a different id.
//!
//! The coordinator's peer listener hands out the key and takes the owner a broker names:
//! members are trusted, so the binding holds where the peer listeners are (TLS on, or a
//! network only members reach).
//!
//! The binding key is derived from the cluster's secret, so brokers can hold it without
//! holding the secret. Pure: no I/O, no randomness.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use tailstream_wire::ProducerId;

/// Bits of the sealed counter.
pub const SEALED_BITS: u32 = 40;
/// Bits of the owner's tag.
pub const TAG_BITS: u32 = 22;
/// Set in every bound id (and in every enciphered id before binding existed).
pub const BOUND_FLAG: u64 = 1 << 62;
/// The largest sealed counter.
pub const SEALED_MAX: u64 = (1 << SEALED_BITS) - 1;
const TAG_MASK: u64 = (1 << TAG_BITS) - 1;
const _: () = assert!(
    SEALED_BITS + TAG_BITS == 62,
    "a bound id fills bits 0 to 61"
);

/// Bytes of a binding key.
pub const BINDING_KEY_BYTES: usize = 32;

/// The key producer ids' tags are made with: the same on every coordinator and broker.
#[derive(Clone)]
pub struct BindingKey {
    bytes: [u8; BINDING_KEY_BYTES],
    /// HMAC keyed with `bytes`, its key blocks already hashed: each tag clones it, which
    /// halves the hashing per batch.
    keyed: Hmac<Sha256>,
}

impl PartialEq for BindingKey {
    fn eq(&self, other: &BindingKey) -> bool {
        self.bytes == other.bytes
    }
}

impl Eq for BindingKey {}

impl std::fmt::Debug for BindingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BindingKey(..)")
    }
}

impl BindingKey {
    /// The binding key of the cluster whose secret is `cluster_secret` (one-way: holding the
    /// binding key reveals nothing of the secret).
    pub fn derive(cluster_secret: &[u8; 32]) -> BindingKey {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(cluster_secret).expect("HMAC takes any key length");
        mac.update(b"tailstream producer id binding v1");
        BindingKey::new(mac.finalize().into_bytes().into())
    }

    fn new(bytes: [u8; BINDING_KEY_BYTES]) -> BindingKey {
        let keyed = Hmac::<Sha256>::new_from_slice(&bytes).expect("HMAC takes any key length");
        BindingKey { bytes, keyed }
    }

    /// A key as sent to a broker; `None` unless it has exactly `BINDING_KEY_BYTES`.
    pub fn from_bytes(bytes: &[u8]) -> Option<BindingKey> {
        bytes.try_into().ok().map(BindingKey::new)
    }

    pub fn as_bytes(&self) -> &[u8; BINDING_KEY_BYTES] {
        &self.bytes
    }

    /// The owner's tag over `sealed`. `None` (anonymous: authentication off) and every user
    /// name are kept apart by a leading byte.
    fn tag(&self, sealed: u64, owner: Option<&str>) -> u64 {
        let mut mac = self.keyed.clone();
        mac.update(&sealed.to_be_bytes());
        match owner {
            None => mac.update(&[0]),
            Some(user) => {
                mac.update(&[1]);
                mac.update(user.as_bytes());
            }
        }
        let digest = mac.finalize().into_bytes();
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        u64::from_be_bytes(first) & TAG_MASK
    }

    /// The id for counter `sealed` (already enciphered, at most `SEALED_MAX`) owned by `owner`.
    pub fn bind(&self, sealed: u64, owner: Option<&str>) -> ProducerId {
        debug_assert!(sealed <= SEALED_MAX);
        let sealed = sealed & SEALED_MAX;
        ProducerId(BOUND_FLAG | sealed << TAG_BITS | self.tag(sealed, owner))
    }

    /// Whether `id` is bound to `owner`: the sealed counter it carries, if so.
    pub fn owned_by(&self, id: ProducerId, owner: Option<&str>) -> Option<u64> {
        let sealed = sealed_counter(id)?;
        (id.0 & TAG_MASK == self.tag(sealed, owner)).then_some(sealed)
    }
}

/// The sealed counter of an id in the bound layout (not yet checked against any owner).
pub fn sealed_counter(id: ProducerId) -> Option<u64> {
    (id.0 >> 62 == 1).then_some(id.0 >> TAG_BITS & SEALED_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> BindingKey {
        BindingKey::derive(&[7; 32])
    }

    #[test]
    fn an_id_is_its_owners_only() {
        let key = key();
        let id = key.bind(12_345, Some("alice"));
        assert!(id.0 >> 62 == 1, "positive, flagged");
        assert_eq!(key.owned_by(id, Some("alice")), Some(12_345));
        assert_eq!(key.owned_by(id, Some("mallory")), None);
        assert_eq!(key.owned_by(id, None), None, "not the anonymous owner's");
        let anonymous = key.bind(12_345, None);
        assert_ne!(anonymous, id);
        assert_eq!(key.owned_by(anonymous, None), Some(12_345));
        assert_eq!(
            key.owned_by(anonymous, Some("")),
            None,
            "no name is not an empty name"
        );
    }

    #[test]
    fn another_key_or_a_flipped_bit_does_not_verify() {
        let key = key();
        let id = key.bind(SEALED_MAX, Some("alice"));
        assert_eq!(key.owned_by(id, Some("alice")), Some(SEALED_MAX));
        let other = BindingKey::derive(&[8; 32]);
        assert_eq!(other.owned_by(id, Some("alice")), None);
        for bit in 0..62 {
            let flipped = ProducerId(id.0 ^ 1 << bit);
            assert_eq!(key.owned_by(flipped, Some("alice")), None, "bit {bit}");
        }
        assert_eq!(
            sealed_counter(ProducerId(42)),
            None,
            "an id from before the layout"
        );
        assert_eq!(key.owned_by(ProducerId(42), Some("alice")), None);
    }

    #[test]
    fn keys_travel_as_exactly_their_bytes() {
        let key = key();
        assert_eq!(BindingKey::from_bytes(key.as_bytes()), Some(key.clone()));
        assert_eq!(BindingKey::from_bytes(&[0; 31]), None);
        assert_eq!(format!("{key:?}"), "BindingKey(..)", "never logged");
    }

    #[test]
    fn tags_spread_over_their_bits() {
        // A different owner gives a different tag nearly always: count clashes over many ids.
        let key = key();
        let clashes = (0..2000u64)
            .filter(|&sealed| {
                key.bind(sealed, Some("alice")).0 & TAG_MASK
                    == key.bind(sealed, Some("bob")).0 & TAG_MASK
            })
            .count();
        assert!(clashes <= 1, "{clashes} clashes in 2000");
    }
}
