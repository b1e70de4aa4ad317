//! [`TermFence`]: the newest coordinator term this broker has seen. Every order a coordinator
//! gives (an assignment, a rebuild, a listing that fences) names its term; an order from an
//! older term than one already seen comes from a deposed leader (one paused past its lease
//! between deciding and sending, say) and is refused whole, as is a heartbeat answer from one.
//!
//! Why that suffices: a new leader hands no streamlet over before a broker lease has passed
//! since it began to lead, and every live broker heartbeats to it within that lease, so by the
//! first hand-over of the new term every live broker refuses the old term's orders. An old
//! order arriving earlier is one its leader gave while it still led.

use std::sync::atomic::{AtomicU64, Ordering};
use tailstream_wire::CoordinatorTerm;

#[derive(Debug, Default)]
pub struct TermFence {
    newest: AtomicU64,
}

impl TermFence {
    /// Takes `term` as seen: `Ok` when no newer one was, else `Err` with the newest.
    pub fn admit(&self, term: CoordinatorTerm) -> Result<(), CoordinatorTerm> {
        let before = self.newest.fetch_max(term.0, Ordering::AcqRel);
        if term.0 > before {
            // The newest as it is now: a concurrent raise may have passed this one.
            let newest = self.newest.load(Ordering::Acquire);
            metrics::gauge!(crate::metrics::COORDINATOR_TERM).set(newest as f64);
        }
        if term.0 >= before {
            Ok(())
        } else {
            Err(CoordinatorTerm(before))
        }
    }

    /// Takes `term` as the newest, even below what was seen: for the answer to a registration
    /// only. A coordinator answers one only while it surely leads, so its term is the
    /// current one; a lower term than seen means the saved term went back (an etcd restored
    /// from a snapshot, a coordinator's lost data directory), and refusing the leader there
    /// would leave this broker unable to serve until restarted.
    pub fn reset_to(&self, term: CoordinatorTerm) {
        self.newest.store(term.0, Ordering::Release);
        metrics::gauge!(crate::metrics::COORDINATOR_TERM).set(term.0 as f64);
    }

    /// The newest term seen (0 before any).
    pub fn newest(&self) -> CoordinatorTerm {
        CoordinatorTerm(self.newest.load(Ordering::Acquire))
    }
}

/// The refusal of an order from `term`, `newest` having been seen.
pub fn stale(what: &str, term: CoordinatorTerm, newest: CoordinatorTerm) -> String {
    format!("{what} from coordinator {term}, but {newest} has led since: refused")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_of_the_newest_term_pass_and_older_ones_are_refused() {
        let fence = TermFence::default();
        assert_eq!(fence.admit(CoordinatorTerm(3)), Ok(()));
        assert_eq!(
            fence.admit(CoordinatorTerm(3)),
            Ok(()),
            "the same term again"
        );
        assert_eq!(fence.admit(CoordinatorTerm(2)), Err(CoordinatorTerm(3)));
        assert_eq!(
            fence.newest(),
            CoordinatorTerm(3),
            "a refusal changes nothing"
        );
        assert_eq!(fence.admit(CoordinatorTerm(5)), Ok(()));
        assert_eq!(fence.admit(CoordinatorTerm(4)), Err(CoordinatorTerm(5)));
        fence.reset_to(CoordinatorTerm(1));
        assert_eq!(
            fence.admit(CoordinatorTerm(1)),
            Ok(()),
            "a registration's term"
        );
        assert_eq!(fence.admit(CoordinatorTerm(0)), Err(CoordinatorTerm(1)));
    }
}
