//! Leadership on etcd: coordinators campaign under `{prefix}/leader` (etcd's election API) on
//! a lease of `election_lease_ms`; the winner leads until its lease is lost (not renewed in
//! time: it was paused, or cut from etcd) or a write finds it deposed, then steps down and
//! campaigns again. Losing coordinators wait in the campaign.
//!
//! Safety does not rest on this shell: every metadata write compares the leader key's create
//! revision ([`crate::persist::EtcdStore`]), so a deposed leader that still believes it leads
//! writes nothing.

use crate::leader_lease::LeaderLease;
use crate::persist::etcd::Fence;
use etcd_client::{Client, LeaderKey, ResignOptions};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tailstream_net::clock::BootInstant;
use tokio::sync::watch;

/// What a leader publishes as its election value: where to reach it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaderAddress {
    pub rpc_addr: String,
    pub peer_addr: String,
    pub admin_addr: String,
}

/// A won election.
#[derive(Debug)]
pub struct Leadership {
    pub key: LeaderKey,
    pub lease_id: i64,
    /// The leader key's create revision: this leadership's term. Later leaders have higher
    /// ones.
    pub term: i64,
    /// Set (with why) when the lease is lost; the keep-alive task stops then.
    pub lost: watch::Receiver<Option<String>>,
    /// Until when this leadership surely holds (renewed by the keep-alive task).
    pub valid: Arc<LeaderLease>,
    keeper: tokio::task::JoinHandle<()>,
}

impl Leadership {
    pub fn fence(&self) -> Fence {
        Fence {
            leader_key: self.key.key().to_vec(),
            create_revision: self.term,
        }
    }

    /// Gives leadership up (best effort: with etcd unreachable, its lease is revoked once
    /// etcd answers again, within `REVOKE_RETRY_FOR`, or runs out).
    pub async fn resign(self, client: &mut Client) {
        self.valid.end();
        self.keeper.abort();
        // Bounded: with etcd unreachable, a shutdown must not wait on it.
        let bound = Duration::from_secs(1);
        let resign = client.resign(Some(ResignOptions::new().with_leader(self.key.clone())));
        match tokio::time::timeout(bound, resign).await {
            Ok(Ok(_)) => {}
            Ok(Err(error)) => {
                tracing::warn!(%error, "resigning leadership failed; revoking its lease");
            }
            Err(_) => tracing::warn!("resigning leadership timed out; revoking its lease"),
        }
        let revoked = tokio::time::timeout(bound, client.lease_revoke(self.lease_id)).await;
        if revoke_settled(&revoked) {
            return;
        }
        // etcd unreachable (it lost its quorum, say): the leader key would then outlive the
        // outage by the lease's whole TTL (etcd restarts lease clocks when it elects a
        // leader), and every candidate wait for it. Revoked as soon as etcd answers, the next
        // candidate leads at once. This coordinator leads no more, so it gives up nothing.
        // (A process that exits meanwhile, at shutdown, leaves it to the TTL.)
        tokio::spawn(revoke_when_etcd_answers(client.clone(), self.lease_id));
    }
}

/// How long a stepped-down leader keeps trying to revoke its lease: an outage longer than
/// this leaves its key to run out its TTL after etcd is back, as before.
const REVOKE_RETRY_FOR: Duration = Duration::from_secs(120);

/// Whether a revocation needs no retry: it succeeded, or the lease is gone already (expired).
/// Anything else (no answer, a broken connection, an etcd without a leader) is retried.
fn revoke_settled<T>(
    revoked: &Result<Result<T, etcd_client::Error>, tokio::time::error::Elapsed>,
) -> bool {
    match revoked {
        Ok(Ok(_)) => true,
        Ok(Err(etcd_client::Error::GRpcStatus(status))) => status.code() == tonic::Code::NotFound,
        _ => false,
    }
}

async fn revoke_when_etcd_answers(mut client: Client, lease_id: i64) {
    let started = tokio::time::Instant::now();
    while started.elapsed() < REVOKE_RETRY_FOR {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let revoked =
            tokio::time::timeout(Duration::from_secs(1), client.lease_revoke(lease_id)).await;
        if revoke_settled(&revoked) {
            if matches!(revoked, Ok(Ok(_))) {
                tracing::info!(
                    "the lease of the leadership given up is revoked: the next candidate leads"
                );
            }
            return;
        }
    }
}

/// The election's name (a key prefix) for the cluster under `prefix`.
pub fn election_name(prefix: &str) -> String {
    format!("{prefix}/leader")
}

/// etcd leases count whole seconds.
pub fn lease_seconds(election_lease_ms: u64) -> i64 {
    election_lease_ms.div_ceil(1000).max(1) as i64
}

/// Campaigns until this coordinator leads. Returns `Err` only for errors worth giving up on;
/// a lost etcd connection is retried.
pub async fn campaign(
    client: &mut Client,
    prefix: &str,
    address: &LeaderAddress,
    election_lease_ms: u64,
) -> Result<Leadership, String> {
    let value = serde_json::to_vec(address).map_err(|e| e.to_string())?;
    let ttl = lease_seconds(election_lease_ms);
    loop {
        let granted_at = BootInstant::now();
        let lease_id = match client.lease_grant(ttl, None).await {
            Ok(granted) => granted.id(),
            Err(error) => {
                tracing::warn!(%error, "etcd lease grant failed; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        // Renewed while campaigning too: the campaign may wait for long.
        let (lost_tx, lost) = watch::channel(None);
        let valid = Arc::new(LeaderLease::new());
        valid.renewed(granted_at, Duration::from_secs(ttl as u64));
        let keeper = tokio::spawn(keep_alive(
            client.clone(),
            lease_id,
            ttl,
            lost_tx,
            valid.clone(),
        ));
        let mut lease_lost = lost.clone();
        let campaigned = tokio::select! {
            won = client.campaign(election_name(prefix), value.clone(), lease_id) => won
                .map_err(|e| e.to_string()),
            // The lease ran out while waiting: a key won on it would be gone already.
            _ = lease_lost.wait_for(Option::is_some) => Err("the campaign's lease was lost".into()),
        };
        match campaigned {
            Ok(mut won) => {
                let Some(key) = won.take_leader() else {
                    keeper.abort();
                    return Err("etcd answered a campaign with no leader key".into());
                };
                let term = key.rev();
                valid.begin_stretch();
                return Ok(Leadership {
                    key,
                    lease_id,
                    term,
                    lost,
                    valid,
                    keeper,
                });
            }
            Err(error) => {
                keeper.abort();
                let _ = client.lease_revoke(lease_id).await;
                tracing::warn!(%error, "campaign failed; campaigning again");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// The pause between attempts to reopen a broken keep-alive stream.
const KEEP_ALIVE_REOPEN_PAUSE: Duration = Duration::from_millis(50);

/// Renews `lease_id` every third of its TTL; reports it lost when etcd says it expired.
///
/// A renewal that does not come in time lets [`LeaderLease`] lapse (this coordinator then
/// answers "not leading" and changes nothing), but it does not end the term: etcd may still
/// hold the lease. It does when its own leader dies: the new one extends every lease, and that
/// takes etcd a second or two, longer than some election leases. So renewals go on until etcd
/// answers: the lease alive (leading again, from a new stretch: see `valid_since`) or expired
/// (stepped down). Without an answer (no quorum) it stays lapsed, as every standby must wait.
async fn keep_alive(
    mut client: Client,
    lease_id: i64,
    ttl_seconds: i64,
    lost: watch::Sender<Option<String>>,
    valid: Arc<LeaderLease>,
) {
    let ttl = Duration::from_secs(ttl_seconds as u64);
    let mut stream = match client.lease_keep_alive(lease_id).await {
        Ok(pair) => Some(pair),
        Err(error) => {
            let _ = lost.send(Some(format!(
                "the election lease could not be renewed: {error}"
            )));
            return;
        }
    };
    let mut renewed = Instant::now();
    let mut lapse_reported = false;
    let mut tick = tokio::time::interval(ttl / 3);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if stream.is_none() {
            // A broken (or unanswered) stream was dropped: open another, again and again for
            // up to a TTL. The client picks a member at random for each call, the dead one
            // included until its address is dropped, so one try could miss the live ones.
            let reopening = Instant::now();
            while stream.is_none() && reopening.elapsed() < ttl {
                match tokio::time::timeout(ttl / 3, client.lease_keep_alive(lease_id)).await {
                    Ok(Ok(pair)) => stream = Some(pair),
                    // etcd no longer knows the lease: it expired.
                    Ok(Err(error)) if error.to_string().contains("not found") => {
                        valid.end();
                        let _ = lost.send(Some(format!(
                            "etcd says the election lease expired ({error})"
                        )));
                        return;
                    }
                    Ok(Err(_)) => tokio::time::sleep(KEEP_ALIVE_REOPEN_PAUSE).await,
                    Err(_) => break,
                }
            }
        }
        let Some((keeper, answers)) = stream.as_mut() else {
            report_lapse(&renewed, ttl, &mut lapse_reported);
            continue;
        };
        let sent_at = BootInstant::now();
        let asked = Instant::now();
        let round = async {
            keeper.keep_alive().await.map_err(|e| e.to_string())?;
            match answers.message().await.map_err(|e| e.to_string())? {
                Some(answer) if answer.ttl() > 0 => Ok(()),
                Some(_) => Err("etcd says the election lease expired".to_string()),
                // The stream ended (an etcd member went away): reopened at the next tick.
                None => Err("the keep-alive stream closed".to_string()),
            }
        };
        // At least a third of the TTL per round, so a lapsed lease does not spin.
        let round_timeout = ttl.saturating_sub(renewed.elapsed()).max(ttl / 3);
        let answered = tokio::time::timeout(round_timeout, round).await;
        crate::metrics::etcd_request("keepalive", asked);
        match answered {
            Ok(Ok(())) => {
                if lapse_reported {
                    tracing::warn!(
                        lapsed_ms = renewed.elapsed().as_millis() as u64,
                        "the election lease is renewed again"
                    );
                    lapse_reported = false;
                }
                renewed = Instant::now();
                valid.renewed(sent_at, ttl);
            }
            Ok(Err(why)) if why.contains("expired") => {
                valid.end();
                let _ = lost.send(Some(why));
                return;
            }
            Ok(Err(error)) => {
                tracing::warn!(%error, "renewing the election lease failed");
                stream = None;
                tick.reset_after(KEEP_ALIVE_REOPEN_PAUSE);
            }
            // Unanswered: the stream is dropped too, so that a late answer to this request is
            // never taken for the answer to a later one (sent later, it would count longer).
            Err(_) => {
                tracing::warn!(
                    timeout_ms = round_timeout.as_millis() as u64,
                    "renewing the election lease got no answer"
                );
                stream = None;
                tick.reset_after(KEEP_ALIVE_REOPEN_PAUSE);
            }
        }
        report_lapse(&renewed, ttl, &mut lapse_reported);
    }
}

/// Logs once when the election lease has gone a whole TTL without a renewal.
fn report_lapse(renewed: &Instant, ttl: Duration, lapse_reported: &mut bool) {
    if renewed.elapsed() >= ttl && !*lapse_reported {
        *lapse_reported = true;
        tracing::warn!(
            unrenewed_ms = renewed.elapsed().as_millis() as u64,
            "the election lease was not renewed for its whole TTL: not leading until etcd renews it or says it expired"
        );
    }
}

/// How long a new leader waits for its warm copy to be provably current before it reads
/// every key from etcd instead (the copy is normally current at once: it saw the previous
/// leader's key go, which is what ended the campaign).
const WARM_COPY_WAIT: Duration = Duration::from_secs(2);

/// What a new leader leads with: the saved metadata with the next term taken (saved), and
/// the committed offsets; from the warm copy when it is current, else read from etcd.
/// Blocking.
fn load_state(
    store: &Arc<crate::persist::EtcdStore>,
    warm: Option<&crate::persist::mirror::WarmCopy>,
    limits: crate::groups::offsets::OffsetLimits,
) -> Result<
    (
        crate::metadata::Metadata,
        crate::groups::etcd_offsets::EtcdOffsets,
    ),
    String,
> {
    use crate::groups::etcd_offsets::EtcdOffsets;
    use crate::persist::MetadataStore;
    let saved = match warm.map(|copy| store.load_warm(copy)) {
        Some(Ok(saved)) => saved,
        Some(Err(why)) => {
            tracing::info!(%why, "not loading from the warm copy");
            store.load()?
        }
        None => store.load()?,
    };
    let metadata = crate::server::take_term(store.as_ref(), saved)?;
    let offsets = match warm {
        Some(copy) => EtcdOffsets::from_copy(store.clone(), copy, limits)?,
        None => EtcdOffsets::load(store.clone(), limits)?,
    };
    Ok((metadata, offsets))
}

/// A coordinator on etcd: campaigns, leads while elected ([`crate::server::lead`]), steps
/// down when its lease is lost or a write finds it deposed, and campaigns again, until
/// `shutdown`.
pub async fn run_elected(
    config: tailstream_config::Config,
    metrics: tailstream_admin::PrometheusHandle,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), String> {
    use crate::persist::{EtcdMirror, EtcdStore, MetadataStore};
    use crate::standby::StandbyListeners;
    use tailstream_net::server::shutdown_signalled;
    let settings = &config.coordinator;
    let options = etcd_client::ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        // etcd answers a client that pings more often than every 5 s (its
        // `--grpc-keepalive-min-time`), or pings with no call open, with GOAWAY: every call on
        // the connection then breaks, a waiting campaign among them (it loses its place in
        // line). A dead member is noticed by the calls themselves (the lease keep-alive runs
        // every third of the election lease).
        .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5))
        .with_keep_alive_while_idle(false);
    let mut client = Client::connect(&settings.etcd_endpoints, Some(options))
        .await
        .map_err(|e| format!("connecting to etcd {:?}: {e}", settings.etcd_endpoints))?;
    let address = LeaderAddress {
        rpc_addr: settings.rpc_addr.to_string(),
        peer_addr: settings.peer_addr.to_string(),
        admin_addr: settings.admin_addr.to_string(),
    };
    // Kept current from now on, leading or not: a takeover loads from it (see `load_state`),
    // and a standby names the leader from it.
    let mirror = Arc::new(EtcdMirror::start(client.clone(), &settings.etcd_prefix));
    // Until it leads it answers `NotLeader` on its client and peer listeners, naming the
    // leader (see `crate::standby`).
    println!(
        "tailstream coordinator standby rpc={} peer={} admin=http://{}",
        address.rpc_addr, address.peer_addr, address.admin_addr
    );
    // The term this process led last (named by its standby listeners).
    let mut led_term = None;
    let mut standby = StandbyListeners::start(&config, mirror.clone(), led_term).await;
    loop {
        tracing::info!(prefix = %settings.etcd_prefix, "campaigning for leadership");
        let campaign_started = Instant::now();
        let leadership = tokio::select! {
            won = campaign(&mut client, &settings.etcd_prefix, &address, settings.election_lease_ms) => won?,
            _ = shutdown_signalled(&mut shutdown) => return Ok(()),
        };
        // A store of this term's own: tasks of an earlier term that still hold theirs (a
        // rebuild finishing late) write with that term's fence, deposed for good, never with
        // this one's, and their failures depose nothing of this term.
        let store = Arc::new(EtcdStore::new(
            client.clone(),
            &settings.etcd_prefix,
            &settings.etcd_endpoints,
            tokio::runtime::Handle::current(),
        ));
        store.fence(leadership.fence());
        let load_started = Instant::now();
        let warm = mirror
            .takeover_copy(leadership.key.key(), leadership.term, WARM_COPY_WAIT)
            .await;
        let from = if warm.is_some() { "warm" } else { "etcd" };
        let loaded = {
            let (store, limits) = (store.clone(), crate::server::offset_limits(&config));
            tokio::task::spawn_blocking(move || load_state(&store, warm.as_ref(), limits))
                .await
                .map_err(|e| e.to_string())
                .and_then(|loaded| loaded)
        };
        metrics::histogram!(crate::metrics::TAKEOVER_LOAD, "from" => from)
            .record(load_started.elapsed().as_secs_f64());
        let (metadata, offsets) = match loaded {
            Ok(loaded) => loaded,
            Err(error) => {
                tracing::error!(%error, "elected, but loading the state failed; stepping down");
                leadership.resign(&mut client).await;
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        tracing::info!(
            term = metadata.term.0,
            leader_key_revision = leadership.term,
            waited_ms = campaign_started.elapsed().as_millis() as u64,
            loaded_from = from,
            load_ms = load_started.elapsed().as_millis() as u64,
            "leading: elected and loaded the metadata"
        );
        metrics::gauge!(crate::metrics::LEADER).set(1.0);
        led_term = Some(metadata.term);
        let (term_over, term_shutdown) = watch::channel(false);
        let why = {
            let mut lost = leadership.lost.clone();
            let mut deposed = store.deposed();
            let mut outer = shutdown.clone();
            tokio::spawn(async move {
                let why = tokio::select! {
                    why = lost.wait_for(Option::is_some) => why.ok().and_then(|w| w.clone()),
                    why = deposed.wait_for(Option::is_some) => why.ok().and_then(|w| w.clone()),
                    _ = shutdown_signalled(&mut outer) => None,
                };
                let _ = term_over.send(true);
                why
            })
        };
        // Its ports, for the leader's listeners.
        standby.stop().await;
        let led = Box::pin(crate::server::lead(
            &config,
            metadata,
            store.clone() as Arc<dyn MetadataStore>,
            Arc::new(offsets),
            crate::server::Term {
                lease: leadership.valid.clone(),
                election: Some((client.clone(), settings.etcd_prefix.clone())),
            },
            metrics.clone(),
            term_shutdown,
        ))
        .await;
        let why = match &led {
            Ok(()) => why.await.ok().flatten(),
            // It could not start leading (its listeners, say: a standby binds no admin port until
            // it leads, and meanwhile another process may have taken one of its ports): the
            // term ends now, so that another coordinator leads instead of none.
            Err(error) => {
                why.abort();
                Some(format!("leading failed: {error}"))
            }
        };
        store.end_term();
        metrics::gauge!(crate::metrics::LEADER).set(0.0);
        if *shutdown.borrow() {
            leadership.resign(&mut client).await;
            return Ok(());
        }
        // Standing by again at once, on the ports the leader's listeners (closed now) held,
        // before resigning (which may wait seconds on an etcd without quorum): brokers whose
        // lease this term renewed hear at their next heartbeat that it leads no more, and
        // serve on (`broker::lease`). Left refusing connections meanwhile, they would have had
        // only a refused connection as evidence, and could miss it within their short lease.
        standby = StandbyListeners::start(&config, mirror.clone(), led_term).await;
        leadership.resign(&mut client).await;
        metrics::counter!(crate::metrics::LEADERSHIP_LOST).increment(1);
        tracing::warn!(
            why = why.as_deref().unwrap_or("unknown"),
            "stepped down from leadership; campaigning again"
        );
        if led.is_err() {
            // Behind the others in line now; not at once, so a lasting fault is not a loop.
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = shutdown_signalled(&mut shutdown) => return Ok(()),
            }
        }
    }
}
