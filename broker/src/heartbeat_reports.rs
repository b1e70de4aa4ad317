//! What a heartbeat tells the coordinator about the logs a broker owns (heads, committed ends,
//! replica sets), as a state machine with no I/O.
//!
//! A broker may own tens of thousands of logs and heartbeats every tenth of a second, so a
//! heartbeat neither scans every log nor sends every one: `Reports` keeps, per kind, what the
//! coordinator acknowledged and a queue of keys that may differ from it (fed by the store's
//! commit feed and the replicators' health changes, or by every key when a session with a
//! coordinator starts: a registration, or a reconnection).
//! Each heartbeat takes queued keys in order, oldest first, until its byte budget is spent: a
//! registration with a new leader then reports everything over a few heartbeats, in frames
//! the coordinator accepts, instead of one frame it refuses again and again.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;

/// One kind of report: acknowledged values, and the keys queued to be looked at again.
#[derive(Debug)]
pub struct Reports<K, V> {
    acknowledged: HashMap<K, V>,
    queue: VecDeque<K>,
    queued: HashSet<K>,
    /// Sent in the heartbeat in flight, not yet acknowledged: queued again if the next
    /// heartbeat is built before they are.
    in_flight: Vec<(K, V)>,
}

impl<K, V> Default for Reports<K, V> {
    fn default() -> Self {
        Self {
            acknowledged: HashMap::new(),
            queue: VecDeque::new(),
            queued: HashSet::new(),
            in_flight: Vec::new(),
        }
    }
}

impl<K: Copy + Eq + Hash, V: Clone + PartialEq> Reports<K, V> {
    /// `key`'s value may have changed: looked at by a coming heartbeat (once, however often
    /// it is marked before).
    pub fn mark(&mut self, key: K) {
        if self.queued.insert(key) {
            self.queue.push_back(key);
        }
    }

    /// The coordinator forgot everything (a registration): nothing counts as acknowledged.
    /// The caller marks every key it holds.
    pub fn forget(&mut self) {
        self.acknowledged.clear();
        self.in_flight.clear();
    }

    /// Keys whose stream was deleted: forgotten, acknowledged or queued.
    pub fn forget_where(&mut self, gone: impl Fn(&K) -> bool) {
        self.acknowledged.retain(|key, _| !gone(key));
        self.in_flight.retain(|(key, _)| !gone(key));
        self.queue.retain(|key| !gone(key));
        self.queued.retain(|key| !gone(key));
    }

    /// Values for the next heartbeat: queued keys, oldest first, whose current value (per
    /// `current`; `None` drops the key) differs from the acknowledged one, until `budget`
    /// (spent per value by `cost`) is used up. A key left unsent stays queued.
    pub fn take(
        &mut self,
        budget: &mut usize,
        current: impl Fn(&K) -> Option<V>,
        cost: impl Fn(&K, &V) -> usize,
    ) -> Vec<(K, V)> {
        for (key, _) in std::mem::take(&mut self.in_flight) {
            self.mark(key);
        }
        let mut taken = Vec::new();
        while let Some(key) = self.queue.front().copied() {
            let Some(value) = current(&key) else {
                self.unqueue_front();
                continue;
            };
            if self.acknowledged.get(&key) == Some(&value) {
                self.unqueue_front();
                continue;
            }
            let spent = cost(&key, &value);
            if spent > *budget {
                break;
            }
            *budget -= spent;
            self.unqueue_front();
            taken.push((key, value));
        }
        self.in_flight = taken.clone();
        taken
    }

    /// The heartbeat carrying what the last `take` returned was answered.
    pub fn acknowledged(&mut self) {
        for (key, value) in std::mem::take(&mut self.in_flight) {
            self.acknowledged.insert(key, value);
        }
    }

    /// The value the coordinator acknowledged for `key`.
    #[cfg(test)]
    pub fn acknowledged_value(&self, key: &K) -> Option<&V> {
        self.acknowledged.get(key)
    }

    #[cfg(test)]
    pub fn queued_len(&self) -> usize {
        self.queue.len()
    }

    fn unqueue_front(&mut self) {
        if let Some(key) = self.queue.pop_front() {
            self.queued.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    type Values = RefCell<HashMap<u32, u64>>;

    /// Keys `0..keys`, each at `value`, all marked.
    fn marked(keys: u32, value: u64) -> (Values, Reports<u32, u64>) {
        let values: Values = RefCell::new((0..keys).map(|k| (k, value)).collect());
        let mut reports = Reports::default();
        for key in 0..keys {
            reports.mark(key);
        }
        (values, reports)
    }

    fn take(reports: &mut Reports<u32, u64>, values: &Values, budget: usize) -> Vec<(u32, u64)> {
        let mut budget = budget;
        reports.take(&mut budget, |k| values.borrow().get(k).copied(), |_, _| 10)
    }

    #[test]
    fn only_changed_values_are_sent_and_each_once_acknowledged() {
        let (values, mut reports) = marked(5, 0);
        assert_eq!(take(&mut reports, &values, 1000).len(), 5);
        reports.acknowledged();
        // Marked again, unchanged: nothing to send.
        reports.mark(1);
        assert!(take(&mut reports, &values, 1000).is_empty());
        values.borrow_mut().insert(3, 7);
        reports.mark(3);
        reports.mark(3);
        assert_eq!(take(&mut reports, &values, 1000), vec![(3, 7)]);
        reports.acknowledged();
        assert_eq!(reports.acknowledged_value(&3), Some(&7));
        assert_eq!(reports.queued_len(), 0);
    }

    #[test]
    fn a_budget_splits_the_reports_over_heartbeats_oldest_first() {
        let (values, mut reports) = marked(10, 1);
        let mut sent = Vec::new();
        for _ in 0..4 {
            let taken = take(&mut reports, &values, 35);
            assert!(taken.len() <= 3);
            sent.extend(taken.into_iter().map(|(k, _)| k));
            reports.acknowledged();
        }
        assert_eq!(sent, (0..10).collect::<Vec<_>>());
        assert_eq!(reports.queued_len(), 0);
    }

    #[test]
    fn what_an_unanswered_heartbeat_carried_is_sent_again() {
        let (values, mut reports) = marked(3, 1);
        assert_eq!(take(&mut reports, &values, 1000).len(), 3);
        // No answer: the next heartbeat carries the same again.
        assert_eq!(take(&mut reports, &values, 1000).len(), 3);
        reports.acknowledged();
        assert!(take(&mut reports, &values, 1000).is_empty());
    }

    #[test]
    fn a_registration_sends_everything_again_and_gone_keys_are_dropped() {
        let (values, mut reports) = marked(3, 1);
        take(&mut reports, &values, 1000);
        reports.acknowledged();
        reports.forget();
        values.borrow_mut().remove(&1);
        for key in 0..3 {
            reports.mark(key);
        }
        assert_eq!(take(&mut reports, &values, 1000), vec![(0, 1), (2, 1)]);
        reports.acknowledged();
        reports.forget_where(|k| *k == 2);
        assert_eq!(reports.acknowledged_value(&2), None);
        assert_eq!(reports.acknowledged_value(&0), Some(&1));
    }
}
