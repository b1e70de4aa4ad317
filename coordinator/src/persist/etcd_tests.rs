//! The etcd store against a real three-member etcd on 127.0.0.1 (Debian's `etcd-server`).
//! Without etcd installed these tests say so and pass, unless `TAILSTREAM_REQUIRE_ETCD` is
//! set (`.ci/run` sets it).

use super::*;
use crate::election::{self, LeaderAddress};
use std::sync::Arc;
use std::time::Duration;
use tailstream_launcher::etcd::{EtcdCluster, etcd_installed};

pub(super) async fn local_etcd(dir: &std::path::Path) -> Option<EtcdCluster> {
    if !etcd_installed() {
        assert!(
            std::env::var_os("TAILSTREAM_REQUIRE_ETCD").is_none(),
            "TAILSTREAM_REQUIRE_ETCD is set but etcd is not installed (.ci/install-deps.sh)"
        );
        eprintln!("skipped: etcd is not installed (.ci/install-deps.sh installs etcd-server)");
        return None;
    }
    Some(EtcdCluster::start(3, dir).await.expect("a local etcd"))
}

pub(super) async fn connect(etcd: &EtcdCluster) -> Client {
    Client::connect(etcd.endpoints(), None)
        .await
        .expect("connect")
}

pub(super) fn address(name: &str) -> LeaderAddress {
    LeaderAddress {
        rpc_addr: name.into(),
        peer_addr: name.into(),
        admin_addr: name.into(),
    }
}

/// A store of the cluster `prefix`, led by a freshly elected `name`.
pub(super) async fn leading_store(
    etcd: &EtcdCluster,
    prefix: &str,
    name: &str,
) -> (Arc<EtcdStore>, election::Leadership, Client) {
    let mut client = connect(etcd).await;
    let won = election::campaign(&mut client, prefix, &address(name), 2000)
        .await
        .expect("elected");
    let store = Arc::new(EtcdStore::new(
        client.clone(),
        prefix,
        &etcd.endpoints(),
        Handle::current(),
    ));
    store.fence(won.fence());
    (store, won, client)
}

pub(super) async fn save(
    store: &Arc<EtcdStore>,
    previous: &Metadata,
    next: &Metadata,
) -> Result<(), String> {
    let (store, previous, next) = (store.clone(), previous.clone(), next.clone());
    tokio::task::spawn_blocking(move || store.save(&previous, &next))
        .await
        .unwrap()
}

pub(super) async fn load(store: &Arc<EtcdStore>) -> Result<Metadata, String> {
    let store = store.clone();
    tokio::task::spawn_blocking(move || store.load())
        .await
        .unwrap()
}

pub(super) use crate::persist::test_support::{brokers, config};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_saved_by_a_leader_load_back_in_a_new_store() {
    let dir = tempfile::tempdir().unwrap();
    let Some(etcd) = local_etcd(dir.path()).await else {
        return;
    };
    let (store, _won, client) = leading_store(&etcd, "/t/round-trip", "a").await;
    let mut previous = load(&store).await.unwrap();
    assert_eq!(previous, Metadata::default());
    let mut next = previous.clone();
    let live = brokers(&mut next, 3);
    for step in 0..4 {
        next.create_stream(&format!("s{step}"), 4, config(), &live)
            .unwrap();
        if step == 2 {
            next.delete_stream("s0").unwrap();
            let moved = next.declare_crashed(live[1]).unwrap();
            next.open_recovery(live[1], moved, 5, 1);
        }
        save(&store, &previous, &next).await.unwrap();
        previous = next.clone();
    }
    let fresh = EtcdStore::new(
        client,
        "/t/round-trip",
        &etcd.endpoints(),
        Handle::current(),
    );
    assert_eq!(load(&Arc::new(fresh)).await.unwrap(), next);
    etcd.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leader_writes_nothing_and_steps_down() {
    let dir = tempfile::tempdir().unwrap();
    let Some(etcd) = local_etcd(dir.path()).await else {
        return;
    };
    let prefix = "/t/deposed";
    let (old, old_term, mut old_client) = leading_store(&etcd, prefix, "old").await;
    let base = load(&old).await.unwrap();
    let mut first = base.clone();
    brokers(&mut first, 2);
    save(&old, &base, &first).await.unwrap();
    // The old leader's lease ends behind its back (as when it was paused past it).
    old_client.lease_revoke(old_term.lease_id).await.unwrap();
    let (new, new_term, _client) = leading_store(&etcd, prefix, "new").await;
    assert!(new_term.term > old_term.term, "terms only grow");
    let mut deposed = old.deposed();
    let mut stale = first.clone();
    brokers(&mut stale, 1);
    let refused = save(&old, &first, &stale).await.unwrap_err();
    assert!(refused.contains("no longer the leader"), "{refused}");
    assert!(deposed.wait_for(Option::is_some).await.is_ok());
    assert!(
        save(&old, &first, &stale).await.is_err(),
        "deposed for good"
    );
    assert_eq!(load(&new).await.unwrap(), first);
    etcd.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_this_leader_did_not_see_makes_it_refuse_rather_than_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let Some(etcd) = local_etcd(dir.path()).await else {
        return;
    };
    let prefix = "/t/behind";
    let (store, _won, mut client) = leading_store(&etcd, prefix, "a").await;
    let base = load(&store).await.unwrap();
    let mut next = base.clone();
    let live = brokers(&mut next, 2);
    next.create_stream("s", 2, config(), &live).unwrap();
    save(&store, &base, &next).await.unwrap();
    // Someone else (an operator's etcdctl, a bug) rewrites a placement.
    let key = format!(
        "{prefix}/{}",
        layout::keys::placement(next.streams["s"].id, 0)
    );
    let value = client.get(key.clone(), None).await.unwrap().kvs()[0]
        .value()
        .to_vec();
    client.put(key, value, None).await.unwrap();
    let mut later = next.clone();
    std::sync::Arc::make_mut(later.streams.get_mut("s").unwrap()).placements[0].detail =
        "changed".into();
    let refused = save(&store, &next, &later).await.unwrap_err();
    assert!(refused.contains("changed behind"), "{refused}");
    etcd.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_too_big_for_one_transaction_is_applied_whole_even_after_a_crash_mid_way() {
    let dir = tempfile::tempdir().unwrap();
    let Some(etcd) = local_etcd(dir.path()).await else {
        return;
    };
    let prefix = "/t/big";
    let (store, won, mut client) = leading_store(&etcd, prefix, "a").await;
    let base = load(&store).await.unwrap();
    let mut next = base.clone();
    let live = brokers(&mut next, 4);
    for i in 0..40 {
        next.create_stream(&format!("s{i}"), 16, config(), &live)
            .unwrap();
    }
    // 40 × 17 keys: several transactions.
    assert!(pieces(&layout::changes(&base, &next).unwrap()).len() > 1);
    save(&store, &base, &next).await.unwrap();
    assert_eq!(load(&store).await.unwrap(), next);
    assert!(store.list(&store.intent_dir()).await.unwrap().is_empty());

    // A broker crash moves a quarter of the placements: the leader writes its intent and
    // dies before applying it.
    let mut crashed = next.clone();
    let moved = crashed.declare_crashed(live[2]).unwrap();
    assert!(moved.len() > 100);
    let ops = layout::changes(&next, &crashed).unwrap();
    let fence = won.fence();
    store.write_intent(&fence, &ops).await.unwrap();
    store.commit(&fence, &ops[..10], true).await.unwrap();
    client.lease_revoke(won.lease_id).await.unwrap();

    let (successor, _won, _client) = leading_store(&etcd, prefix, "b").await;
    assert_eq!(
        load(&successor).await.unwrap(),
        crashed,
        "the intent was completed"
    );
    assert!(
        successor
            .list(&successor.intent_dir())
            .await
            .unwrap()
            .is_empty()
    );
    etcd.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_offsets_survive_a_change_of_leader_and_a_deposed_one_commits_nothing() {
    use crate::groups::etcd_offsets::EtcdOffsets;
    use crate::groups::offsets::{CommittedOffsets, OffsetLimits};
    use tailstream_wire::messages::CommittedOffset;
    let dir = tempfile::tempdir().unwrap();
    let Some(etcd) = local_etcd(dir.path()).await else {
        return;
    };
    let prefix = "/t/offsets";
    let limits = OffsetLimits {
        groups_max: 10,
        partitions_per_group_max: 1000,
    };
    let offset = |partition, offset| CommittedOffset {
        topic: "orders/eu".into(),
        partition,
        offset,
        metadata: String::new(),
    };
    let (old, old_term, mut old_client) = leading_store(&etcd, prefix, "old").await;
    let committed = {
        let old = old.clone();
        tokio::task::spawn_blocking(move || {
            let offsets = EtcdOffsets::load(old, limits).unwrap();
            offsets
                .commit("g", vec![offset(0, 5), offset(1, 7)])
                .unwrap();
            // More partitions than one transaction holds.
            offsets
                .commit("g", (0..250).map(|p| offset(p, 100 + p as u64)).collect())
                .unwrap();
            offsets.commit("g", vec![offset(0, 500)]).unwrap();
            offsets
        })
        .await
        .unwrap()
    };
    old_client.lease_revoke(old_term.lease_id).await.unwrap();
    let (new, _term, _client) = leading_store(&etcd, prefix, "new").await;
    let (reloaded, refused) = tokio::task::spawn_blocking(move || {
        let refused = committed.commit("g", vec![offset(0, 9999)]).unwrap_err();
        (EtcdOffsets::load(new, limits).unwrap(), refused)
    })
    .await
    .unwrap();
    assert!(
        refused.to_string().contains("no longer the leader"),
        "{refused}"
    );
    let fetched = reloaded.fetch("g", None);
    assert_eq!(fetched.len(), 250);
    assert_eq!(
        fetched.iter().find(|o| o.partition == 0).unwrap().offset,
        500
    );
    assert_eq!(
        fetched.iter().find(|o| o.partition == 249).unwrap().offset,
        349
    );
    etcd.stop().await;
}

/// Regression: a commit held the offsets' map locked across its etcd write, and the runtime's
/// workers drive that write. A worker reading the map meanwhile (an OffsetFetch, the lag, the
/// metrics) waited for the lock; with every worker waiting, the write never finished: the
/// leader stopped answering, its election lease keep-alive too, with no word in its log.
/// One worker here (as on a one-core machine), reading the map as often as it can.
#[test]
fn a_commit_finishes_while_every_worker_reads_the_committed_offsets() {
    use crate::groups::etcd_offsets::EtcdOffsets;
    use crate::groups::offsets::{CommittedOffsets, OffsetLimits};
    use tailstream_wire::messages::CommittedOffset;
    let (finished, done) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let Some(etcd) = local_etcd(dir.path()).await else {
                return;
            };
            let (store, _leadership, _client) = leading_store(&etcd, "/t/stall", "one").await;
            let limits = OffsetLimits {
                groups_max: 10,
                partitions_per_group_max: 10,
            };
            let offsets = tokio::task::spawn_blocking(move || EtcdOffsets::load(store, limits))
                .await
                .unwrap()
                .unwrap();
            let offsets = Arc::new(offsets);
            let committer = {
                let offsets = offsets.clone();
                tokio::task::spawn_blocking(move || {
                    for i in 0..200 {
                        let offset = CommittedOffset {
                            topic: "t".into(),
                            partition: 0,
                            offset: i,
                            metadata: String::new(),
                        };
                        offsets.commit("g", vec![offset]).unwrap();
                    }
                })
            };
            // On the worker (a spawned task, as the lag publisher and fetches are), reading at
            // moments a timer picks, as often as every 200 µs.
            let reader = {
                let offsets = offsets.clone();
                tokio::spawn(async move {
                    while !committer.is_finished() {
                        let _ = offsets.fetch("g", None);
                        tokio::time::sleep(Duration::from_micros(200)).await;
                    }
                    committer.await.unwrap();
                })
            };
            reader.await.unwrap();
            assert_eq!(offsets.fetch("g", None)[0].offset, 199);
            etcd.stop().await;
        });
        let _ = finished.send(());
    });
    done.recv_timeout(Duration::from_secs(60))
        .expect("200 commits finish in a minute while the one worker reads the offsets");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_store_cluster_migrates_whole_and_a_prefix_with_metadata_is_refused() {
    use crate::groups::etcd_offsets::EtcdOffsets;
    use crate::groups::offsets::{CommittedOffsets, OffsetLimits, OffsetStore};
    use crate::persist::MetadataFile;
    use tailstream_wire::messages::CommittedOffset;
    let dir = tempfile::tempdir().unwrap();
    let Some(etcd) = local_etcd(&dir.path().join("etcd")).await else {
        return;
    };
    let from = dir.path().join("coordinator");
    let limits = OffsetLimits {
        groups_max: 10,
        partitions_per_group_max: 100,
    };
    let mut metadata = Metadata::default();
    let live = brokers(&mut metadata, 3);
    metadata
        .create_stream("orders", 4, config(), &live)
        .unwrap();
    let moved = metadata.declare_crashed(live[0]).unwrap();
    metadata.open_recovery(live[0], moved, 9, 1);
    MetadataFile::new(&from)
        .save(&Metadata::default(), &metadata)
        .unwrap();
    let committed = CommittedOffset {
        topic: "orders".into(),
        partition: 3,
        offset: 77,
        metadata: "m".into(),
    };
    OffsetStore::open(&from.join("groups"), limits)
        .unwrap()
        .commit("readers", vec![committed.clone()])
        .unwrap();

    let endpoints = etcd.endpoints();
    let migrated = crate::migrate::migrate(&from, &endpoints, "/t/migrated", limits)
        .await
        .unwrap();
    assert_eq!(
        (migrated.streams, migrated.groups, migrated.offsets),
        (1, 1, 1)
    );
    let (store, won, mut client) = leading_store(&etcd, "/t/migrated", "after").await;
    assert_eq!(load(&store).await.unwrap(), metadata);
    let offsets = tokio::task::spawn_blocking(move || EtcdOffsets::load(store, limits).unwrap())
        .await
        .unwrap();
    assert_eq!(offsets.fetch("readers", None), vec![committed]);
    won.resign(&mut client).await;
    let again = crate::migrate::migrate(&from, &endpoints, "/t/migrated", limits).await;
    let refused = again.unwrap_err();
    assert!(refused.contains("already holds metadata"), "{refused}");
    etcd.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standbys_warm_copy_holds_every_write_of_the_leader_it_replaces() {
    use crate::groups::etcd_offsets::EtcdOffsets;
    use crate::groups::offsets::{CommittedOffsets, OffsetLimits};
    use crate::persist::EtcdMirror;
    use tailstream_wire::messages::CommittedOffset;
    let dir = tempfile::tempdir().unwrap();
    let Some(etcd) = local_etcd(dir.path()).await else {
        return;
    };
    let prefix = "/t/warm";
    let limits = OffsetLimits {
        groups_max: 10,
        partitions_per_group_max: 1000,
    };
    let (old, old_term, mut old_client) = leading_store(&etcd, prefix, "old").await;
    // Another cluster under a prefix that starts with this one's name is not followed.
    let (_other, _other_term, _) = leading_store(&etcd, "/t/warm2", "other").await;
    let mut standby_client = connect(&etcd).await;
    let mirror = EtcdMirror::start(standby_client.clone(), prefix);
    let base = load(&old).await.unwrap();
    let mut last = base.clone();
    let live = brokers(&mut last, 3);
    save(&old, &base, &last).await.unwrap();
    // The standby campaigns (and waits) while the old leader keeps changing things.
    let campaign = tokio::spawn(async move {
        let won = election::campaign(&mut standby_client, prefix, &address("new"), 2000)
            .await
            .expect("elected");
        (won, standby_client)
    });
    for step in 0..30 {
        let mut next = last.clone();
        next.create_stream(&format!("s{step}"), 16, config(), &live)
            .unwrap();
        if step == 20 {
            // A change too big for one transaction (an intent, applied, then cleared).
            let moved = next.declare_crashed(live[1]).unwrap();
            next.open_recovery(live[1], moved, 5, 1);
        }
        save(&old, &last, &next).await.unwrap();
        last = next;
    }
    let offsets = {
        let old = old.clone();
        tokio::task::spawn_blocking(move || {
            let offsets = EtcdOffsets::load(old, limits).unwrap();
            let committed = (0..150)
                .map(|partition| CommittedOffset {
                    topic: "t".into(),
                    partition,
                    offset: 7 + partition as u64,
                    metadata: String::new(),
                })
                .collect();
            offsets.commit("g", committed).unwrap();
            offsets.snapshot()
        })
        .await
        .unwrap()
    };
    assert_eq!(mirror.leader().map(|a| a.rpc_addr).as_deref(), Some("old"));
    // Gone without a word, right after its last write.
    old_client.lease_revoke(old_term.lease_id).await.unwrap();
    let (won, client) = campaign.await.unwrap();
    let copy = mirror
        .takeover_copy(won.key.key(), won.term, Duration::from_secs(5))
        .await
        .expect("the warm copy is current at the takeover");
    let store = Arc::new(EtcdStore::new(
        client,
        prefix,
        &etcd.endpoints(),
        Handle::current(),
    ));
    store.fence(won.fence());
    let warm = store.load_warm(&copy).unwrap();
    assert_eq!(
        warm, last,
        "the warm copy holds the old leader's last write"
    );
    assert_eq!(load(&store).await.unwrap(), last, "as etcd does");
    let warm_offsets = EtcdOffsets::from_copy(store.clone(), &copy, limits).unwrap();
    assert_eq!(warm_offsets.snapshot(), offsets);
    // The copy's revisions are etcd's: a change from the warm load is accepted.
    let mut next = warm.clone();
    next.create_stream("fresh", 2, config(), &[live[0], live[2]])
        .unwrap();
    save(&store, &warm, &next).await.unwrap();
    assert_eq!(mirror.leader().map(|a| a.rpc_addr).as_deref(), Some("new"));
    // Never current for a term it does not hold the key of.
    let stale = mirror
        .takeover_copy(won.key.key(), won.term + 1, Duration::from_millis(200))
        .await;
    assert!(stale.is_none());
    etcd.stop().await;
}
