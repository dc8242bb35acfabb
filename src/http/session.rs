//! The session phase of the Streamable HTTP transport (MCP 2025-11-25
//! basic/transports, session management): `Mcp-Session-Id` → the [`Session`],
//! bound to the principal that created it, and the two requests that are about
//! the session itself: `GET` (the standalone SSE stream, or the resumption of an
//! interrupted one) and `DELETE` (the end of the session).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::accept::accept;
use super::sse::sse_response;
use super::{AppState, HttpError, headers};
use crate::auth::Principal;
use crate::cluster::{Lookup, parse_held_field, record_key};
use crate::jsonrpc;
use crate::request::{Outcome, Rejection, RequestContext};
use crate::session::{Session, SessionRecord, SessionToken, StreamSlot, unix_now};
use crate::streamable_http::{LAST_EVENT_ID, ResumeError, SESSION_ID, parse_id};
use crate::supervisor::recorded_upstreams;

/// Answers a request refused on the HTTP plane, recording why.
pub(super) fn reject(ctx: RequestContext, e: HttpError) -> Response {
    ctx.reject_with(e.reason, e.status.as_u16(), e.detail.error.code);
    e.into_response()
}

/// The session named by `Mcp-Session-Id`: 400 without the header, 404 when
/// unknown, expired or ended (the host then re-initializes), or when it belongs
/// to another principal or another endpoint (`endpoint`, `[endpoints.NAME]`). A session this process holds costs a map lookup (no
/// crypto, no store); any other id is opened and may be [`restore`]d. With a
/// shared store, a session in use slides its record's expiry there (at most
/// once a minute per process, not awaited).
pub(super) async fn lookup(
    st: &AppState,
    h: &HeaderMap,
    principal: Option<&Arc<Principal>>,
    endpoint: &str,
    client: Option<std::net::IpAddr>,
) -> Result<Arc<Session>, HttpError> {
    match h.get_all(SESSION_ID).iter().count() {
        0 => return Err(HttpError::missing_session()),
        1 => {}
        _ => {
            return Err(HttpError::new(
                Rejection::InvalidMessage,
                StatusCode::BAD_REQUEST,
                jsonrpc::TRANSPORT_ERROR,
                "Bad Request: more than one Mcp-Session-Id header",
            ));
        }
    }
    // Present but not visible ASCII: no session of ours has such an id.
    let id = headers::session_id(h).ok_or_else(HttpError::unknown_session)?;
    let session = match st.sessions.get(id) {
        // Opened at another endpoint: unknown here, as its id would not open.
        Some(held) if held.endpoint() != endpoint => return Err(HttpError::unknown_session()),
        Some(held) => held,
        // Boxed: rare, and large (the shared store's futures).
        None => Box::pin(restore(st, id, principal, endpoint, client)).await?,
    };
    super::auth::bind(st, &session, principal)?;
    if let Some(store) = st.supervisor.shared()
        && session.claim_refresh(unix_now(), store.refresh_every())
    {
        store.refresh(session.store_key().to_owned());
    }
    Ok(session)
}

/// A session this process does not hold, rebuilt from its sealed id (after a
/// restart with the same keys, or from another replica) and, with a shared
/// store, from its record there: capabilities and `clientInfo` verbatim, the
/// log level it set, the per-session HTTP backends' sessions it opened, whether
/// its owner's children list for it alone (`ol`: its lists are asked there). Without a store (or while it does not answer: fail open,
/// `mcpgate_cluster_degraded_total`) revision and capabilities come from the
/// id's bits alone (`Caps::to_json`, lossy). 404 when the id does not open (a
/// flipped byte: no store is asked), binds another principal, has no record
/// in a store that answers (ended or expired on any replica), ended here
/// (without a store) or is past `session_max_lifetime`; 503 at
/// `max_sessions`, and 503 + `Retry-After` while draining for shutdown (a
/// session rebuilt here would end with the process; the host retries through
/// the balancer on a replica that stays).
async fn restore(
    st: &AppState,
    id: &str,
    principal: Option<&Arc<Principal>>,
    endpoint: &str,
    client: Option<std::net::IpAddr>,
) -> Result<Arc<Session>, HttpError> {
    let count = |result: &str| {
        st.metrics
            .session_restores
            .with_label_values(&[result])
            .inc();
    };
    let Some(token) = SessionToken::open(&st.sealer, id, endpoint) else {
        count("forged");
        return Err(HttpError::unknown_session());
    };
    let presented = principal.map(|p| p.id());
    if !token.binds(&st.sealer, presented.as_ref()) {
        count("principal");
        return Err(HttpError::unknown_session());
    }
    if st.supervisor.is_stopping() {
        count("draining");
        return Err(HttpError::draining());
    }
    let (record, held_elsewhere) = match stored_record(st, &token).await {
        Ok(Some((record, elsewhere))) => (Some(record), elsewhere),
        Ok(None) => (None, false),
        Err(e) => {
            count("ended");
            return Err(e);
        }
    };
    let p = principal.map(|p| &**p);
    let confirmed = record.is_some();
    let (caps, info, level, upstreams, lists_elsewhere, tasks) = match record {
        Some(r) => (
            r.client_capabilities,
            r.client_info,
            r.log_level,
            r.upstream_sessions,
            r.lists_elsewhere,
            r.tasks,
        ),
        None => (
            token.caps.to_json(),
            Value::Null,
            None,
            Default::default(),
            false,
            Default::default(),
        ),
    };
    let session = Session::new(id.into(), token.identity, token.version, caps, info)
        .at_endpoint(endpoint.into())
        .opened_by(client)
        .with_principal(p, st.catalog.view_key_at(endpoint, p));
    if let Some(level) = level {
        session.set_log_level(level);
    }
    for (backend, upstream) in upstreams {
        session.set_upstream_session(&backend, Some(upstream));
    }
    session.set_lists_elsewhere(lists_elsewhere);
    for (exposed, route) in tasks {
        session.add_task(&exposed, route);
    }
    count_drops(st, &session);
    let session = Arc::new(session);
    let take = |s: &Arc<Session>| match confirmed {
        true => st.sessions.adopt(s.clone()),
        false => st.sessions.restore(s.clone()),
    };
    let mut taken = take(&session);
    // At the cap, a session in use takes the place of one never used.
    if taken.is_err() && super::admission::make_room(st, None).await {
        taken = take(&session);
    }
    match taken {
        Ok(Some(held)) => {
            count("restored");
            super::standalone::wire(st, &held);
            if held_elsewhere {
                // Its holders may be gone: this replica may take them over.
                st.supervisor.spawn_take_over(&held);
            }
            tracing::info!(session = %held.log_id(), version = %held.version(), from_store = confirmed, "session restored from its id");
            Ok(held)
        }
        Ok(None) => {
            count("ended");
            Err(HttpError::unknown_session())
        }
        Err(full) => {
            st.limit_log
                .refused("server.max_sessions (a restore)", full.limit);
            let retry = super::mcp::session_cap_retry_after(st);
            Err(HttpError::too_many_sessions().with_header(header::RETRY_AFTER, retry))
        }
    }
}

/// The shared store's record of the session `token` names, and whether it
/// names subscriptions held by another replica or by none (`ss:` fields):
/// `Ok(None)` without a store or while it does not answer (counted as
/// degraded); 404 when the store answers without a record, or with one that
/// is not ours.
async fn stored_record(
    st: &AppState,
    token: &SessionToken,
) -> Result<Option<(SessionRecord, bool)>, HttpError> {
    let Some(store) = st.supervisor.shared() else {
        return Ok(None);
    };
    let h = record_key(&token.identity.rand);
    match store.get_record(&h).await {
        Lookup::Found(fields) => match SessionRecord::from_fields(&fields) {
            Some(mut record) => {
                record.upstream_sessions = recorded_upstreams(&st.sealer, &h, &fields);
                let elsewhere =
                    (fields.iter()).any(|(k, v)| parse_held_field(k).is_some() && v != store.tag());
                Ok(Some((record, elsewhere)))
            }
            None => {
                tracing::warn!(
                    "a session record in the shared store does not parse; the session is refused"
                );
                Err(HttpError::unknown_session())
            }
        },
        Lookup::Absent => Err(HttpError::unknown_session()),
        Lookup::Unavailable => {
            st.metrics.cluster_degraded.inc();
            Ok(None)
        }
    }
}

/// Writes the record of a session `initialize` just opened to the shared
/// store, if there is one, before the host learns its id: 503 +
/// `Retry-After: 1` when the store does not answer.
pub(super) async fn record_new(st: &AppState, session: &Session) -> Result<(), HttpError> {
    let Some(store) = st.supervisor.shared() else {
        return Ok(());
    };
    let fields = session.record().to_fields();
    store
        .put_record(session.store_key(), &fields)
        .await
        .map_err(|_| HttpError::store_unavailable())
}

/// Counts what a slow host's streams drop (`mcpgate_dropped_messages_total`).
pub(super) fn count_drops(st: &AppState, session: &Session) {
    let dropped = st
        .metrics
        .dropped_messages
        .with_label_values(&["slow_host"]);
    session.events().count_drops_in(dropped);
}

/// A stream slot for a request about to be answered (POST) or a GET stream;
/// 429 + `Retry-After: 1` (RFC 6585 §4, whole seconds: a slot frees as soon as
/// one of the session's streams ends, which the gateway cannot foresee) when the
/// session already holds `max_streams_per_session` of them.
pub(super) fn reserve_stream(
    st: &AppState,
    session: &Arc<Session>,
) -> Result<StreamSlot, HttpError> {
    session
        .reserve_stream(st.server.max_streams_per_session)
        .map_err(|open| {
            HttpError::new(
                Rejection::TooManyStreams,
                StatusCode::TOO_MANY_REQUESTS,
                jsonrpc::TRANSPORT_ERROR,
                format!(
                    "Too Many Requests: this session already holds {open} open streams \
                     (server.max_streams_per_session)"
                ),
            )
            .with_header(header::RETRY_AFTER, HeaderValue::from_static("1"))
        })
}

/// `GET /mcp`: the standalone SSE stream for messages unrelated to any request,
/// or, with `Last-Event-ID`, the resumption of an interrupted stream (its events
/// after that id, on that stream only).
pub async fn get(State(st): State<AppState>, req: Request) -> Response {
    let mut ctx = super::accept::context(&st, &req);
    ctx.set_http_method("GET");
    match open_stream(&st, &mut ctx, req).await {
        Ok(resp) => {
            ctx.finish(Outcome::Ok);
            resp
        }
        Err(e) => reject(ctx, e),
    }
}

async fn open_stream(
    st: &AppState,
    ctx: &mut RequestContext,
    req: Request,
) -> Result<Response, HttpError> {
    let a = accept(st, req).await?;
    ctx.set_principal(a.principal.as_ref());
    let h = &a.parts.headers;
    if let Some(e) = super::modern::refuse_get_or_delete(h) {
        ctx.set_modern();
        return Err(e);
    }
    ctx.set_legacy();
    headers::check_get_accept(h)?;
    let session = lookup(st, h, a.principal.as_ref(), ctx.endpoint(), ctx.client()).await?;
    ctx.set_session(session.log_id());
    ctx.set_revision(session.version());
    headers::protocol_version(h)?;
    session.touch();
    if !session.mark_used() {
        return Err(HttpError::unknown_session());
    }
    let slot = reserve_stream(st, &session)?;
    // The host (re-)attaches here: subscriptions whose holder is gone come
    // here (the host re-attaches within seconds when its replica dies).
    st.supervisor.spawn_take_over(&session);
    let keep_alive = st.server.sse_keep_alive;
    let last_event = h
        .get(LAST_EVENT_ID)
        .map(|v| v.to_str().unwrap_or("invalid"));
    let Some(id) = last_event else {
        let prime = session.version().primes_streams();
        let attached = super::standalone::attach(st, &session, prime).await;
        return Ok(sse_response(slot, prime, attached, keep_alive, &st.metrics));
    };
    let parsed = parse_id(id);
    let ours = parsed.is_some_and(|(s, _)| session.events().standalone() == Some(s));
    // A standalone stream with a store: another replica may continue it.
    let mut resumed = match (st.supervisor.shared(), parsed) {
        (Some(_), Some(_)) if ours => Err(ResumeError::Gone),
        _ => session.events().resume(id),
    };
    if let (Err(ResumeError::Gone), Some(store), Some((stream, after))) =
        (&resumed, st.supervisor.shared(), parsed)
        && let Some(r) = super::standalone::resume(st, store, &session, stream, after).await
    {
        let prime = session.version().primes_streams();
        return match r {
            Ok((attached, fresh)) => {
                let prime = prime && fresh;
                Ok(sse_response(slot, prime, attached, keep_alive, &st.metrics))
            }
            Err(e) => Err(resume_refused(e)),
        };
    }
    if let (Err(ResumeError::Gone), Some(store), Some((stream, after))) =
        (&resumed, st.supervisor.shared(), parse_id(id))
    {
        // Not produced here (or no longer held here): another replica's, maybe.
        let h = session.store_key();
        resumed = super::resume::elsewhere(store, &st.sealer, h, stream, after).await;
    }
    match resumed {
        Ok(attached) => Ok(sse_response(slot, false, attached, keep_alive, &st.metrics)),
        Err(e) => Err(resume_refused(e)),
    }
}

/// A `Last-Event-ID` that cannot be honoured: 400 when malformed, 410 when
/// its events are gone.
fn resume_refused(e: ResumeError) -> HttpError {
    let status = match e {
        ResumeError::Malformed => StatusCode::BAD_REQUEST,
        ResumeError::Gone => StatusCode::GONE,
    };
    HttpError::new(
        Rejection::Resume,
        status,
        jsonrpc::TRANSPORT_ERROR,
        e.to_string(),
    )
}

/// `DELETE /mcp`: ends the session and its backend state (HTTP backends get a
/// `DELETE` of their own session, per-session stdio children are stopped).
pub async fn delete(State(st): State<AppState>, req: Request) -> Response {
    let mut ctx = super::accept::context(&st, &req);
    ctx.set_http_method("DELETE");
    let found = async {
        let a = accept(&st, req).await?;
        ctx.set_principal(a.principal.as_ref());
        if let Some(e) = super::modern::refuse_get_or_delete(&a.parts.headers) {
            ctx.set_modern();
            return Err(e);
        }
        ctx.set_legacy();
        let session = lookup(
            &st,
            &a.parts.headers,
            a.principal.as_ref(),
            ctx.endpoint(),
            ctx.client(),
        )
        .await?;
        headers::protocol_version(&a.parts.headers)?;
        Ok::<_, HttpError>(session)
    };
    match found.await {
        Ok(session) => {
            ctx.set_session(session.log_id());
            ctx.set_revision(session.version());
            tracing::info!(session = %session.log_id(), "session deleted by the client");
            // Unknown from now on; backend connections close in the background
            // (a child that ignores SIGTERM must not hold up the answer).
            st.sessions.remove(session.id());
            if let Some(store) = st.supervisor.shared() {
                // The backend sessions other replicas opened end here too.
                let h = session.store_key();
                if let Lookup::Found(fields) = store.get_record(h).await {
                    for (backend, u) in recorded_upstreams(&st.sealer, h, &fields) {
                        session.set_upstream_session(&backend, Some(u));
                    }
                }
                // Ended for every replica before the host hears so.
                store.end(h).await;
            }
            let supervisor = st.supervisor.clone();
            tokio::spawn(async move { supervisor.end_session(&session).await });
            ctx.finish(Outcome::Ok);
            StatusCode::OK.into_response()
        }
        Err(e) => reject(ctx, e),
    }
}
