//! Why a request failed, from the chain of errors under `object_store`'s: its
//! own message stops at "error sending request", leaving out whether the
//! connection was refused or the server's certificate was. A refused certificate
//! is also the one failure without a response that trying again cannot mend.

/// The errors under `e`, outermost first. hyper-util and tokio-rustls hand a
/// connection's error on wrapped in io::Errors, whose source() skips the error
/// they hold, so those are opened too.
pub(crate) fn chain(e: &object_store::Error) -> Vec<&(dyn std::error::Error + 'static)> {
    let object_store::Error::Generic { source, .. } = e else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut cur = Some(source.as_ref() as &(dyn std::error::Error + 'static));
    while let Some(err) = cur {
        out.push(err);
        cur = match err
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            Some(held) => Some(held as &(dyn std::error::Error + 'static)),
            None => err.source(),
        };
    }
    out
}

/// Why rustls refused the server's TLS handshake, when that is why `e` failed:
/// a certificate it does not trust (unknown issuer, wrong name, expired), no
/// certificate, or no protocol version both sides speak.
pub(crate) fn refusal(e: &object_store::Error) -> Option<&rustls::Error> {
    chain(e).into_iter().find_map(|err| {
        err.downcast_ref::<rustls::Error>().filter(|r| {
            matches!(
                r,
                rustls::Error::InvalidCertificate(_)
                    | rustls::Error::NoCertificatesPresented
                    | rustls::Error::PeerIncompatible(_)
            )
        })
    })
}

/// Whether `e` failed because nothing accepted the connection: no server
/// listens at the address.
pub(crate) fn refused_connection(e: &object_store::Error) -> bool {
    chain(e).into_iter().any(|err| {
        err.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
    })
}

/// `e` as errors show it, with the innermost cause when the message lacks it
/// (a refused connection, a reset), and for a refused handshake, what to do.
pub(crate) fn describe(e: &object_store::Error) -> String {
    let msg = e.to_string();
    if let Some(r) = refusal(e) {
        return format!(
            "{msg}: the TLS handshake was refused ({r}); a private endpoint's certificate \
             needs its CA in SSL_CERT_FILE, or the storage option allow_invalid_certificates"
        );
    }
    match chain(e).last().map(|c| c.to_string()) {
        Some(cause) if !msg.contains(&cause) => format!("{msg} ({cause})"),
        _ => msg,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error that, like reqwest's, says only "error sending request" and
    /// holds the reason as its source.
    #[derive(Debug)]
    struct Sending(std::io::Error);

    impl std::fmt::Display for Sending {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("error sending request")
        }
    }

    impl std::error::Error for Sending {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    fn generic(source: std::io::Error) -> object_store::Error {
        object_store::Error::Generic {
            store: "HTTP",
            source: Box::new(Sending(source)),
        }
    }

    #[test]
    fn refusals_are_found_inside_nested_io_errors() {
        use std::io::{Error as Io, ErrorKind};
        let cert = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let e = generic(Io::other(Io::new(ErrorKind::InvalidData, cert)));
        assert!(matches!(
            refusal(&e),
            Some(rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer
            ))
        ));
        assert!(describe(&e).contains("the TLS handshake was refused"));
        // A connection that failed, or a handshake the network broke, may work
        // when tried again.
        let refused = generic(Io::other(Io::new(
            ErrorKind::ConnectionRefused,
            "connection refused",
        )));
        assert!(refusal(&refused).is_none());
        assert!(refused_connection(&refused));
        assert!(!refused_connection(&e));
        assert_eq!(
            describe(&refused),
            "Generic HTTP error: error sending request (connection refused)"
        );
        let broken = generic(Io::new(ErrorKind::InvalidData, rustls::Error::DecryptError));
        assert!(refusal(&broken).is_none());
    }
}
