//! `recalld ui`: the web inspector. A page served on loopback that reads a memory's timeline,
//! decisions and graph, and an agent's scope facts, through the same ops as the CLI.
//!
//! Layers: `http` reads one request and writes one response, `server` checks the Host and the
//! token and forwards an allow-listed op to the daemon's socket, `assets` holds the page (HTML,
//! JS, CSS built into the binary). The server talks to the daemon as the uid that started it, so
//! the daemon's peer credentials give it that uid's namespace and nothing else.

mod assets;
pub mod http;
mod server;

use std::net::SocketAddr;
use std::path::PathBuf;

pub use server::{Server, ALLOWED_OPS};

/// What `recalld ui` is started with.
#[derive(Debug, Clone)]
pub struct Options {
    /// The daemon's socket.
    pub socket: PathBuf,
    /// The loopback port; 0 picks a free one.
    pub port: u16,
    /// The token every API request must carry; None draws a random one.
    pub token: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum UiError {
    #[error("cannot bind 127.0.0.1:{port}: {source}")]
    Bind { port: u16, source: std::io::Error },
    #[error("cannot draw a random token: {0}")]
    Random(String),
    #[error("a token must be 16 to 256 characters of letters, digits, '-' and '_'")]
    BadToken,
}

/// 128 bits from the operating system's random source, as 32 hex digits.
pub fn random_token() -> Result<String, UiError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| UiError::Random(e.to_string()))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// A token fit for a URL and a header, long enough not to be guessed.
pub fn check_token(token: &str) -> Result<(), UiError> {
    let ok = (16..=256).contains(&token.len())
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(UiError::BadToken)
    }
}

/// The address to open: the page with its token.
pub fn url(addr: SocketAddr, token: &str) -> String {
    format!("http://{addr}/?token={token}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens() {
        let a = random_token().unwrap();
        assert_eq!(a.len(), 32);
        assert_ne!(a, random_token().unwrap());
        assert!(check_token(&a).is_ok());
        assert!(check_token("short").is_err());
        assert!(check_token("has a space in it, long enough").is_err());
    }
}
