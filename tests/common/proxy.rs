//! A TCP proxy in front of the test Redis that can hold back the replies on a
//! connection once a chosen command went through: the command runs in Redis
//! at once, its answer reaches the gateway late (after the store's 500 ms
//! deadline), as when a reply is lost on a slow network; or cut every
//! connection (a blackhole: nothing passes either way, nothing is closed)
//! until healed, as when a network partition isolates one replica.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

/// The armed hold: the command to look for and how long replies wait.
type Armed = Arc<Mutex<Option<(Vec<u8>, Duration)>>>;

/// A running proxy (its tasks end with the test's runtime).
pub struct RedisProxy {
    /// `redis://127.0.0.1:PORT` of the proxy.
    pub url: String,
    armed: Armed,
    cut: Arc<AtomicBool>,
}

impl RedisProxy {
    /// Listens on a free loopback port and forwards to `port`.
    pub async fn start(port: u16) -> RedisProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("redis://{}", listener.local_addr().unwrap());
        let armed = Arc::new(Mutex::new(None));
        let cut = Arc::new(AtomicBool::new(false));
        let (shared, cutting) = (armed.clone(), cut.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if cutting.load(Ordering::SeqCst) {
                    // Held open, never answered, closed once healed.
                    let cutting = cutting.clone();
                    tokio::spawn(async move {
                        while cutting.load(Ordering::SeqCst) {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        drop(client);
                    });
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", port)).await else {
                    continue;
                };
                tokio::spawn(pipe(client, server, shared.clone(), cutting.clone()));
            }
        });
        RedisProxy { url, armed, cut }
    }

    /// Cuts every connection through the proxy: from now on nothing passes
    /// either way and nothing is closed (commands time out), new connections
    /// included, until [`RedisProxy::heal`].
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
    }

    /// Ends the cut: the connections it hit are closed (what they carried
    /// was lost halfway) and new ones pass again.
    pub fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }

    /// Once: the next command containing `needle` passes, then this
    /// connection's replies are held back for `delay`.
    pub fn hold_replies_after(&self, needle: &str, delay: Duration) {
        *self.armed.lock().unwrap() = Some((needle.as_bytes().to_vec(), delay));
    }

    /// Whether the armed hold happened.
    pub fn fired(&self) -> bool {
        self.armed.lock().unwrap().is_none()
    }
}

/// Waits while `cut` is set; `true` when it was (the connection is to close).
async fn blackholed(cut: &AtomicBool) -> bool {
    let mut was = false;
    while cut.load(Ordering::SeqCst) {
        was = true;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    was
}

async fn pipe(client: TcpStream, server: TcpStream, armed: Armed, cut: Arc<AtomicBool>) {
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let hold: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    let held = hold.clone();
    // Set once a cut hit this connection: both halves then close.
    let broken = Arc::new(AtomicBool::new(false));
    let (cut2, broken2) = (cut.clone(), broken.clone());
    tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n) = sr.read(&mut buf).await {
            if n == 0 || blackholed(&cut2).await || broken2.load(Ordering::SeqCst) {
                broken2.store(true, Ordering::SeqCst);
                break;
            }
            let until = *held.lock().unwrap();
            if let Some(until) = until {
                tokio::time::sleep_until(until).await;
            }
            if cw.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
    });
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = tokio::select! {
            r = cr.read(&mut buf) => match r {
                Ok(n) => n,
                Err(_) => break,
            },
            // A cut while the client is quiet breaks the connection too.
            _ = async {
                while !cut.load(Ordering::SeqCst) && !broken.load(Ordering::SeqCst) {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            } => 0,
        };
        if n == 0 || blackholed(&cut).await || broken.load(Ordering::SeqCst) {
            broken.store(true, Ordering::SeqCst);
            break;
        }
        {
            let mut armed = armed.lock().unwrap();
            let hit = armed
                .as_ref()
                .is_some_and(|(needle, _)| buf[..n].windows(needle.len()).any(|w| w == needle));
            if hit {
                let (_, delay) = armed.take().unwrap();
                *hold.lock().unwrap() = Some(Instant::now() + delay);
            }
        }
        if sw.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
}
