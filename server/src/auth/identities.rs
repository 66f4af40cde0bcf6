//! The identities API tokens proved to this process lately (by the token's hash), so that a
//! script's request costs no query to say who sent it (sessions are always looked up: see
//! `http::identity`). Forgotten when an
//! `account_changed` notification names the person, or once its credential may have lapsed
//! (see [`super::super::progress::remembered`] for the rest of the rules). The transaction that
//! changes someone's tokens or role forgets them here before it commits and holds them until
//! its notification comes back ([`changing`]), so the request after a revocation or a
//! demotion through this process is judged afresh at once.

use std::{
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use app::auth::Me;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::progress::{
    Change, Hub,
    remembered::{self, Holds, Live, Remembered, Ticket},
};

/// Credentials remembered at most.
const CAPACITY: usize = 10_000;

pub struct Identities {
    remembered: Remembered<Vec<u8>, Me>,
    /// People whose change is being committed: not served nor remembered until their
    /// notification comes back (or for `remembered::HOLD` at most).
    held: Mutex<Holds<Uuid>>,
}

/// Every [`Identities`] of this process.
static LIVE: Live<Identities> = Live::new();

impl Identities {
    /// Starts forgetting the people the hub reports changed; stops on `shutdown`.
    pub fn start(hub: &Hub, shutdown: CancellationToken) -> Arc<Self> {
        let identities = Arc::new(Self {
            remembered: Remembered::new(hub.clone(), CAPACITY),
            held: Mutex::new(Holds::new(CAPACITY)),
        });
        LIVE.add(&identities);
        remembered::follow(
            &identities,
            hub.accounts(),
            shutdown,
            |identities, change| match change {
                Change::Account(id) => {
                    identities.forget(id);
                    identities.held().release(&id, 0);
                }
                Change::Job(_) => {}
                Change::Resync => {
                    identities.remembered.forget_all();
                    identities.held().clear();
                }
            },
        );
        identities
    }

    /// Who the credential with this hash proved to be lately.
    pub fn get(&self, credential_hash: &[u8]) -> Option<Me> {
        self.remembered
            .get(credential_hash)
            .filter(|me| !self.holds(me.id))
    }

    fn held(&self) -> MutexGuard<'_, Holds<Uuid>> {
        self.held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn holds(&self, person: Uuid) -> bool {
        self.held().holds(&person)
    }

    /// Taken before the credential is looked up.
    pub fn ticket(&self) -> Ticket {
        self.remembered.ticket()
    }

    /// Remembers who the credential proved to be, for up to `lasting`.
    pub fn remember(&self, ticket: Ticket, credential_hash: Vec<u8>, me: Me, lasting: Duration) {
        self.remembered
            .remember(ticket, credential_hash, me, lasting);
    }

    fn forget(&self, person: Uuid) {
        self.remembered.forget_where(|_, me| me.id == person);
    }
}

/// A transaction is changing `person`'s sessions, tokens or role.
pub fn changing(person: Uuid) {
    LIVE.each(|identities| {
        identities.held().hold(person, 0);
        identities.forget(person);
    });
}
