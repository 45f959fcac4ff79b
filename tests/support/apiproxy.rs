//! An HTTP proxy in front of kube-apiserver whose answers a test controls: a fault injector
//! named as such, for what the real apiserver will not do on demand (a 404 on a watch, a 500
//! from discovery). kubecast talks plain HTTP to this proxy on loopback; the proxy forwards
//! every request, streaming, to `kubectl proxy` (the stack's own kubectl, which adds the
//! admin's credentials and speaks TLS to the apiserver), except those a test armed a fault
//! for, which get the status it chose as a Kubernetes `Status` object, and those under a path
//! it holds, which get no answer at all (a partition of one kind of request: the Lease's,
//! while watches go on).

use std::path::Path;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper_util::client::legacy::{Client, connect::HttpConnector};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpListener;
use tokio::process::{Child, Command};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::Stack;

type Body = BoxBody<Bytes, hyper::Error>;

/// One armed fault: the next `times` requests for `path` get `status`: watches of any path
/// under it if `watch`, else requests for exactly that path.
struct Fault {
    path: String,
    watch: bool,
    status: u16,
    times: u32,
}

#[derive(Default)]
struct Faults {
    armed: Vec<Fault>,
    /// What was answered with a fault: `"{status} {path}?{query}"`.
    served: Vec<String>,
    /// Paths under which requests get no answer while held.
    held: Vec<String>,
    /// Requests held so far.
    held_count: usize,
}

/// A running proxy (and the `kubectl proxy` behind it); both stop when dropped.
pub struct ApiProxy {
    pub port: u16,
    faults: Arc<Mutex<Faults>>,
    /// Bumped by [`ApiProxy::cut`]: connections open before are closed.
    epoch: watch::Sender<u64>,
    task: JoinHandle<()>,
    _kubectl: Child,
}

impl ApiProxy {
    /// Starts `kubectl proxy` for the stack's admin and this proxy in front of it.
    pub async fn start(stack: &Stack) -> ApiProxy {
        let kubectl = stack.script(&["tool", "kubectl"]).trim().to_string();
        let mut child = Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(&stack.kubeconfig)
            .args(["proxy", "--address=127.0.0.1", "--port=0"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {kubectl} proxy: {e}"));
        let stdout = child
            .stdout
            .take()
            .expect("kubectl proxy's stdout is piped");
        let mut lines = BufReader::new(stdout).lines();
        let upstream: u16 = super::within(
            std::time::Duration::from_secs(30),
            "kubectl proxy to say where it serves",
            async {
                while let Ok(Some(line)) = lines.next_line().await {
                    // "Starting to serve on 127.0.0.1:PORT"
                    if let Some(port) = line
                        .rsplit_once(':')
                        .and_then(|(_, p)| p.trim().parse().ok())
                    {
                        return port;
                    }
                }
                panic!("kubectl proxy ended without saying where it serves")
            },
        )
        .await;
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the API proxy on loopback");
        let port = listener.local_addr().expect("the proxy's address").port();
        let faults = Arc::new(Mutex::new(Faults::default()));
        let (epoch, rx) = watch::channel(0u64);
        let client: Client<HttpConnector, Incoming> =
            Client::builder(TokioExecutor::new()).build(HttpConnector::new());
        let shared = faults.clone();
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                let mut cut = rx.clone();
                cut.borrow_and_update();
                let (client, faults) = (client.clone(), shared.clone());
                conns.spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        forward(req, client.clone(), faults.clone(), upstream)
                    });
                    let conn = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service);
                    tokio::select! {
                        _ = conn => {}
                        // Dropping the connection closes its socket: a watch on it ends.
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        ApiProxy {
            port,
            faults,
            epoch,
            task,
            _kubectl: child,
        }
    }

    /// Arms a fault: the next watch of a path under `path` (if `watch`), or the next request
    /// for exactly `path`, is answered with `status`.
    pub fn fail_once(&self, path: &str, watch: bool, status: u16) {
        self.faults
            .lock()
            .expect("the faults' lock")
            .armed
            .push(Fault {
                path: path.to_string(),
                watch,
                status,
                times: 1,
            });
    }

    /// From now on, requests for paths under `path` get no answer (they hang until their
    /// client gives up); every other request is forwarded as before.
    pub fn hold(&self, path: &str) {
        self.faults
            .lock()
            .expect("the faults' lock")
            .held
            .push(path.to_string());
    }

    /// How many requests were held so far.
    pub fn held(&self) -> usize {
        self.faults.lock().expect("the faults' lock").held_count
    }

    /// The requests answered with a fault so far, as `"{status} {path}?{query}"`.
    pub fn served(&self) -> Vec<String> {
        self.faults.lock().expect("the faults' lock").served.clone()
    }

    /// Closes every connection open now (a watch on one ends); new ones are served.
    pub fn cut(&self) {
        self.epoch.send_modify(|e| *e += 1);
    }

    /// Writes a kubeconfig that reaches the apiserver through this proxy to `to`.
    pub fn kubeconfig(&self, to: &Path) {
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: proxied\n  cluster: {{server: 'http://127.0.0.1:{}'}}\n\
             contexts:\n- name: proxied\n  context: {{cluster: proxied, user: proxied}}\ncurrent-context: proxied\n\
             users:\n- name: proxied\n  user: {{}}\n",
            self.port
        );
        std::fs::write(to, text).unwrap_or_else(|e| panic!("writing {}: {e}", to.display()));
    }
}

impl Drop for ApiProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The fault armed for `req`, if any (used up as it is taken).
fn take_fault(faults: &Mutex<Faults>, req: &hyper::Request<Incoming>) -> Option<u16> {
    let path = req.uri().path();
    let query = req.uri().query().unwrap_or("");
    let is_watch = query
        .split('&')
        .any(|p| p == "watch=true" || p == "watch=1");
    let mut f = faults.lock().expect("the faults' lock");
    let i = f.armed.iter().position(|a| {
        if a.watch {
            is_watch && path.starts_with(&a.path)
        } else {
            path == a.path
        }
    })?;
    let status = f.armed[i].status;
    f.armed[i].times -= 1;
    if f.armed[i].times == 0 {
        f.armed.remove(i);
    }
    f.served.push(format!("{status} {path}?{query}"));
    Some(status)
}

/// Whether `req` is under a held path (counted if so).
fn is_held(faults: &Mutex<Faults>, req: &hyper::Request<Incoming>) -> bool {
    let mut f = faults.lock().expect("the faults' lock");
    let held = f.held.iter().any(|p| req.uri().path().starts_with(p));
    f.held_count += usize::from(held);
    held
}

async fn forward(
    mut req: hyper::Request<Incoming>,
    client: Client<HttpConnector, Incoming>,
    faults: Arc<Mutex<Faults>>,
    upstream: u16,
) -> Result<hyper::Response<Body>, hyper::Error> {
    if is_held(&faults, &req) {
        // No answer, ever: the client's own timeout ends the request.
        return std::future::pending().await;
    }
    if let Some(status) = take_fault(&faults, &req) {
        let body = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": format!("injected by the test's API proxy: {status}"), "code": status});
        let response = hyper::Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(
                Full::new(Bytes::from(body.to_string()))
                    .map_err(|e| match e {})
                    .boxed(),
            )
            .expect("a status and a JSON body make a response");
        return Ok(response);
    }
    let target = format!(
        "http://127.0.0.1:{upstream}{}",
        req.uri().path_and_query().map_or("/", |p| p.as_str())
    );
    *req.uri_mut() = target.parse().expect("a loopback URL parses");
    // kubectl proxy accepts requests for loopback hosts only.
    req.headers_mut().insert(
        http::header::HOST,
        format!("127.0.0.1:{upstream}")
            .parse()
            .expect("a host header parses"),
    );
    match client.request(req).await {
        Ok(response) => Ok(response.map(BodyExt::boxed)),
        Err(e) => {
            let response = hyper::Response::builder()
                .status(502)
                .body(
                    Full::new(Bytes::from(format!("the API proxy's upstream failed: {e}")))
                        .map_err(|e| match e {})
                        .boxed(),
                )
                .expect("a status and a body make a response");
            Ok(response)
        }
    }
}
