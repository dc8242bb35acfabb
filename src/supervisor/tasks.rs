//! A session's tasks (MCP 2025-11-25 basic/utilities/tasks) across replicas
//! (issue 11): with a shared store, a task made through a backend every
//! replica reaches alike (HTTP, or a shared stdio process: see below) is
//! recorded with the session (`cluster/tasks.rs`), so a replica whose copy of
//! the session lacks it reads it back and forwards on its own connection.
//! Tasks of per-session stdio children are not recorded: their requests go
//! to the children's owner (`dispatch/target.rs`).
//!
//! A stdio child holds its tasks in its memory, so a task's route names the
//! process (`TAG/PID`, [`TaskRoute::process`]). A request for it that would
//! reach another process — the child restarted, or the task was made on
//! another replica's child — is not forwarded (the id means nothing there):
//! -32602 "lost" when that process is gone (this replica's, or a replica
//! whose heartbeat stopped), -32603 when another live replica runs it.

use std::sync::Arc;

use super::Supervisor;
use crate::backend::Connection;
use crate::config::Transport;
use crate::error::RpcError;
use crate::session::{Host, Session, TaskRoute};

/// The replica part of a process name without a store.
const NO_STORE: &str = "-";

impl Supervisor {
    /// The replica's tag in process names (`-` without a store).
    fn process_tag(&self) -> &str {
        self.shared.as_ref().map_or(NO_STORE, |s| s.tag())
    }

    /// The process a task made on `conn` lives in: `TAG/PID` for a stdio
    /// child, `None` for a backend any connection reaches alike.
    pub fn task_process(&self, conn: &Connection) -> Option<String> {
        TaskRoute::process_of(self.process_tag(), conn.stdio_process())
    }

    /// The connection that serves `session` on backend `idx` now, if one is
    /// live (no connection is opened).
    pub fn live_connection(&self, idx: usize, session: &Session) -> Option<Arc<Connection>> {
        let b = self.catalog.backend(idx);
        if b.shares_with(session.created()) {
            b.shared().current()
        } else {
            session.slot(idx)?.current()
        }
    }

    /// Records task `exposed` that `session` made on backend `idx` in the
    /// shared store (awaited: a request for it on another replica must find
    /// it), unless there is no store or the task lives in a per-session
    /// stdio child. A store failure is logged: the task stays known here.
    pub async fn record_task(
        &self,
        session: &Session,
        idx: usize,
        exposed: &str,
        route: &TaskRoute,
    ) {
        let Some(store) = &self.shared else {
            return;
        };
        if self.is_owner_bound(idx, session) {
            return;
        }
        let value = route.to_field();
        // The index routes statuses arriving on a *shared* connection; a
        // per-session connection's statuses belong to its owner, and its task
        // ids may repeat another session's (each backend session numbers its own).
        let shared = self.catalog.backend(idx).shares_with(session.created());
        let index =
            (route.process.is_none() && shared).then_some((&*route.backend, &*route.original));
        let put = (store.tasks()).record(session.store_key(), exposed, &value, index);
        if put.await.is_err() {
            tracing::warn!(session = %session.log_id(), backend = %route.backend, "task not recorded in the shared store: other replicas will not know it");
        }
    }

    /// Where `session`'s task `exposed`, which its copy here lacks, leads,
    /// as the shared store recorded it (one `HGET`); it is added to the
    /// copy. `None`: no store, not recorded, or the store did not answer.
    pub async fn recorded_task(&self, session: &Session, exposed: &str) -> Option<TaskRoute> {
        let store = self.shared.as_ref()?;
        let value = store
            .tasks()
            .get(session.store_key(), exposed)
            .await
            .ok()??;
        let route = TaskRoute::from_field(&value)?;
        session.add_task(exposed, route.clone());
        Some(route)
    }

    /// Adds to `session`'s copy every task the shared store recorded for it
    /// (one `HGETALL`; nothing without a store or while it does not answer).
    pub async fn load_recorded_tasks(&self, session: &Session) {
        let Some(store) = &self.shared else {
            return;
        };
        let Ok(all) = store.tasks().all(session.store_key()).await else {
            return;
        };
        for (exposed, value) in all {
            if !session.owns_task(&exposed)
                && let Some(route) = TaskRoute::from_field(&value)
            {
                session.add_task(&exposed, route);
            }
        }
    }

    /// Whether a request for `session`'s task `exposed` (`route`, on backend
    /// `idx`) may be forwarded here: always when the task is not bound to a
    /// process or its process serves the session here; else the error that
    /// says why not (see the module docs).
    ///
    /// Errors: [`RpcError::TaskLost`], [`RpcError::TaskElsewhere`], or the
    /// backend's when no connection can be opened.
    pub async fn check_task_process(
        &self,
        session: &Arc<Session>,
        idx: usize,
        exposed: &str,
        route: &TaskRoute,
    ) -> Result<(), RpcError> {
        let Some(process) = &route.process else {
            return Ok(());
        };
        let b = self.catalog.backend(idx);
        if !matches!(b.spec.config.transport, Transport::Stdio { .. }) {
            return Ok(());
        }
        let conn = self
            .connection_for(idx, &Host::Legacy(session.clone()))
            .await?;
        if self.task_process(&conn).as_ref() == Some(process) {
            return Ok(());
        }
        let tag = process.split_once('/').map_or("", |(t, _)| t);
        let lost = RpcError::TaskLost {
            task: exposed.to_owned(),
            backend: route.backend.clone(),
        };
        let other_alive = match &self.shared {
            Some(store) if tag != store.tag() && tag != NO_STORE => store.is_alive(tag).await,
            _ => false,
        };
        if !other_alive {
            tracing::info!(session = %session.log_id(), backend = %route.backend, "a task's backend process stopped since it was made; refused");
            return Err(lost);
        }
        Err(RpcError::TaskElsewhere {
            task: exposed.to_owned(),
            backend: route.backend.clone(),
            replica: tag.to_owned(),
        })
    }
}
