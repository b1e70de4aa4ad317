//! [`EtcdStore`]: the metadata on etcd, one key per object ([`super::layout`]), under the
//! cluster's prefix.
//!
//! Every write is a transaction that compares the leader key's create revision (only the
//! coordinator elected leader can write: a deposed one's transaction fails, whatever it still
//! believes) and each written key's mod revision against what this coordinator last saw (a
//! write it did not see means its copy is stale: it refuses rather than overwrite).
//!
//! etcd bounds a transaction (128 operations, 1.5 MiB by default). A change that does not fit
//! (a broker crash moving thousands of placements) is first written whole as an *intent*
//! (chunked values under `P/intent/`, then their count), then applied in pieces, then the
//! intent is deleted. Whoever loads next, this coordinator or a new leader, finds a complete
//! intent and applies it again first (every op is a whole put or delete: applying twice is
//! applying once), so a change is never seen half made by a leader.
//!
//! The trait is blocking (the coordinator saves on the blocking pool): calls run on the
//! runtime handle the store was made on.

use super::MetadataStore;
use super::layout::{self, Op};
use super::mirror::WarmCopy;
use crate::metadata::Metadata;
use etcd_client::{Client, Compare, CompareOp, GetOptions, Txn, TxnOp};
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use tokio::runtime::Handle;

/// Operations per transaction: etcd's default `--max-txn-ops` is 128, and compares count too
/// (one for the leader key, one per written key).
const TXN_OPS_MAX: usize = 100;
/// Bytes per transaction, well inside etcd's default 1.5 MiB request.
const TXN_BYTES_MAX: usize = 1 << 20;
/// Keys per page when listing (a large cluster's metadata exceeds one gRPC message).
const LIST_PAGE_KEYS: i64 = 5_000;
/// A transaction (or the read after a refused one) that takes longer has an unknown outcome
/// (etcd lost quorum, or is cut off). Bounded per request, not per save: a broker crash in a
/// large cluster moves tens of thousands of placements, hundreds of transactions that take
/// longer than this together.
const TXN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// Loading a large cluster reads every key.
const LOAD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
/// Largest answer this client accepts (a page of keys).
pub const MESSAGE_BYTES_MAX: usize = 64 << 20;

/// The leadership a write must still hold: the leader key and its create revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fence {
    pub leader_key: Vec<u8>,
    pub create_revision: i64,
}

pub struct EtcdStore {
    client: Client,
    /// The cluster's prefix, e.g. `/tailstream/default`; keys are `{prefix}/{layout key}`.
    prefix: String,
    endpoints: Vec<String>,
    runtime: Handle,
    fence: Mutex<Option<Fence>>,
    /// Set, with why, once a write failed or its outcome is unknown: this coordinator's copy
    /// may differ from etcd's, so it writes nothing more and must step down.
    deposed: tokio::sync::watch::Sender<Option<String>>,
    /// Each metadata key's mod revision as this coordinator last wrote or read it.
    revisions: Mutex<HashMap<String, i64>>,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EtcdStore({})", self.describe())
    }
}

/// The first key after every key that starts with `prefix`.
pub fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// One key as listed: relative to the cluster's prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyEntry {
    pub key: String,
    pub value: Vec<u8>,
    pub mod_revision: i64,
    pub create_revision: i64,
}

/// Every key under `dir` (absolute), at one revision, page by page (a large cluster's
/// metadata exceeds one gRPC message), with keys made relative to `{prefix}/`; and that
/// revision.
pub async fn list_under(
    client: &Client,
    prefix: &str,
    dir: &str,
) -> Result<(Vec<KeyEntry>, i64), String> {
    let mut kv = client
        .kv_client()
        .max_decoding_message_size(MESSAGE_BYTES_MAX);
    let end = prefix_end(dir);
    let own = format!("{prefix}/");
    let mut start = dir.as_bytes().to_vec();
    let mut revision = 0;
    let mut found = Vec::new();
    loop {
        let mut options = GetOptions::new()
            .with_range(end.clone())
            .with_limit(LIST_PAGE_KEYS);
        if revision != 0 {
            options = options.with_revision(revision);
        }
        let asked = std::time::Instant::now();
        let page = kv.get(start.clone(), Some(options)).await;
        crate::metrics::etcd_request("range", asked);
        let page = page.map_err(etcd_error("listing"))?;
        if revision == 0 {
            revision = page.header().map_or(0, |h| h.revision());
        }
        for item in page.kvs() {
            let key = item
                .key_str()
                .map_err(|_| "a metadata key is not UTF-8".to_string())?;
            found.push(KeyEntry {
                key: key.strip_prefix(&own).unwrap_or(key).to_string(),
                value: item.value().to_vec(),
                mod_revision: item.mod_revision(),
                create_revision: item.create_revision(),
            });
        }
        match page.kvs().last() {
            Some(last) if page.more() => {
                start = last.key().to_vec();
                start.push(0);
            }
            _ => return Ok((found, revision)),
        }
    }
}

fn etcd_error(what: &str) -> impl Fn(etcd_client::Error) -> String + '_ {
    move |e| format!("etcd {what}: {e}")
}

impl EtcdStore {
    /// A store on `client` under `prefix`. It refuses every save until [`Self::fence`] names
    /// the leadership it holds.
    pub fn new(client: Client, prefix: &str, endpoints: &[String], runtime: Handle) -> Self {
        Self {
            client,
            prefix: prefix.to_string(),
            endpoints: endpoints.to_vec(),
            runtime,
            fence: Mutex::new(None),
            deposed: tokio::sync::watch::channel(None).0,
            revisions: Mutex::new(HashMap::new()),
        }
    }

    /// From now on every write requires `fence` to hold (a new term: forgets any earlier
    /// deposition).
    pub fn fence(&self, fence: Fence) {
        *self.fence.lock().unwrap_or_else(|p| p.into_inner()) = Some(fence);
        self.deposed.send_replace(None);
    }

    /// Set once this coordinator must stop leading, with why.
    pub fn deposed(&self) -> tokio::sync::watch::Receiver<Option<String>> {
        self.deposed.subscribe()
    }

    /// This store's term is over: it writes nothing more (a new term gets a new store).
    pub fn end_term(&self) {
        self.depose("the term this store served is over");
    }

    fn depose(&self, why: &str) {
        *self.fence.lock().unwrap_or_else(|p| p.into_inner()) = None;
        self.deposed.send_replace(Some(why.to_string()));
    }

    fn current_fence(&self) -> Result<Fence, String> {
        self.fence
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(|| "this coordinator is not the leader: it writes nothing".to_string())
    }

    fn key(&self, relative: &str) -> String {
        format!("{}/{relative}", self.prefix)
    }

    fn intent_dir(&self) -> String {
        self.key("intent/")
    }

    /// Every key under `dir` (absolute), at one revision: (relative key, value, mod revision).
    async fn list(&self, dir: &str) -> Result<Vec<(String, Vec<u8>, i64)>, String> {
        let (found, _) = list_under(&self.client, &self.prefix, dir).await?;
        Ok(found
            .into_iter()
            .map(|entry| (entry.key, entry.value, entry.mod_revision))
            .collect())
    }

    /// One transaction: `ops` if the fence holds and every written key is at the revision
    /// this coordinator last saw (`check_revisions`). Records the new revisions.
    async fn commit(&self, fence: &Fence, ops: &[Op], check_revisions: bool) -> Result<(), String> {
        let mut compares = vec![Compare::create_revision(
            fence.leader_key.clone(),
            CompareOp::Equal,
            fence.create_revision,
        )];
        if check_revisions {
            let revisions = self.revisions.lock().unwrap_or_else(|p| p.into_inner());
            for op in ops {
                let seen = revisions.get(op.key()).copied().unwrap_or(0);
                compares.push(Compare::mod_revision(
                    self.key(op.key()),
                    CompareOp::Equal,
                    seen,
                ));
            }
        }
        let writes: Vec<TxnOp> = ops
            .iter()
            .map(|op| match op {
                Op::Put { key, value } => TxnOp::put(self.key(key), value.clone(), None),
                Op::Delete { key } => TxnOp::delete(self.key(key), None),
            })
            .collect();
        let asked = std::time::Instant::now();
        let answer = send_txn(&self.client, Txn::new().when(compares).and_then(writes)).await;
        crate::metrics::etcd_request("transaction", asked);
        let answer = answer.map_err(|e| format!("etcd transaction: {e}"))?;
        if !answer.succeeded() {
            return Err(self.why_refused(fence).await);
        }
        let revision = answer.header().map_or(0, |h| h.revision());
        let mut revisions = self.revisions.lock().unwrap_or_else(|p| p.into_inner());
        for op in ops {
            match op {
                Op::Put { key, .. } => revisions.insert(key.clone(), revision),
                Op::Delete { key } => revisions.remove(key),
            };
        }
        Ok(())
    }

    /// Why a fenced transaction was refused: leadership lost, or a key changed behind us.
    async fn why_refused(&self, fence: &Fence) -> String {
        let mut kv = self.client.kv_client();
        let leader = bounded(kv.get(fence.leader_key.clone(), None))
            .await
            .ok()
            .and_then(Result::ok)
            .and_then(|answer| answer.kvs().first().map(|kv| kv.create_revision()));
        if leader == Some(fence.create_revision) {
            "the metadata in etcd changed behind this coordinator (a write it did not make): \
             refused rather than overwritten"
                .to_string()
        } else {
            "this coordinator is no longer the leader (its leader key is gone): it writes \
             nothing more"
                .to_string()
        }
    }

    /// `ops` in transactions of at most [`TXN_OPS_MAX`] ops and [`TXN_BYTES_MAX`] bytes.
    async fn commit_in_pieces(
        &self,
        fence: &Fence,
        ops: &[Op],
        check_revisions: bool,
    ) -> Result<(), String> {
        for piece in pieces(ops) {
            self.commit(fence, piece, check_revisions).await?;
        }
        Ok(())
    }

    async fn save_async(&self, previous: &Metadata, next: &Metadata) -> Result<(), String> {
        let fence = self.current_fence()?;
        let ops = layout::changes(previous, next)?;
        if pieces(&ops).len() <= 1 {
            return self.commit(&fence, &ops, true).await;
        }
        // Too big for one transaction: intent first, so it is applied whole or not at all.
        self.write_intent(&fence, &ops).await?;
        self.commit_in_pieces(&fence, &ops, true).await?;
        self.clear_intent(&fence).await
    }

    /// Writes `ops` as the intent: chunks, then their count (a complete intent).
    async fn write_intent(&self, fence: &Fence, ops: &[Op]) -> Result<(), String> {
        let encoded = serde_json::to_vec(ops).map_err(|e| e.to_string())?;
        let chunks: Vec<Op> = encoded
            .chunks(TXN_BYTES_MAX / 2)
            .enumerate()
            .map(|(i, chunk)| Op::Put {
                key: format!("intent/{i:010}"),
                value: chunk.to_vec(),
            })
            .collect();
        self.commit_in_pieces(fence, &chunks, false).await?;
        let count = Op::Put {
            key: "intent/count".to_string(),
            value: chunks.len().to_string().into_bytes(),
        };
        self.commit(fence, &[count], false).await
    }

    async fn clear_intent(&self, fence: &Fence) -> Result<(), String> {
        let compare = Compare::create_revision(
            fence.leader_key.clone(),
            CompareOp::Equal,
            fence.create_revision,
        );
        let dir = self.intent_dir();
        let delete = TxnOp::delete(
            dir.clone(),
            Some(etcd_client::DeleteOptions::new().with_range(prefix_end(&dir))),
        );
        let answer = send_txn(
            &self.client,
            Txn::new().when(vec![compare]).and_then(vec![delete]),
        )
        .await
        .map_err(|e| format!("etcd deleting the intent: {e}"))?;
        if answer.succeeded() {
            Ok(())
        } else {
            Err(self.why_refused(fence).await)
        }
    }

    /// The intent a previous leader left complete, as its ops; `None` when there is none (or
    /// only an incomplete one: its change was never applied, nor answered).
    fn intent_ops(listing: &[(String, Vec<u8>, i64)]) -> Result<Option<Vec<Op>>, String> {
        let Some((_, count, _)) = listing.iter().find(|(k, _, _)| k == "intent/count") else {
            return Ok(None);
        };
        let count: usize = std::str::from_utf8(count)
            .ok()
            .and_then(|c| c.parse().ok())
            .ok_or("the metadata intent's count is not a number")?;
        let chunks: Vec<&Vec<u8>> = listing
            .iter()
            .filter(|(k, _, _)| k.starts_with("intent/") && k != "intent/count")
            .map(|(_, v, _)| v)
            .collect();
        if chunks.len() != count {
            return Err(format!(
                "the metadata intent has {} of its {count} pieces",
                chunks.len()
            ));
        }
        let encoded: Vec<u8> = chunks.into_iter().flatten().copied().collect();
        serde_json::from_slice(&encoded)
            .map(Some)
            .map_err(|e| format!("the metadata intent is not valid: {e}"))
    }

    async fn load_async(&self) -> Result<Metadata, String> {
        let intent = self.list(&self.intent_dir()).await?;
        if let Some(ops) = Self::intent_ops(&intent)? {
            let fence = self.current_fence()?;
            tracing::warn!(
                ops = ops.len(),
                "completing a metadata change the previous leader left half applied"
            );
            self.commit_in_pieces(&fence, &ops, false).await?;
        }
        if let (false, Ok(fence)) = (intent.is_empty(), self.current_fence()) {
            // An incomplete intent was never applied nor answered: dropped.
            self.clear_intent(&fence).await?;
        }
        let listing = self.list(&self.key(layout::METADATA_DIR)).await?;
        self.adopt(listing)
    }

    /// The metadata `listing` (under [`layout::METADATA_DIR`]) holds, its revisions taken as
    /// the ones this coordinator last saw.
    fn adopt(&self, listing: Vec<(String, Vec<u8>, i64)>) -> Result<Metadata, String> {
        let mut revisions = HashMap::with_capacity(listing.len());
        let mut values = BTreeMap::new();
        for (key, value, revision) in listing {
            revisions.insert(key.clone(), revision);
            values.insert(key, value);
        }
        let metadata = layout::read(&values)?;
        *self.revisions.lock().unwrap_or_else(|p| p.into_inner()) = revisions;
        Ok(metadata)
    }

    /// The metadata as a warm copy holds it (see [`super::mirror`]), instead of reading every
    /// key. Refused when the copy holds an intent: completing it needs etcd ([`Self::load`]).
    pub fn load_warm(&self, copy: &WarmCopy) -> Result<Metadata, String> {
        if !copy.under("intent/").is_empty() {
            return Err("the warm copy holds a metadata intent: loading from etcd".into());
        }
        self.adopt(copy.under(layout::METADATA_DIR))
    }

    /// Writes `metadata` into an empty prefix (migration from the file store). Refused when
    /// the prefix already holds metadata.
    pub async fn import(&self, metadata: &Metadata) -> Result<usize, String> {
        let existing = self.list(&self.key(layout::METADATA_DIR)).await?;
        if !existing.is_empty() {
            return Err(format!(
                "{} already holds metadata ({} keys): refusing to overwrite it",
                self.describe(),
                existing.len()
            ));
        }
        self.save_async(&Metadata::default(), metadata).await?;
        Ok(layout::changes(&Metadata::default(), metadata)?.len())
    }
}

impl EtcdStore {
    /// Writes `ops` (keys relative to the prefix) fenced by the leadership, in as many
    /// transactions as they need, without comparing their revisions: for objects only the
    /// leader writes and that need no read-modify-write (committed offsets). Blocking. A
    /// failure deposes this coordinator, as a failed metadata save does.
    pub fn write(&self, ops: &[Op]) -> Result<(), String> {
        check_sizes(ops)?;
        let written = self.runtime.block_on(async {
            let fence = self.current_fence()?;
            self.commit_in_pieces(&fence, ops, false).await
        });
        if let Err(why) = &written {
            self.depose(why);
        }
        written
    }

    /// Every key under `dir` (relative to the prefix), with its value. Blocking.
    pub fn read_dir(&self, dir: &str) -> Result<Vec<(String, Vec<u8>)>, String> {
        self.runtime.block_on(async {
            let listed = tokio::time::timeout(LOAD_TIMEOUT, self.list(&self.key(dir)))
                .await
                .unwrap_or_else(|_| Err("listing etcd timed out".into()))?;
            Ok(listed.into_iter().map(|(k, v, _)| (k, v)).collect())
        })
    }
}

/// Sends `txn` and returns etcd's answer, within [`TXN_TIMEOUT`] in all. A transaction whose
/// connection could not even be made (the etcd member it was routed to is down) is sent again
/// after a short pause: it never reached etcd, so it cannot apply twice, and the client's
/// balanced channel routes the next try to a member that answers. Without that, one etcd
/// member's death under a leader that is writing deposed the leader (a failed save makes it
/// step down, its state no longer known to be etcd's). Any other failure is returned as it
/// is: its transaction may have applied.
async fn send_txn(client: &Client, txn: Txn) -> Result<etcd_client::TxnResponse, String> {
    const RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);
    let deadline = tokio::time::Instant::now() + TXN_TIMEOUT;
    loop {
        let mut kv = client.kv_client();
        match tokio::time::timeout_at(deadline, kv.txn(txn.clone())).await {
            Ok(Ok(answer)) => return Ok(answer),
            Ok(Err(error))
                if never_sent(&error) && tokio::time::Instant::now() + RETRY_PAUSE < deadline =>
            {
                tracing::debug!(%error, "an etcd transaction could not be sent; sending it again");
                metrics::counter!(crate::metrics::ETCD_UNSENT_RETRIES).increment(1);
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            Ok(Err(error)) => return Err(error.to_string()),
            Err(_) => return Err(no_answer()),
        }
    }
}

/// Whether a request surely never reached etcd: its connection could not be made. (An
/// unavailable member that took the request, or a connection that broke after it was sent,
/// leaves the outcome unknown.)
fn never_sent(error: &etcd_client::Error) -> bool {
    match error {
        // tonic reports a failed connect as Unavailable with the connect error as its source;
        // a request lost on a connection that was made comes back as another error.
        etcd_client::Error::GRpcStatus(status) => {
            status.code() == tonic::Code::Unavailable
                && std::iter::successors(std::error::Error::source(status), |e| e.source())
                    .any(|cause| cause.is::<tonic::ConnectError>())
        }
        _ => false,
    }
}

/// What a request unanswered within [`TXN_TIMEOUT`] fails with.
fn no_answer() -> String {
    format!(
        "etcd gave no answer within {} ms (the outcome of the write is unknown)",
        TXN_TIMEOUT.as_millis()
    )
}

/// `request`, or an error once it has gone [`TXN_TIMEOUT`] unanswered.
async fn bounded<T>(request: impl std::future::Future<Output = T>) -> Result<T, String> {
    tokio::time::timeout(TXN_TIMEOUT, request)
        .await
        .map_err(|_| no_answer())
}

/// Refuses ops that no transaction could carry.
fn check_sizes(ops: &[Op]) -> Result<(), String> {
    match ops.iter().find(|op| op.size_bytes() > TXN_BYTES_MAX) {
        Some(op) => Err(format!(
            "{} would be {} bytes in etcd, more than one transaction carries ({TXN_BYTES_MAX})",
            op.key(),
            op.size_bytes()
        )),
        None => Ok(()),
    }
}

/// `ops` cut into transactions that etcd takes.
fn pieces(ops: &[Op]) -> Vec<&[Op]> {
    let mut pieces = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, op) in ops.iter().enumerate() {
        let full =
            i - start == TXN_OPS_MAX || (i > start && bytes + op.size_bytes() > TXN_BYTES_MAX);
        if full {
            pieces.push(&ops[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes += op.size_bytes();
    }
    if start < ops.len() {
        pieces.push(&ops[start..]);
    }
    pieces
}

impl MetadataStore for EtcdStore {
    fn describe(&self) -> String {
        format!("etcd {} under {}", self.endpoints.join(","), self.prefix)
    }

    fn load(&self) -> Result<Metadata, String> {
        self.runtime.block_on(async {
            tokio::time::timeout(LOAD_TIMEOUT, self.load_async())
                .await
                .unwrap_or_else(|_| Err("loading the metadata from etcd timed out".into()))
        })
    }

    fn save(&self, previous: &Metadata, next: &Metadata) -> Result<(), String> {
        // Refused before anything is written (and without stepping down): an object etcd
        // would never take, applied as an intent, would stop every later leader.
        check_sizes(&layout::changes(previous, next)?)?;
        let saved = self
            .runtime
            .block_on(async { self.save_async(previous, next).await });
        if let Err(why) = &saved {
            // Refused, failed or unknown: etcd may now hold what this coordinator does not.
            self.depose(why);
        }
        saved
    }
}

#[cfg(test)]
#[path = "etcd_tests.rs"]
mod etcd_tests;

#[cfg(test)]
#[path = "scale_tests.rs"]
mod scale_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_respect_the_op_and_byte_bounds_and_keep_order() {
        let op = |i: usize, bytes: usize| Op::Put {
            key: format!("k{i}"),
            value: vec![0; bytes],
        };
        let ops: Vec<Op> = (0..250).map(|i| op(i, 10)).collect();
        let cut = pieces(&ops);
        assert_eq!(
            cut.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [100, 100, 50]
        );
        let big: Vec<Op> = (0..5).map(|i| op(i, TXN_BYTES_MAX / 2)).collect();
        assert!(pieces(&big).iter().all(|p| p.len() == 1));
        assert!(pieces(&[]).is_empty());
        let flat: Vec<&Op> = cut.iter().flat_map(|p| p.iter()).collect();
        assert!(flat.iter().zip(&ops).all(|(a, b)| *a == b));
    }

    /// A transaction to an address nothing listens at was never sent: it is resent (until
    /// the bound), and the error it ends with says it could not connect.
    #[tokio::test]
    async fn a_transaction_whose_connection_is_refused_counts_as_never_sent() {
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let options = etcd_client::ConnectOptions::new()
            .with_connect_timeout(std::time::Duration::from_millis(200));
        // etcd-client connects lazily: the failure comes with the first request.
        let client = Client::connect([format!("127.0.0.1:{port}")], Some(options))
            .await
            .unwrap();
        let mut kv = client.kv_client();
        let error = kv.txn(Txn::new()).await.unwrap_err();
        assert!(never_sent(&error), "{error:?}");
        let other = etcd_client::Error::GRpcStatus(tonic::Status::unavailable("tcp connect error"));
        assert!(!never_sent(&other), "a message alone proves nothing");
    }

    #[test]
    fn prefix_end_is_the_first_key_past_the_prefix() {
        assert_eq!(prefix_end("/t/m/"), b"/t/m0".to_vec());
        assert_eq!(prefix_end("a\u{7f}"), b"a\x80".to_vec());
    }
}
