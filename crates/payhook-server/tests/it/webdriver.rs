//! A small WebDriver client on the workspace's `reqwest`, enough to drive headless Chromium through chromedriver:
//! a session, navigation, elements by CSS selector, clicks, keys, text, a script, the window size, screenshots.

use base64::Engine;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The key under which WebDriver names an element.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";

/// Where chromedriver is, if it is installed: `PAYHOOK_CHROMEDRIVER` when set (and only there), else in `PATH` or
/// `/usr/bin`.
pub fn chromedriver_path() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("PAYHOOK_CHROMEDRIVER") {
        return Some(PathBuf::from(path)).filter(|p| p.is_file());
    }
    let dirs = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&dirs)
        .map(|d| d.join("chromedriver"))
        .chain([PathBuf::from("/usr/bin/chromedriver")])
        .find(|p| p.is_file())
}

/// A chromedriver child process on a free port, killed when dropped.
#[derive(Debug)]
pub struct ChromeDriver {
    child: Child,
    pub addr: SocketAddr,
}

impl ChromeDriver {
    /// Starts `path` and waits until it answers `/status` as ready.
    pub async fn start(path: &Path) -> Self {
        // A port the kernel just handed out and took back is free for the moment it takes chromedriver to bind it.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new(path)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", path.display()));
        let driver = Self { child, addr: SocketAddr::from(([127, 0, 0, 1], port)) };
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let ready = http.get(format!("http://{}/status", driver.addr)).send().await;
            if let Ok(resp) = ready
                && let Ok(status) = resp.json::<Value>().await
                && status["value"]["ready"] == true
            {
                return driver;
            }
            assert!(Instant::now() < deadline, "chromedriver did not get ready within 20 s");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for ChromeDriver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One browser session. Dropping it ends the session (and so closes Chromium) with a blocking request, so a
/// failing test leaves no browser behind.
#[derive(Debug)]
pub struct Browser {
    http: reqwest::Client,
    driver: SocketAddr,
    session: String,
}

/// An element of the current page.
#[derive(Debug, Clone)]
pub struct Element(String);

impl Browser {
    /// A new headless Chromium window of `width`×`height`.
    pub async fn open(driver: &ChromeDriver, width: u32, height: u32) -> Self {
        let http = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap();
        let mut options = json!({
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     format!("--window-size={width},{height}")],
        });
        if let Some(binary) = std::env::var_os("PAYHOOK_CHROMIUM")
            .map(PathBuf::from)
            .or_else(|| Some(PathBuf::from("/usr/bin/chromium")).filter(|p| p.is_file()))
        {
            options["binary"] = json!(binary);
        }
        let caps =
            json!({ "capabilities": { "alwaysMatch": { "browserName": "chrome", "goog:chromeOptions": options } } });
        let resp = http.post(format!("http://{}/session", driver.addr)).json(&caps).send().await.expect("new session");
        let value = answer(resp, "new session").await;
        let session = value["sessionId"].as_str().unwrap_or_else(|| panic!("no session id: {value}")).to_owned();
        Self { http, driver: driver.addr, session }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}/session/{}{path}", self.driver, self.session)
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        let resp = self.http.post(self.url(path)).json(&body).send().await.unwrap_or_else(|e| panic!("{path}: {e}"));
        answer(resp, path).await
    }

    async fn get(&self, path: &str) -> Value {
        let resp = self.http.get(self.url(path)).send().await.unwrap_or_else(|e| panic!("{path}: {e}"));
        answer(resp, path).await
    }

    pub async fn goto(&self, url: &str) {
        self.post("/url", json!({ "url": url })).await;
    }

    pub async fn current_url(&self) -> String {
        self.get("/url").await.as_str().unwrap_or_default().to_owned()
    }

    pub async fn set_window_size(&self, width: u32, height: u32) {
        self.post("/window/rect", json!({ "width": width, "height": height })).await;
    }

    /// The first element matching `css`, waiting up to 10 s for it to appear (pages load after a click).
    pub async fn find(&self, css: &str) -> Element {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let resp = self
                .http
                .post(self.url("/element"))
                .json(&json!({ "using": "css selector", "value": css }))
                .send()
                .await
                .expect("find element");
            let ok = resp.status().is_success();
            let body: Value = resp.json().await.expect("WebDriver answers JSON");
            if ok && let Some(id) = body["value"][ELEMENT_KEY].as_str() {
                return Element(id.to_owned());
            }
            if Instant::now() >= deadline {
                let page = self.get("/source").await;
                panic!("no element {css:?} within 10 s at {}: {body}\n{page}", self.current_url().await);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn click(&self, element: &Element) {
        self.post(&format!("/element/{}/click", element.0), json!({})).await;
    }

    pub async fn send_keys(&self, element: &Element, text: &str) {
        self.post(&format!("/element/{}/value", element.0), json!({ "text": text })).await;
    }

    pub async fn text(&self, element: &Element) -> String {
        self.get(&format!("/element/{}/text", element.0)).await.as_str().unwrap_or_default().to_owned()
    }

    /// Runs `script` in the page and returns what it returns.
    pub async fn execute(&self, script: &str) -> Value {
        self.post("/execute/sync", json!({ "script": script, "args": [] })).await
    }

    /// Saves a PNG of the viewport to `path`.
    pub async fn screenshot(&self, path: &Path) {
        let png = self.get("/screenshot").await;
        let bytes = base64::engine::general_purpose::STANDARD.decode(png.as_str().unwrap_or_default()).expect("PNG");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        println!("screenshot: {}", path.display());
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // A plain blocking DELETE: Drop cannot await, and the runtime may be shutting down.
        let Ok(mut stream) = TcpStream::connect_timeout(&self.driver, Duration::from_secs(2)) else { return };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
        let request = format!(
            "DELETE /session/{} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            self.session, self.driver
        );
        if stream.write_all(request.as_bytes()).is_ok() {
            let _ = stream.read_to_end(&mut Vec::new());
        }
    }
}

async fn answer(resp: reqwest::Response, what: &str) -> Value {
    let status = resp.status();
    let body: Value =
        resp.json().await.unwrap_or_else(|e| panic!("{what}: WebDriver answered {status}, not JSON: {e}"));
    assert!(status.is_success(), "{what}: WebDriver answered {status}: {body}");
    body["value"].clone()
}
