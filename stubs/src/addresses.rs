//! [`CoordinatorAddresses`]: the coordinators a process may reach ("a,b,c": with the etcd
//! store, several run and one leads) and the one it tries now. A call that gets no answer
//! from the current one moves it on to the next; a standby's `NotLeader` that names the
//! leader moves it there at once (an address not in the list is added, up to
//! [`ADDRESSES_MAX`]), so brokers, clients and tools follow a change of leader by themselves.

use crate::error::StubError;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// The most addresses a list grows to by following leaders it was not given.
pub const ADDRESSES_MAX: usize = 16;
/// How long an address that gave no answer is not gone back to on a standby's word: a
/// standby names the leader its copy of etcd knows, which is a dead leader until its etcd
/// lease runs out (seconds), and following it there would keep a caller from the others.
const UNANSWERED_DISTRUST: Duration = Duration::from_secs(1);

/// Cheap to clone: clones share the list and which address is current.
#[derive(Clone, Debug)]
pub struct CoordinatorAddresses {
    addrs: Arc<RwLock<Vec<String>>>,
    current: Arc<AtomicUsize>,
    /// The address that last gave no answer, and when.
    last_unanswered: Arc<Mutex<Option<(String, Instant)>>>,
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
            addrs: Arc::new(RwLock::new(addrs)),
            current: Arc::new(AtomicUsize::new(0)),
            last_unanswered: Arc::default(),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Vec<String>> {
        self.addrs.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The address to try now (empty when the list was).
    pub fn current(&self) -> String {
        let addrs = self.read();
        if addrs.is_empty() {
            return String::new();
        }
        let at = self.current.load(Ordering::Relaxed) % addrs.len();
        addrs[at].clone()
    }

    /// `addr` gave no answer: the next call tries the next address (unless another caller
    /// moved on already).
    pub fn unanswered(&self, addr: &str) {
        *self
            .last_unanswered
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some((addr.to_string(), Instant::now()));
        self.move_on_from(addr);
    }

    fn move_on_from(&self, addr: &str) {
        let addrs = self.read();
        if addrs.len() < 2 {
            return;
        }
        let at = self.current.load(Ordering::Relaxed);
        if addrs[at % addrs.len()] == addr {
            let _ = self.current.compare_exchange(
                at,
                (at + 1) % addrs.len(),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }

    /// `addr` answered that `leader` leads: the next call goes there (unless another caller
    /// moved on already). A leader not in the list is added while the list has room; with
    /// none, or when `leader` just gave no answer itself, or is `addr`, the next address is
    /// tried instead.
    pub fn redirected(&self, addr: &str, leader: &str) {
        let distrusted = self
            .last_unanswered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .is_some_and(|(gone, at)| gone == leader && at.elapsed() < UNANSWERED_DISTRUST);
        if leader == addr || distrusted {
            return self.move_on_from(addr);
        }
        let mut addrs = self.addrs.write().unwrap_or_else(|p| p.into_inner());
        let at = self.current.load(Ordering::Relaxed);
        if addrs.is_empty() || addrs[at % addrs.len()] != addr {
            return;
        }
        let to = match addrs.iter().position(|a| a == leader) {
            Some(to) => to,
            None if addrs.len() < ADDRESSES_MAX => {
                addrs.push(leader.to_string());
                addrs.len() - 1
            }
            None => (at + 1) % addrs.len(),
        };
        self.current.store(to, Ordering::Relaxed);
    }

    /// After `error` from `addr`: go where a standby said the leader is, or on to the next
    /// address if it gave no answer or does not lead; stay otherwise.
    pub fn after_error(&self, addr: &str, error: &StubError) {
        match error.leader_named() {
            Some(leader) => self.redirected(addr, leader),
            None if error.wants_another_coordinator() => self.unanswered(addr),
            None => {}
        }
    }

    pub fn all(&self) -> Vec<String> {
        self.read().clone()
    }

    pub fn len(&self) -> usize {
        self.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }
}

impl std::fmt::Display for CoordinatorAddresses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.read().join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailstream_wire::Status;
    use tailstream_wire::messages::not_leader_message;

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

    fn not_leader(leader: Option<&str>) -> StubError {
        StubError::Refused {
            status: Status::NotLeader,
            message: not_leader_message("standing by", None, leader),
        }
    }

    #[test]
    fn a_standby_naming_the_leader_sends_every_clone_there() {
        let addrs = CoordinatorAddresses::parse("a:1,b:2,c:3");
        let other = addrs.clone();
        addrs.after_error("a:1", &not_leader(Some("c:3")));
        assert_eq!(other.current(), "c:3", "straight past b");
        // A late answer from a, which is no longer current, moves nothing.
        other.after_error("a:1", &not_leader(Some("b:2")));
        assert_eq!(addrs.current(), "c:3");
        // A NotLeader without a name: the next one.
        addrs.after_error("c:3", &not_leader(None));
        assert_eq!(addrs.current(), "a:1");
        // Any other refusal: stay.
        let refused = StubError::Refused {
            status: Status::UnknownStream,
            message: "x".into(),
        };
        addrs.after_error("a:1", &refused);
        assert_eq!(addrs.current(), "a:1");
    }

    #[test]
    fn a_standby_naming_a_leader_that_just_gave_no_answer_sends_callers_on_instead() {
        let addrs = CoordinatorAddresses::parse("a:1,b:2,c:3");
        addrs.unanswered("a:1");
        assert_eq!(addrs.current(), "b:2");
        // b's copy of etcd still names the dead a: c is tried, not a again.
        addrs.after_error("b:2", &not_leader(Some("a:1")));
        assert_eq!(addrs.current(), "c:3");
        // Naming a live one still sends callers there.
        addrs.after_error("c:3", &not_leader(Some("b:2")));
        assert_eq!(addrs.current(), "b:2");
    }

    #[test]
    fn a_leader_it_was_not_given_is_added_while_there_is_room() {
        let addrs = CoordinatorAddresses::parse("a:1");
        addrs.after_error("a:1", &not_leader(Some("z:9")));
        assert_eq!(addrs.current(), "z:9");
        assert_eq!(addrs.all(), ["a:1", "z:9"]);
        for i in 0..40 {
            let current = addrs.current();
            addrs.after_error(&current, &not_leader(Some(&format!("n{i}:1"))));
        }
        assert_eq!(addrs.len(), ADDRESSES_MAX, "bounded");
        // Naming itself is no answer.
        let current = addrs.current();
        addrs.after_error(&current, &not_leader(Some(&current)));
        assert_ne!(addrs.current(), current);
    }
}
