//! What lets several gateway processes — replicas behind one load balancer, or
//! one process and its restarted successor — serve the same host sessions
//! without talking to each other: the keys and the [`Sealer`] (`seal.rs`). The
//! values they seal (session ids, cursors) carry what any process needs to
//! check and use them; nothing here keeps state per request. What a sealed value
//! cannot carry — whether a session still exists, what it changed — is in the
//! shared store (`store.rs` over `redis.rs`, `[cluster] redis`), read only when a
//! replica does not hold the session.

mod bell;
mod ctl;
mod events;
mod inbox;
mod listener;
mod owner;
mod redis;
mod seal;
mod standalone;
mod store;
mod subscriptions;
mod tasks;
mod upstream;

pub use bell::Bell;
pub use ctl::Ctl;
pub use events::MirroredEvent;
pub use listener::ListenClaim;
pub use owner::{Claim, GiveUp, OwnedSubscription, Take};
pub use seal::{Purpose, Sealer, random_bytes};
pub use standalone::{StandaloneClaim, StandaloneWrite};
pub use store::{Lookup, SharedStore, Started, StoreMetrics, record_key};
pub use subscriptions::{Held, parse_held_field};
pub use upstream::{Recorded, fingerprint, open_upstream, seal_upstream, upstream_field};

#[cfg(test)]
pub(crate) use seal::tests as seal_tests;
