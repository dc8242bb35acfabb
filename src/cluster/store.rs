//! The shared session store (`[cluster] redis`): what every replica must agree
//! on about a session that its sealed id cannot carry — whether it still exists
//! (a `DELETE` or an idle expiry anywhere ends it everywhere) and what changed
//! since `initialize` (the log level) — plus the broadcasts that keep each
//! replica's cached copy right (`ctl`).
//!
//! The store is a health-checked front of the Redis commands (`redis.rs`):
//! every operation has a deadline; a failure or a missed deadline marks the
//! store down (`mcpgate_cluster_redis_up` 0, `mcpgate_cluster_store_errors_total`)
//! and the heartbeat marks it up again. Callers decide what "down" means:
//! `initialize` is refused, a session already cached keeps working, an
//! uncached one is served from its sealed id alone. After a reconnect the
//! replica is told to revalidate what it holds ([`Ctl::Resync`]), since `ctl`
//! messages are lost while the connection is down.
//!
//! Fencing: the store keeps when the last heartbeat that landed was sent. A
//! replica that goes a heartbeat TTL (3 heartbeats) without one is *fenced*
//! ([`Ctl::Fenced`]): its key has expired in Redis, so another replica may
//! have adopted its sessions; it stops acting as their owner until the store
//! answers again ([`Ctl::Unfenced`]).
//!
//! Records are keyed by `h` = the first 24 hex digits of SHA-256 over the
//! session's random identity, so Redis never sees the bearer-secret id and a key
//! rotation does not rename records.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus::{IntCounterVec, IntGauge};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::bell::Bells;
use super::ctl::{Ctl, parse_ctl};
use super::events::MirrorStore;
use super::listener::ListenerStore;
use super::owner::OwnerStore;
use super::redis::{Push, Redis};
use super::standalone::StandaloneStore;
use super::subscriptions::SubscriptionStore;
use super::tasks::TaskStore;
use super::upstream::UpstreamStore;
use crate::config::ClusterConfig;

/// How long one store operation may take before the store counts as down.
const DEADLINE: Duration = Duration::from_millis(500);

/// At most this often a replica slides a session's expiry in the store.
const REFRESH_EVERY: Duration = Duration::from_secs(60);

/// At most this many session ends wait for a store that does not answer.
const MAX_PENDING_ENDS: usize = 10_000;

/// The answer to a record lookup.
#[derive(Debug)]
pub enum Lookup {
    /// The record's fields.
    Found(HashMap<String, String>),
    /// No record: the session ended or expired (the store is healthy).
    Absent,
    /// The store did not answer.
    Unavailable,
}

/// A store operation failed or the store is down.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the shared session store is unavailable")]
pub struct Unavailable;

/// What the store reports to `/metrics`.
pub struct StoreMetrics {
    /// `mcpgate_cluster_redis_up`.
    pub up: IntGauge,
    /// `mcpgate_cluster_store_errors_total{op}`.
    pub errors: IntCounterVec,
}

/// A store and the receiver of what it reports ([`Ctl`]).
pub type Started = (Arc<SharedStore>, mpsc::UnboundedReceiver<Ctl>);

/// Up/down, and whether broadcasts may have been missed since the last check.
#[derive(Default)]
struct Health {
    up: AtomicBool,
    missed: AtomicBool,
    /// Subscribed to `ctl` (then one of the channel's listeners is us).
    subscribed: AtomicBool,
    /// Another replica listened on `ctl` at the last heartbeat that landed.
    peers: AtomicBool,
    /// No heartbeat landed for the heartbeat TTL (see the module docs).
    fenced: AtomicBool,
}

/// The Redis handle every part of the store shares: the commands, this
/// replica's tag, and the health each operation reports to. Built once; each
/// phase store holds it (one `Arc`, cloned at start, never per call).
pub(super) struct Link {
    pub(super) redis: Redis,
    tag: String,
    health: Arc<Health>,
    metrics: StoreMetrics,
}

impl Link {
    /// Whether the store answered its last operation.
    pub(super) fn is_up(&self) -> bool {
        self.health.up.load(Ordering::Relaxed)
    }

    /// This replica's tag (8 hex digits).
    pub(super) fn tag(&self) -> &str {
        &self.tag
    }

    /// Runs one operation within the deadline; a failure marks the store down.
    pub(super) async fn op<T>(
        &self,
        name: &'static str,
        f: impl Future<Output = ::redis::RedisResult<T>>,
    ) -> Result<T, Unavailable> {
        let cause = match tokio::time::timeout(DEADLINE, f).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) => e.to_string(),
            Err(_) => "deadline missed".to_owned(),
        };
        self.metrics.errors.with_label_values(&[name]).inc();
        self.health.missed.store(true, Ordering::Relaxed);
        if self.health.up.swap(false, Ordering::Relaxed) {
            self.metrics.up.set(0);
            tracing::warn!(op = name, %cause, "shared session store unreachable: cached sessions go on, new sessions are refused");
        }
        Err(Unavailable)
    }
}

/// One replica's handle on the shared store; see the module docs. It keeps
/// the session records, the heartbeat and fencing, and the `ctl` broadcasts
/// and inbox answers; each other phase has a store of its own, handed out by
/// reference ([`SharedStore::owner`] and its kin).
pub struct SharedStore {
    pub(super) link: Arc<Link>,
    /// `tag` as a number, for the ids of relayed requests (`inbox::tagged_id`).
    tag_bits: u32,
    /// Seconds; `server.session_idle_timeout` (a reload may change it).
    record_ttl: AtomicU64,
    heartbeat: Duration,
    events: mpsc::UnboundedSender<Ctl>,
    /// Session ends the store missed, sent again when it is back.
    pending_ends: Mutex<Vec<String>>,
    /// When the last heartbeat that landed was sent (before Redis ran it, so
    /// its key expires no earlier than this plus the TTL).
    last_beat: Mutex<Instant>,
    owner: OwnerStore,
    listener: ListenerStore,
    mirror: MirrorStore,
    standalone: StandaloneStore,
    upstream: UpstreamStore,
    subscriptions: SubscriptionStore,
    tasks: TaskStore,
    /// The doorbells of the sessions whose streams are followed here.
    pub(super) bells: Arc<Bells>,
}

impl SharedStore {
    /// A store for `cluster.redis` (`None` without one), whose records expire
    /// after `record_ttl` without use (`server.session_idle_timeout`), and the
    /// receiver of what other replicas broadcast. Nothing is sent before
    /// [`SharedStore::start`].
    ///
    /// Errors: a URL the client refuses (the message never quotes it).
    pub fn new(
        cluster: &ClusterConfig,
        record_ttl: Duration,
        metrics: StoreMetrics,
    ) -> Result<Option<Started>, String> {
        let Some(url) = &cluster.redis else {
            return Ok(None);
        };
        let tag_bits = u32::from_be_bytes(super::random_bytes::<4>()).max(1);
        let tag = format!("{tag_bits:08x}");
        let health = Arc::new(Health::default());
        let (events, rx) = mpsc::unbounded_channel();
        let bells = Arc::new(Bells::default());
        let on_push = {
            let (health, events, tag) = (health.clone(), events.clone(), tag.clone());
            let bells = bells.clone();
            move |push: Push| match push {
                Push::Disconnected => health.missed.store(true, Ordering::Relaxed),
                Push::Bell(h) => bells.ring(&h),
                Push::Ctl(text) => {
                    if let Some(ctl) = parse_ctl(&text, &tag) {
                        let _ = events.send(ctl);
                    }
                }
            }
        };
        let redis = Redis::new(url, DEADLINE, on_push)
            .map_err(|e| format!("cluster.redis: {:?}", e.kind()))?;
        metrics.up.set(0);
        let link = Arc::new(Link {
            redis,
            tag,
            health,
            metrics,
        });
        let store = SharedStore {
            tag_bits,
            record_ttl: AtomicU64::new(record_ttl.as_secs().max(1)),
            heartbeat: cluster.heartbeat,
            events,
            pending_ends: Mutex::default(),
            last_beat: Mutex::new(Instant::now()),
            owner: OwnerStore::new(link.clone()),
            listener: ListenerStore::new(link.clone()),
            mirror: MirrorStore::new(link.clone()),
            standalone: StandaloneStore::new(link.clone()),
            upstream: UpstreamStore::new(link.clone()),
            subscriptions: SubscriptionStore::new(link.clone()),
            tasks: TaskStore::new(link.clone()),
            link,
            bells,
        };
        Ok(Some((Arc::new(store), rx)))
    }

    /// This replica's tag (`mcpg:replica:{TAG}`, 8 hex digits).
    pub fn tag(&self) -> &str {
        self.link.tag()
    }

    /// Owners of per-session stdio children, requests handed them (`owner.rs`).
    pub fn owner(&self) -> &OwnerStore {
        &self.owner
    }

    /// Who listens on a per-session HTTP backend's session (`listener.rs`).
    pub fn listener(&self) -> &ListenerStore {
        &self.listener
    }

    /// The mirrored events of host-facing streams (`events.rs`).
    pub fn mirror(&self) -> &MirrorStore {
        &self.mirror
    }

    /// Claims on standalone streams, their mirrored events (`standalone.rs`).
    pub fn standalone(&self) -> &StandaloneStore {
        &self.standalone
    }

    /// Per-session HTTP backends' sessions in the record (`upstream.rs`).
    pub fn upstream(&self) -> &UpstreamStore {
        &self.upstream
    }
    /// Who holds sessions' other subscriptions (`subscriptions.rs`).
    pub fn subscriptions(&self) -> &SubscriptionStore {
        &self.subscriptions
    }
    /// Sessions' tasks in their records (`tasks.rs`).
    pub fn tasks(&self) -> &TaskStore {
        &self.tasks
    }

    /// The id the host sees for the `n`-th server→client request this replica
    /// relays in a session (`inbox::tagged_id`).
    pub fn relayed_id(&self, n: i64) -> i64 {
        super::inbox::tagged_id(self.tag_bits, n)
    }

    /// The tag of the other replica that relayed request `id` (`None`: ours, or none's).
    pub fn relayed_elsewhere(&self, id: i64) -> Option<String> {
        super::inbox::tag_of(id)
            .filter(|t| *t != self.tag_bits)
            .map(|t| format!("{t:08x}"))
    }

    /// Sends the host's answer `message` (JSON-RPC response text) for session
    /// `h` to replica `tag`'s inbox; `Ok(false)` when that replica is not alive
    /// (the answer is dropped).
    pub async fn send_answer(
        &self,
        tag: &str,
        h: &str,
        message: &str,
    ) -> Result<bool, Unavailable> {
        if !self.is_up() {
            return Err(Unavailable);
        }
        let message = [message.as_bytes()];
        self.op("send", self.link.redis.send(tag, "answer", h, &message))
            .await
    }

    /// Announces a host's cancel (`params`: the notification's params as
    /// JSON) of a request of session `h` that this replica does not run.
    pub async fn broadcast_cancel(&self, h: &str, params: &str) -> Result<(), Unavailable> {
        if !self.is_up() {
            return Err(Unavailable);
        }
        let msg = format!("cancel {h} {} {params}", self.link.tag);
        self.op("publish", self.link.redis.publish(&msg)).await
    }

    /// Announces a host's `notifications/roots/list_changed` for session `h`
    /// (the owner of its per-session children is elsewhere).
    pub async fn broadcast_roots(&self, h: &str) -> Result<(), Unavailable> {
        let msg = format!("roots {h} {}", self.link.tag);
        match self.is_up() {
            true => self.op("publish", self.link.redis.publish(&msg)).await,
            false => Err(Unavailable),
        }
    }

    /// Whether the store answered its last operation.
    pub fn is_up(&self) -> bool {
        self.link.is_up()
    }

    /// Whether this replica is fenced and another replica could have adopted
    /// its sessions meanwhile: no heartbeat landed for the heartbeat TTL, and
    /// at the last one that did another replica listened on `ctl`. A replica
    /// alone (a store down for everyone, or one replica) is never refused
    /// for this: nobody could have taken its sessions.
    pub fn fenced_among_peers(&self) -> bool {
        self.link.health.fenced.load(Ordering::Relaxed)
            && self.link.health.peers.load(Ordering::Relaxed)
    }

    /// Subscribes to `ctl` and runs the heartbeat until `stop`; waits (at most
    /// 2 s) for the first heartbeat so that a replica does not start by
    /// refusing `initialize` while Redis is there.
    pub async fn start(self: &Arc<Self>, stop: CancellationToken) {
        let first = self.beat().await;
        tokio::spawn(super::inbox::read(
            self.link.redis.client(),
            super::inbox::inbox_key(&self.link.tag),
            self.events.clone(),
            stop.clone(),
        ));
        tokio::spawn(self.clone().fence(stop.clone()));
        let me = self.clone();
        tokio::spawn(async move {
            let mut subscribed =
                first && me.op("subscribe", me.link.redis.subscribe()).await.is_ok();
            me.link
                .health
                .subscribed
                .store(subscribed, Ordering::Relaxed);
            let mut tick = tokio::time::interval(me.heartbeat);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stop.cancelled() => return,
                }
                if me.beat().await && !subscribed {
                    subscribed = me.op("subscribe", me.link.redis.subscribe()).await.is_ok();
                    me.link
                        .health
                        .subscribed
                        .store(subscribed, Ordering::Relaxed);
                }
            }
        });
    }

    /// How long the heartbeat key lives: 3 heartbeats.
    fn beat_ttl(&self) -> Duration {
        self.heartbeat
            .saturating_mul(3)
            .max(Duration::from_millis(1))
    }

    /// Fences this replica as soon as its heartbeat key may have expired (the
    /// TTL after the last heartbeat that landed was sent), on a timer of its
    /// own: a heartbeat stuck in its deadline does not delay it.
    async fn fence(self: Arc<Self>, stop: CancellationToken) {
        loop {
            let due = *self.last_beat.lock().unwrap_or_else(|e| e.into_inner()) + self.beat_ttl();
            let wake = match Instant::now() >= due {
                true => {
                    if !self.link.health.fenced.swap(true, Ordering::Relaxed) {
                        tracing::warn!(replica = %self.link.tag, "fenced: no heartbeat reached the shared session store for its TTL; another replica may adopt this one's sessions, their backend processes are not used here until the store answers");
                        let _ = self.events.send(Ctl::Fenced);
                    }
                    Instant::now() + self.heartbeat
                }
                false => due,
            };
            tokio::select! {
                _ = tokio::time::sleep_until(wake) => {}
                _ = stop.cancelled() => return,
            }
        }
    }

    /// One heartbeat; marks the store up when it answers, and asks for a
    /// revalidation when broadcasts may have been missed.
    async fn beat(&self) -> bool {
        let ttl = u64::try_from(self.beat_ttl().as_millis()).unwrap_or(u64::MAX);
        let value = format!("pid={}", std::process::id());
        let sent = Instant::now();
        let beat = self.link.redis.heartbeat(self.link.tag(), &value, ttl);
        let Ok(listeners) = self.op("heartbeat", beat).await else {
            return false;
        };
        *self.last_beat.lock().unwrap_or_else(|e| e.into_inner()) = sent;
        let ours = u64::from(self.link.health.subscribed.load(Ordering::Relaxed));
        self.link
            .health
            .peers
            .store(listeners > ours, Ordering::Relaxed);
        if self.link.health.fenced.swap(false, Ordering::Relaxed) {
            tracing::info!(replica = %self.link.tag, "no longer fenced: the shared session store answers again");
            let _ = self.events.send(Ctl::Unfenced);
        }
        if !self.link.health.up.swap(true, Ordering::Relaxed) {
            tracing::info!(replica = %self.link.tag, "shared session store reachable");
            self.link.metrics.up.set(1);
        }
        if self.link.health.missed.swap(false, Ordering::Relaxed) {
            self.send_pending_ends().await;
            let _ = self.events.send(Ctl::Resync);
        }
        true
    }

    /// Runs one operation within the deadline (see [`Link::op`]).
    async fn op<T>(
        &self,
        name: &'static str,
        f: impl Future<Output = ::redis::RedisResult<T>>,
    ) -> Result<T, Unavailable> {
        self.link.op(name, f).await
    }

    /// Writes a new session's record (`fields`) with the idle expiry; refused
    /// at once while the store is down.
    pub async fn put_record(&self, h: &str, fields: &[(&str, String)]) -> Result<(), Unavailable> {
        if !self.is_up() {
            return Err(Unavailable);
        }
        self.op(
            "put",
            self.link.redis.put_record(h, fields, self.record_ttl()),
        )
        .await
    }

    /// The record of session `h`; [`Lookup::Unavailable`] at once while the
    /// store is down.
    pub async fn get_record(&self, h: &str) -> Lookup {
        if !self.is_up() {
            return Lookup::Unavailable;
        }
        match self.op("get", self.link.redis.get_record(h)).await {
            Ok(fields) if fields.is_empty() => Lookup::Absent,
            Ok(fields) => Lookup::Found(fields),
            Err(Unavailable) => Lookup::Unavailable,
        }
    }

    /// How long a record lives without use (s).
    fn record_ttl(&self) -> u64 {
        self.record_ttl.load(Ordering::Relaxed)
    }

    /// Sets how long records live without use (`server.session_idle_timeout`,
    /// at a reload): records written or slid from now on get it.
    pub fn set_record_ttl(&self, ttl: Duration) {
        self.record_ttl
            .store(ttl.as_secs().max(1), Ordering::Relaxed);
    }

    /// How often a session in use slides its record's expiry, in seconds: 60,
    /// or a quarter of the idle timeout when that is shorter.
    pub fn refresh_every(&self) -> u32 {
        let every = REFRESH_EVERY.as_secs().min(self.record_ttl() / 4).max(1);
        u32::try_from(every).unwrap_or(60)
    }

    /// Slides the expiry of session `h` (fire and forget).
    pub fn refresh(self: &Arc<Self>, h: String) {
        if !self.is_up() {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            let _ = me
                .op("refresh", me.link.redis.refresh(&h, me.record_ttl()))
                .await;
        });
    }

    /// Ends session `h` for every replica: deletes the record and announces
    /// it. While the store does not answer the end is kept and sent again
    /// once it does (else the session would come back with the store).
    pub async fn end(&self, h: &str) {
        let msg = format!("ended {h} {}", self.link.tag);
        if self
            .op("delete", self.link.redis.delete(h, Some(&msg)))
            .await
            .is_err()
        {
            let mut pending = self.pending_ends.lock().unwrap_or_else(|e| e.into_inner());
            if pending.len() < MAX_PENDING_ENDS {
                pending.push(h.to_owned());
            }
        }
    }

    /// Sends the ends the store missed (see [`SharedStore::end`]).
    async fn send_pending_ends(&self) {
        let pending =
            std::mem::take(&mut *self.pending_ends.lock().unwrap_or_else(|e| e.into_inner()));
        for h in pending {
            self.end(&h).await;
        }
    }

    /// Forgets the record of a session that did not start after all.
    pub async fn discard(&self, h: &str) {
        let _ = self.op("delete", self.link.redis.delete(h, None)).await;
    }

    /// Records session `h`'s log level and announces it.
    pub async fn set_level(&self, h: &str, level: &str) -> Result<(), Unavailable> {
        if !self
            .op("set", self.link.redis.set_field(h, "lvl", level))
            .await?
        {
            return Ok(());
        }
        let msg = format!("lvl {h} {level} {}", self.link.tag);
        self.op("publish", self.link.redis.publish(&msg)).await
    }

    /// Which of the sessions `hs` still have a record (one pipelined `EXISTS`
    /// each); `None` when the store did not answer.
    pub async fn exist(&self, hs: &[String]) -> Option<Vec<bool>> {
        self.op("exists", self.link.redis.exist(hs)).await.ok()
    }
}

impl SharedStore {
    /// Whether replica `tag` still heartbeats (`true` when the store cannot
    /// tell: nobody is declared dead on a store outage).
    pub async fn is_alive(&self, tag: &str) -> bool {
        self.op("alive", self.link.redis.alive(tag))
            .await
            .unwrap_or(true)
    }

    /// Which of replicas `tags` still heartbeat (one pipelined `EXISTS`
    /// each); `None` when the store did not answer (nobody is declared dead
    /// on an outage).
    pub async fn alive_tags(&self, tags: &[String]) -> Option<Vec<bool>> {
        if !self.is_up() {
            return None;
        }
        let mut p = ::redis::pipe();
        for t in tags {
            p.exists(super::inbox::replica_key(t));
        }
        self.op("alive", self.link.redis.pipe(p)).await.ok()
    }

    /// How often this replica heartbeats.
    pub fn heartbeat(&self) -> Duration {
        self.heartbeat
    }
}
/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The store key of a session whose identity's random part is `rand`: the
/// first 24 hex digits of its SHA-256.
pub fn record_key(rand: &[u8; 16]) -> String {
    let d = <sha2::Sha256 as sha2::Digest>::digest(rand);
    hex(&d[..12])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_keys_hide_the_identity() {
        let k = record_key(&[7; 16]);
        assert_eq!(k.len(), 24);
        assert!(k.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(k, record_key(&[8; 16]));
        assert!(!k.contains("0707"), "{k}");
    }
}
