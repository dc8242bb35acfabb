//! The SSE body of an attached response ([`Attached::into_sse`]).

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream;
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior, interval_at};

use super::{Attached, Frame, KEEP_ALIVE};

impl Attached {
    pub(super) fn empty() -> Self {
        Attached {
            stream: 0,
            replay: Vec::new(),
            live: None,
            prime_due: false,
        }
    }

    /// The SSE body of the response: the priming event (when `prime`: revision
    /// 2025-11-25 or later, see `ProtocolVersion::primes_streams`), the replayed
    /// frames, then live frames until the stream's last event or until the log
    /// detaches the response; a [`KEEP_ALIVE`] comment after each `keep_alive` of
    /// silence. Every item is one [`Frame::encode`]d event or a [`KEEP_ALIVE`].
    pub fn into_sse(
        self,
        prime: bool,
        keep_alive: Duration,
    ) -> impl futures_util::Stream<Item = Bytes> + Send {
        struct State {
            queued: VecDeque<Frame>,
            live: Option<mpsc::Receiver<Frame>>,
            tick: tokio::time::Interval,
            done: bool,
        }
        let mut queued: VecDeque<Frame> = self.replay.into();
        if prime && self.prime_due {
            queued.push_front(Frame {
                stream: self.stream,
                seq: 0,
                data: Bytes::new(),
                last: false,
            });
        }
        let mut tick = interval_at(Instant::now() + keep_alive, keep_alive);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let state = State {
            queued,
            live: self.live,
            tick,
            done: false,
        };
        stream::unfold(state, |mut st| async move {
            if st.done {
                return None;
            }
            let next = match st.queued.pop_front() {
                Some(f) => f,
                None => {
                    let live = st.live.as_mut()?;
                    tokio::select! {
                        f = live.recv() => f?,
                        _ = st.tick.tick() => {
                            return Some((Bytes::from_static(KEEP_ALIVE), st));
                        }
                    }
                }
            };
            st.tick.reset();
            st.done = next.last;
            Some((next.encode(), st))
        })
    }
}
