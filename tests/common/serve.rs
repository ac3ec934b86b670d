//! `repairbench serve` of the default model on a free loopback port, stopped when dropped.

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};

pub struct Server {
    child: Child,
    /// The API's base URL (`http://127.0.0.1:PORT/v1`), as the server's first line says.
    pub base: String,
}

impl Server {
    pub fn start() -> Self {
        let mut child =
            super::cli::repairbench().args(["serve", "--port", "0"]).stdout(Stdio::piped()).spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let base = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("first line: {line}"))
            .to_owned();
        Server { child, base }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An OpenAI-compatible server that completes every prompt and chat with " x" and returns no
/// log-probabilities and no `/tokenize` (as many hosted APIs): its base URL. It answers until
/// the test process ends.
pub fn plain_server() -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let mut stream = stream.unwrap();
            let mut request = Vec::new();
            let mut buf = [0u8; 4096];
            // Read the head and a body of Content-Length bytes.
            loop {
                let n = stream.read(&mut buf).unwrap();
                request.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&request);
                if let Some(end) = text.find("\r\n\r\n") {
                    let length = text
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse::<usize>().unwrap())
                        })
                        .unwrap_or(0);
                    if request.len() >= end + 4 + length {
                        break;
                    }
                }
                if n == 0 {
                    break;
                }
            }
            let head = String::from_utf8_lossy(&request);
            let body = if head.starts_with("GET /v1/models") {
                r#"{"object":"list","data":[{"id":"plain","object":"model","created":0,"owned_by":"x"}]}"#
            } else if head.starts_with("POST /v1/chat/completions") {
                r#"{"id":"c2","object":"chat.completion","created":0,"model":"plain","choices":[{"index":0,"message":{"role":"assistant","content":" x"},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}"#
            } else {
                r#"{"id":"c1","object":"text_completion","created":0,"model":"plain","choices":[{"index":0,"text":" x","logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}"#
            };
            let response = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            stream.write_all(response.as_bytes()).unwrap();
        }
    });
    base
}
