//! What replicas tell each other through the shared store: [`Ctl`], the
//! `ctl` broadcast lines (`ended`, `roots`, `lvl`, `cancel`, `ol`, a
//! listener's release, a subscription's holder `ss`, `free` and `unsub`) and inbox messages as the supervisor receives them, plus the
//! store's own health events; `parse_ctl` reads a broadcast line.

/// A message from another replica (or from the store's own health check).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ctl {
    /// Session `h` ended (`DELETE`): drop its cached copy.
    Ended(String),
    /// Session `h` set its log level to `level` (an MCP level name).
    Level {
        /// The session's store key.
        h: String,
        /// The level's wire name.
        level: String,
    },
    /// The host of session `h` answered, on another replica, a server→client
    /// request this replica relayed: `message` is the JSON-RPC response.
    Answer {
        /// The session's store key.
        h: String,
        /// The host's response, as JSON text.
        message: String,
    },
    /// The host of session `h` cancelled, on another replica, one of its
    /// requests: `params` are the `notifications/cancelled` params as JSON
    /// text. Whichever replica runs the request cancels it.
    Cancel {
        /// The session's store key.
        h: String,
        /// `{"requestId": …, "reason"?: …}`.
        params: String,
    },
    /// The host of session `h` changed its roots, on another replica: the
    /// session's owner tells its per-session children.
    Roots(String),
    /// Another replica's backend sent, for session `h`, a message for its
    /// standalone stream, which this replica produces: `message` is the
    /// JSON-RPC message, to put on that stream as if it came from here.
    Standalone {
        /// The session's store key.
        h: String,
        /// The JSON-RPC message, as JSON text.
        message: String,
    },
    /// Another replica hands this one, the owner of session `h`'s per-session
    /// children, a request routed to one of them: `message` is the sealed
    /// call (`http/owner.rs`), to run here and mirror to the session's event
    /// stream.
    Call {
        /// The session's store key.
        h: String,
        /// The sealed call.
        message: String,
    },
    /// Replica TAG let go of the GET stream of session `h`'s backend
    /// session on `backend` (`listener.rs`): a standby here claims it.
    Listener {
        /// The session's store key.
        h: String,
        /// The backend's name.
        backend: String,
    },
    /// The owner of session `h`'s per-session children lists for it what
    /// the backends' catalogues do not (`on`), or no longer: its list
    /// requests go to the owner while `on`.
    OwnLists {
        /// The session's store key.
        h: String,
        /// Whether the mark is set.
        on: bool,
    },
    /// Replica `holder` holds a resource subscription of session `h` now
    /// (`subscriptions.rs`): a replica caching it watches that holder's
    /// heartbeat, to take it over when it dies.
    Held {
        /// The session's store key.
        h: String,
        /// The holder's tag.
        holder: String,
    },
    /// Another replica let session `h` go while it lives on, with the
    /// subscriptions it held (vacant now): a replica caching it takes them.
    Vacated(String),
    /// The host of session `h` unsubscribed, on another replica, from `uri`
    /// of `backend`, a subscription this replica holds: its share ends.
    Unsubscribe {
        /// The session's store key.
        h: String,
        /// The backend's name.
        backend: String,
        /// The backend's URI.
        uri: String,
    },
    /// The store is reachable again after an outage: broadcasts may have been
    /// missed, revalidate the cached sessions.
    Resync,
    /// No heartbeat landed for the heartbeat TTL: this replica's key expired,
    /// another replica may adopt its sessions. Drop every owned mark.
    Fenced,
    /// A heartbeat landed again after [`Ctl::Fenced`]: check which of the
    /// sessions owned before are still ours.
    Unfenced,
}

/// A `ctl` message from another replica: `ended H TAG`, `roots H TAG`, `lvl H
/// LEVEL TAG`, `ol H 1|0 TAG`, `ss H TAG`, `free H TAG`, `cancel H TAG PARAMS` (PARAMS:
/// JSON, the rest of the line) or `unsub H HOLDER NAME URI` (URI: the rest
/// of the line; only when HOLDER is `me`);
/// `None` for this replica's own (`me`) and for anything else.
pub(super) fn parse_ctl(text: &str, me: &str) -> Option<Ctl> {
    if let Some(rest) = text.strip_prefix("unsub ") {
        let mut words = rest.splitn(4, ' ');
        let (h, holder) = (words.next()?, words.next()?);
        let (backend, uri) = (words.next()?, words.next()?);
        return (holder == me).then(|| Ctl::Unsubscribe {
            h: h.to_owned(),
            backend: backend.to_owned(),
            uri: uri.to_owned(),
        });
    }
    if let Some(rest) = text.strip_prefix("cancel ") {
        let mut words = rest.splitn(3, ' ');
        let (h, tag, params) = (words.next()?, words.next()?, words.next()?);
        return (tag != me).then(|| Ctl::Cancel {
            h: h.to_owned(),
            params: params.to_owned(),
        });
    }
    let words: Vec<&str> = text.split(' ').collect();
    if let Some((h, backend)) = super::listener::parse_released(&words, me) {
        let (h, backend) = (h.to_owned(), backend.to_owned());
        return Some(Ctl::Listener { h, backend });
    }
    match words.as_slice() {
        ["ended", h, tag] if *tag != me => Some(Ctl::Ended((*h).to_owned())),
        ["roots", h, tag] if *tag != me => Some(Ctl::Roots((*h).to_owned())),
        ["free", h, tag] if *tag != me => Some(Ctl::Vacated((*h).to_owned())),
        ["ss", h, tag] if *tag != me => Some(Ctl::Held {
            h: (*h).to_owned(),
            holder: (*tag).to_owned(),
        }),
        ["ol", h, on @ ("1" | "0"), tag] if *tag != me => Some(Ctl::OwnLists {
            h: (*h).to_owned(),
            on: *on == "1",
        }),
        ["lvl", h, level, tag] if *tag != me => Some(Ctl::Level {
            h: (*h).to_owned(),
            level: (*level).to_owned(),
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ctl_messages_of_others_only() {
        assert_eq!(
            parse_ctl("ended abc r1", "r2"),
            Some(Ctl::Ended("abc".into()))
        );
        assert_eq!(parse_ctl("ended abc r2", "r2"), None, "our own");
        assert!(matches!(parse_ctl("roots abc r1", "r2"), Some(Ctl::Roots(h)) if h == "abc"));
        assert_eq!(
            parse_ctl("lvl abc warning r1", "r2"),
            Some(Ctl::Level {
                h: "abc".into(),
                level: "warning".into()
            })
        );
        assert_eq!(parse_ctl("lvl abc r1", "r2"), None);
        assert_eq!(
            parse_ctl("ol abc 1 r1", "r2"),
            Some(Ctl::OwnLists {
                h: "abc".into(),
                on: true
            })
        );
        assert!(matches!(
            parse_ctl("ol abc 0 r1", "r2"),
            Some(Ctl::OwnLists { on: false, .. })
        ));
        assert_eq!(parse_ctl("ol abc 0 r2", "r2"), None, "our own");
        assert_eq!(parse_ctl("ol abc yes r1", "r2"), None);
        assert_eq!(
            parse_ctl("ss abc r1", "r2"),
            Some(Ctl::Held {
                h: "abc".into(),
                holder: "r1".into()
            })
        );
        assert_eq!(parse_ctl("ss abc r2", "r2"), None, "our own");
        assert_eq!(
            parse_ctl("free abc r1", "r2"),
            Some(Ctl::Vacated("abc".into()))
        );
        assert_eq!(
            parse_ctl("unsub abc r2 web file:///a b", "r2"),
            Some(Ctl::Unsubscribe {
                h: "abc".into(),
                backend: "web".into(),
                uri: "file:///a b".into()
            })
        );
        assert_eq!(parse_ctl("unsub abc r1 web x", "r2"), None, "not held here");
        assert_eq!(parse_ctl("unsub abc r2 web", "r2"), None);
        assert_eq!(parse_ctl("owner abc r1", "r2"), None, "not ours to read");
        assert_eq!(
            parse_ctl(r#"cancel abc r1 {"requestId":1,"reason":"a b"}"#, "r2"),
            Some(Ctl::Cancel {
                h: "abc".into(),
                params: r#"{"requestId":1,"reason":"a b"}"#.into()
            })
        );
        assert_eq!(parse_ctl("cancel abc r2 {}", "r2"), None, "our own");
        assert_eq!(parse_ctl("cancel abc r1", "r2"), None);
    }
}
