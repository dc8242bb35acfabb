//! Owner-bound requests with a shared store (issue 11 item 4): a request
//! routed to a session's per-session stdio child runs on the one replica that
//! owns the session's children (the record's `own`, `cluster::Claim`).
//!
//! - **Here.** A session this replica owns is marked so: its requests make no
//!   store command. The first owner-bound request of a session with no owner
//!   (or whose owner's heartbeat is gone) claims it with one `EVAL` and runs
//!   here; a request that goes to no per-session child never asks.
//! - **Elsewhere.** The request is sealed (`Purpose::Value`, bound to the
//!   session) and put in the owner's inbox with the number of a new stream;
//!   the owner runs it as a request of its own host and writes everything it
//!   sends (related messages, the response) to the session's mirrored event
//!   stream under that number (`sse::mirror_only`), seq 0 first as the mark
//!   that it picked the request up. This replica follows that stream
//!   (`resume::handed`; a store hiccup is followed, not taken as an end,
//!   and no event for the backend's call timeout + 10 s ends it with
//!   -32603): the response as JSON when it comes within
//!   `server.json_response_window`, else an SSE stream whose event ids are the
//!   owner's stream, so the host resumes it on any replica. A host's cancel
//!   reaches the owner by the `ctl` broadcast; a server→client request of the
//!   owner's child carries the owner's tag, so its answer finds its way back.
//! - **Owner gone.** Not picked up within [`PICKUP`] (or the send's reply
//!   missed the deadline: no take key then means never sent), this replica gives up
//!   on the request: one compare-and-set on its take key, which the owner's
//!   pickup races (`cluster::GiveUp`; no clock is compared). Won: the owner
//!   will never run it; if the owner no longer heartbeats this replica adopts
//!   the session and runs the request here, else the request gets -32603
//!   "owner unreachable". Lost: the owner picked it up just in time and it is
//!   followed as above. Adopting a session whose dead owner had started a
//!   child of a backend with `on_owner_loss = "end_session"` ends the session
//!   instead (404: the child's state is gone); otherwise children restart on
//!   first use with the session's log level.
//! - **Let go.** An owner that no longer holds the session (it ended, expired
//!   or was released here) or is draining releases it and refuses the
//!   request; the sender claims it again. A handed request counts as a use
//!   of the owner's copy of the session (it does not idle out there). A
//!   draining replica hands a request to a live owner where there is one and
//!   takes the session only when there is none (no call fails for the drain).

use std::sync::Arc;
use std::time::Duration;

use axum::response::Response;
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::handed;
use super::session::reject;
use super::sse::{Mirror, json_response, mirror_only};
use super::{AppState, HttpError};
use crate::cluster::{Claim, GiveUp, Purpose, SharedStore, Take};
use crate::config::OwnerLoss;
use crate::dispatch::{Call, Reply};
use crate::jsonrpc::{self, ErrorObject};
use crate::mcp::{Message, Request as RpcRequest};
use crate::request::{Outcome, RequestContext};
use crate::session::{Host, Outbound, Session, StreamSlot};
use crate::streamable_http::{Attached, next_stream_id};

/// How long the owner has to pick a request up (write its seq 0).
const PICKUP: Duration = Duration::from_secs(1);

/// The longest wait between two looks for the pickup mark.
const PICKUP_POLL: Duration = Duration::from_millis(100);

/// How often a give-up is tried while the store does not answer.
const GIVE_UP_TRIES: u32 = 3;

/// How long an owner tries to learn whether its pickup of a handed request
/// landed when the store's answer did not come.
const TAKE_SETTLE: Duration = Duration::from_secs(10);

/// Added to the backend's call timeout: how long a handed request's follower
/// waits for the owner's next event before it ends the request with -32603.
const BACKSTOP_MARGIN: Duration = Duration::from_secs(10);

/// Where a request of a session runs.
enum Gate {
    /// On this replica.
    Here,
    /// On the owner, replica `TAG`.
    Owner(String),
    /// Nowhere: the session ended (404).
    Ended,
    /// Nowhere: the store does not answer and this replica is fenced while
    /// another may have adopted the session (-32603, not run).
    Fenced,
}

/// What became of a request handed to the owner.
enum Handed {
    /// Picked up: its events, from the mirror.
    Picked(Attached),
    /// The owner no longer holds the session (it let go): claim again.
    Refused,
    /// The owner is dead (`reason` for the adoption).
    Dead(&'static str),
    /// The owner heartbeats but did not pick the request up (and never
    /// will).
    Unreachable,
    /// The store could not say whether the owner picked the request up.
    Unknown,
    /// The store did not answer: nothing was sent.
    NotSent,
}

/// Serves `req` of `session` on the replica owning its per-session stdio
/// child when that is another one; `Err` gives the request back to be
/// dispatched here (not owner-bound, owned here, or claimed now).
pub(super) async fn serve(
    st: &AppState,
    mut ctx: RequestContext,
    session: &Arc<Session>,
    req: RpcRequest,
    slot: StreamSlot,
) -> Result<Response, (RequestContext, RpcRequest, StreamSlot)> {
    let Some(store) = st.supervisor.shared().cloned() else {
        return Err((ctx, req, slot));
    };
    let host = Host::Legacy(session.clone());
    let params = req.params.as_deref();
    // Owner-bound: routed to a per-session child (claimed if unowned). Else
    // unknown here but maybe known to the owner's children: asked who owns
    // the session (claiming nothing), handed over only to another replica.
    let (mut gate, backend, backstop) = match st.dispatch.target(&host, &req.method, params) {
        Some(idx) if st.supervisor.is_owner_bound(idx, session) => {
            let b = st.catalog.backends().at(idx);
            let backstop = b.spec.call_timeout() + BACKSTOP_MARGIN;
            let gate = claim(st, &store, session, "owner_lost").await;
            (gate, Some(b), backstop)
        }
        Some(_) => return Err((ctx, req, slot)),
        None => match handed::longest_call_timeout(st, session) {
            Some(timeout) if st.dispatch.unknown_here(session, &req.method, params) => (
                find_owner(&store, session).await,
                None,
                timeout + BACKSTOP_MARGIN,
            ),
            _ => return Err((ctx, req, slot)),
        },
    };
    let lookup = backend.is_none();
    // At most a few hand-overs: an owner letting go, or dying, meanwhile.
    for _ in 0..3 {
        let tag = match gate {
            Gate::Here => return Err((ctx, req, slot)),
            Gate::Ended => return Ok(reject(ctx, HttpError::unknown_session())),
            Gate::Fenced => {
                let e = ErrorObject::new(
                    jsonrpc::INTERNAL_ERROR,
                    "owner unknown: this gateway replica lost the shared session store and another replica may run this session's backend process now; it was not run, retry",
                );
                return Ok(error_response(ctx, &req, &e));
            }
            Gate::Owner(tag) => tag,
        };
        gate = match hand(st, &store, session, &req, &ctx, &tag, backstop).await {
            Handed::Picked(attached) => {
                handed::name_route(&mut ctx, backend.as_deref(), &req);
                return Ok(handed::respond(st, ctx, session, slot, attached, !lookup).await);
            }
            Handed::Refused if lookup => find_owner(&store, session).await,
            // What a dead owner's children knew died with them: unknown here
            // (and so did their lists: listed here from now on).
            Handed::Dead(_) if lookup => {
                session.set_lists_elsewhere(false);
                Gate::Here
            }
            Handed::Refused => claim(st, &store, session, "owner_lost").await,
            Handed::Dead(reason) => claim(st, &store, session, reason).await,
            Handed::NotSent => return Err((ctx, req, slot)),
            Handed::Unreachable => break,
            Handed::Unknown => {
                tracing::warn!(session = %session.log_id(), id = %req.id.logged(), "owner replica did not pick the request up in time and the shared store did not say whether it did");
                let e = ErrorObject::new(
                    jsonrpc::INTERNAL_ERROR,
                    "owner unreachable: the gateway replica running this session's backend process did not take the request in time and the shared store did not answer; it may have run",
                );
                return Ok(error_response(ctx, &req, &e));
            }
        };
    }
    tracing::warn!(session = %session.log_id(), id = %req.id.logged(), "owner replica did not pick the request up");
    let e = ErrorObject::new(
        jsonrpc::INTERNAL_ERROR,
        "owner unreachable: the gateway replica running this session's backend process did not take the request; it was not run",
    );
    Ok(error_response(ctx, &req, &e))
}

/// Which replica owns `session`'s children, claiming nothing:
/// [`Gate::Owner`] when another one does, else [`Gate::Here`] (none does, or
/// the store does not answer: refused here as unknown).
async fn find_owner(store: &SharedStore, session: &Session) -> Gate {
    match store.owner().of(session.store_key()).await {
        Ok(Some(tag)) if tag != store.tag() => Gate::Owner(tag),
        _ => Gate::Here,
    }
}

/// `e` as the JSON answer to `req`.
fn error_response(ctx: RequestContext, req: &RpcRequest, e: &ErrorObject) -> Response {
    let body: Bytes = jsonrpc::error_bytes(Some(&req.id), e).into();
    ctx.finish_error(Outcome::Error, e.code);
    json_response(body)
}

/// Claims `session` for this replica: [`Gate::Here`] when it is ours now
/// (also when the store does not answer: served here, as without a store,
/// unless this replica is fenced and other replicas ran: [`Gate::Fenced`]),
/// [`Gate::Owner`] when a live replica owns it, [`Gate::Ended`] when its
/// record is gone or the adoption ended it (`reason`: the adoption's label),
/// A draining replica first asks without taking the session (a child started
/// here stops with it: a live owner elsewhere is preferred, even for a session
/// this replica let go a moment ago); with none, it takes the session after all
/// rather than fail the host's request (a rolling restart fails no call; the
/// replica that takes it over next starts the child again). Taking a session
/// over subscribes its new children again to its recorded subscriptions.
async fn claim(st: &AppState, store: &SharedStore, session: &Arc<Session>, reason: &str) -> Gate {
    let h = session.store_key();
    let mut claimed = store.owner().claim(h, st.supervisor.is_stopping()).await;
    if matches!(claimed, Ok(Claim::Vacant)) {
        tracing::info!(session = %session.log_id(),
            "no live replica holds this session's backend processes and this one drains: served here, its next owner starts them again");
        claimed = store.owner().claim(h, false).await;
    }
    match claimed {
        Ok(Claim::Mine { subscriptions }) => {
            // Its children's lists are this replica's now (the claim cleared
            // any mark of another's).
            session.set_lists_elsewhere(false);
            st.supervisor.take_over(session, subscriptions).await;
            Gate::Here
        }
        Ok(Claim::Other(tag)) => Gate::Owner(tag),
        Ok(Claim::NoRecord) => Gate::Ended,
        Ok(Claim::Vacant) => Gate::Here,
        Err(_) if store.fenced_among_peers() => {
            tracing::info!(session = %session.log_id(), "owner unknown: fenced from the shared store while other replicas run; refused");
            Gate::Fenced
        }
        Err(_) => {
            tracing::debug!(session = %session.log_id(), "owner unknown: the shared store is unavailable; served here");
            Gate::Here
        }
        Ok(Claim::Adopted {
            from,
            children,
            subscriptions,
        }) => {
            st.metrics
                .cluster_adoptions
                .with_label_values(&[reason])
                .inc();
            let ends = children.iter().find(|name| {
                st.catalog
                    .backends()
                    .by_name(name)
                    .is_some_and(|b| b.spec.config.on_owner_loss == OwnerLoss::EndSession)
            });
            if let Some(backend) = ends {
                tracing::info!(session = %session.log_id(), replica = %from, %backend,
                    "the replica running this session's backend process is gone and the backend says end_session: session ended");
                st.sessions.remove(session.id());
                store.end(h).await;
                let supervisor = st.supervisor.clone();
                let session = session.clone();
                tokio::spawn(async move { supervisor.end_session(&session).await });
                return Gate::Ended;
            }
            tracing::info!(session = %session.log_id(), replica = %from, lost = ?children,
                "the replica running this session's backend processes is gone: adopted, they restart here on first use");
            session.set_lists_elsewhere(false);
            st.supervisor.take_over(session, subscriptions).await;
            Gate::Here
        }
    }
}

/// The additional data a handed request is sealed with: its session.
fn call_aad(h: &str) -> String {
    format!("mcpgate/call/v1 {h}")
}

/// Hands `req` to owner `tag` and waits until it is picked up, or gives up
/// on it after [`PICKUP`] (a race with the pickup that one of them wins). A
/// send whose answer did not come may still have reached the store: the
/// give-up settles it too, so the request never runs both here and there.
/// `backstop`: how long the answer may keep the follower waiting.
async fn hand(
    st: &AppState,
    store: &Arc<SharedStore>,
    session: &Session,
    req: &RpcRequest,
    ctx: &RequestContext,
    tag: &str,
    backstop: Duration,
) -> Handed {
    let h = session.store_key();
    if !store.is_up() {
        return Handed::NotSent;
    }
    let stream = next_stream_id();
    let call = json!({
        "id": &**session.id(),
        "s": stream,
        "r": {"jsonrpc": "2.0", "id": req.id.to_value(), "method": req.method.as_str(), "params": req.params.as_deref()},
        // For the owner's access line: who sent it, from where, to which endpoint.
        "a": {"p": ctx.principal_id(), "c": ctx.client(), "e": &**ctx.endpoint()},
    });
    let sealed = st.sealer.seal(
        Purpose::Value,
        call_aad(h).as_bytes(),
        call.to_string().as_bytes(),
    );
    let forwarded = || {
        st.metrics
            .cluster_forwarded
            .with_label_values(&["call"])
            .inc()
    };
    let settled = match store
        .owner()
        .send_call(tag, h, stream, sealed.as_bytes())
        .await
    {
        Ok(true) => {
            forwarded();
            match await_pickup(store, h, stream).await {
                Some(Take::Run) => Ok(true),
                Some(_) => Ok(false),
                None => give_up(store, h, stream, tag, false).await,
            }
        }
        Ok(false) => return Handed::Dead("owner_lost"),
        Err(_) => {
            let settled = give_up(store, h, stream, tag, true).await;
            if !matches!(settled, Err(Handed::NotSent)) {
                forwarded();
            }
            settled
        }
    };
    match settled {
        Err(handed) => return handed,
        Ok(false) => return Handed::Refused,
        Ok(true) => {}
    }
    let rid = req.id.to_json();
    let attached = super::resume::handed(store, &st.sealer, h, stream, tag, &rid, backstop).await;
    // `None`: ended without a response (the host cancelled it).
    Handed::Picked(attached.unwrap_or(Attached {
        stream,
        replay: Vec::new(),
        live: None,
        prime_due: true,
    }))
}

/// Waits up to [`PICKUP`] for the owner's pickup of handed stream `stream`
/// (one `GET` of its take key a look): [`Take::Run`] or [`Take::Refused`];
/// `None` when not seen.
async fn await_pickup(store: &SharedStore, h: &str, stream: u64) -> Option<Take> {
    let end = Instant::now() + PICKUP;
    let mut wait = Duration::from_millis(2);
    while Instant::now() < end {
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(PICKUP_POLL);
        if let Ok(t @ (Take::Run | Take::Refused)) = store.owner().take_state(h, stream).await {
            return Some(t);
        }
    }
    None
}

/// Gives up on handed stream `stream` (a few tries while the store does not
/// answer): `Ok(true)` the owner picked it up first and runs it, `Ok(false)`
/// it refused it; else what the sender does: `Unreachable` / `Dead` (the
/// give-up won, never run there), `NotSent` (no take key and `unsent_if_absent`:
/// the send never reached the store), `Unknown`.
async fn give_up(
    store: &SharedStore,
    h: &str,
    stream: u64,
    tag: &str,
    unsent_if_absent: bool,
) -> Result<bool, Handed> {
    for attempt in 0..GIVE_UP_TRIES {
        if attempt > 0 {
            tokio::time::sleep(PICKUP_POLL).await;
        }
        match store.owner().give_up_call(h, stream).await {
            Ok(GiveUp::Won) if store.is_alive(tag).await => return Err(Handed::Unreachable),
            Ok(GiveUp::Won) => return Err(Handed::Dead("unreachable")),
            Ok(GiveUp::Taken) => return Ok(true),
            Ok(GiveUp::Refused) => return Ok(false),
            Ok(GiveUp::Lost) if unsent_if_absent => return Err(Handed::NotSent),
            Ok(GiveUp::Lost) => return Err(Handed::Unknown),
            Err(_) => {}
        }
    }
    Err(Handed::Unknown)
}

/// Runs the requests other replicas hand this one as the owner of their
/// sessions' children (`(h, sealed call)`), each in a task of its own.
pub(crate) async fn run_handed(st: AppState, mut calls: mpsc::UnboundedReceiver<(String, String)>) {
    while let Some((h, sealed)) = calls.recv().await {
        tokio::spawn(run_one(st.clone(), h, sealed));
    }
}

/// A handed request, opened: the session id, the stream to write and the
/// request.
struct Opened {
    id: String,
    stream: u64,
    request: RpcRequest,
    /// Who sent it, for the access line (`handed::handed_context`).
    audit: Option<Value>,
}

fn open_call(st: &AppState, h: &str, sealed: &str) -> Option<Opened> {
    let plain = st
        .sealer
        .open(Purpose::Value, call_aad(h).as_bytes(), sealed)?;
    let v: Value = serde_json::from_slice(&plain).ok()?;
    let text = serde_json::to_vec(v.get("r")?).ok()?;
    let Ok(Message::Request(request)) = jsonrpc::parse_message(&text) else {
        return None;
    };
    Some(Opened {
        id: v.get("id")?.as_str()?.to_owned(),
        stream: v.get("s")?.as_u64()?,
        request,
        audit: v.get("a").cloned(),
    })
}

/// Runs one handed request and mirrors what it sends.
async fn run_one(st: AppState, h: String, sealed: String) {
    let Some(store) = st.supervisor.shared().cloned() else {
        return;
    };
    let Some(call) = open_call(&st, &h, &sealed) else {
        tracing::warn!("a request handed to this replica does not open; ignored");
        return;
    };
    let request_id = call.request.id.to_json();
    let held = st
        .sessions
        .get(&call.id)
        .filter(|s| !s.is_ended() && s.store_key() == h);
    // A draining replica takes no new request for its sessions: the sender
    // claims the session and its next child runs there, while the calls in
    // flight here finish (and the drain is not held up by new ones).
    let stopping = st.supervisor.is_stopping();
    if let Some(s) = held.as_ref().filter(|_| stopping) {
        st.supervisor.unmark(s);
    }
    // Used through another replica (refused if this copy is being evicted as
    // never used): it must not idle out (its expiry would stop the child and
    // lose its state), nor be ended as never used.
    let held = held.filter(|s| !stopping && s.mark_used());
    if held.is_none() {
        // Let go first: the sender, seeing the refusal, claims it again.
        let _ = store.owner().release(&h).await;
    }
    // The pickup (with its mark) races the sender's give-up: run only if won.
    let refuse = held.is_none();
    let taken = match store
        .owner()
        .take_call(&h, call.stream, &request_id, refuse)
        .await
    {
        Ok(taken) => Some(taken),
        Err(_) => settle_take(&store, &h, call.stream, &request_id, refuse).await,
    };
    match taken {
        Some(true) => {}
        Some(false) => {
            tracing::info!(id = %call.request.id.logged(), "a request handed to this replica came too late; not run (the sender gave up on it)");
            return;
        }
        None => {
            tracing::warn!(id = %call.request.id.logged(), "a handed request not run: the shared store did not say whether its pickup landed");
            return;
        }
    }
    let Some(session) = held else {
        match stopping {
            true => {
                tracing::info!(id = %call.request.id.logged(), "a request handed to this replica while it drains: the session is let go, refused")
            }
            false => {
                tracing::info!(id = %call.request.id.logged(), "a request handed to this replica for a session it no longer holds: let go, refused")
            }
        }
        return;
    };
    st.supervisor.own(&session);
    session.touch();
    let mirror = Mirror {
        store: store.clone(),
        h: h.clone(),
        request_id: call.request.id.to_json(),
        sealer: st.sealer.clone(),
    };
    let ctx = handed::handed_context(&st, &call.request, call.audit.as_ref(), &session);
    let host = Host::Legacy(session.clone());
    let id = call.request.id.clone();
    let reply = st.dispatch.handle(ctx, &host, call.request).await;
    // Registered now: a cancel that came first (the broadcast overtook the
    // inbox) applies to it.
    st.relay.cancels().apply_early(&session, &id);
    let call_of = match reply {
        Reply::Now(bytes) => {
            let (tx, rx) = mpsc::channel(1);
            let _ = tx.try_send(Outbound::Final(bytes.into()));
            Call::from(rx)
        }
        Reply::Stream(rx) => Call::from(rx),
        Reply::Call(c) => c,
    };
    mirror_only(call_of, mirror, call.stream).await;
    session.touch();
}

/// Learns whether a pickup whose answer did not come landed (its take key
/// says `run`/`ref`), trying it again while the key still says `wait`, for
/// up to [`TAKE_SETTLE`]: `Some(true)` taken (run it: the sender follows its
/// mark), `Some(false)` given up on, `None` unknown.
async fn settle_take(
    store: &SharedStore,
    h: &str,
    stream: u64,
    request_id: &str,
    refuse: bool,
) -> Option<bool> {
    let end = Instant::now() + TAKE_SETTLE;
    let mut pause = Duration::from_millis(50);
    while Instant::now() < end {
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(PICKUP_POLL * 5);
        match store.owner().take_state(h, stream).await {
            Ok(Take::Run | Take::Refused) => return Some(true),
            Ok(Take::Gone) => return Some(false),
            Ok(Take::Wait) => {
                if let Ok(taken) = store.owner().take_call(h, stream, request_id, refuse).await {
                    return Some(taken);
                }
            }
            Err(_) => {}
        }
    }
    None
}
