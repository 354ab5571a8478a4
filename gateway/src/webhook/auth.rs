//! Route authentication: a bearer token, or an HMAC-SHA256 signature of the raw body
//! (`X-Iris-Signature: sha256=<hex>`), each compared in constant time. A route whose secret
//! variable is unset refuses everything (fail closed).

use axum::http::HeaderMap;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

type HmacSha256 = Hmac<Sha256>;

/// The signature header.
pub const SIGNATURE_HEADER: &str = "x-iris-signature";

/// A route's credentials, read from the environment at start.
#[derive(Clone, Default)]
pub struct RouteAuth {
    pub token: Option<String>,
    pub secret: Option<String>,
}

impl std::fmt::Debug for RouteAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouteAuth")
            .field("token", &self.token.as_ref().map(|_| "…"))
            .field("secret", &self.secret.as_ref().map(|_| "…"))
            .finish()
    }
}

impl RouteAuth {
    /// Whether the request carries a valid token or signature for this route.
    pub fn allows(&self, headers: &HeaderMap, body: &[u8]) -> bool {
        let bearer = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            });
        if let (Some(expected), Some(given)) = (&self.token, bearer)
            && bool::from(expected.as_bytes().ct_eq(given.trim().as_bytes()))
        {
            return true;
        }
        let signature = headers
            .get(SIGNATURE_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().strip_prefix("sha256="))
            .and_then(|hex_sig| hex::decode(hex_sig).ok());
        match (&self.secret, signature) {
            (Some(secret), Some(signature)) => verify(secret, body, &signature),
            _ => false,
        }
    }
}

/// `sha256=<hex HMAC-SHA256(secret, body)>`, for callbacks and for clients' tests.
pub fn sign(secret: &str, body: &[u8]) -> String {
    let mut mac = mac(secret);
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

fn verify(secret: &str, body: &[u8], signature: &[u8]) -> bool {
    let mut mac = mac(secret);
    mac.update(body);
    mac.verify_slice(signature).is_ok()
}

fn mac(secret: &str) -> HmacSha256 {
    // HMAC takes keys of any length; this cannot fail.
    <HmacSha256 as Mac>::new_from_slice(secret.as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().expect("header"));
        }
        h
    }

    #[test]
    fn tokens_and_signatures() {
        let auth = RouteAuth {
            token: Some("tok-123".into()),
            secret: Some("s3cret".into()),
        };
        let body = br#"{"text":"hi"}"#;
        assert!(auth.allows(&headers(&[("authorization", "Bearer tok-123")]), body));
        assert!(!auth.allows(&headers(&[("authorization", "Bearer tok-124")]), body));
        assert!(!auth.allows(&headers(&[("authorization", "Bearer tok-12")]), body));
        let good = sign("s3cret", body);
        assert!(auth.allows(&headers(&[(SIGNATURE_HEADER, &good)]), body));
        assert!(!auth.allows(&headers(&[(SIGNATURE_HEADER, &good)]), b"{\"text\":\"hj\"}"));
        assert!(!auth.allows(&headers(&[(SIGNATURE_HEADER, "sha256=zz")]), body));
        assert!(!auth.allows(&HeaderMap::new(), body));
        // Nothing configured (secret variables unset): closed.
        let closed = RouteAuth::default();
        assert!(!closed.allows(&headers(&[("authorization", "Bearer ")]), body));
        assert!(!closed.allows(&headers(&[(SIGNATURE_HEADER, &sign("", body))]), body));
    }
}
