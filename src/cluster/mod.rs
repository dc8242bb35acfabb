//! What lets several gateway processes — replicas behind one load balancer, or
//! one process and its restarted successor — serve the same host sessions
//! without talking to each other: the keys and the [`Sealer`] (`seal.rs`). The
//! values they seal (session ids, cursors) carry what any process needs to
//! check and use them; nothing here keeps state per request.

mod seal;

pub use seal::{Purpose, Sealer, random_bytes};

#[cfg(test)]
pub(crate) use seal::tests as seal_tests;
