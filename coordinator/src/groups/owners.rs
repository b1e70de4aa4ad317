//! Which user made each group, and how much each user's groups hold: so no one user can take
//! every group the coordinator allows (`coordinator.groups_max`) or fill the offsets store,
//! and lock everyone else out.
//!
//! A group belongs to the user whose join or commit made it (a group exists while it has
//! members or committed offsets). Others the access rules let read the group use it as
//! before; what they commit is counted against its owner. Anonymous callers (authentication
//! off) own nothing: only the cluster-wide limits hold them.
//!
//! Pure: the caller says which groups exist, and settles each call it admitted once the call
//! took effect (a commit is written later, after its turn): until then the group counts as
//! existing, so neither a recount nor another user's call takes it from its maker. Counts are
//! kept from when this coordinator started leading: groups made before are held to the
//! cluster-wide limits only. A user's count of groups is recounted only when it reaches the
//! limit (groups that emptied since are given up then), so the common path is one map lookup.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Without a limit on groups, a user's groups are still recounted at this many, so what is
/// kept for the partitions limit stays bounded.
const RECOUNT_UNLIMITED_AT: usize = 10_000;

#[derive(Clone, Copy, Debug)]
pub struct OwnerLimits {
    /// Groups one user may own (0: not limited).
    pub groups_per_user_max: usize,
    /// Committed partitions the groups one user owns may hold together (0: not limited).
    pub committed_partitions_per_user_max: usize,
}

#[derive(Debug, Default)]
struct Holdings {
    groups: HashSet<String>,
    committed_partitions: usize,
}

#[derive(Debug)]
pub struct GroupOwners {
    limits: OwnerLimits,
    owner_of: HashMap<String, Arc<str>>,
    held: HashMap<Arc<str>, Holdings>,
    /// Calls admitted and not yet settled, by group.
    pending: HashMap<String, usize>,
}

impl GroupOwners {
    pub fn new(limits: OwnerLimits) -> Self {
        Self {
            limits,
            owner_of: HashMap::new(),
            held: HashMap::new(),
            pending: HashMap::new(),
        }
    }

    /// The call `admit` let through for `group` took effect (or failed).
    pub fn settle(&mut self, group: &str) {
        if let Some(calls) = self.pending.get_mut(group) {
            *calls -= 1;
            if *calls == 0 {
                self.pending.remove(group);
            }
        }
    }

    /// Before `user` joins or commits to `group`: a group that does not exist yet becomes
    /// `user`'s, if `user` may own one more. `exists` says whether a group has members or
    /// committed offsets now. Every `Ok` is to be settled (`settle`) once the call took effect.
    pub fn admit(
        &mut self,
        group: &str,
        user: Option<&str>,
        exists: impl Fn(&str) -> bool,
    ) -> Result<(), String> {
        self.claim(group, user, exists)?;
        *self.pending.entry(group.to_owned()).or_default() += 1;
        Ok(())
    }

    fn claim(
        &mut self,
        group: &str,
        user: Option<&str>,
        exists: impl Fn(&str) -> bool,
    ) -> Result<(), String> {
        let pending = &self.pending;
        let live = |g: &str| pending.contains_key(g) || exists(g);
        if live(group) {
            return Ok(());
        }
        // The group is new, whatever an earlier owner's record says (it emptied since).
        if let Some(earlier) = self.owner_of.remove(group)
            && let Some(holdings) = self.held.get_mut(&earlier)
        {
            holdings.groups.remove(group);
        }
        let Some(user) = user else {
            return Ok(());
        };
        let max = self.limits.groups_per_user_max;
        let recount_at = if max > 0 { max } else { RECOUNT_UNLIMITED_AT };
        let holdings = self.held.entry(Arc::from(user)).or_default();
        if holdings.groups.len() >= recount_at {
            let owner_of = &mut self.owner_of;
            holdings.groups.retain(|owned| {
                let kept = live(owned);
                if !kept {
                    owner_of.remove(owned);
                }
                kept
            });
            if max > 0 && holdings.groups.len() >= max {
                return Err(format!(
                    "user {user:?} already has {max} consumer groups (coordinator.groups_per_user_max)"
                ));
            }
        }
        holdings.groups.insert(group.to_owned());
        let owner = self
            .held
            .get_key_value(user)
            .map(|(owner, _)| owner.clone())
            .unwrap_or_else(|| Arc::from(user));
        self.owner_of.insert(group.to_owned(), owner);
        Ok(())
    }

    /// Before a commit adds `added` partitions `group` had no offset for: refused if its owner's
    /// groups would then hold more than the limit; else counted.
    pub fn add_partitions(&mut self, group: &str, added: usize) -> Result<(), String> {
        let Some(owner) = self.owner_of.get(group) else {
            return Ok(());
        };
        let max = self.limits.committed_partitions_per_user_max;
        let Some(holdings) = self.held.get_mut(owner) else {
            return Ok(());
        };
        let after = holdings.committed_partitions.saturating_add(added);
        if max > 0 && after > max {
            return Err(format!(
                "the groups of user {owner:?} hold {} committed partitions; {added} more would pass {max} (coordinator.group_committed_partitions_per_user_max)",
                holdings.committed_partitions
            ));
        }
        holdings.committed_partitions = after;
        Ok(())
    }

    /// Gives back what `add_partitions` counted for a commit that then failed.
    pub fn remove_partitions(&mut self, group: &str, removed: usize) {
        if let Some(holdings) = self
            .owner_of
            .get(group)
            .and_then(|owner| self.held.get_mut(owner))
        {
            holdings.committed_partitions = holdings.committed_partitions.saturating_sub(removed);
        }
    }

    /// Groups `user` owns now (as last counted).
    pub fn groups_of(&self, user: &str) -> usize {
        self.held.get(user).map_or(0, |h| h.groups.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// A call admitted and taken effect at once.
    fn call(
        owners: &mut GroupOwners,
        group: &str,
        user: Option<&str>,
        exists: impl Fn(&str) -> bool,
    ) -> Result<(), String> {
        owners.admit(group, user, exists)?;
        owners.settle(group);
        Ok(())
    }

    fn owners(groups: usize, partitions: usize) -> GroupOwners {
        GroupOwners::new(OwnerLimits {
            groups_per_user_max: groups,
            committed_partitions_per_user_max: partitions,
        })
    }

    #[test]
    fn one_user_cannot_take_every_group() {
        let mut owners = owners(2, 0);
        let existing: RefCell<HashSet<String>> = RefCell::default();
        let exists = |g: &str| existing.borrow().contains(g);
        for group in ["a", "b"] {
            call(&mut owners, group, Some("mallory"), exists).unwrap();
            existing.borrow_mut().insert(group.into());
        }
        let refused = call(&mut owners, "c", Some("mallory"), exists).unwrap_err();
        assert!(refused.contains("groups_per_user_max"), "{refused}");
        // Others are not held by mallory's count, nor is anyone using mallory's groups.
        call(&mut owners, "c", Some("alice"), exists).unwrap();
        call(&mut owners, "a", Some("alice"), exists).unwrap();
        call(&mut owners, "d", None, exists).unwrap();
        assert_eq!(owners.groups_of("alice"), 1);
        // A group that emptied is given up when the count is reached again.
        existing.borrow_mut().remove("a");
        call(&mut owners, "c2", Some("mallory"), exists).unwrap();
        assert_eq!(owners.groups_of("mallory"), 2);
    }

    #[test]
    fn a_group_whose_first_call_is_still_in_flight_stays_its_makers() {
        let mut owners = owners(2, 10);
        // Nothing is written yet: every call below is admitted and not settled.
        let none = |_: &str| false;
        owners.admit("g1", Some("mallory"), none).unwrap();
        owners.admit("g2", Some("mallory"), none).unwrap();
        // Pipelined commits do not get past the limit by recounting groups not yet written.
        assert!(owners.admit("g3", Some("mallory"), none).is_err());
        // Nor does another user take a group whose first commit is in flight.
        owners.admit("g1", Some("alice"), none).unwrap();
        assert_eq!(owners.groups_of("alice"), 0);
        owners.add_partitions("g1", 10).unwrap();
        assert!(
            owners.add_partitions("g2", 1).is_err(),
            "g1's count is mallory's"
        );
        // Settled, and never written (the commits failed): given up at the next recount.
        for group in ["g1", "g1", "g2"] {
            owners.settle(group);
        }
        owners.admit("g3", Some("mallory"), none).unwrap();
        assert_eq!(owners.groups_of("mallory"), 1);
    }

    #[test]
    fn a_group_made_again_belongs_to_its_new_maker() {
        let mut owners = owners(1, 10);
        let none = |_: &str| false;
        call(&mut owners, "g", Some("mallory"), none).unwrap();
        // "g" emptied; alice makes it again: hers now, and mallory's count is freed.
        call(&mut owners, "g", Some("alice"), none).unwrap();
        assert_eq!(owners.groups_of("mallory"), 0);
        owners.add_partitions("g", 10).unwrap();
        assert!(owners.add_partitions("g", 1).is_err());
        call(&mut owners, "h", Some("mallory"), none).unwrap();
        owners.add_partitions("h", 10).unwrap();
    }

    #[test]
    fn committed_partitions_count_against_the_owner() {
        let mut owners = owners(0, 100);
        let none = |_: &str| false;
        call(&mut owners, "g1", Some("mallory"), none).unwrap();
        call(&mut owners, "g2", Some("mallory"), none).unwrap();
        owners.add_partitions("g1", 60).unwrap();
        let refused = owners.add_partitions("g2", 41).unwrap_err();
        assert!(refused.contains("per_user_max"), "{refused}");
        owners.add_partitions("g2", 40).unwrap();
        // Groups without an owner (made before this leader, or anonymously) are held to the
        // cluster-wide limits only.
        owners.add_partitions("older", 1_000).unwrap();
        call(&mut owners, "anon", None, none).unwrap();
        owners.add_partitions("anon", 1_000).unwrap();
    }
}
