//! An auditing proxy in front of the API server and an RBAC evaluator over deploy/'s rules, so
//! the end-to-end test checks every call each service really makes against its Role.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// One API request as RBAC sees it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Call {
    /// The bearer token: the service's ServiceAccount name in the dev stack.
    pub user: String,
    pub verb: String,
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
}

/// Requests seen by the proxy.
#[derive(Clone, Default)]
pub struct Audit(Arc<Mutex<BTreeSet<Call>>>);

impl Audit {
    pub fn calls(&self) -> BTreeSet<Call> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Starts the proxy on a loopback port; the upstream is read from `kubeconfig` at each
/// connection (it exists only once the API server started). Returns its URL.
pub async fn start_proxy(kubeconfig: PathBuf, audit: Audit) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let (kubeconfig, audit) = (kubeconfig.clone(), audit.clone());
            tokio::spawn(async move {
                let text = std::fs::read_to_string(&kubeconfig).unwrap_or_default();
                let Some(upstream) = text
                    .lines()
                    .find_map(|l| l.trim().strip_prefix("server: http://"))
                    .map(str::to_string)
                else {
                    return;
                };
                let Ok(server) = TcpStream::connect(upstream).await else {
                    return;
                };
                let (cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut sr, &mut cw).await;
                    let _ = cw.shutdown().await;
                });
                let mut reader = BufReader::new(cr);
                loop {
                    // One request: head, then a Content-Length body (the kube client sends
                    // whole bodies; chunked bodies are forwarded chunk by chunk).
                    let mut head = Vec::new();
                    loop {
                        let mut line = String::new();
                        match reader.read_line(&mut line).await {
                            Ok(0) | Err(_) => return,
                            Ok(_) => {}
                        }
                        let end = line == "\r\n";
                        head.push(line);
                        if end {
                            break;
                        }
                    }
                    let mut length = 0usize;
                    let mut chunked = false;
                    let mut user = String::new();
                    for h in &head[1..] {
                        let (k, v) = h.split_once(':').unwrap_or((h, ""));
                        let v = v.trim();
                        match k.to_ascii_lowercase().as_str() {
                            "content-length" => length = v.parse().unwrap_or(0),
                            "transfer-encoding" => chunked = v.contains("chunked"),
                            "authorization" => user = v.trim_start_matches("Bearer ").to_string(),
                            _ => {}
                        }
                    }
                    let mut parts = head[0].split_whitespace();
                    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
                    if let Some(call) = classify(&user, method, target) {
                        audit
                            .0
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .insert(call);
                    }
                    if sw.write_all(head.concat().as_bytes()).await.is_err() {
                        return;
                    }
                    if chunked {
                        loop {
                            let mut size = String::new();
                            if reader.read_line(&mut size).await.unwrap_or(0) == 0 {
                                return;
                            }
                            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
                            let mut data = vec![0u8; n + 2];
                            if reader.read_exact(&mut data).await.is_err() {
                                return;
                            }
                            if sw.write_all(size.as_bytes()).await.is_err()
                                || sw.write_all(&data).await.is_err()
                            {
                                return;
                            }
                            if n == 0 {
                                break;
                            }
                        }
                    } else if length > 0 {
                        let mut body = vec![0u8; length];
                        if reader.read_exact(&mut body).await.is_err()
                            || sw.write_all(&body).await.is_err()
                        {
                            return;
                        }
                    }
                }
            });
        }
    });
    format!("http://{addr}")
}

/// The RBAC attributes of a request (`None` for non-resource URLs such as discovery).
pub fn classify(user: &str, method: &str, target: &str) -> Option<Call> {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match segs.as_slice() {
        ["api", _v, rest @ ..] if !rest.is_empty() => (String::new(), rest),
        ["apis", g, _v, rest @ ..] if !rest.is_empty() => (g.to_string(), rest),
        _ => return None,
    };
    let (namespace, resource, name, sub) = match rest {
        ["namespaces", ns, res, tail @ ..] => {
            (ns.to_string(), res.to_string(), tail.first(), tail.get(1))
        }
        ["namespaces", tail @ ..] => (
            String::new(),
            "namespaces".to_string(),
            tail.first(),
            tail.get(1),
        ),
        [res, tail @ ..] => (String::new(), res.to_string(), tail.first(), tail.get(1)),
        [] => return None,
    };
    let watch = query
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1");
    let verb = match (method, name.is_some()) {
        ("GET", true) => "get",
        ("GET", false) if watch => "watch",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => return None,
    };
    Some(Call {
        user: user.to_string(),
        verb: verb.to_string(),
        group,
        resource,
        subresource: sub.map(|s| s.to_string()).unwrap_or_default(),
        namespace,
        name: name
            .filter(|_| method != "POST")
            .map(|s| s.to_string())
            .unwrap_or_default(),
    })
}

fn list_has(v: &Value, want: &str) -> bool {
    v.as_array()
        .is_some_and(|a| a.iter().any(|x| x == want || x == "*"))
}

/// Whether the rules bound to ServiceAccount `sa` (namespace `sa_ns`) in `docs` allow `call`.
pub fn allowed(docs: &[Value], sa: &str, sa_ns: &str, call: &Call) -> bool {
    let bound = |b: &Value| {
        b["subjects"].as_array().is_some_and(|s| {
            s.iter().any(|s| {
                s["kind"] == "ServiceAccount" && s["name"] == sa && s["namespace"] == sa_ns
            })
        })
    };
    let resource = if call.subresource.is_empty() {
        call.resource.clone()
    } else {
        format!("{}/{}", call.resource, call.subresource)
    };
    for b in docs.iter().filter(|d| {
        matches!(
            d["kind"].as_str(),
            Some("ClusterRoleBinding" | "RoleBinding")
        ) && bound(d)
    }) {
        let binding_ns = b["metadata"]["namespace"].as_str();
        if let Some(ns) = binding_ns
            && ns != call.namespace
        {
            continue;
        }
        let role_kind = b["roleRef"]["kind"].as_str().unwrap_or_default();
        let role_name = &b["roleRef"]["name"];
        let role = docs.iter().find(|d| {
            d["kind"] == role_kind
                && &d["metadata"]["name"] == role_name
                && (role_kind == "ClusterRole" || d["metadata"]["namespace"].as_str() == binding_ns)
        });
        let Some(role) = role else { continue };
        for rule in role["rules"].as_array().into_iter().flatten() {
            let names = rule["resourceNames"].as_array();
            let name_ok = match names {
                None => true,
                Some(n) if n.is_empty() => true,
                Some(n) => !call.name.is_empty() && n.iter().any(|x| x == call.name.as_str()),
            };
            if list_has(&rule["apiGroups"], &call.group)
                && list_has(&rule["resources"], &resource)
                && list_has(&rule["verbs"], &call.verb)
                && name_ok
            {
                return true;
            }
        }
    }
    false
}
