//! `WireField`: how each field type is written and read, and `wire_message!`, which derives a
//! message's encoding from its field list so every message is encoded the same way.

use crate::codec::{DecodeError, WireReader, WireWrite};
use crate::ids::{
    BatchSequence, CoordinatorTerm, GroupId, LogId, OwnershipEpoch, ProducerEpoch, ProducerId,
    RecordOffset, ReplicaEpoch, SegmentId, SegmentPosition, ServerId, StreamId, StreamletId,
};
use bytes::{BufMut, Bytes, BytesMut};

/// Longest string field (names, addresses, error messages).
pub const STRING_BYTES_MAX: usize = 4096;
/// Most elements in any list field.
pub const LIST_ITEMS_MAX: usize = 1 << 20;
/// Longest length-prefixed byte field.
pub const BYTES_FIELD_MAX: usize = 64 << 20;

/// Bytes `value` takes encoded (encodes it once: for budgets that must hold for any value,
/// where `MIN_BYTES` is only a floor).
pub fn encoded_len<T: WireField>(value: &T) -> usize {
    let mut out = BytesMut::new();
    value.put(&mut out);
    out.len()
}

/// A type that can be a field of a wire message.
pub trait WireField: Sized {
    /// Fewest bytes an encoded value takes: lets list decoding reject forged counts.
    const MIN_BYTES: usize;
    fn put(&self, out: &mut BytesMut);
    fn get(reader: &mut WireReader, what: &'static str) -> Result<Self, DecodeError>;
}

macro_rules! int_field {
    ($ty:ty, $bytes:literal, $put:ident, $get:ident) => {
        impl WireField for $ty {
            const MIN_BYTES: usize = $bytes;
            fn put(&self, out: &mut BytesMut) {
                out.$put(*self);
            }
            fn get(reader: &mut WireReader, what: &'static str) -> Result<Self, DecodeError> {
                reader.$get(what)
            }
        }
    };
}

int_field!(u8, 1, put_u8, u8);
int_field!(u16, 2, put_u16_le, u16);
int_field!(u32, 4, put_u32_le, u32);
int_field!(u64, 8, put_u64_le, u64);
int_field!(bool, 1, put_bool, bool);

macro_rules! id_field {
    ($ty:ident, $inner:ty) => {
        impl WireField for $ty {
            const MIN_BYTES: usize = <$inner as WireField>::MIN_BYTES;
            fn put(&self, out: &mut BytesMut) {
                self.0.put(out);
            }
            fn get(reader: &mut WireReader, what: &'static str) -> Result<Self, DecodeError> {
                Ok($ty(<$inner>::get(reader, what)?))
            }
        }
    };
}

id_field!(StreamId, u64);
id_field!(StreamletId, u32);
id_field!(LogId, u32);
id_field!(GroupId, u64);
id_field!(SegmentId, u64);
id_field!(ProducerId, u64);
id_field!(RecordOffset, u64);
id_field!(SegmentPosition, u32);
id_field!(BatchSequence, u32);
id_field!(OwnershipEpoch, u32);
id_field!(CoordinatorTerm, u64);
id_field!(ReplicaEpoch, u32);

/// A producer epoch travels as a u16 holding `0..=i16::MAX` (Kafka's valid epochs).
impl WireField for ProducerEpoch {
    const MIN_BYTES: usize = 2;
    fn put(&self, out: &mut BytesMut) {
        out.put_u16_le(self.0.max(0) as u16);
    }
    fn get(reader: &mut WireReader, what: &'static str) -> Result<Self, DecodeError> {
        let raw = reader.u16(what)?;
        i16::try_from(raw)
            .map(ProducerEpoch)
            .map_err(|_| DecodeError::InvalidValue {
                what,
                value: u64::from(raw),
            })
    }
}

impl WireField for ServerId {
    const MIN_BYTES: usize = 8;
    fn put(&self, out: &mut BytesMut) {
        out.put_u32_le(self.index);
        out.put_u32_le(self.generation);
    }
    fn get(reader: &mut WireReader, what: &'static str) -> Result<Self, DecodeError> {
        Ok(ServerId {
            index: reader.u32(what)?,
            generation: reader.u32(what)?,
        })
    }
}

impl WireField for String {
    const MIN_BYTES: usize = 4;
    fn put(&self, out: &mut BytesMut) {
        out.put_str(self);
    }
    fn get(reader: &mut WireReader, what: &'static str) -> Result<Self, DecodeError> {
        reader.string(what, STRING_BYTES_MAX)
    }
}

impl WireField for Bytes {
    const MIN_BYTES: usize = 4;
    fn put(&self, out: &mut BytesMut) {
        out.put_len_bytes(self);
    }
    fn get(reader: &mut WireReader, what: &'static str) -> Result<Self, DecodeError> {
        reader.bytes(what, BYTES_FIELD_MAX)
    }
}

impl<T: WireField> WireField for Option<T> {
    const MIN_BYTES: usize = 1;
    fn put(&self, out: &mut BytesMut) {
        match self {
            None => out.put_u8(0),
            Some(value) => {
                out.put_u8(1);
                value.put(out);
            }
        }
    }
    fn get(reader: &mut WireReader, what: &'static str) -> Result<Self, DecodeError> {
        match reader.u8(what)? {
            0 => Ok(None),
            1 => Ok(Some(T::get(reader, what)?)),
            tag => Err(DecodeError::InvalidValue {
                what,
                value: u64::from(tag),
            }),
        }
    }
}

/// A field added at the end of a message after the message first shipped: senders from
/// before it end the message where the field would start, and their bytes decode as `None`.
/// Only a message's last field may be `Appended` (anywhere else, the next field's bytes would
/// be read as it), and only in a message sent on its own, never inside a list. `None` is
/// written as nothing, so a new sender that fills nothing in is read by older receivers too;
/// `Some` as an `Option`'s tag 1 and the value (a tag 0 is refused: one encoding per value).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct Appended<T>(pub Option<T>);

impl<T> Appended<T> {
    pub fn as_ref(&self) -> Option<&T> {
        self.0.as_ref()
    }
}

impl<T: WireField> WireField for Appended<T> {
    const MIN_BYTES: usize = 0;
    fn put(&self, out: &mut BytesMut) {
        if self.0.is_some() {
            self.0.put(out);
        }
    }
    fn get(reader: &mut WireReader, what: &'static str) -> Result<Self, DecodeError> {
        if reader.remaining() == 0 {
            return Ok(Self(None));
        }
        match Option::get(reader, what)? {
            Some(value) => Ok(Self(Some(value))),
            None => Err(DecodeError::InvalidValue { what, value: 0 }),
        }
    }
}

impl<T: WireField> WireField for Vec<T> {
    const MIN_BYTES: usize = 4;
    fn put(&self, out: &mut BytesMut) {
        out.put_count(self.len());
        for item in self {
            item.put(out);
        }
    }
    fn get(reader: &mut WireReader, what: &'static str) -> Result<Self, DecodeError> {
        let count = reader.count(what, LIST_ITEMS_MAX, T::MIN_BYTES.max(1))?;
        let mut items = Vec::with_capacity(count);
        for _ in 0..count {
            items.push(T::get(reader, what)?);
        }
        Ok(items)
    }
}

/// Declares a message struct whose encoding is its fields, in order, each as `WireField`.
/// The struct is also a `WireField`, so messages nest.
#[macro_export]
macro_rules! wire_message {
    ($(#[$meta:meta])* pub struct $name:ident {
        $($(#[$fmeta:meta])* pub $field:ident : $ty:ty),* $(,)?
    }) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq)]
        #[cfg_attr(test, derive(proptest_derive::Arbitrary))]
        pub struct $name {
            $($(#[$fmeta])* pub $field: $ty,)*
        }

        impl $crate::field::WireField for $name {
            const MIN_BYTES: usize = 0 $(+ <$ty as $crate::field::WireField>::MIN_BYTES)*;

            fn put(&self, _out: &mut ::bytes::BytesMut) {
                $($crate::field::WireField::put(&self.$field, _out);)*
            }

            fn get(
                _reader: &mut $crate::codec::WireReader,
                _what: &'static str,
            ) -> Result<Self, $crate::codec::DecodeError> {
                Ok(Self {
                    $($field: $crate::field::WireField::get(
                        _reader,
                        concat!(stringify!($name), ".", stringify!($field)),
                    )?,)*
                })
            }
        }

        impl $crate::codec::Encode for $name {
            fn encode(&self, out: &mut ::bytes::BytesMut) {
                $crate::field::WireField::put(self, out);
            }
        }

        impl $crate::codec::Decode for $name {
            fn decode(
                reader: &mut $crate::codec::WireReader,
            ) -> Result<Self, $crate::codec::DecodeError> {
                <Self as $crate::field::WireField>::get(reader, stringify!($name))
            }
        }
    };
}

/// Declares a fieldless enum carried as one byte (its explicit discriminant), serde-able (the
/// coordinator saves some), with `ALL` listing its variants.
#[macro_export]
macro_rules! wire_enum {
    ($(#[$meta:meta])* pub enum $name:ident {
        $($(#[$vmeta:meta])* $variant:ident = $value:literal),* $(,)?
    }) => {
        $(#[$meta])*
        #[derive(
            Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord,
            serde::Serialize, serde::Deserialize,
        )]
        #[cfg_attr(test, derive(proptest_derive::Arbitrary))]
        #[repr(u8)]
        pub enum $name {
            $($(#[$vmeta])* $variant = $value,)*
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];
        }

        impl $crate::field::WireField for $name {
            const MIN_BYTES: usize = 1;
            fn put(&self, out: &mut ::bytes::BytesMut) {
                $crate::field::WireField::put(&(*self as u8), out);
            }
            fn get(
                reader: &mut $crate::codec::WireReader,
                what: &'static str,
            ) -> Result<Self, $crate::codec::DecodeError> {
                match reader.u8(what)? {
                    $($value => Ok($name::$variant),)*
                    other => Err($crate::codec::DecodeError::InvalidValue {
                        what,
                        value: u64::from(other),
                    }),
                }
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use crate::codec::{Decode, Encode};
    use crate::messages::{CommittedOffset, OffsetCommitRequest};
    use crate::{Appended, DecodeError};
    use bytes::{BufMut, BytesMut};

    fn commit(owner: Option<&str>) -> OffsetCommitRequest {
        OffsetCommitRequest {
            group: "readers".into(),
            member: None,
            offsets: vec![CommittedOffset {
                topic: "clicks".into(),
                partition: 3,
                offset: 42,
                metadata: String::new(),
            }],
            owner: Appended(owner.map(str::to_owned)),
        }
    }

    #[test]
    fn an_appended_field_reads_as_none_from_senders_that_predate_it() {
        let named = commit(Some("alice")).to_bytes();
        assert_eq!(
            OffsetCommitRequest::decode_exact(named).unwrap().owner,
            Appended(Some("alice".to_owned()))
        );
        // An older sender's message ends where the field would start, as a new sender's does
        // when it names no one (so older receivers read it too).
        let named = commit(Some("alice")).to_bytes();
        let older = commit(None).to_bytes();
        assert_eq!(older.len(), named.len() - 1 - 4 - "alice".len());
        assert_eq!(
            OffsetCommitRequest::decode_exact(older.clone()).unwrap(),
            commit(None)
        );
        // Present but damaged is still refused (a tag 0 too: `None` is written as nothing),
        // and nothing may follow it.
        for tag in [7, 0] {
            let mut bad = BytesMut::from(&older[..]);
            bad.put_u8(tag);
            assert!(matches!(
                OffsetCommitRequest::decode_exact(bad.freeze()),
                Err(DecodeError::InvalidValue { .. })
            ));
        }
        let mut longer = BytesMut::from(&commit(Some("alice")).to_bytes()[..]);
        longer.put_u8(0);
        assert!(OffsetCommitRequest::decode_exact(longer.freeze()).is_err());
    }
}
