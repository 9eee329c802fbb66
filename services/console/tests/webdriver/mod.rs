//! A minimal W3C WebDriver client (JSON over HTTP) for chromedriver driving headless Chromium
//! (Debian `chromium` and `chromium-driver`): just what the console's browser test needs, so
//! no WebDriver crate joins the dependency tree.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use base64::Engine as _;
use http_body_util::BodyExt as _;
use serde_json::{Value, json};

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// chromedriver, killed on drop.
pub struct Driver {
    child: tokio::process::Child,
    addr: SocketAddr,
}

/// A browser session.
pub struct Browser {
    addr: SocketAddr,
    session: String,
    _driver: Driver,
}

async fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> Result<Value, String> {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let io = hyper_util::rt::TokioIo::new(stream);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string())
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let res = sender.send_request(req).await.map_err(|e| e.to_string())?;
    let status = res.status();
    let bytes = res
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    let v: Value = serde_json::from_slice(&bytes)
        .map_err(|e| format!("{e}: {}", String::from_utf8_lossy(&bytes)))?;
    if !status.is_success() {
        return Err(format!("{method} {path}: {status}: {}", v["value"]));
    }
    Ok(v["value"].clone())
}

impl Browser {
    /// Starts chromedriver on a free port and opens a headless Chromium session.
    pub async fn start() -> Browser {
        for bin in ["/usr/bin/chromium", "/usr/bin/chromedriver"] {
            assert!(
                std::path::Path::new(bin).exists(),
                "{bin} is missing: install Debian's chromium and chromium-driver (scripts/install-deps.sh)"
            );
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = tokio::process::Command::new("/usr/bin/chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("chromedriver starts");
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let driver = Driver { child, addr };
        let mut ready = false;
        for _ in 0..200 {
            if let Ok(v) = call(addr, "GET", "/status", None).await
                && v["ready"] == true
            {
                ready = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(ready, "chromedriver did not become ready");
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--window-size=1360,900", "--hide-scrollbars"],
            },
        }}});
        let v = call(addr, "POST", "/session", Some(caps))
            .await
            .expect("a browser session");
        let session = v["sessionId"].as_str().expect("session id").to_string();
        Browser {
            addr,
            session,
            _driver: driver,
        }
    }

    async fn cmd(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let p = format!("/session/{}{path}", self.session);
        call(self.addr, method, &p, body)
            .await
            .unwrap_or_else(|e| panic!("WebDriver: {e}"))
    }

    pub async fn goto(&self, url: &str) {
        self.cmd("POST", "/url", Some(json!({"url": url}))).await;
    }

    pub async fn url(&self) -> String {
        self.cmd("GET", "/url", None)
            .await
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// The element `css` selects (it must exist).
    pub async fn find(&self, css: &str) -> String {
        let v = self
            .cmd(
                "POST",
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        v[ELEMENT]
            .as_str()
            .unwrap_or_else(|| panic!("no element {css}: {v}"))
            .to_string()
    }

    pub async fn count(&self, css: &str) -> usize {
        let v = self
            .cmd(
                "POST",
                "/elements",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        v.as_array().map_or(0, Vec::len)
    }

    pub async fn type_into(&self, css: &str, text: &str) {
        let e = self.find(css).await;
        self.cmd(
            "POST",
            &format!("/element/{e}/value"),
            Some(json!({"text": text})),
        )
        .await;
    }

    pub async fn click(&self, css: &str) {
        let e = self.find(css).await;
        self.cmd("POST", &format!("/element/{e}/click"), Some(json!({})))
            .await;
    }

    /// Runs `script` in the page and returns its value.
    pub async fn eval(&self, script: &str) -> Value {
        self.cmd(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": []})),
        )
        .await
    }

    /// Waits until `script` returns `true` (the page changes through its live stream).
    pub async fn wait_for(&self, what: &str, script: &str) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            if self.eval(script).await == Value::Bool(true) {
                return;
            }
            if tokio::time::Instant::now() > deadline {
                let body = self.eval("return document.body.innerText").await;
                panic!("gave up waiting for {what}; the page shows:\n{body}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Saves a PNG screenshot of the window.
    pub async fn screenshot(&self, path: &std::path::Path) {
        let v = self.cmd("GET", "/screenshot", None).await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap_or_default())
            .expect("base64 PNG");
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        std::fs::write(path, png).expect("write the screenshot");
    }

    pub async fn close(self) {
        let _ = call(
            self.addr,
            "DELETE",
            &format!("/session/{}", self.session),
            None,
        )
        .await;
    }
}
