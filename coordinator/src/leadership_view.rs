//! What `DescribeLeadership` and the admin route `/leadership` answer: this coordinator (the
//! leader: nothing else answers), its term, where the metadata is kept, and the coordinators
//! standing by, read from the election's keys on etcd (each campaign's key holds its
//! candidate's addresses; etcd orders them by creation, which is the order they will lead in).

use crate::election::{LeaderAddress, election_name};
use etcd_client::{Client, GetOptions, SortOrder, SortTarget};
use std::time::Duration;
use tailstream_wire::CoordinatorTerm;
use tailstream_wire::messages::{CoordinatorInfo, DescribeLeadershipResponse};

/// How long reading the candidates may take: an answer about leadership must not hang on etcd.
const CANDIDATES_TIMEOUT: Duration = Duration::from_secs(1);
/// More candidates than any deployment runs; a listing is cut there.
const CANDIDATES_MAX: i64 = 64;

#[derive(Clone)]
pub struct LeadershipView {
    own: CoordinatorInfo,
    /// The etcd client and the election's prefix; `None` on the file store (no standbys).
    election: Option<(Client, String)>,
}

impl std::fmt::Debug for LeadershipView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeadershipView")
            .field("own", &self.own)
            .field("election", &self.election.as_ref().map(|(_, name)| name))
            .finish()
    }
}

impl LeadershipView {
    /// The only coordinator (file store).
    pub fn alone(own: CoordinatorInfo) -> Self {
        Self {
            own,
            election: None,
        }
    }

    /// A leader elected under `prefix` on etcd.
    pub fn elected(own: CoordinatorInfo, client: Client, prefix: &str) -> Self {
        Self {
            own,
            election: Some((client, format!("{}/", election_name(prefix)))),
        }
    }

    pub async fn describe(&self, term: CoordinatorTerm) -> DescribeLeadershipResponse {
        let (store, standbys) = match &self.election {
            None => ("file", Ok(Vec::new())),
            Some((client, election)) => {
                let listed =
                    tokio::time::timeout(CANDIDATES_TIMEOUT, candidates(client.clone(), election))
                        .await
                        .unwrap_or_else(|_| Err("etcd did not answer in time".into()));
                let standbys = listed.map(|all| {
                    all.into_iter()
                        .filter(|candidate| candidate.rpc_addr != self.own.rpc_addr)
                        .collect()
                });
                ("etcd", standbys)
            }
        };
        let (standbys, standbys_error) = match standbys {
            Ok(standbys) => (standbys, String::new()),
            Err(error) => (Vec::new(), error),
        };
        DescribeLeadershipResponse {
            term,
            store: store.into(),
            leader: self.own.clone(),
            standbys,
            standbys_error,
        }
    }
}

/// Every campaigning coordinator, oldest campaign (the leader) first.
async fn candidates(mut client: Client, election: &str) -> Result<Vec<CoordinatorInfo>, String> {
    let options = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(CANDIDATES_MAX);
    let listed = client
        .get(election, Some(options))
        .await
        .map_err(|e| e.to_string())?;
    Ok(listed
        .kvs()
        .iter()
        .filter_map(|kv| serde_json::from_slice::<LeaderAddress>(kv.value()).ok())
        .map(|address| CoordinatorInfo {
            rpc_addr: address.rpc_addr,
            peer_addr: address.peer_addr,
            admin_addr: address.admin_addr,
        })
        .collect())
}
