//! [`EtcdMirror`]: a coordinator's warm copy of its cluster's keys, kept current by watching
//! etcd, so that a standby taking over starts from memory instead of reading every key (a
//! cluster of 10,000 streams of 16 streamlets is 160,000 placement keys).
//!
//! The copy is one listing of everything under `{prefix}/`, then every event after it, in
//! revision order (etcd's watch delivers each revision whole, none skipped). The election's
//! keys are under the same prefix, which is what makes a copy provably current at a takeover
//! ([`MirrorState::current_for`]): it holds the new leader's own key, so it has every
//! revision up to that key's creation (the term), and it holds no election key created
//! before it, so it has applied the deletion of the previous leader's key too. Every write of
//! every earlier leader compared that leader's key and so came before that deletion: the copy
//! holds all of them. Anything short of that, or a copy not caught up within a bound, and the
//! new leader reads etcd as before.

use super::etcd::{KeyEntry, MESSAGE_BYTES_MAX, list_under, prefix_end};
use crate::election::LeaderAddress;
use etcd_client::{Client, EventType, WatchOptions};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, watch};

/// Where the election's keys are, below the cluster's prefix (see [`crate::election`]).
const ELECTION_DIR: &str = "leader/";
/// The pause before following again after the watch broke.
const REFOLLOW_PAUSE: Duration = Duration::from_millis(500);
/// The longest pause between listings that fail.
const REFOLLOW_PAUSE_MAX: Duration = Duration::from_secs(5);

/// One key of the copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MirroredKey {
    pub value: Vec<u8>,
    pub mod_revision: i64,
    pub create_revision: i64,
}

/// The copy itself, as of `revision`. Pure: no I/O.
#[derive(Debug, Default)]
pub struct MirrorState {
    /// Keys relative to `{prefix}/`.
    keys: BTreeMap<String, MirroredKey>,
    /// The last revision applied whole.
    revision: i64,
    /// False until the first listing and after the watch broke (until listed again).
    following: bool,
}

/// What a new leader loads from: the keys of each directory it reads, with mod revisions.
#[derive(Debug, Default)]
pub struct WarmCopy {
    pub revision: i64,
    pub keys: Vec<(String, Vec<u8>, i64)>,
}

impl WarmCopy {
    /// Every key under `dir` (relative to the prefix): (key, value, mod revision).
    pub fn under(&self, dir: &str) -> Vec<(String, Vec<u8>, i64)> {
        self.keys
            .iter()
            .filter(|(key, _, _)| key.starts_with(dir))
            .cloned()
            .collect()
    }
}

impl MirrorState {
    /// Starts over from a listing at `revision`.
    pub fn reset(&mut self, listing: Vec<KeyEntry>, revision: i64) {
        self.keys = listing
            .into_iter()
            .map(|entry| {
                (
                    entry.key,
                    MirroredKey {
                        value: entry.value,
                        mod_revision: entry.mod_revision,
                        create_revision: entry.create_revision,
                    },
                )
            })
            .collect();
        self.revision = revision;
        self.following = true;
    }

    pub fn put(&mut self, key: String, value: MirroredKey) {
        self.revision = self.revision.max(value.mod_revision);
        self.keys.insert(key, value);
    }

    pub fn delete(&mut self, key: &str, revision: i64) {
        self.revision = self.revision.max(revision);
        self.keys.remove(key);
    }

    /// The watch broke: nothing is trusted until listed again.
    pub fn stop_following(&mut self) {
        self.following = false;
    }

    /// The whole copy if it surely holds every write made before the leadership whose key is
    /// `leader_key` (relative) and whose term is `term` (that key's create revision) was
    /// won; `None` otherwise (see the module's comment for why this is enough).
    pub fn current_for(&self, leader_key: &str, term: i64) -> Option<WarmCopy> {
        if !self.following {
            return None;
        }
        let own = self.keys.get(leader_key)?;
        if own.create_revision != term {
            return None;
        }
        let older_candidate = self
            .keys
            .range(ELECTION_DIR.to_string()..)
            .take_while(|(key, _)| key.starts_with(ELECTION_DIR))
            .any(|(_, entry)| entry.create_revision < term);
        if older_candidate {
            return None;
        }
        Some(WarmCopy {
            revision: self.revision,
            keys: self
                .keys
                .iter()
                .filter(|(key, _)| !key.starts_with(ELECTION_DIR))
                .map(|(key, entry)| (key.clone(), entry.value.clone(), entry.mod_revision))
                .collect(),
        })
    }

    /// The leader's address as the copy knows it: the value of the oldest election key.
    pub fn leader(&self) -> Option<LeaderAddress> {
        if !self.following {
            return None;
        }
        let (_, oldest) = self
            .keys
            .range(ELECTION_DIR.to_string()..)
            .take_while(|(key, _)| key.starts_with(ELECTION_DIR))
            .min_by_key(|(_, entry)| entry.create_revision)?;
        serde_json::from_slice(&oldest.value).ok()
    }
}

/// The copy and the task that keeps it current (stopped when dropped).
#[derive(Debug)]
pub struct EtcdMirror {
    prefix: String,
    state: Arc<Mutex<MirrorState>>,
    /// Bumped after every change applied, for waiters.
    changed: watch::Receiver<u64>,
    /// Cuts the pause before the next listing short: a coordinator just elected wants a
    /// current copy now (its campaign succeeding says etcd answers again).
    list_now: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for EtcdMirror {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl EtcdMirror {
    /// Starts following every key under `{prefix}/`.
    pub fn start(client: Client, prefix: &str) -> Self {
        let state = Arc::new(Mutex::new(MirrorState::default()));
        let (changed_tx, changed) = watch::channel(0);
        let list_now = Arc::new(Notify::new());
        let task = tokio::spawn(follow_forever(
            client,
            prefix.to_string(),
            state.clone(),
            changed_tx,
            list_now.clone(),
        ));
        Self {
            prefix: prefix.to_string(),
            state,
            changed,
            list_now,
            task,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MirrorState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The copy as of the takeover of the leadership whose key is `leader_key` (absolute) and
    /// whose term is `term`, once it is provably current; `None` if it is not within `bound`.
    pub async fn takeover_copy(
        &self,
        leader_key: &[u8],
        term: i64,
        bound: Duration,
    ) -> Option<WarmCopy> {
        let leader_key = std::str::from_utf8(leader_key).ok()?;
        let relative = leader_key.strip_prefix(&format!("{}/", self.prefix))?;
        let mut changed = self.changed.clone();
        // A copy that stopped following (etcd lost its quorum, say) waits out a pause of up
        // to REFOLLOW_PAUSE_MAX before it lists again: list at once instead, or the takeover
        // would wait out its bound and read every key anyway. (Sent while a listing is under
        // way, the wake-up is kept and cuts one later pause short instead: one listing early.)
        if !self.lock().following {
            self.list_now.notify_one();
        }
        let wait = async {
            loop {
                if let Some(copy) = self.lock().current_for(relative, term) {
                    return Some(copy);
                }
                changed.changed().await.ok()?;
            }
        };
        tokio::time::timeout(bound, wait).await.ok().flatten()
    }

    /// The leader's address as the copy knows it.
    pub fn leader(&self) -> Option<LeaderAddress> {
        self.lock().leader()
    }
}

async fn follow_forever(
    client: Client,
    prefix: String,
    state: Arc<Mutex<MirrorState>>,
    changed: watch::Sender<u64>,
    list_now: Arc<Notify>,
) {
    let mut pause = REFOLLOW_PAUSE;
    loop {
        let (error, listed) = follow(&client, &prefix, &state, &changed).await;
        state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .stop_following();
        // Without quorum every listing fails: said once per pause, which grows.
        pause = if listed {
            REFOLLOW_PAUSE
        } else {
            (pause * 2).min(REFOLLOW_PAUSE_MAX)
        };
        tracing::warn!(%error, pause_ms = pause.as_millis() as u64, "the warm copy of etcd stopped following; listing again");
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = list_now.notified() => {}
        }
    }
}

/// Lists, then applies the watch's events until it breaks; returns why it broke, and whether
/// the listing succeeded.
async fn follow(
    client: &Client,
    prefix: &str,
    state: &Mutex<MirrorState>,
    changed: &watch::Sender<u64>,
) -> (String, bool) {
    let dir = format!("{prefix}/");
    let (listing, revision) = match list_under(client, prefix, &dir).await {
        Ok(listed) => listed,
        Err(error) => return (error, false),
    };
    state
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .reset(listing, revision);
    changed.send_modify(|n| *n += 1);
    // Fragmented: a watch behind by many large transactions (a recovery's) gets them in
    // pieces rather than in one answer past the message limit. A piece may hold part of a
    // revision: the copy is then current only once its election keys say so, as always.
    let options = WatchOptions::new()
        .with_range(prefix_end(&dir))
        .with_start_revision(revision + 1)
        .with_fragment();
    let mut stream = match client
        .watch_client()
        .max_decoding_message_size(MESSAGE_BYTES_MAX)
        .watch(dir.clone(), Some(options))
        .await
    {
        Ok(stream) => stream,
        Err(error) => return (format!("etcd watch: {error}"), true),
    };
    loop {
        let response = match stream.message().await {
            Ok(Some(response)) => response,
            Ok(None) => return ("the etcd watch stream ended".into(), true),
            Err(error) => return (format!("etcd watch: {error}"), true),
        };
        if response.canceled() {
            let why = format!(
                "etcd cancelled the watch ({}; compacted up to {})",
                response.cancel_reason(),
                response.compact_revision()
            );
            return (why, true);
        }
        if response.events().is_empty() {
            continue;
        }
        let mut copy = state.lock().unwrap_or_else(|p| p.into_inner());
        for event in response.events() {
            let Some(kv) = event.kv() else { continue };
            let Some(key) = kv
                .key_str()
                .ok()
                .and_then(|key| key.strip_prefix(&dir))
                .map(str::to_string)
            else {
                continue;
            };
            match event.event_type() {
                EventType::Put => copy.put(
                    key,
                    MirroredKey {
                        value: kv.value().to_vec(),
                        mod_revision: kv.mod_revision(),
                        create_revision: kv.create_revision(),
                    },
                ),
                EventType::Delete => copy.delete(&key, kv.mod_revision()),
            }
        }
        drop(copy);
        changed.send_modify(|n| *n += 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(value: &[u8], mod_revision: i64, create_revision: i64) -> MirroredKey {
        MirroredKey {
            value: value.to_vec(),
            mod_revision,
            create_revision,
        }
    }

    fn address(name: &str) -> Vec<u8> {
        serde_json::to_vec(&LeaderAddress {
            rpc_addr: name.into(),
            peer_addr: name.into(),
            admin_addr: name.into(),
        })
        .unwrap()
    }

    #[test]
    fn a_copy_is_current_only_with_the_new_leaders_key_and_no_older_one() {
        let mut state = MirrorState::default();
        assert!(state.current_for("leader/b", 7).is_none(), "not listed yet");
        state.reset(
            vec![
                KeyEntry {
                    key: "leader/a".into(),
                    value: address("a"),
                    mod_revision: 3,
                    create_revision: 3,
                },
                KeyEntry {
                    key: "m/counters".into(),
                    value: b"1".to_vec(),
                    mod_revision: 5,
                    create_revision: 2,
                },
            ],
            6,
        );
        assert_eq!(state.leader().unwrap().rpc_addr, "a");
        // b's key is not in the copy yet: the copy may lack writes before it.
        assert!(state.current_for("leader/b", 7).is_none());
        state.put("leader/b".into(), key(&address("b"), 7, 7));
        // a's key is still there: a may still have written after 7.
        assert!(state.current_for("leader/b", 7).is_none());
        state.put("m/counters".into(), key(b"2", 8, 2));
        state.delete("leader/a", 9);
        let copy = state.current_for("leader/b", 7).expect("current");
        assert_eq!(copy.revision, 9);
        assert_eq!(copy.under("m/"), [("m/counters".into(), b"2".to_vec(), 8)]);
        assert!(
            copy.under("leader/").is_empty(),
            "election keys are not state"
        );
        assert_eq!(state.leader().unwrap().rpc_addr, "b");
        // A key of the same name from another campaign is another term.
        assert!(state.current_for("leader/b", 8).is_none());
        // A later candidate does not make the copy stale.
        state.put("leader/c".into(), key(&address("c"), 10, 10));
        assert!(state.current_for("leader/b", 7).is_some());
        state.stop_following();
        assert!(
            state.current_for("leader/b", 7).is_none(),
            "the watch broke"
        );
        assert!(state.leader().is_none());
    }
}
