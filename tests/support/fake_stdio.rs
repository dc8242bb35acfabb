//! `mcpgate-fake-stdio`: a small, scriptable MCP server on stdin/stdout
//! (newline-delimited JSON-RPC) for the integration tests. Hand-rolled on purpose
//! (no gateway code) so it can misbehave. Knobs:
//!
//! `--exit-after-calls N` (exits when `tools/call` number N+1 arrives, unanswered),
//! `--crash-on-start` (traceback on stderr, exit 1), `--ignore-sigterm` (also keeps
//! running after stdin EOF), `--strict-init` (only `initialize`/`ping` until
//! `notifications/initialized`), `--page-size K`, `--noise` (non-JSON stdout lines),
//! `--never-answer TOOL`, `--tools-json FILE` (extra raw tool definitions),
//! `--log FILE` (every inbound message as a JSON line `{ts, pid, msg, line}`, `line`
//! the text as received; events as `{ts, pid, event, ...}`; a line a `Value` cannot
//! hold is logged as `bad line` and, if it has an id, answered -32602), `--label TEXT` (what `whoami` answers),
//! `--start-delay-ms N` (a slow start: stdin is read only after N ms),
//! `--hang-after N` (answers N `ping`s, then nothing at all: a hung server),
//! `--subscribe` (declares `resources.subscribe`, accepts `resources/subscribe` and
//! `unsubscribe`, and offers a tool `touch {uri, force?}` that sends
//! `notifications/resources/updated` for `uri` if it is subscribed, or `force`), `--tasks` (declares the tasks
//! capability and serves task-augmented `tools/call`, `tasks/get|result|cancel|list`,
//! sending `notifications/tasks/status` on every status change),
//! `--storm` (sends `notifications/tools/list_changed` after every `tools/list`
//! answer, with nothing changed: a notification storm), `--modern` (a 2026-07-28
//! server only: `server/discover`, `_meta` on every request, `input_required`
//! tools; see `modern.rs`).
//!
//! A tool named `log_later` (declare it with `--tools-json`) answers at once and
//! sends a `notifications/message` `{delay_ms}` later, unrelated to any request;
//! `ask_later` likewise sends a `roots/list` request, then logs its answer.
//! A tool named `structured` (declare it with `--tools-json`) answers with
//! `structuredContent` and a `resource_link` block; `bogus_progress` sends progress
//! for tokens it was never given, then one for its own token.

mod modern;
mod tasks;
mod tools;

use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot};

use tasks::FakeTask;
use tools::{Catalog, Peer};

const VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];

#[derive(Default)]
struct Knobs {
    exit_after_calls: Option<usize>,
    crash_on_start: bool,
    ignore_sigterm: bool,
    strict_init: bool,
    /// Exit on any request but `initialize` before `notifications/initialized`
    /// (as some legacy servers do on an era probe).
    exit_before_init: bool,
    page_size: usize,
    noise: bool,
    never_answer: Vec<String>,
    tools_json: Option<String>,
    log: Option<String>,
    label: String,
    start_delay_ms: u64,
    hang_after: Option<usize>,
    subscribe: bool,
    tasks: bool,
    storm: bool,
    modern: bool,
}

fn parse_args() -> Knobs {
    let mut k = Knobs {
        label: "fx-stdio".into(),
        ..Knobs::default()
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_default();
        match a.as_str() {
            "--exit-after-calls" => k.exit_after_calls = val().parse().ok(),
            "--crash-on-start" => k.crash_on_start = true,
            "--ignore-sigterm" => k.ignore_sigterm = true,
            "--strict-init" => k.strict_init = true,
            "--exit-before-init" => k.exit_before_init = true,
            "--page-size" => k.page_size = val().parse().unwrap_or(0),
            "--noise" => k.noise = true,
            "--never-answer" => k.never_answer.push(val()),
            "--tools-json" => k.tools_json = Some(val()),
            "--log" => k.log = Some(val()),
            "--label" => k.label = val(),
            "--start-delay-ms" => k.start_delay_ms = val().parse().unwrap_or(0),
            "--hang-after" => k.hang_after = val().parse().ok(),
            "--subscribe" => k.subscribe = true,
            "--tasks" => k.tasks = true,
            "--storm" => k.storm = true,
            "--modern" => k.modern = true,
            other => eprintln!("fake-stdio: unknown argument {other:?}"),
        }
    }
    k
}

/// Appends JSON lines to the `--log` file.
struct Log(Option<Mutex<std::fs::File>>);

impl Log {
    fn write(&self, mut entry: Value) {
        let Some(f) = &self.0 else { return };
        let ts = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        entry["ts"] = ts.into();
        entry["pid"] = std::process::id().into();
        // One write(2) per line: several children may append to the same file,
        // and `writeln!` on a `File` writes each formatted piece separately, so
        // lines of two processes could interleave.
        let line = format!("{entry}\n");
        if let Ok(mut f) = f.lock() {
            let _ = f.write_all(line.as_bytes());
        }
    }
}

type Answer = Result<Value, Value>;

struct Server {
    knobs: Knobs,
    catalog: Arc<Catalog>,
    log: Log,
    out: mpsc::UnboundedSender<String>,
    asked: Mutex<HashMap<i64, oneshot::Sender<Answer>>>,
    next_ask: AtomicI64,
    running: Mutex<HashMap<String, (String, tokio::task::AbortHandle)>>,
    initialized: AtomicBool,
    calls: AtomicUsize,
    pings: AtomicUsize,
    subscribed: Mutex<std::collections::HashSet<String>>,
    tasks: Mutex<HashMap<String, FakeTask>>,
    next_task: AtomicUsize,
}

struct StdioPeer(Arc<Server>);

impl Peer for StdioPeer {
    fn notify(&self, method: &str, params: Value) {
        self.0.notify(method, params);
    }

    async fn ask(&self, method: &str, params: Value) -> Answer {
        let id = self.0.next_ask.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        if let Ok(mut m) = self.0.asked.lock() {
            m.insert(id, tx);
        }
        self.0.send(&tools::message(Some(id), method, params));
        rx.await
            .unwrap_or_else(|_| Err(json!({"code": -1, "message": "no answer"})))
    }
}

impl Server {
    fn send(&self, msg: &Value) {
        let _ = self.out.send(msg.to_string());
    }

    fn notify(&self, method: &str, params: Value) {
        self.send(&tools::message(None, method, params));
    }

    fn answer(&self, id: &Value, outcome: Result<Value, (i64, String)>) {
        self.send(&tools::response(id, outcome));
    }

    fn handle(self: &Arc<Self>, msg: &Value) {
        if self.knobs.modern {
            // Stateless: every request on its own (notifications ignored).
            let (me, msg) = (self.clone(), msg.clone());
            tokio::spawn(async move {
                if let Some(reply) = modern::answer(&me.catalog, &msg).await {
                    reply.related.iter().for_each(|n| me.send(n));
                    me.send(&reply.response);
                }
            });
            return;
        }
        let method = msg.get("method").and_then(Value::as_str).map(str::to_owned);
        let id = msg.get("id").cloned();
        match (method, id) {
            (Some(m), Some(id)) => self.request(&m, id, msg.get("params").cloned()),
            (Some(m), None) => self.notification(&m, msg.get("params")),
            (None, Some(Value::Number(n))) => {
                let outcome = match msg.get("result") {
                    Some(r) => Ok(r.clone()),
                    None => Err(msg.get("error").cloned().unwrap_or_default()),
                };
                let tx = n.as_i64().and_then(|n| self.asked.lock().ok()?.remove(&n));
                if let Some(tx) = tx {
                    let _ = tx.send(outcome);
                }
            }
            _ => {}
        }
    }

    fn notification(&self, method: &str, params: Option<&Value>) {
        match method {
            "notifications/initialized" => self.initialized.store(true, Ordering::Relaxed),
            "notifications/cancelled" => {
                let key = params
                    .and_then(|p| p.get("requestId"))
                    .map(Value::to_string)
                    .unwrap_or_default();
                let task = self.running.lock().ok().and_then(|mut r| r.remove(&key));
                if let Some((tool, handle)) = task {
                    if tool == "slow_task" {
                        handle.abort();
                    }
                    self.log
                        .write(json!({"event": "cancelled", "requestId": key, "tool": tool}));
                }
            }
            _ => {}
        }
    }

    fn request(self: &Arc<Self>, method: &str, id: Value, params: Option<Value>) {
        let params = params.unwrap_or_else(|| json!({}));
        if self.knobs.exit_before_init
            && !self.initialized.load(Ordering::Relaxed)
            && method != "initialize"
        {
            self.log
                .write(json!({"event": "exit before initialize", "method": method}));
            std::process::exit(3);
        }
        if self.knobs.strict_init
            && !self.initialized.load(Ordering::Relaxed)
            && !matches!(method, "initialize" | "ping")
        {
            self.log
                .write(json!({"event": "ignored before initialized", "method": method}));
            return;
        }
        if let Some(max) = self.knobs.hang_after {
            let hung = method == "ping" && self.pings.fetch_add(1, Ordering::Relaxed) >= max;
            if hung || self.pings.load(Ordering::Relaxed) > max {
                self.log.write(json!({"event": "hung", "method": method}));
                return;
            }
        }
        let cursor = params.get("cursor").and_then(Value::as_str);
        let ps = self.knobs.page_size;
        let outcome = match method {
            "initialize" => {
                let asked = params.get("protocolVersion").and_then(Value::as_str);
                let version = asked
                    .filter(|v| VERSIONS.contains(v))
                    .unwrap_or(VERSIONS[0]);
                let mut caps = tools::capabilities();
                if self.knobs.subscribe {
                    caps["resources"]["subscribe"] = true.into();
                }
                if self.knobs.tasks {
                    caps["tasks"] =
                        json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}});
                }
                Ok(json!({"protocolVersion": version, "capabilities": caps,
                          "serverInfo": {"name": "fx-stdio", "version": "0"}}))
            }
            "ping" => Ok(json!({})),
            "resources/subscribe" | "resources/unsubscribe" if self.knobs.subscribe => {
                let uri = params
                    .get("uri")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if let Ok(mut subs) = self.subscribed.lock() {
                    if method == "resources/subscribe" {
                        subs.insert(uri.to_owned());
                    } else {
                        subs.remove(uri);
                    }
                }
                Ok(json!({}))
            }
            "tasks/get" | "tasks/result" | "tasks/cancel" | "tasks/list" if self.knobs.tasks => {
                return self.task_request(method, id, &params);
            }
            "resources/read" => {
                tools::read_resource(params.get("uri").and_then(Value::as_str).unwrap_or(""))
            }
            "prompts/get" => tools::get_prompt(&params),
            "tools/call" => return self.call(id, params),
            _ => tools::list(&self.catalog, method, cursor, ps)
                .ok_or_else(|| (-32601, format!("Method not found: {method}"))),
        };
        self.answer(&id, outcome);
        if self.knobs.storm && method == "tools/list" {
            self.notify("notifications/tools/list_changed", Value::Null);
        }
    }

    fn call(self: &Arc<Self>, id: Value, params: Value) {
        let n = self.calls.fetch_add(1, Ordering::Relaxed);
        if self.knobs.exit_after_calls.is_some_and(|max| n >= max) {
            self.log
                .write(json!({"event": "exiting", "after_calls": n}));
            std::process::exit(3);
        }
        let tool = params
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if self.knobs.never_answer.contains(&tool) {
            return;
        }
        if self.knobs.tasks && params.get("task").is_some() {
            return self.create_task(&id, params);
        }
        if tool == "touch" && self.knobs.subscribe {
            // Like a real server: only subscribed URIs are announced (`force`
            // announces anyway, to test the gateway's own filtering).
            let uri = params
                .pointer("/arguments/uri")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let force = params.pointer("/arguments/force") == Some(&Value::Bool(true));
            let subscribed = self.subscribed.lock().is_ok_and(|s| s.contains(&uri));
            if subscribed || force {
                self.notify("notifications/resources/updated", json!({"uri": uri}));
            }
            let text = json!({"content": [{"type": "text", "text": "touched"}]});
            return self.answer(&id, Ok(text));
        }
        if tool == "bogus_progress" {
            // Progress for tokens this server was never given, then its own.
            let own = params.pointer("/_meta/progressToken").cloned();
            for token in [json!(987_654_321), json!("never-given"), json!(null)] {
                let progress = json!({"progressToken": token, "progress": 1});
                self.notify("notifications/progress", progress);
            }
            if let Some(t) = own {
                let progress = json!({"progressToken": t, "progress": 1});
                self.notify("notifications/progress", progress);
            }
            let text = json!({"content": [{"type": "text", "text": "bogus sent"}]});
            return self.answer(&id, Ok(text));
        }
        if tool == "structured" {
            let result = json!({
                "content": [
                    {"type": "text", "text": "{\"n\":1}"},
                    {"type": "resource_link", "uri": "fx://static", "name": "static",
                     "title": "Static", "icons": [{"src": "https://fx.example/i.png"}],
                     "annotations": {"priority": 1, "lastModified": "2025-01-01T00:00:00Z"}}
                ],
                "structuredContent": {"n": 1}
            });
            return self.answer(&id, Ok(result));
        }
        if tool == "log_later" {
            let args = params.get("arguments").cloned().unwrap_or_default();
            let delay = args.get("delay_ms").and_then(Value::as_u64).unwrap_or(100);
            let me = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
                let log = json!({"level": "info", "logger": "bg", "data": args.get("text")});
                me.notify("notifications/message", log);
            });
            let text = json!({"content": [{"type": "text", "text": "later"}]});
            return self.answer(&id, Ok(text));
        }
        if tool == "ask_later" {
            // Unrelated to any request: `roots/list` to the client, then a
            // log of its answer.
            let args = params.get("arguments").cloned().unwrap_or_default();
            let delay = args.get("delay_ms").and_then(Value::as_u64).unwrap_or(100);
            let me = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
                let text = match StdioPeer(me.clone()).ask("roots/list", json!({})).await {
                    Ok(r) => format!("roots: {}", r["roots"]),
                    Err(e) => format!("roots error: {e}"),
                };
                let log = json!({"level": "info", "logger": "bg", "data": text});
                me.notify("notifications/message", log);
            });
            let text = json!({"content": [{"type": "text", "text": "later"}]});
            return self.answer(&id, Ok(text));
        }
        let key = id.to_string();
        let me = self.clone();
        let task_key = key.clone();
        let handle = tokio::spawn(async move {
            let peer = StdioPeer(me.clone());
            let outcome = tools::call_tool(&me.catalog, &peer, &params).await;
            if let Ok(mut r) = me.running.lock() {
                r.remove(&task_key);
            }
            me.log.write(json!({"event": "answered", "id": id}));
            me.answer(&id, outcome);
        });
        if let Ok(mut r) = self.running.lock()
            && !handle.is_finished()
        {
            r.insert(key, (tool, handle.abort_handle()));
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let knobs = parse_args();
    if knobs.crash_on_start {
        eprintln!("Traceback (most recent call last):");
        eprintln!("  File \"fx_stdio.py\", line 1, in <module>");
        eprintln!("RuntimeError: crash-on-start requested");
        std::process::exit(1);
    }
    let log = Log(knobs.log.as_ref().and_then(|p| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .ok()
            .map(Mutex::new)
    }));
    log.write(json!({"event": "started"}));
    if knobs.ignore_sigterm
        && let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    {
        tokio::spawn(async move {
            while term.recv().await.is_some() {
                eprintln!("fake-stdio: SIGTERM ignored");
            }
        });
    }
    let mut extra = knobs
        .tools_json
        .as_ref()
        .and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|t| serde_json::from_str::<Vec<Value>>(&t).ok())
        .unwrap_or_default();
    if knobs.subscribe {
        extra.push(json!({"name": "touch", "inputSchema": {"type": "object",
            "properties": {"uri": {"type": "string"}}}}));
    }
    if knobs.tasks {
        extra.push(
            json!({"name": "task_sleep", "inputSchema": {"type": "object",
            "properties": {"s": {"type": "number"}}}, "execution": {"taskSupport": "optional"}}),
        );
    }
    let (out, mut out_rx) = mpsc::unbounded_channel::<String>();
    let noise = knobs.noise;
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        if noise {
            let _ = stdout
                .write_all(b"fake-stdio starting up (not JSON)\n")
                .await;
        }
        while let Some(line) = out_rx.recv().await {
            if noise {
                let _ = stdout.write_all(b"[noise] {not json at all\n").await;
            }
            if stdout.write_all(line.as_bytes()).await.is_err()
                || stdout.write_all(b"\n").await.is_err()
                || stdout.flush().await.is_err()
            {
                return;
            }
        }
    });
    let server = Arc::new(Server {
        catalog: Catalog::new(&knobs.label, extra),
        knobs,
        log,
        out,
        asked: Mutex::new(HashMap::new()),
        next_ask: AtomicI64::new(1000),
        running: Mutex::new(HashMap::new()),
        initialized: AtomicBool::new(false),
        calls: AtomicUsize::new(0),
        pings: AtomicUsize::new(0),
        subscribed: Mutex::new(std::collections::HashSet::new()),
        tasks: Mutex::new(HashMap::new()),
        next_task: AtomicUsize::new(0),
    });
    let delay = server.knobs.start_delay_ms;
    tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        match serde_json::from_str::<Value>(&line) {
            Ok(msg) => {
                server.log.write(json!({"msg": msg, "line": line}));
                server.handle(&msg);
            }
            Err(e) => {
                server.log.write(json!({"event": "bad line", "line": line}));
                // JSON that a `Value` cannot hold (a number such as 1e400): a
                // request with a readable id is answered -32602, not left hanging.
                let top = serde_json::from_str::<HashMap<String, Box<RawValue>>>(&line);
                let id: Option<Value> = top
                    .ok()
                    .and_then(|t| serde_json::from_str(t.get("id")?.get()).ok());
                if let Some(id) = id {
                    let error = json!({"code": -32602, "message": format!("unreadable: {e}")});
                    server.send(&json!({"jsonrpc": "2.0", "id": id, "error": error}));
                }
            }
        }
    }
    server.log.write(json!({"event": "stdin closed"}));
    if server.knobs.ignore_sigterm {
        // A stubborn server: stays up until SIGKILL.
        std::future::pending::<()>().await;
    }
    drop(server);
    let _ = tokio::time::timeout(std::time::Duration::from_millis(200), writer).await;
}
