//! Who a native connection is: its [`Session`], which every request on it carries, and the
//! [`Authenticator`] a listener that requires authentication runs its `Authenticate` steps
//! through.
//!
//! The server drives the exchange on the connection's reader, one step at a time and before
//! reading anything else, so a request pipelined behind the client's last step is already
//! checked as the user it proved. Until then the listener answers nothing but `Ping`,
//! `Authenticate` and what the service lets in by itself (the coordinator's user and access
//! control operations, which carry the admin token), and closes the connection once
//! `handshake_timeout` passed from its opening. Once authenticated, a connection is checked
//! every `recheck_every` against the user's current credentials, and closed once its user is
//! gone or its password changed.

use crate::listener::Standing;
use crate::pace::Debt;
use bytes::Bytes;
use futures::future::BoxFuture;
use std::any::Any;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::response::Response;

/// One connection's identity, shared by every request on it.
#[derive(Debug)]
pub struct Session {
    /// Set once, when the connection authenticated.
    user: OnceLock<Arc<str>>,
    /// What the user proved with (SCRAM's StoredKey), to check later that it still holds.
    proof: OnceLock<Bytes>,
    /// The authenticator's state between two steps (its SCRAM exchange).
    exchange: Mutex<Option<Box<dyn Any + Send>>>,
    standing: Option<Standing>,
    /// Decompression this connection's requests cost beyond the service's rate.
    decompression: Mutex<Option<Debt>>,
    /// Until when the server reads nothing more from this connection (a quota's throttle).
    muted_until: Mutex<Option<tokio::time::Instant>>,
    /// Whether `muted_until` holds a mute: the reader asks before every frame, so it asks
    /// this flag, not the lock.
    muted: AtomicBool,
}

impl Session {
    pub(crate) fn new(standing: Option<Standing>) -> Session {
        Session {
            user: OnceLock::new(),
            proof: OnceLock::new(),
            exchange: Mutex::new(None),
            standing,
            decompression: Mutex::new(None),
            muted_until: Mutex::new(None),
            muted: AtomicBool::new(false),
        }
    }

    /// A session that proved nothing, for a service called outside a connection (tests).
    pub fn anonymous() -> Arc<Session> {
        Arc::new(Session::new(None))
    }

    /// A session of `user`, for a service called outside a connection (tests).
    pub fn of_user(user: &str) -> Arc<Session> {
        let session = Session::new(None);
        let _ = session.user.set(Arc::from(user));
        Arc::new(session)
    }

    /// Charges `bytes` of decompression to this connection at `now`, against
    /// `bytes_per_second` (0: no limit), one second of it free as burst; the wait it now owes
    /// (zero within the rate). Charge 0 to ask.
    pub fn pace_decompression(
        &self,
        bytes_per_second: u64,
        bytes: u64,
        now: tokio::time::Instant,
    ) -> Duration {
        let mut debt = self.decompression.lock().unwrap_or_else(|p| p.into_inner());
        debt.get_or_insert_with(|| Debt::new(now))
            .settle(bytes_per_second, bytes, now)
    }

    /// Has the server read nothing more from this connection for `wait` (from now), once the
    /// answer at hand is queued: a quota's throttle, as Kafka's brokers mute a throttled
    /// connection (KIP-219). Answers to requests already read still go out. Bounded by the
    /// caller (`pace::WAIT_MAX`).
    pub fn mute_for(&self, wait: Duration) {
        if wait.is_zero() {
            return;
        }
        let until = tokio::time::Instant::now() + wait;
        let mut muted = self.muted_until.lock().unwrap_or_else(|p| p.into_inner());
        *muted = Some(muted.map_or(until, |earlier| earlier.max(until)));
        self.muted.store(true, Ordering::Release);
    }

    /// Until when the connection is to be muted, if it is (taken: asked once per mute).
    pub(crate) fn take_mute(&self) -> Option<tokio::time::Instant> {
        if !self.muted.load(Ordering::Acquire) {
            return None;
        }
        let mut muted = self.muted_until.lock().unwrap_or_else(|p| p.into_inner());
        // Cleared under the lock, so a mute set meanwhile is either taken here or flagged anew.
        self.muted.store(false, Ordering::Release);
        muted.take()
    }

    /// The user this connection authenticated as; `None` before, or on a listener that
    /// requires no authentication.
    pub fn user(&self) -> Option<&str> {
        self.user.get().map(|user| &**user)
    }

    /// Records that the connection proved to be `user`. False if it was already closed to make
    /// room for a newer connection (say nothing more to it) or had authenticated before.
    pub(crate) fn prove(&self, proven: Proven) -> bool {
        if let Some(standing) = &self.standing
            && !standing.proven()
        {
            return false;
        }
        let _ = self.proof.set(proven.proof);
        self.user.set(Arc::from(proven.user)).is_ok()
    }

    /// The user and what it proved with, once authenticated.
    pub(crate) fn proven(&self) -> Option<(&str, &Bytes)> {
        Some((self.user()?, self.proof.get()?))
    }

    /// Takes the authenticator's state of the exchange in progress, if it is a `T`.
    pub fn take_exchange<T: Any + Send>(&self) -> Option<Box<T>> {
        let mut exchange = self.exchange.lock().unwrap_or_else(|p| p.into_inner());
        exchange.take()?.downcast().ok()
    }

    /// Keeps the authenticator's state until the next step.
    pub fn keep_exchange<T: Any + Send>(&self, state: T) {
        *self.exchange.lock().unwrap_or_else(|p| p.into_inner()) = Some(Box::new(state));
    }
}

/// What one `Authenticate` step ends in.
#[derive(Debug)]
pub enum Step {
    /// Answer, and wait for the client's next step.
    Continue(Response),
    /// The client proved to be this user: answer (the server's final message).
    Proven(Response, Proven),
    /// Answer (`AuthenticationFailed`), then close the connection, for this reason (logged).
    Refused(Response, String),
}

/// Who a connection proved to be, and with what (SCRAM's StoredKey of the credential).
#[derive(Debug)]
pub struct Proven {
    pub user: String,
    pub proof: Bytes,
}

/// Checks a native connection's `Authenticate` steps.
pub trait Authenticator: Send + Sync + std::fmt::Debug + 'static {
    fn step<'a>(&'a self, session: &'a Session, body: Bytes) -> BoxFuture<'a, Step>;

    /// Whether `user` still holds the credential it proved with (`proof`): `Some(false)` once
    /// the user is gone or its password changed; `None` when that cannot be told now (the
    /// session carries on).
    fn still_holds<'a>(&'a self, user: &'a str, proof: &'a [u8]) -> BoxFuture<'a, Option<bool>>;
}

/// A listener's authentication requirement.
#[derive(Clone, Debug)]
pub struct Authentication {
    pub authenticator: Arc<dyn Authenticator>,
    /// A connection not authenticated this long after it opened is closed.
    pub handshake_timeout: Duration,
    /// How often an authenticated connection checks that its user still holds its credential
    /// (`security.session_recheck_ms`); `None`: never.
    pub recheck_every: Option<Duration>,
}
