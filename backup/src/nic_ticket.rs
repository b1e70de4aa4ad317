//! Tickets for the software NIC: what a connection to it must present to be believed.
//!
//! The one-sided path stays plain TCP (a backup's CPU never touches what it places, and
//! encrypting would make it), so it is authenticated instead: the backup grants each primary
//! (index and generation) a ticket in the buffer descriptors it answers opens with, over the
//! peer RPC that members authenticate on; the NIC closes a connection whose hello lacks the
//! ticket for the primary it names, before believing that name. A ticket is the first 8 bytes
//! of an HMAC-SHA256, keyed by a secret drawn when this backup starts, over the primary's id:
//! a new backup incarnation grants new tickets, and a ticket says nothing about any other.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;
use tailstream_wire::ids::ServerId;

/// This backup incarnation's ticket key.
pub struct NicTickets {
    key: [u8; 32],
}

impl std::fmt::Debug for NicTickets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NicTickets")
    }
}

impl NicTickets {
    /// A fresh key.
    pub fn new() -> Self {
        Self {
            key: rand::random(),
        }
    }

    /// The ticket granted to `primary`.
    pub fn ticket_for(&self, primary: ServerId) -> u64 {
        // Any key length is valid for HMAC.
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes any key");
        mac.update(&primary.index.to_le_bytes());
        mac.update(&primary.generation.to_le_bytes());
        let digest = mac.finalize().into_bytes();
        let mut ticket = [0u8; 8];
        ticket.copy_from_slice(&digest[..8]);
        u64::from_le_bytes(ticket)
    }

    /// Whether `ticket` is the one granted to `primary` (compared in constant time).
    pub fn admits(&self, primary: ServerId, ticket: u64) -> bool {
        let granted = self.ticket_for(primary).to_le_bytes();
        granted.ct_eq(&ticket.to_le_bytes()).into()
    }
}

impl Default for NicTickets {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticket_admits_its_own_primary_only() {
        let tickets = NicTickets::new();
        let primary = ServerId::new(3, 2);
        let ticket = tickets.ticket_for(primary);
        assert!(tickets.admits(primary, ticket));
        assert!(
            !tickets.admits(ServerId::new(3, 3), ticket),
            "another generation"
        );
        assert!(
            !tickets.admits(ServerId::new(4, 2), ticket),
            "another server"
        );
        assert!(!tickets.admits(primary, ticket ^ 1));
        assert!(
            !NicTickets::new().admits(primary, ticket),
            "another incarnation"
        );
    }
}
