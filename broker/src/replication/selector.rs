//! Choosing backups: at random among live brokers other than this one, never one that
//! already holds a replica of the segment, and not one that failed recently (quarantine)
//! while another qualifies, unless it came back as a new generation, which is a different
//! server id. A quarantine
//! belongs to the incarnation of this broker that saw the failure: a paused broker that comes
//! back finds every backup refusing its old generation's writes, and must not hold that
//! against them once it registers again.

use rand::seq::IndexedRandom;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tailstream_wire::ServerId;
use tailstream_wire::messages::BrokerInfo;

#[derive(Debug)]
pub struct BackupSelector {
    quarantine: Duration,
    /// Failed backup -> when, and which incarnation of this broker saw it fail.
    failed_at: HashMap<ServerId, (Instant, ServerId)>,
}

impl BackupSelector {
    pub fn new(quarantine: Duration) -> Self {
        Self {
            quarantine,
            failed_at: HashMap::new(),
        }
    }

    /// `backup` failed, as incarnation `me` saw it: `me` does not choose it again for a while.
    pub fn failed(&mut self, backup: ServerId, me: ServerId, now: Instant) {
        self.failed_at.insert(backup, (now, me));
    }

    /// A backup for a segment, or `None` when no broker qualifies.
    pub fn choose(
        &mut self,
        membership: &[BrokerInfo],
        me: ServerId,
        exclude: &[ServerId],
        now: Instant,
    ) -> Option<BrokerInfo> {
        let quarantine = self.quarantine;
        self.failed_at.retain(|_, (at, seen_by)| {
            *seen_by == me && now.saturating_duration_since(*at) < quarantine
        });
        let eligible: Vec<&BrokerInfo> = membership
            .iter()
            .filter(|b| b.alive)
            .filter(|b| b.server_id.index != me.index)
            .filter(|b| !exclude.iter().any(|e| e.index == b.server_id.index))
            .collect();
        let healthy: Vec<&BrokerInfo> = eligible
            .iter()
            .copied()
            .filter(|b| !self.failed_at.contains_key(&b.server_id))
            .collect();
        if let Some(chosen) = healthy.choose(&mut rand::rng()) {
            return Some((*chosen).clone());
        }
        // Quarantine is a preference, not a ban: when every live broker left failed recently
        // (e.g. a recovery that needs exactly the survivors), the one that failed longest ago
        // is tried again rather than leaving the segment without copies until it ends.
        eligible
            .into_iter()
            .min_by_key(|b| self.failed_at.get(&b.server_id).map(|(at, _)| *at))
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broker(index: u32, generation: u32, alive: bool) -> BrokerInfo {
        BrokerInfo {
            server_id: ServerId::new(index, generation),
            rpc_addr: format!("127.0.0.1:{index}"),
            peer_addr: format!("127.0.0.1:{}", 10_000 + index),
            crashed: false,
            admin_addr: String::new(),
            kafka_addr: String::new(),
            alive,
        }
    }

    #[test]
    fn only_live_distinct_unquarantined_brokers_other_than_me_are_chosen() {
        let mut selector = BackupSelector::new(Duration::from_secs(5));
        let now = Instant::now();
        let members = vec![
            broker(0, 1, true),
            broker(1, 1, true),
            broker(2, 1, false),
            broker(3, 1, true),
        ];
        let me = ServerId::new(0, 1);
        for _ in 0..50 {
            let chosen = selector
                .choose(&members, me, &[ServerId::new(1, 1)], now)
                .unwrap();
            assert_eq!(chosen.server_id, ServerId::new(3, 1));
        }
        selector.failed(ServerId::new(3, 1), me, now);
        let with_another = [members.clone(), vec![broker(4, 1, true)]].concat();
        for _ in 0..50 {
            let chosen = selector
                .choose(&with_another, me, &[ServerId::new(1, 1)], now)
                .unwrap();
            assert_eq!(
                chosen.server_id,
                ServerId::new(4, 1),
                "never the quarantined one while another qualifies"
            );
        }
        assert_eq!(
            selector
                .choose(&members, me, &[ServerId::new(1, 1)], now)
                .map(|b| b.server_id),
            Some(ServerId::new(3, 1)),
            "the only live broker left, quarantined or not"
        );
        assert!(
            selector
                .choose(
                    &members,
                    me,
                    &[ServerId::new(1, 1), ServerId::new(3, 1)],
                    now
                )
                .is_none(),
            "none qualifies"
        );
        // The same slot as a new generation is a different server: eligible at once.
        let members = vec![broker(0, 1, true), broker(1, 1, true), broker(3, 2, true)];
        let chosen = selector
            .choose(&members, me, &[ServerId::new(1, 1)], now)
            .unwrap();
        assert_eq!(chosen.server_id, ServerId::new(3, 2));
        // A new incarnation of this broker starts with no quarantine.
        let members = vec![broker(0, 2, true), broker(1, 1, true), broker(3, 1, true)];
        selector.failed(ServerId::new(3, 1), me, now);
        assert_eq!(
            selector
                .choose(&members, ServerId::new(0, 2), &[ServerId::new(1, 1)], now)
                .map(|b| b.server_id),
            Some(ServerId::new(3, 1))
        );
        assert!(selector.failed_at.is_empty(), "not held against it");
        // Quarantine ends.
        selector.failed(ServerId::new(3, 1), me, now);
        let members = vec![broker(3, 1, true)];
        assert!(
            selector
                .choose(&members, me, &[], now + Duration::from_secs(6))
                .is_some()
        );
        assert!(selector.failed_at.is_empty(), "expired");
    }
}
