//! [`CoordinatorAddresses`]: the coordinators a process may reach ("a,b,c": with the etcd
//! store, several run and one leads; standbys do not listen) and the one it tries now. A call
//! that gets no answer from the current one moves it on to the next, so brokers, clients and
//! tools follow a change of leader by themselves.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Cheap to clone: clones share which address is current.
#[derive(Clone, Debug)]
pub struct CoordinatorAddresses {
    addrs: Arc<Vec<String>>,
    current: Arc<AtomicUsize>,
}

impl CoordinatorAddresses {
    /// A comma-separated list (spaces and empty items ignored); one address is a list of one.
    pub fn parse(list: &str) -> Self {
        let addrs: Vec<String> = list
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(str::to_string)
            .collect();
        Self {
            addrs: Arc::new(addrs),
            current: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// The address to try now (empty when the list was).
    pub fn current(&self) -> String {
        if self.addrs.is_empty() {
            return String::new();
        }
        let at = self.current.load(Ordering::Relaxed) % self.addrs.len();
        self.addrs[at].clone()
    }

    /// `addr` gave no answer: the next call tries the next address (unless another caller
    /// moved on already).
    pub fn unanswered(&self, addr: &str) {
        if self.addrs.len() < 2 {
            return;
        }
        let at = self.current.load(Ordering::Relaxed);
        if self.addrs[at % self.addrs.len()] == addr {
            let _ = self.current.compare_exchange(
                at,
                (at + 1) % self.addrs.len(),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }

    pub fn all(&self) -> &[String] {
        &self.addrs
    }

    pub fn len(&self) -> usize {
        self.addrs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.addrs.is_empty()
    }
}

impl std::fmt::Display for CoordinatorAddresses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.addrs.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unanswered_address_moves_every_clone_on_once() {
        let addrs = CoordinatorAddresses::parse("a:1, b:2,,c:3");
        assert_eq!(addrs.all(), ["a:1", "b:2", "c:3"]);
        let other = addrs.clone();
        assert_eq!(addrs.current(), "a:1");
        addrs.unanswered("a:1");
        // A second report of the same failure (another task) does not skip b.
        other.unanswered("a:1");
        assert_eq!(other.current(), "b:2");
        addrs.unanswered("b:2");
        addrs.unanswered("c:3");
        assert_eq!(addrs.current(), "a:1");
        let single = CoordinatorAddresses::parse("x:1");
        single.unanswered("x:1");
        assert_eq!(single.current(), "x:1");
    }
}
