//! The HTTP client the OTLP exporters send with: the blocking flavour of
//! the `reqwest` Baton already builds (TLS by rustls), so the exporters add
//! no second HTTP stack. They call it from their own threads.

use std::io::Read as _;

use bytes::Bytes;
use opentelemetry_http::{HttpClient, HttpError};

/// The most of a collector's answer that is read.
const MAX_ANSWER: u64 = 4 * 1024 * 1024;

#[derive(Debug)]
pub(super) struct BlockingHttp(reqwest::blocking::Client);

impl BlockingHttp {
    pub(super) fn new() -> Self {
        Self(reqwest::blocking::Client::new())
    }
}

#[async_trait::async_trait]
impl HttpClient for BlockingHttp {
    async fn send_bytes(
        &self,
        request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, HttpError> {
        let request = reqwest::blocking::Request::try_from(request)?;
        let mut response = self.0.execute(request)?;
        let status = response.status();
        let headers = std::mem::take(response.headers_mut());
        let mut body = Vec::new();
        response.by_ref().take(MAX_ANSWER).read_to_end(&mut body)?;
        let mut answer = http::Response::builder()
            .status(status)
            .body(Bytes::from(body))?;
        *answer.headers_mut() = headers;
        Ok(answer)
    }
}
