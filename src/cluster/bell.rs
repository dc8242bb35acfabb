//! Doorbells of mirrored streams: a replica following a stream another
//! replica produces (a POST stream resumed here, the answer of a request
//! handed to the session's owner: `http/resume.rs`) waits for the session's
//! channel `mcpg:{h}:bell`, which the producer rings (`PUBLISH`, in the same
//! pipeline as the mirror write, so no round trip of its own) with each event,
//! rather than polling the mirror. A replica subscribes to a session's
//! channel while anything here follows one of its streams (on the connection
//! that carries `ctl`, resubscribed after a reconnect), so the publishes of
//! sessions nobody follows reach nobody. A bell only says "read the mirror";
//! a lost one (published while the connection was down, or while a
//! follower's subscription is on its way) only delays the follower until its
//! slow fallback poll. One task at a time changes a session's subscription
//! (`reconcile`), so the last follower's `UNSUBSCRIBE` never lands after the
//! next follower's `SUBSCRIBE`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::store::SharedStore;

/// The bells of the sessions followed here.
#[derive(Default)]
pub(super) struct Bells {
    map: Mutex<HashMap<String, Entry>>,
}

struct Entry {
    /// [`Bell`]s alive for the session.
    followers: usize,
    /// Counts the rings (a follower wakes when it changed).
    rings: watch::Sender<u64>,
    /// Whether the channel is subscribed (as far as the last acknowledged
    /// command says).
    subscribed: bool,
    /// Whether a task is bringing the subscription in line with `followers`
    /// ([`reconcile`]): one at a time, so a `SUBSCRIBE` and an `UNSUBSCRIBE`
    /// of one session never race.
    busy: bool,
}

impl Bells {
    /// Wakes whatever follows a stream of session `h` here.
    pub(super) fn ring(&self, h: &str) {
        if let Ok(map) = self.map.lock()
            && let Some(e) = map.get(h)
        {
            e.rings.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// A new follower of session `h`: its receiver, and whether the caller
    /// is to run [`reconcile`] (the channel is not subscribed and nobody is
    /// changing that).
    fn join(&self, h: &str) -> Option<(watch::Receiver<u64>, bool)> {
        let mut map = self.map.lock().ok()?;
        let e = map.entry(h.to_owned()).or_insert_with(|| Entry {
            followers: 0,
            rings: watch::channel(0).0,
            subscribed: false,
            busy: false,
        });
        e.followers += 1;
        let go = !e.busy && !e.subscribed;
        e.busy |= go;
        Some((e.rings.subscribe(), go))
    }

    /// A follower of session `h` left; whether the caller is to run
    /// [`reconcile`] (it was the last and the channel is subscribed).
    fn leave(&self, h: &str) -> bool {
        let Ok(mut map) = self.map.lock() else {
            return false;
        };
        let Some(e) = map.get_mut(h) else {
            return false;
        };
        e.followers = e.followers.saturating_sub(1);
        if e.followers > 0 || e.busy {
            return false;
        }
        if !e.subscribed {
            map.remove(h);
            return false;
        }
        e.busy = true;
        true
    }

    /// For the task holding `busy` on session `h`, after `done` (what it
    /// asked: subscribe or not, and whether the store acknowledged it): the
    /// next command (`Some(true)` subscribe, `Some(false)` unsubscribe), or
    /// `None` when the subscription matches the followers (or a subscribe
    /// failed: followers poll) and `busy` is cleared.
    fn next(&self, h: &str, done: Option<(bool, bool)>) -> Option<bool> {
        let mut map = self.map.lock().ok()?;
        let e = map.get_mut(h)?;
        let failed = match done {
            // An unsubscribe that failed counts as done: a stray push for a
            // session nobody follows is ignored (`ring`).
            Some((want, ok)) => {
                e.subscribed = want && ok;
                want && !ok
            }
            None => false,
        };
        let want = e.followers > 0;
        if failed || want == e.subscribed {
            e.busy = false;
            if e.followers == 0 {
                map.remove(h);
            }
            return None;
        }
        Some(want)
    }

    /// Whether session `h`'s channel is subscribed.
    fn subscribed(&self, h: &str) -> bool {
        self.map
            .lock()
            .is_ok_and(|m| m.get(h).is_some_and(|e| e.subscribed))
    }
}

/// Brings session `h`'s subscription in line with its followers, one command
/// at a time, until it matches (followers that joined or left meanwhile are
/// seen at each step).
async fn reconcile(store: &SharedStore, h: &str) {
    let mut done = None;
    while let Some(want) = store.bells.next(h, done) {
        let redis = &store.link.redis;
        let ok = match want {
            true => store.link.op("bell", redis.subscribe_bell(h)).await,
            false => store.link.op("bell", redis.unsubscribe_bell(h)).await,
        }
        .is_ok();
        done = Some((want, ok));
    }
}

/// One follower's doorbell of a session; dropping it leaves (the last one
/// out unsubscribes, in the background).
pub struct Bell {
    store: Arc<SharedStore>,
    h: String,
    rings: watch::Receiver<u64>,
}

impl Bell {
    /// Resolves when the bell rang since the last time this returned (at
    /// once if it rang meanwhile: a ring during a read of the mirror is not
    /// lost). Cancel-safe.
    pub async fn rung(&mut self) {
        if self.rings.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for Bell {
    fn drop(&mut self) {
        if !self.store.bells.leave(&self.h) {
            return;
        }
        let (store, h) = (self.store.clone(), std::mem::take(&mut self.h));
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move { reconcile(&store, &h).await });
        } else {
            // No runtime (shutting down): no command; forget the session.
            store.bells.next(&h, Some((true, false)));
        }
    }
}

impl SharedStore {
    /// The doorbell of session `h`'s mirrored streams for a follower here
    /// (subscribing to `mcpg:{h}:bell` for the first one: one round trip).
    /// `None` when the store does not answer: poll instead.
    pub async fn bell(self: &Arc<Self>, h: &str) -> Option<Bell> {
        if !self.is_up() {
            return None;
        }
        let (rings, go) = self.bells.join(h)?;
        let bell = Bell {
            store: self.clone(),
            h: h.to_owned(),
            rings,
        };
        if go {
            reconcile(self, h).await;
            if !self.bells.subscribed(h) {
                return None;
            }
        }
        Some(bell)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_ring_wakes_every_follower_of_the_session_once() {
        let bells = Bells::default();
        let (mut a, first) = bells.join("h1").unwrap();
        let (mut b, second) = bells.join("h1").unwrap();
        assert!(first && !second, "one task subscribes per session");
        bells.ring("other");
        assert!(!a.has_changed().unwrap(), "another session's bell");
        bells.ring("h1");
        bells.ring("h1");
        a.changed().await.unwrap();
        b.changed().await.unwrap();
        assert!(!a.has_changed().unwrap(), "two rings while busy wake once");
        assert_eq!(bells.next("h1", None), Some(true), "the first subscribes");
        assert_eq!(
            bells.next("h1", Some((true, true))),
            None,
            "then it matches"
        );
        assert!(!bells.leave("h1"));
        assert!(bells.leave("h1"), "the last one unsubscribes");
        assert_eq!(bells.next("h1", None), Some(false));
        let (_c, go) = bells.join("h1").unwrap();
        assert!(!go, "one joining meanwhile leaves it to the task at work");
        let again = bells.next("h1", Some((false, true)));
        assert_eq!(again, Some(true), "which subscribes again");
        assert_eq!(bells.next("h1", Some((true, true))), None);
        assert!(bells.subscribed("h1"));
    }

    /// A `redis-server` of the test's own on a free port (killed on drop).
    struct Server(std::process::Child, u16);

    impl Drop for Server {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    async fn redis_server() -> Server {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap();
        let child = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server");
        let server = Server(child, port);
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        server
    }

    fn cli(port: u16, args: &[&str]) -> String {
        let out = std::process::Command::new("redis-cli")
            .args(["-p", &port.to_string()])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    async fn started_store(port: u16) -> Arc<SharedStore> {
        let cluster = crate::config::ClusterConfig {
            redis: Some(format!("redis://127.0.0.1:{port}")),
            ..Default::default()
        };
        let metrics = super::super::store::StoreMetrics {
            up: prometheus::IntGauge::new("up", "up").unwrap(),
            errors: prometheus::IntCounterVec::new(prometheus::Opts::new("e", "e"), &["op"])
                .unwrap(),
        };
        let (store, _rx) = SharedStore::new(&cluster, std::time::Duration::from_secs(60), metrics)
            .unwrap()
            .unwrap();
        store
            .start(tokio_util::sync::CancellationToken::new())
            .await;
        assert!(store.is_up());
        store
    }

    // review6: the last follower's UNSUBSCRIBE is spawned on drop; a new
    // follower's SUBSCRIBE, awaited at once, can reach Redis first. The
    // channel then ends up unsubscribed while the new follower (and every
    // later one, as long as one is alive) waits: no ring ever comes, each
    // event waits for the 1 s fallback poll.
    #[tokio::test]
    async fn a_follower_right_after_the_last_one_left_still_hears_the_bell() {
        let server = redis_server().await;
        let store = started_store(server.1).await;
        let first = store.bell("h1").await.expect("a bell");
        drop(first);
        let mut next = store.bell("h1").await.expect("a bell");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let numsub = cli(server.1, &["PUBSUB", "NUMSUB", "mcpg:{h1}:bell"]);
        cli(server.1, &["PUBLISH", "mcpg:{h1}:bell", "1"]);
        let rang = tokio::time::timeout(std::time::Duration::from_millis(500), next.rung()).await;
        assert!(
            rang.is_ok(),
            "the bell did not ring; PUBSUB NUMSUB: {numsub:?}"
        );
    }

    // The control: the same with the unsubscription done first rings.
    #[tokio::test]
    async fn a_follower_after_the_unsubscription_hears_the_bell() {
        let server = redis_server().await;
        let store = started_store(server.1).await;
        drop(store.bell("h1").await.expect("a bell"));
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let mut next = store.bell("h1").await.expect("a bell");
        cli(server.1, &["PUBLISH", "mcpg:{h1}:bell", "1"]);
        let rang = tokio::time::timeout(std::time::Duration::from_millis(500), next.rung()).await;
        assert!(rang.is_ok(), "the bell did not ring");
    }
}
