//! [`Call`]: a forwarded call that the POST handler runs inline while it waits
//! for the answer, spawned only when it has to run on its own.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use tokio::sync::mpsc;

use crate::session::Outbound;

/// A forwarded call whose task has not been spawned: whoever waits for its
/// first message runs it inline ([`Call::recv`]), which saves a task, its
/// scheduling and a wake-up per call when the answer comes soon;
/// [`Call::detach`] spawns it. Dropped with its task unfinished (the host went
/// away), the task is spawned: a disconnect is not a cancellation (MCP
/// 2025-11-25 basic/transports).
pub struct Call {
    task: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    rx: Option<mpsc::Receiver<Outbound>>,
}

impl Call {
    pub(super) fn new(
        task: impl Future<Output = ()> + Send + 'static,
        rx: mpsc::Receiver<Outbound>,
    ) -> Self {
        Call {
            task: Some(Box::pin(task)),
            rx: Some(rx),
        }
    }

    /// The next message, running the call's task meanwhile; `None` when the
    /// channel closed without a final message (cancelled). Cancel-safe: a
    /// message is only taken when it is returned.
    pub async fn recv(&mut self) -> Option<Outbound> {
        std::future::poll_fn(|cx| {
            let Some(rx) = self.rx.as_mut() else {
                return Poll::Ready(None);
            };
            if let Poll::Ready(m) = rx.poll_recv(cx) {
                return Poll::Ready(m);
            }
            if let Some(task) = self.task.as_mut()
                && task.as_mut().poll(cx).is_ready()
            {
                // Whatever it sent last is queued now.
                self.task = None;
                return rx.poll_recv(cx);
            }
            Poll::Pending
        })
        .await
    }

    /// Lets the task run on its own; its messages come on the receiver.
    pub fn detach(mut self) -> mpsc::Receiver<Outbound> {
        self.spawn_task();
        match self.rx.take() {
            Some(rx) => rx,
            None => mpsc::channel(1).1,
        }
    }

    fn spawn_task(&mut self) {
        if let Some(task) = self.task.take()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            rt.spawn(task);
        }
    }
}

impl From<mpsc::Receiver<Outbound>> for Call {
    /// The messages of a call that runs on its own already.
    fn from(rx: mpsc::Receiver<Outbound>) -> Self {
        Call {
            task: None,
            rx: Some(rx),
        }
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        self.spawn_task();
    }
}
