//! HTTP receivers for the HTTP sink's tests: the CloudEvents Go SDK's receiver (not written
//! here: `scripts/go/ce-receiver`, built and cached by `scripts/stack tool ce-receiver`), and
//! [`FakeReceiver`], a test server named as the fake it is, for the faults a real receiver
//! cannot produce on demand (scripted statuses, slow answers).

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::Stack;

/// One event as the Go SDK receiver printed it.
#[derive(Debug, Clone)]
pub struct Received {
    /// `binary`, `structured` or `batch`.
    pub mode: String,
    /// `HTTP/1.1` or `HTTP/2.0`.
    pub proto: String,
    /// The request's `Authorization` header.
    pub auth: String,
    /// The request body came gzip-compressed.
    pub gzip: bool,
    /// `event.Validate()` passed.
    pub valid: bool,
    pub error: String,
    /// The event in structured form, as the SDK serializes it.
    pub event: Value,
}

impl Received {
    pub fn attr(&self, name: &str) -> &str {
        self.event[name].as_str().unwrap_or_default()
    }
}

/// The CloudEvents Go SDK's HTTP receiver, running. Killed when dropped.
pub struct GoReceiver {
    child: Child,
    pub url: String,
    events: Arc<Mutex<Vec<Received>>>,
    /// The address it listens on, to start it again there.
    pub addr: String,
    args: Vec<String>,
    /// Its error output.
    log: PathBuf,
}

impl GoReceiver {
    /// Plain HTTP on a free loopback port.
    pub async fn start(stack: &Stack) -> GoReceiver {
        GoReceiver::spawn(stack, "127.0.0.1:0", Vec::new()).await
    }

    /// HTTPS with the stack's serving certificate (HTTP/2 offered); `client_ca`: require a
    /// client certificate from the stack's CA.
    pub async fn start_tls(stack: &Stack, client_ca: bool) -> GoReceiver {
        let pki = |f: &str| stack.pki.join(f).display().to_string();
        let mut args = vec![
            "-cert".to_string(),
            pki("tls-server.crt"),
            "-key".into(),
            pki("tls-server.key"),
        ];
        if client_ca {
            args.extend(["-client-ca".to_string(), pki("ca.crt")]);
        }
        GoReceiver::spawn(stack, "127.0.0.1:0", args).await
    }

    /// With `-quiet`: counts events without printing them (benchmarks).
    pub async fn start_quiet(stack: &Stack) -> GoReceiver {
        GoReceiver::spawn(stack, "127.0.0.1:0", vec!["-quiet".to_string()]).await
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }

    /// Starts it again on the same address, keeping what it received.
    pub async fn restart(self, stack: &Stack) -> GoReceiver {
        let GoReceiver {
            mut child,
            addr,
            args,
            events,
            ..
        } = self;
        let _ = child.kill().await;
        let again = GoReceiver::spawn(stack, &addr, args).await;
        let before = std::mem::take(&mut *events.lock().unwrap());
        again.events.lock().unwrap().splice(0..0, before);
        again
    }

    /// Stops it (the address stays free for [`GoReceiver::restart`]).
    pub async fn stop(&mut self) {
        let _ = self.child.kill().await;
    }

    async fn spawn(stack: &Stack, addr: &str, args: Vec<String>) -> GoReceiver {
        let bin = stack.script(&["tool", "ce-receiver"]).trim().to_string();
        // Its error output (and, on SIGQUIT, Go's goroutine dump) goes to a file for
        // post-mortems.
        let log = super::kubecast::scratch_dir("ce-receiver").join("stderr.log");
        let stderr = std::fs::File::create(&log)
            .unwrap_or_else(|e| panic!("creating {}: {e}", log.display()));
        let mut child = Command::new(&bin)
            .arg("-addr")
            .arg(addr)
            .args(&args)
            .env("GOTRACEBACK", "all")
            .stdout(std::process::Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {bin}: {e}"));
        let mut stdout = BufReader::new(child.stdout.take().expect("piped")).lines();
        let first = super::within(
            Duration::from_secs(20),
            "ce-receiver to listen",
            stdout.next_line(),
        )
        .await
        .ok()
        .flatten()
        .unwrap_or_default();
        let bound = serde_json::from_str::<Value>(&first)
            .ok()
            .and_then(|v| v["listening"].as_str().map(str::to_string))
            .unwrap_or_else(|| panic!("ce-receiver did not start: {first}; see {}", log.display()));
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = events.clone();
        tokio::spawn(async move {
            loop {
                let line = match stdout.next_line().await {
                    Ok(Some(line)) => line,
                    Ok(None) => return,
                    Err(e) => panic!("reading ce-receiver's output: {e}"),
                };
                let v: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("ce-receiver printed {line}: {e}"));
                if v.get("count").is_some() {
                    continue; // -quiet's running count
                }
                let s = |k: &str| v[k].as_str().unwrap_or_default().to_string();
                sink.lock().unwrap().push(Received {
                    mode: s("mode"),
                    proto: s("proto"),
                    auth: s("auth"),
                    gzip: v["gzip"].as_bool().unwrap_or(false),
                    valid: v["valid"].as_bool().unwrap_or(false),
                    error: s("error"),
                    event: v["event"].clone(),
                });
            }
        });
        let scheme = if args.iter().any(|a| a == "-cert") {
            "https"
        } else {
            "http"
        };
        GoReceiver {
            child,
            url: format!("{scheme}://{bound}/"),
            events,
            addr: bound,
            args,
            log,
        }
    }

    /// Asks the Go runtime for a goroutine dump (SIGQUIT; the receiver exits) and returns its
    /// error output: what a hung receiver was doing.
    pub async fn dump(&mut self) -> String {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .arg("-QUIT")
                .arg(pid.to_string())
                .status();
            let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
        }
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Every event received so far, in arrival order.
    pub fn events(&self) -> Vec<Received> {
        self.events.lock().unwrap().clone()
    }

    /// Waits until `done` holds for the events received; fails naming `what` after `limit`.
    pub async fn wait_until(
        &self,
        what: &str,
        limit: Duration,
        done: impl Fn(&[Received]) -> bool,
    ) -> Result<Vec<Received>, String> {
        super::consume::wait_for(limit, what, || Some(self.events()).filter(|e| done(e)))
            .await
            .ok_or_else(|| {
                let n = self.events().len();
                format!("timed out after {limit:?} waiting for {what}; {n} events received")
            })
    }
}

/// One request as the fake receiver saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    /// The request's path and query.
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    pub at: Instant,
    /// The status it answered.
    pub status: u16,
    /// Requests being answered at once when this one arrived (itself included).
    pub concurrent: usize,
}

impl Seen {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or_default()
    }
}

/// What the fake answers to the `n`th POST (from 0): a status, extra headers and a body.
pub type Script = dyn Fn(usize, &Seen) -> (u16, Vec<(&'static str, String)>, String) + Send + Sync;

/// FAKE: a test HTTP server that answers POSTs as its script says, after `delay`, and records
/// every request. Stands in for a receiver failing on demand (503s, 429, 400, slow answers),
/// which no real receiver does when asked. OPTIONS (kubecast's probe) gets 200.
pub struct FakeReceiver {
    pub url: String,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    /// The POSTs taken whole, answered or not (one cut off by a kill before its answer is
    /// here and never in `seen`).
    received: Arc<Mutex<Vec<Seen>>>,
    /// Requests taken whole and not answered yet.
    active: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeReceiver {
    pub async fn start(delay: Duration, script: Arc<Script>) -> FakeReceiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the fake receiver");
        let url = format!("http://{}/", listener.local_addr().expect("address"));
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let received: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let taken = received.clone();
        let posts = Arc::new(AtomicUsize::new(0));
        let active = Arc::new(AtomicUsize::new(0));
        let record = seen.clone();
        let in_flight = active.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (record, script, posts, active, taken) = (
                    record.clone(),
                    script.clone(),
                    posts.clone(),
                    active.clone(),
                    taken.clone(),
                );
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let (record, script, posts, active, taken) = (
                            record.clone(),
                            script.clone(),
                            posts.clone(),
                            active.clone(),
                            taken.clone(),
                        );
                        async move {
                            let method = req.method().to_string();
                            let path = req
                                .uri()
                                .path_and_query()
                                .map(|p| p.to_string())
                                .unwrap_or_default();
                            let headers = req
                                .headers()
                                .iter()
                                .map(|(k, v)| {
                                    (
                                        k.to_string(),
                                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                                    )
                                })
                                .collect();
                            let body = req
                                .into_body()
                                .collect()
                                .await
                                .map(|b| b.to_bytes())
                                .unwrap_or_default();
                            // Counted in flight once it is taken whole.
                            let concurrent = active.fetch_add(1, Ordering::SeqCst) + 1;
                            let mut seen = Seen {
                                method,
                                path,
                                headers,
                                body,
                                at: Instant::now(),
                                status: 200,
                                concurrent,
                            };
                            let (status, extra, text) = if seen.method == "POST" {
                                taken.lock().unwrap().push(seen.clone());
                                let n = posts.fetch_add(1, Ordering::SeqCst);
                                tokio::time::sleep(delay).await;
                                script(n, &seen)
                            } else {
                                (200, Vec::new(), String::new())
                            };
                            seen.status = status;
                            record.lock().unwrap().push(seen);
                            active.fetch_sub(1, Ordering::SeqCst);
                            let mut resp = Response::builder().status(status);
                            for (k, v) in extra {
                                resp = resp.header(k, v);
                            }
                            Ok::<_, Infallible>(
                                resp.body(Full::new(Bytes::from(text))).expect("a response"),
                            )
                        }
                    });
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await;
                });
            }
        });
        FakeReceiver {
            url,
            seen,
            received,
            active: in_flight,
            task,
        }
    }

    /// The POSTs taken whole, in the order they came, answered or not.
    pub fn received(&self) -> Vec<Seen> {
        self.received.lock().unwrap().clone()
    }

    /// Requests taken and not answered yet.
    pub fn in_flight(&self) -> usize {
        self.active.load(Ordering::SeqCst)
    }

    /// The POSTs so far, in the order they were answered.
    pub fn posts(&self) -> Vec<Seen> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.method == "POST")
            .cloned()
            .collect()
    }

    /// The POSTs answered 2xx.
    pub fn accepted(&self) -> Vec<Seen> {
        self.posts()
            .into_iter()
            .filter(|s| (200..300).contains(&s.status))
            .collect()
    }

    /// Waits until `done` holds for the POSTs so far.
    pub async fn wait_until(
        &self,
        what: &str,
        limit: Duration,
        done: impl Fn(&[Seen]) -> bool,
    ) -> Result<Vec<Seen>, String> {
        super::consume::wait_for(limit, what, || Some(self.posts()).filter(|p| done(p)))
            .await
            .ok_or_else(|| {
                let n = self.posts().len();
                format!("timed out after {limit:?} waiting for {what}; {n} requests seen")
            })
    }
}

/// A path in the stack's PKI directory.
pub fn pki(stack: &Stack, file: &str) -> PathBuf {
    stack.pki.join(file)
}
