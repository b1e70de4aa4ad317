//! Where the coordinator's metadata lives: the [`MetadataStore`] seam and its two stores.
//!
//! - [`file`]: [`MetadataFile`], a JSON snapshot in the data directory, replaced atomically,
//!   and a journal of each change's writes since it (`tailstream_wire::metadata_journal`;
//!   the embedded default; one coordinator);
//! - [`layout`]: the metadata as one key per object and the writes a change makes (pure);
//! - [`etcd`]: [`EtcdStore`], those keys on etcd, every write fenced by the leader key;
//! - [`mirror`]: [`EtcdMirror`], every coordinator's warm copy of those keys, kept current by
//!   watching etcd, which a new leader loads from when it is provably current.

pub mod etcd;
pub mod file;
pub mod layout;
pub mod mirror;
#[cfg(test)]
pub(crate) mod test_support;

pub use etcd::EtcdStore;
pub use file::MetadataFile;
pub use mirror::EtcdMirror;

use crate::metadata::Metadata;

/// Durable storage of the metadata. `save` returns only once the state is durable.
pub trait MetadataStore: Send + Sync + std::fmt::Debug + 'static {
    /// The saved state (validated), or an empty one when nothing was saved yet.
    fn load(&self) -> Result<Metadata, String>;
    /// Makes `next` the saved state, durably, where `previous` is what this store last saved
    /// or loaded (a store of objects writes only what differs). Blocking.
    fn save(&self, previous: &Metadata, next: &Metadata) -> Result<(), String>;
    /// Where it lives, for log lines.
    fn describe(&self) -> String;
}
