//! A TCP proxy in front of the test Redis that can hold back the replies on a
//! connection once a chosen command went through: the command runs in Redis
//! at once, its answer reaches the gateway late (after the store's 500 ms
//! deadline), as when a reply is lost on a slow network.

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
}

impl RedisProxy {
    /// Listens on a free loopback port and forwards to `port`.
    pub async fn start(port: u16) -> RedisProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("redis://{}", listener.local_addr().unwrap());
        let armed = Arc::new(Mutex::new(None));
        let shared = armed.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(("127.0.0.1", port)).await else {
                    continue;
                };
                tokio::spawn(pipe(client, server, shared.clone()));
            }
        });
        RedisProxy { url, armed }
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

async fn pipe(client: TcpStream, server: TcpStream, armed: Armed) {
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let hold: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    let held = hold.clone();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n) = sr.read(&mut buf).await {
            if n == 0 {
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
    while let Ok(n) = cr.read(&mut buf).await {
        if n == 0 {
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
