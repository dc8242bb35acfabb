//! The standalone stream's side of the event log with a shared store: which
//! stream is mirrored (claimed by this process), and taking back what the
//! store refused because another process produces the stream the host
//! listens to now (`http/standalone.rs` hands it on there).

use bytes::Bytes;

use super::{EventLog, Inner, StandaloneMirror, Stream, next_stream_id};

impl Inner {
    /// The standalone stream's number, created (detached) if there is none.
    pub(super) fn standalone_stream(&mut self) -> u64 {
        if let Some(s) = self.standalone {
            return s;
        }
        let id = next_stream_id();
        self.streams.insert(id, Stream::new(None));
        self.standalone = Some(id);
        id
    }

    fn forget(&mut self, stream: u64) {
        self.streams.remove(&stream);
        if self.standalone == Some(stream) {
            self.standalone = None;
        }
        let bytes = &mut self.bytes;
        self.events.retain(|f| {
            let keep = f.stream != stream;
            if !keep {
                *bytes -= f.data.len();
            }
            keep
        });
    }

    /// Whether the standalone stream is produced here: a response is
    /// attached to it (and the store has not said the host left it), or it is
    /// mirrored (claimed here).
    fn standalone_here(&self) -> bool {
        let s = self.standalone.and_then(|s| self.streams.get(&s));
        s.is_some_and(|s| {
            let listened = !s.left && s.listened();
            s.mirrored || listened
        })
    }
}

impl EventLog {
    /// Sets what receives the events of mirrored standalone streams (once).
    pub fn set_standalone_mirror(&self, mirror: StandaloneMirror) {
        let _ = self.mirror.set(mirror);
    }

    /// The standalone stream's number, if there is one.
    pub fn standalone(&self) -> Option<u64> {
        self.inner.lock().ok()?.standalone
    }

    /// From now on, events of `stream` go to the standalone mirror too
    /// (`false`: no longer; the store names another stream).
    pub fn mirror_standalone(&self, stream: u64, on: bool) {
        if let Ok(mut g) = self.inner.lock()
            && let Some(s) = g.streams.get_mut(&stream)
        {
            s.mirrored = on;
        }
    }

    /// Whether this log produces the standalone stream a host listens to: a
    /// response is attached to it (one the host has not left, see
    /// [`EventLog::take_back`]), or it is mirrored (claimed here).
    pub fn standalone_here(&self) -> bool {
        self.inner.lock().is_ok_and(|g| g.standalone_here())
    }

    /// Sends `data` on the standalone stream if this log produces it (see
    /// [`EventLog::standalone_here`]), in one step; back otherwise.
    pub fn push_standalone_if_here(&self, data: Bytes) -> Result<(), Bytes> {
        let Ok(mut g) = self.inner.lock() else {
            return Err(data);
        };
        match g.standalone.filter(|_| g.standalone_here()) {
            Some(stream) => {
                self.push_locked(&mut g, stream, data, false);
                Ok(())
            }
            None => Err(data),
        }
    }

    /// [`EventLog::push_standalone`] for what this process makes for its own
    /// copy of the session (lists changed; every replica sends its own): it
    /// is never taken back by [`EventLog::take_back`].
    pub fn push_standalone_own(&self, data: Bytes) {
        let Ok(mut g) = self.inner.lock() else { return };
        let stream = g.standalone_stream();
        let seq = g.streams.get(&stream).map(|s| s.next_seq);
        self.push_locked(&mut g, stream, data, false);
        if let (Some(seq), Some(s)) = (seq, g.streams.get_mut(&stream))
            && s.next_seq > seq
        {
            s.own.push(seq);
        }
    }

    /// Forgets `stream` and its buffered events (another process continues
    /// it): a `Last-Event-ID` of it is no longer answered from here.
    pub fn forget(&self, stream: u64) {
        if let Ok(mut g) = self.inner.lock() {
            g.forget(stream);
        }
    }

    /// Takes back the buffered events of standalone stream `stream` from seq
    /// `from` on, which the standalone mirror refused: with `forget`, another
    /// process continues the stream (it is forgotten here, see
    /// [`EventLog::forget`]); otherwise the host listens to another stream
    /// (this one is no longer mirrored, and a response still attached to it
    /// no longer makes it produced here: the host left it, and hyper notices
    /// a closed connection only at a later write). The message of each such event (the
    /// empty priming events and this process's own excepted; also one handed
    /// to a `GET` here: the host left this stream, and a closed connection is
    /// only noticed at the next write) goes to `give`, in order, under the
    /// log's lock: ahead of anything [`EventLog::push_standalone_if_here`]
    /// refuses afterwards. It is removed from the buffer, so never sent from
    /// here again. Returns the last seq the stream had numbered (`None`: it is
    /// not here): its later mirror writes up to it are stale.
    pub fn take_back(
        &self,
        stream: u64,
        from: u64,
        forget: bool,
        mut give: impl FnMut(Bytes),
    ) -> Option<u64> {
        let Ok(mut g) = self.inner.lock() else {
            return None;
        };
        let g = &mut *g;
        let s = g.streams.get_mut(&stream)?;
        let upto = s.next_seq.saturating_sub(1);
        let own = std::mem::take(&mut s.own);
        // A response attached after the refused event was numbered: the
        // host came back here since (its GET claimed the stream again), so
        // the stream stays mirrored and produced here; the events still go
        // to the hand-off, which finds the stream here.
        if from >= s.attached_at {
            s.mirrored = false;
            s.left = true;
        }
        let bytes = &mut g.bytes;
        g.events.retain(|f| {
            let back =
                f.stream == stream && f.seq >= from && !f.data.is_empty() && !own.contains(&f.seq);
            if back {
                *bytes -= f.data.len();
                give(f.data.clone());
            }
            !back
        });
        if forget {
            g.forget(stream);
        } else if let Some(s) = g.streams.get_mut(&stream) {
            s.own = own;
        }
        Some(upto)
    }
}
