//! A cluster of 10,000 streams of 16 streamlets (160,000 placements) on a real etcd: saved
//! whole, changed one object at a time, hit by a broker crash that moves a fifth of it, and
//! taken over by a standby from its warm copy; each step read back whole and timed (the times
//! are printed, not asserted: CI machines differ).

use super::etcd_tests::{address, brokers, config, connect, leading_store, load, local_etcd, save};
use super::*;
use crate::election;
use crate::persist::EtcdMirror;
use std::sync::Arc;
use std::time::{Duration, Instant};

const STREAMS: usize = 10_000;
const STREAMLETS: u32 = 16;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_streams_of_sixteen_streamlets_save_change_crash_and_fail_over() {
    let dir = tempfile::tempdir().unwrap();
    let Some(etcd) = local_etcd(dir.path()).await else {
        return;
    };
    let prefix = "/t/scale";
    let (store, old_term, mut old_client) = leading_store(&etcd, prefix, "old").await;
    let mut standby_client = connect(&etcd).await;
    let mirror = EtcdMirror::start(standby_client.clone(), prefix);
    let empty = load(&store).await.unwrap();
    let mut registered = empty.clone();
    let live = brokers(&mut registered, 5);
    save(&store, &empty, &registered).await.unwrap();

    let mut whole = registered.clone();
    let mut replicated = config();
    replicated.replicas = 2;
    for i in 0..STREAMS {
        whole
            .create_stream(
                &format!("stream-{i:05}"),
                STREAMLETS,
                replicated.clone(),
                &live,
            )
            .unwrap();
    }
    let keys = layout::changes(&registered, &whole).unwrap().len();
    let started = Instant::now();
    save(&store, &registered, &whole).await.unwrap();
    eprintln!("saved {keys} keys in {:?}", started.elapsed());

    // One more stream writes its own keys only.
    let mut one_more = whole.clone();
    one_more
        .create_stream("one-more", STREAMLETS, replicated.clone(), &live)
        .unwrap();
    let started = Instant::now();
    let written = layout::changes(&whole, &one_more).unwrap().len();
    let diffed = started.elapsed();
    let started = Instant::now();
    let copied = whole.clone();
    eprintln!(
        "in memory: a change found in {diffed:?}, the metadata copied in {:?}",
        started.elapsed()
    );
    drop(copied);
    assert!(written <= STREAMLETS as usize + 3, "{written} keys written");
    let started = Instant::now();
    save(&store, &whole, &one_more).await.unwrap();
    eprintln!(
        "a stream created ({written} keys) in {:?}",
        started.elapsed()
    );

    // A broker crash moves every placement it owned: one change, too big for a transaction.
    let mut crashed = one_more.clone();
    let moved = crashed.declare_crashed(live[4]).unwrap();
    assert!(
        moved.len() > STREAMS * STREAMLETS as usize / 6,
        "{}",
        moved.len()
    );
    let moved_count = moved.len();
    crashed.open_recovery(live[4], moved, 5, 1);
    let written = layout::changes(&one_more, &crashed).unwrap().len();
    let started = Instant::now();
    save(&store, &one_more, &crashed).await.unwrap();
    eprintln!(
        "a broker crash ({moved_count} streamlets moved, {written} keys) saved in {:?}",
        started.elapsed()
    );

    // The leader goes; a standby takes over from its warm copy.
    let campaign = tokio::spawn(async move {
        let won = election::campaign(&mut standby_client, prefix, &address("new"), 2000)
            .await
            .unwrap();
        (won, standby_client)
    });
    old_client.lease_revoke(old_term.lease_id).await.unwrap();
    let (won, client) = campaign.await.unwrap();
    let started = Instant::now();
    let copy = mirror
        .takeover_copy(won.key.key(), won.term, Duration::from_secs(60))
        .await
        .expect("the warm copy is current");
    let new = Arc::new(EtcdStore::new(
        client,
        prefix,
        &etcd.endpoints(),
        Handle::current(),
    ));
    new.fence(won.fence());
    let warm = new.load_warm(&copy).unwrap();
    let warm_took = started.elapsed();
    assert_eq!(warm, crashed, "the warm copy holds it all");
    let started = Instant::now();
    let cold = load(&new).await.unwrap();
    let cold_took = started.elapsed();
    assert_eq!(cold, crashed, "etcd holds it all");
    eprintln!(
        "taken over: from the warm copy in {warm_took:?}, reading every key from etcd in {cold_took:?}"
    );
    // The new leader changes it.
    let mut after = cold.clone();
    after
        .create_stream("after", STREAMLETS, replicated.clone(), &live[..4])
        .unwrap();
    save(&new, &cold, &after).await.unwrap();
    assert_eq!(load(&new).await.unwrap(), after);
    etcd.stop().await;
}
