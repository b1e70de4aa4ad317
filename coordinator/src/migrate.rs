//! `tailstream coordinator migrate`: a file-store cluster's state (metadata, recoveries,
//! committed offsets) into etcd. It takes leadership of the prefix first, as a coordinator
//! would, so no coordinator leads there while it writes, and it refuses a prefix that already
//! holds metadata. The brokers' data stays where it is: only the coordinator's state moves.

use crate::election::{self, LeaderAddress};
use crate::groups::etcd_offsets::commit_ops;
use crate::groups::offsets::{OffsetLimits, OffsetStore};
use crate::persist::{EtcdStore, MetadataFile, MetadataStore};
use std::path::Path;
use std::sync::Arc;

/// What was moved.
#[derive(Debug)]
pub struct Migrated {
    pub streams: usize,
    pub brokers: usize,
    pub metadata_keys: usize,
    pub groups: usize,
    pub offsets: usize,
}

/// Moves the state in `from_dir` (a file-store coordinator's data directory) to etcd at
/// `endpoints` under `prefix`.
pub async fn migrate(
    from_dir: &Path,
    endpoints: &[String],
    prefix: &str,
    limits: OffsetLimits,
) -> Result<Migrated, String> {
    let metadata = MetadataFile::read_only(from_dir).load()?;
    let offsets = OffsetStore::open(&from_dir.join("groups"), limits)
        .map_err(|e| {
            format!(
                "reading the committed offsets in {}: {e}",
                from_dir.display()
            )
        })?
        .snapshot();
    let mut client = etcd_client::Client::connect(endpoints, None)
        .await
        .map_err(|e| format!("connecting to etcd {endpoints:?}: {e}"))?;
    let migrating = LeaderAddress {
        rpc_addr: "migration".into(),
        peer_addr: "migration".into(),
        admin_addr: "migration".into(),
    };
    // A coordinator already leading there holds the election: this waits, bounded.
    let leadership = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        election::campaign(&mut client, prefix, &migrating, 5_000),
    )
    .await
    .map_err(|_| format!("a coordinator leads {prefix} on etcd: stop it before migrating"))??;
    let store = Arc::new(EtcdStore::new(
        client.clone(),
        prefix,
        endpoints,
        tokio::runtime::Handle::current(),
    ));
    store.fence(leadership.fence());
    let written = async {
        let metadata_keys = store.import(&metadata).await?;
        let store = store.clone();
        let offsets_written = tokio::task::spawn_blocking(move || {
            let mut written = 0;
            for (group, committed) in &offsets {
                let ops = commit_ops(group, committed)?;
                store.write(&ops)?;
                written += ops.len();
            }
            Ok::<_, String>((offsets.len(), written))
        })
        .await
        .map_err(|e| e.to_string())??;
        Ok::<_, String>((metadata_keys, offsets_written))
    }
    .await;
    leadership.resign(&mut client).await;
    let (metadata_keys, (groups, offsets)) = written?;
    Ok(Migrated {
        streams: metadata.streams.len(),
        brokers: metadata.brokers.len(),
        metadata_keys,
        groups,
        offsets,
    })
}
