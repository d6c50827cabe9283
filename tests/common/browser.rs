//! A real browser for the dashboard's tests: Debian's headless Chromium driven through
//! `chromedriver` with the W3C WebDriver protocol (JSON over HTTP on 127.0.0.1), by the few
//! commands the tests need. No crate: the protocol is a handful of JSON requests, and the test
//! suite builds offline without a WebDriver client's dependency tree.
//!
//! Missing Chromium fails the test with how to install it; it never skips. Dropping the
//! [`Browser`] ends the session and kills the driver and every browser process it started,
//! and removes the browser's profile dir.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use super::{kill_process_tree, wait_for};

pub const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// A headless Chromium session.
pub struct Browser {
    driver: Child,
    address: String,
    session: String,
    _profile: tempfile::TempDir,
}

/// One WebDriver request: the status code and the JSON answer's `value`.
fn request(address: &str, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let mut stream = TcpStream::connect(address).expect("chromedriver accepts connections");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\nContent-Type: \
         application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    // chromedriver keeps the connection open: read the head, then the body by its length.
    let mut response = Vec::new();
    let mut byte = [0u8; 1];
    while !response.ends_with(b"\r\n\r\n") {
        stream.read_exact(&mut byte).expect("chromedriver answers");
        response.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&response).to_ascii_lowercase();
    let code = head.split(' ').nth(1).unwrap().parse().unwrap();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |l| l.trim().parse().unwrap());
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).expect("chromedriver's answer");
    let body = String::from_utf8_lossy(&body);
    let value: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    (code, value["value"].clone())
}

/// Standard base64 (the screenshot's encoding) to bytes.
fn base64_decode(text: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut bits, mut count) = (0u32, 0);
    for byte in text
        .bytes()
        .filter(|b| *b != b'=' && !b.is_ascii_whitespace())
    {
        let value = ALPHABET.iter().position(|a| *a == byte).expect("base64") as u32;
        bits = (bits << 6) | value;
        count += 6;
        if count >= 8 {
            count -= 8;
            out.push((bits >> count) as u8);
        }
    }
    out
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session with a fresh profile.
    pub fn start() -> Browser {
        for (path, package) in [(CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")] {
            assert!(
                Path::new(path).exists(),
                "{path} is missing: the dashboard's browser tests need Debian's {package}; \
                 install both with `apt-get install -y chromium chromium-driver` (scripts/test \
                 does when run as root)"
            );
        }
        let profile = super::tempdir();
        let port = free_port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let address = format!("127.0.0.1:{port}");
        let mut browser = Browser {
            driver,
            address,
            session: String::new(),
            _profile: profile,
        };
        let address = browser.address.clone();
        wait_for("chromedriver to listen", Duration::from_secs(20), || {
            TcpStream::connect(&address).is_ok()
        });
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=1280,900",
        ];
        let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        args.push(format!(
            "--user-data-dir={}",
            browser._profile.path().display()
        ));
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args},
            "goog:loggingPrefs": {"browser": "ALL"},
            "unhandledPromptBehavior": "ignore",
        }}});
        let (code, value) = request(&browser.address, "POST", "/session", Some(&capabilities));
        assert_eq!(code, 200, "no Chromium session: {value}");
        browser.session = value["sessionId"].as_str().unwrap().to_string();
        browser
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let path = format!("/session/{}{path}", self.session);
        let (code, value) = request(&self.address, method, &path, body.as_ref());
        assert_eq!(code, 200, "WebDriver {method} {path}: {value}");
        value
    }

    pub fn goto(&self, url: &str) {
        self.call("POST", "/url", Some(json!({ "url": url })));
    }

    /// Runs `script` (a function body) in the page with `args`; what it returns.
    pub fn execute(&self, script: &str, args: Vec<Value>) -> Value {
        self.call(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
        )
    }

    /// The page's visible text.
    pub fn text(&self) -> String {
        self.execute("return document.body.innerText;", vec![])
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// The visible text of the first element matching `css` (empty when none).
    pub fn text_of(&self, css: &str) -> String {
        self.execute(
            "const e = document.querySelector(arguments[0]); return e ? e.innerText : '';",
            vec![json!(css)],
        )
        .as_str()
        .unwrap_or_default()
        .to_string()
    }

    fn element(&self, css: &str) -> String {
        let found = self.call(
            "POST",
            "/element",
            Some(json!({"using": "css selector", "value": css})),
        );
        found
            .as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .unwrap()
            .to_string()
    }

    /// Types `text` into the element matching `css`, as a person would.
    pub fn type_into(&self, css: &str, text: &str) {
        let id = self.element(css);
        self.call(
            "POST",
            &format!("/element/{id}/value"),
            Some(json!({ "text": text })),
        );
    }

    pub fn click(&self, css: &str) {
        let id = self.element(css);
        self.call("POST", &format!("/element/{id}/click"), Some(json!({})));
    }

    /// Waits until the page's visible text satisfies `condition`.
    pub fn wait_text(&self, what: &str, limit: Duration, condition: impl Fn(&str) -> bool) {
        wait_for(what, limit, || condition(&self.text()));
    }

    /// Saves a PNG of the viewport at `path`.
    pub fn screenshot(&self, path: &Path) {
        let data = self.call("GET", "/screenshot", None);
        let png = base64_decode(data.as_str().unwrap());
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, png).unwrap();
    }

    /// The console's errors since the last call (the browser's SEVERE log entries).
    pub fn console_errors(&self) -> Vec<String> {
        let entries = self.call("POST", "/se/log", Some(json!({"type": "browser"})));
        entries
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["level"] == "SEVERE")
            .map(|e| e["message"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// The text of an open alert, prompt or confirm dialog, if one is open.
    pub fn open_dialog(&self) -> Option<String> {
        let path = format!("/session/{}/alert/text", self.session);
        let (code, value) = request(&self.address, "GET", &path, None);
        (code == 200).then(|| value.as_str().unwrap_or_default().to_string())
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let path = format!("/session/{}", self.session);
            let _ = std::panic::catch_unwind(|| request(&self.address, "DELETE", &path, None));
        }
        kill_process_tree(&mut self.driver);
    }
}
