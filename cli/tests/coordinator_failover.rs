//! Coordinators on etcd through real processes: three coordinators (one leads, two stand by)
//! on a local three-member etcd, brokers, producers and a consumer. The leader is killed with
//! SIGKILL under load; a standby must take over, brokers and clients must follow it, a broker
//! crash after that must be recovered by the new leader, and every acknowledged record must be
//! read back exactly once, in per-log order.

#![allow(clippy::unwrap_used)] // tests may unwrap freely (see clippy.toml)

mod common;

use common::load::{Load, RECORDS_PER_PRODUCER_MAX};
use common::{TEST_TIMEOUT, TestCluster, recovered_stream, wait_until_serving};
use std::time::{Duration, Instant};
use tailstream_net::{RpcClient, RpcClientConfig, RpcError};
use tailstream_wire::messages::{
    AssignStreamletsRequest, CoordinatorInfo, Empty, ListBrokersResponse, ListReplicasRequest,
    ListReplicasResponse, leader_named_in,
};
use tailstream_wire::{CoordinatorTerm, Opcode, Status};

/// Each test runs a three-member etcd, three coordinators, brokers and a load: two at once
/// overload a 2-core machine (etcd members miss heartbeats, leadership flaps), so they take
/// turns.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Waits until a coordinator answers with `brokers` live brokers; returns how long it took.
async fn wait_for_a_leader(test: &TestCluster, brokers: usize) -> Duration {
    let started = Instant::now();
    let client = test.client();
    loop {
        let alive = client
            .list_brokers()
            .await
            .map(|b| b.iter().filter(|b| b.alive).count());
        if alive.is_ok_and(|alive| alive >= brokers) {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no coordinator led with {brokers} live brokers within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A standby answers `NotLeader` naming `leader`'s listener of the same kind, on its client
/// and its peer listener (within a few seconds: its copy of etcd learns the leader by a watch).
async fn standby_names_the_leader(standby: &tailstream_launcher::Proc, leader: &CoordinatorInfo) {
    let started = Instant::now();
    for (addr, expected) in [
        (standby.rpc_addr, &leader.rpc_addr),
        (standby.peer_addr, &leader.peer_addr),
    ] {
        loop {
            // Refused while it changes from leading to standing by (its ports are rebound).
            let answer =
                match RpcClient::connect(&addr.to_string(), RpcClientConfig::default()).await {
                    Ok(client) => client
                        .call::<_, ListBrokersResponse>(Opcode::ListBrokers, &Empty {})
                        .await
                        .map(|_| ()),
                    Err(refused) => Err(refused),
                };
            let named = match &answer {
                Err(RpcError::Status {
                    status: Status::NotLeader,
                    message,
                }) => leader_named_in(message),
                Err(RpcError::Connection { .. }) => None,
                other => panic!("a standby at {addr} answered {other:?}"),
            };
            if named == Some(expected.as_str()) {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the standby at {addr} names {named:?}, not {expected}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Orders of `stale` (an earlier leader's term) sent to every live broker, each of which would
/// do harm if obeyed: an assignment at a far newer version with no streamlets (drop them all),
/// and a listing that fences every live broker. Each must be refused for its term.
async fn stale_orders_are_refused(test: &TestCluster, stale: CoordinatorTerm) {
    let brokers = test.client().list_brokers().await.unwrap();
    let live: Vec<_> = brokers.iter().filter(|b| b.alive && !b.crashed).collect();
    // A new leader counts every broker alive from its start, before any heartbeat: wait
    // until each has seen a newer term (as it has by the new term's first hand-over, which
    // waits a lease), else the order below would be taken, and do its harm.
    let started = Instant::now();
    for broker in &live {
        let admin = broker.admin_addr.parse().unwrap();
        while common::hostile::metric(admin, "tailstream_coordinator_term_seen", &[]).await
            <= stale.0 as f64
        {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{} saw no term after {stale} within 10 s",
                broker.server_id
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    for broker in &live {
        let client = RpcClient::connect(&broker.peer_addr, RpcClientConfig::default())
            .await
            .unwrap();
        let assign = AssignStreamletsRequest {
            term: stale,
            target: broker.server_id,
            version: u64::MAX / 4,
            added_since: None,
            assignments: Vec::new(),
            brokers: Vec::new(),
        };
        let fence = ListReplicasRequest {
            term: stale,
            primary: None,
            fence: live.iter().map(|b| b.server_id).collect(),
        };
        let refusals = [
            client
                .call::<_, Empty>(Opcode::AssignStreamlets, &assign)
                .await
                .err(),
            client
                .call::<_, ListReplicasResponse>(Opcode::ListReplicas, &fence)
                .await
                .err(),
        ];
        for refusal in refusals {
            match refusal {
                Some(RpcError::Status {
                    status: Status::StaleTerm,
                    ..
                }) => {}
                other => panic!("{} took an order of {stale}: {other:?}", broker.server_id),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_is_replaced_brokers_follow_and_nothing_acked_is_lost() {
    let _turn = ONE_AT_A_TIME.lock().await;
    tokio::time::timeout(TEST_TIMEOUT, async {
        let Some(mut test) = TestCluster::start_on_etcd(4, "", 3).await else {
            return;
        };
        test.client()
            .create_stream("steady", 4, recovered_stream(&test))
            .await
            .unwrap();
        let load = Load::start(&test, "steady", 2);
        load.wait_for_acks(20_000).await;
        let before = test.client().describe_leadership().await.unwrap();
        assert_eq!(before.store, "etcd");
        assert_eq!(before.standbys.len(), 2, "two standbys: {before:?}");
        // A standby binds no admin port until it leads, so that port of the next in line may be taken
        // meanwhile: elected, it must step down and stand by again, and the one after it lead.
        // (Whichever coordinator leads now: on a loaded machine it need not be the first.)
        let leader: std::net::SocketAddr = before.leader.rpc_addr.parse().unwrap();
        let squatted = test
            .cluster
            .coordinators()
            .position(|c| c.rpc_addr != leader)
            .unwrap();
        let (next, next_admin) = {
            let standby = test.cluster.coordinators().nth(squatted).unwrap();
            (standby.rpc_addr.to_string(), standby.admin_addr)
        };
        // Already taken by another process (an outgoing connection's ephemeral port): the
        // same situation, not of this test's making.
        let squatter = std::net::TcpListener::bind(next_admin).ok();
        test.cluster.kill_coordinator_at(leader).await.unwrap();
        // Until a standby leads (seconds: its etcd lease must run out), producers are acked:
        // the brokers serve on without a leader, into 64 KiB segments they keep rolling to
        // that no coordinator saved.
        let acked = || load.acked.load(std::sync::atomic::Ordering::Relaxed);
        let capped = 2 * RECORDS_PER_PRODUCER_MAX;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let (first, since) = (acked(), Instant::now());
        tokio::time::sleep(Duration::from_secs(1)).await;
        let second = acked();
        eprintln!(
            "{} records acked in the {:?} from 300 ms after the leader's kill",
            second - first,
            since.elapsed()
        );
        assert!(
            second > first || second >= capped,
            "no record was acked in the second after the leader's kill"
        );
        let took = wait_for_a_leader(&test, 4).await;
        eprintln!("a standby led, with every broker heartbeating to it, {took:?} after the kill");
        let after = test.client().describe_leadership().await.unwrap();
        assert!(after.term > before.term, "{after:?} after {before:?}");
        assert_ne!(
            after.leader.rpc_addr, next,
            "it leads without its admin port"
        );
        let squatted_proc = match squatted {
            0 => &mut test.cluster.coordinator,
            n => &mut test.cluster.standbys[n - 1],
        };
        assert!(
            !squatted_proc.has_exited(),
            "a coordinator that could not bind gave up instead of standing by again"
        );
        drop(squatter);
        // It took over from its warm copy of etcd, not by reading every key.
        let new_admin = after.leader.admin_addr.parse().unwrap();
        let takeovers = "tailstream_coordinator_takeover_load_seconds_count";
        let warm = common::hostile::metric(new_admin, takeovers, &[("from", "warm")]).await;
        let cold = common::hostile::metric(new_admin, takeovers, &[("from", "etcd")]).await;
        assert!(warm >= 1.0 && cold == 0.0, "warm {warm}, from etcd {cold}");
        // The standby left names the new leader on both its listeners, and a client given
        // only the standby's address works through it.
        let standby = test
            .cluster
            .coordinators()
            .find(|c| c.rpc_addr != leader && c.rpc_addr.to_string() != after.leader.rpc_addr)
            .unwrap();
        standby_names_the_leader(standby, &after.leader).await;
        let through_standby = tailstream_client::Client::builder(&standby.rpc_addr.to_string())
            .from_config(&test.config)
            .build();
        let brokers = through_standby.list_brokers().await.unwrap();
        assert_eq!(brokers.iter().filter(|b| b.alive).count(), 4);
        assert!(
            before
                .standbys
                .iter()
                .any(|s| s.rpc_addr == after.leader.rpc_addr),
            "a standby leads now: {after:?}"
        );
        // The killed leader's orders, had it sent any late, change nothing: every broker has
        // seen the new term by now (it heartbeats to the new leader).
        stale_orders_are_refused(&test, before.term).await;
        // The new leader creates streams and recovers crashes.
        test.client()
            .create_stream("after", 2, recovered_stream(&test))
            .await
            .unwrap();
        let acked = load.acked.load(std::sync::atomic::Ordering::Relaxed);
        load.wait_for_acks(acked + 10_000).await;
        let victim = test.owner_of("steady", 0).await;
        test.cluster.kill_broker(victim).await;
        let serving = wait_until_serving(&test, "steady").await;
        eprintln!("a broker crash under the new leader: serving again after {serving:?}");
        let acked = load.finish_and_check().await;
        assert!(acked > 30_000);
        test.stop().await;
    })
    .await
    .unwrap();
}

/// The leader paused past its etcd lease (SIGSTOP), then woken: a standby leads meanwhile, and
/// the woken one must answer nothing but pings (it renews no broker's lease), step down, and
/// write nothing; the load runs on throughout and loses nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_paused_past_its_lease_wakes_deposed_and_changes_nothing() {
    let _turn = ONE_AT_A_TIME.lock().await;
    tokio::time::timeout(TEST_TIMEOUT, async {
        let Some(test) = TestCluster::start_on_etcd(3, "", 2).await else {
            return;
        };
        test.client()
            .create_stream("paused", 3, recovered_stream(&test))
            .await
            .unwrap();
        let load = Load::start(&test, "paused", 2);
        load.wait_for_acks(10_000).await;
        let paused = test.cluster.coordinator.rpc_addr;
        test.cluster.signal_coordinator("STOP").unwrap();
        let took = wait_for_a_leader(&test, 3).await;
        // (As a client sees it: its first call waits out its timeout on the paused leader.)
        eprintln!("a client reached the new leader {took:?} after the pause");
        test.cluster.signal_coordinator("CONT").unwrap();
        // Woken, it refuses at once (its lease ran out on the boot clock while it slept), or
        // its listeners are closing as it steps down.
        let config = RpcClientConfig {
            request_timeout_ms: 2_000,
            ..RpcClientConfig::default()
        };
        let woken = match RpcClient::connect(&paused.to_string(), config).await {
            Ok(woken) => woken
                .call::<_, ListBrokersResponse>(Opcode::ListBrokers, &Empty {})
                .await
                .map(|_| ()),
            Err(refused) => Err(refused),
        };
        match woken {
            Ok(()) => panic!("a deposed leader answered"),
            Err(RpcError::Status {
                status: Status::NotLeader,
                ..
            })
            | Err(RpcError::Connection { .. }) => {}
            Err(other) => panic!("the woken leader answered {other}"),
        }
        // Then it stands by, naming the new leader.
        let leader = test.client().describe_leadership().await.unwrap().leader;
        assert_ne!(leader.rpc_addr, paused.to_string());
        standby_names_the_leader(&test.cluster.coordinator, &leader).await;
        // Producers go on (the load is bounded: at most every record it has).
        let acked = load.acked.load(std::sync::atomic::Ordering::Relaxed);
        load.wait_for_acks((acked + 5_000).min(2 * RECORDS_PER_PRODUCER_MAX))
            .await;
        load.finish_and_check().await;
        test.stop().await;
    })
    .await
    .unwrap();
}

/// Whether no coordinator leads: each answers "not leading", or nothing listens there.
async fn nobody_leads(test: &TestCluster) -> bool {
    let coordinators = std::iter::once(&test.cluster.coordinator).chain(&test.cluster.standbys);
    let config = RpcClientConfig {
        connect_timeout_ms: 1_000,
        request_timeout_ms: 1_000,
        ..RpcClientConfig::default()
    };
    for coordinator in coordinators {
        let addr = coordinator.rpc_addr.to_string();
        let Ok(client) = RpcClient::connect(&addr, config).await else {
            continue;
        };
        match client
            .call::<_, ListBrokersResponse>(Opcode::ListBrokers, &Empty {})
            .await
        {
            Err(RpcError::Status {
                status: Status::NotLeader,
                ..
            }) => {}
            Ok(_) => return false,
            Err(error) => panic!("{addr}: {error}"),
        }
    }
    true
}

/// Segments the brokers committed while no coordinator led, before any saved them.
async fn unsaved_leaderless_commits(test: &TestCluster) -> f64 {
    let mut total = 0.0;
    for broker in test.cluster.brokers() {
        total += common::hostile::metric(
            broker.admin_addr,
            "tailstream_commits_unsaved_leaderless_total",
            &[],
        )
        .await;
    }
    total
}

/// Item 5's etcd faults. One member down changes nothing (the same term leads). Quorum lost:
/// no coordinator leads (none can change anything), yet brokers keep serving what they own
/// and producers keep being acked (the leader that renewed their leases said it leads no more,
/// or its address went quiet, so their leases run on: `broker::lease`), into segments no
/// coordinator saved; an owner then killed loses none of them: quorum back, a leader serves
/// again, recovers it, and every acked record is read back exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_etcd_quorum_nobody_leads_and_producers_are_still_acked() {
    let _turn = ONE_AT_A_TIME.lock().await;
    tokio::time::timeout(TEST_TIMEOUT, async {
        let Some(mut test) = TestCluster::start_on_etcd(4, "", 2).await else {
            return;
        };
        // Segments of 64 KiB: the load rolls its logs to new ones while nobody leads, and
        // those (never saved by a coordinator) must be acked too.
        let stream = recovered_stream(&test);
        test.client()
            .create_stream("quorum", 3, stream)
            .await
            .unwrap();
        let load = Load::start(&test, "quorum", 2);
        load.wait_for_acks(5_000).await;
        // Killed while nobody leads (owners do not move without a leader).
        let victim = test.owner_of("quorum", 0).await;
        let acked = || load.acked.load(std::sync::atomic::Ordering::Relaxed);
        let capped = 2 * RECORDS_PER_PRODUCER_MAX;

        // One member down: nothing changes.
        let before = test.client().describe_leadership().await.unwrap();
        test.etcd.as_mut().unwrap().kill(0).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let during = test.client().describe_leadership().await.unwrap();
        assert_eq!(
            during.term, before.term,
            "one etcd member down changed the leader"
        );
        let etcd = test.etcd.as_mut().unwrap();
        etcd.restart(0).await.unwrap();
        etcd.wait_healthy(Duration::from_secs(30)).await.unwrap();

        // Quorum lost: past the election lease, nobody leads.
        etcd.kill(0).await;
        etcd.kill(1).await;
        let lost = Instant::now();
        // The leader's etcd lease outlives the quorum for a while (etcd's leader renews leases
        // until it notices the quorum gone), then it steps down.
        while !nobody_leads(&test).await {
            assert!(
                lost.elapsed() < Duration::from_secs(15),
                "a coordinator still led 15 s after etcd lost its quorum"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        eprintln!(
            "nobody leads {:?} after etcd lost its quorum",
            lost.elapsed()
        );
        // Past every short lease (`broker.lease_ms`) the last leader granted.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let unsaved_before = unsaved_leaderless_commits(&test).await;
        let since = Instant::now();
        // Every second: acks do not stop once the segments saved before the outage fill.
        for second in 0..3 {
            let first = acked();
            tokio::time::sleep(Duration::from_secs(1)).await;
            let next = acked();
            eprintln!(
                "without etcd quorum for {:?}: {} records acked in second {second}",
                lost.elapsed(),
                next - first,
            );
            assert!(
                next > first || next >= capped,
                "no record was acked in second {second} of {:?} while nobody led",
                since.elapsed()
            );
        }
        if acked() < capped {
            let unsaved = unsaved_leaderless_commits(&test).await - unsaved_before;
            eprintln!("{unsaved} segments committed before any coordinator saved them");
            assert!(
                unsaved > 0.0,
                "no segment was committed unsaved: the load did not roll while nobody led"
            );
        }
        assert!(
            nobody_leads(&test).await,
            "a coordinator led without etcd quorum"
        );
        // An owner whose logs hold such segments crashes before any leader saved them: the
        // next leader's recovery must find every acknowledged record in them (the checker
        // below reads each back exactly once).
        let victim_admin = test.cluster.broker(victim).unwrap().admin_addr;
        let victims_unsaved = common::hostile::metric(
            victim_admin,
            "tailstream_commits_unsaved_leaderless_total",
            &[],
        )
        .await;
        eprintln!("the owner killed committed {victims_unsaved} segments unsaved");
        assert!(
            victims_unsaved > 0.0 || acked() >= capped,
            "the owner to kill committed no segment unsaved"
        );
        test.cluster.kill_broker(victim).await;
        tokio::time::sleep(Duration::from_millis(500)).await;

        // Quorum back: a leader serves again, recovers the crash, and the load goes on to
        // the end.
        let etcd = test.etcd.as_mut().unwrap();
        etcd.restart(0).await.unwrap();
        etcd.restart(1).await.unwrap();
        etcd.wait_healthy(Duration::from_secs(30)).await.unwrap();
        let took = wait_for_a_leader(&test, 3).await;
        eprintln!("etcd quorum back: a coordinator led with every live broker {took:?} later");
        let serving = wait_until_serving(&test, "quorum").await;
        eprintln!(
            "the broker killed without a leader: its streamlets serve again {serving:?} later"
        );
        load.wait_for_acks((acked() + 5_000).min(capped)).await;
        load.finish_and_check().await;
        test.stop().await;
    })
    .await
    .unwrap();
}

/// Item 5: the leader killed in the middle of a broker recovery. The broker's crash is
/// declared and its recovery under way (declared within milliseconds: nothing listens at its
/// address any more) when the leader dies; the new leader finds the recovery saved, plans it
/// again, proves the crashed broker gone with its own probes (so it waits out no leaderless
/// lease), and serves the streamlets again; nothing acked is lost or read twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_killed_during_a_recovery_leaves_it_to_the_next_who_completes_it() {
    let _turn = ONE_AT_A_TIME.lock().await;
    tokio::time::timeout(TEST_TIMEOUT, async {
        let Some(mut test) = TestCluster::start_on_etcd(4, "", 2).await else {
            return;
        };
        test.client()
            .create_stream("midway", 4, recovered_stream(&test))
            .await
            .unwrap();
        let load = Load::start(&test, "midway", 2);
        load.wait_for_acks(10_000).await;
        let before = test.client().describe_leadership().await.unwrap();
        let leader: std::net::SocketAddr = before.leader.rpc_addr.parse().unwrap();
        let victim = test.owner_of("midway", 0).await;
        let killed = Instant::now();
        test.cluster.kill_broker(victim).await;
        // Declared on two refused probes, a few milliseconds after the first report; the
        // rebuild takes several hundred.
        tokio::time::sleep(Duration::from_millis(150)).await;
        test.cluster.kill_coordinator_at(leader).await.unwrap();
        wait_until_serving(&test, "midway").await;
        eprintln!(
            "leader killed 150 ms into a broker recovery: serving again {:?} after the broker's kill",
            killed.elapsed()
        );
        let after = test.client().describe_leadership().await.unwrap();
        assert!(after.term > before.term, "{after:?} after {before:?}");
        let acked = load.acked.load(std::sync::atomic::Ordering::Relaxed);
        load.wait_for_acks((acked + 5_000).min(2 * RECORDS_PER_PRODUCER_MAX))
            .await;
        load.finish_and_check().await;
        test.stop().await;
    })
    .await
    .unwrap();
}

/// Kafka's own clients through a leader kill: an idempotent kafka-python producer and a
/// consumer group (whose calls brokers forward to whichever coordinator leads) run on while
/// the leader is killed. Every acknowledged record is in the stream exactly once, in order;
/// the group reads every one (at least once: a member whose generation died with the old
/// leader's memory re-reads from its last commit, as against Kafka), and its last commit,
/// made through the new leader, leaves the group nothing to read again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_clients_and_a_consumer_group_carry_on_through_a_leader_kill() {
    use common::kafka::{CLIENTS_PY, Seen, bootstrap, kafka_python, parse, required, run};
    let Some(python) = required(kafka_python(), "kafka-python") else {
        return;
    };
    let _turn = ONE_AT_A_TIME.lock().await;
    tokio::time::timeout(TEST_TIMEOUT, async {
        let Some(mut test) = TestCluster::start_on_etcd(3, "", 3).await else {
            return;
        };
        let bootstrap = bootstrap(&test);
        let mut config = test.stream_config();
        config.replicas = 1;
        test.client()
            .create_stream("orders", 2, config)
            .await
            .unwrap();
        let client = |args: &[&str]| {
            let (python, mut all) = (python.clone(), vec![CLIENTS_PY.to_string()]);
            all.extend(args.iter().map(|a| a.to_string()));
            tokio::spawn(async move {
                let args: Vec<&str> = all.iter().map(String::as_str).collect();
                parse(&run(&python, &args, b"").await)
            })
        };
        let producer = client(&["produce", &bootstrap, "orders", "12000", "3000"]);
        let member = client(&["consume", &bootstrap, "orders", "readers", "0", "10"]);
        // The kill comes once the group has a member and a commit: a generation and its
        // offsets cross the failover.
        let coordinator = tailstream_stubs::CoordinatorClient::new(
            &test.coordinator(),
            tailstream_stubs::coordinator::client_rpc_config(&test.config.client, 2_000),
        );
        let started = Instant::now();
        loop {
            let described = coordinator.describe_consumer_groups().await;
            let joined = described.as_ref().is_ok_and(|d| {
                d.groups
                    .iter()
                    .any(|g| g.group == "readers" && g.members > 0)
                    && d.lag.iter().any(|l| l.group == "readers")
            });
            if joined {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the group never joined and committed: {described:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let before = test.client().describe_leadership().await.unwrap();
        let leader = before.leader.clone();
        let killed = Instant::now();
        test.cluster
            .kill_coordinator_at(leader.rpc_addr.parse().unwrap())
            .await
            .unwrap();
        let acked = producer.await.unwrap();
        assert_eq!(acked.len(), 12_000, "every record acknowledged");
        eprintln!("producer done {:?} after the kill", killed.elapsed());
        let read = member.await.unwrap();
        eprintln!("member done {:?} after the kill", killed.elapsed());
        let acked_set: std::collections::HashSet<&Seen> = acked.iter().collect();
        let read_set: std::collections::HashSet<&Seen> = read.iter().collect();
        let missing = acked.iter().filter(|r| !read_set.contains(r)).count();
        let unknown = read.iter().filter(|r| !acked_set.contains(r)).count();
        assert_eq!(
            (missing, unknown),
            (0, 0),
            "(missing, unknown) read by the group"
        );
        eprintln!(
            "the group read {} records for {} acknowledged ({} again after the failover)",
            read.len(),
            acked.len(),
            read.len() - read_set.len()
        );
        let after = test.client().describe_leadership().await.unwrap();
        assert!(after.term > before.term && after.leader.rpc_addr != leader.rpc_addr);
        let again = client(&["consume", &bootstrap, "orders", "readers", "0", "4"])
            .await
            .unwrap();
        eprintln!("second member done {:?} after the kill", killed.elapsed());
        assert!(again.is_empty(), "the group read {} again", again.len());
        let lag = coordinator.describe_consumer_groups().await.unwrap().lag;
        let readers: Vec<_> = lag.iter().filter(|l| l.group == "readers").collect();
        assert!(
            !readers.is_empty() && readers.iter().all(|l| l.lag_records == Some(0)),
            "the group's commits leave records unread: {readers:?}"
        );
        let audit = client(&["consume", &bootstrap, "orders", "audit", "0", "4"])
            .await
            .unwrap();
        common::kafka::check_exactly_once_in_order(&acked, &audit);
        test.stop().await;
    })
    .await
    .unwrap();
}
