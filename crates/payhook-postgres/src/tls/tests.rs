use super::*;

fn parts(conn: &str) -> (String, Option<String>, Option<String>) {
    let s = split(conn).unwrap();
    (s.rest, s.mode, s.root_cert)
}

#[test]
fn every_mode_parses_by_its_libpq_name_and_maps_to_what_tokio_postgres_negotiates() {
    use tokio_postgres::config::SslMode as Wire;
    let wire: Vec<(SslMode, Wire)> =
        SslMode::ALL.iter().map(|m| (SslMode::parse(m.as_str()).unwrap(), m.wire())).collect();
    assert_eq!(
        wire,
        [
            (SslMode::Disable, Wire::Disable),
            (SslMode::Prefer, Wire::Prefer),
            (SslMode::Require, Wire::Require),
            (SslMode::VerifyCa, Wire::Require),
            (SslMode::VerifyFull, Wire::Require),
        ]
    );
}

#[test]
fn a_misspelt_mode_is_named_with_the_modes_there_are() {
    for bad in ["verfy-full", "VERIFY-FULL", "allow", ""] {
        let e = SslMode::parse(bad).unwrap_err().to_string();
        assert_eq!(
            e,
            format!("sslmode {bad:?} is not one of disable, prefer, require, verify-ca, verify-full"),
            "{bad}"
        );
    }
}

#[test]
fn the_tls_keys_are_taken_out_of_a_url_and_the_rest_is_kept_as_written() {
    assert_eq!(
        parts("postgres://u:p@db.example:5432/payhook?sslmode=verify-full&sslrootcert=/etc/payhook/ca.pem"),
        (
            "postgres://u:p@db.example:5432/payhook".to_owned(),
            Some("verify-full".to_owned()),
            Some("/etc/payhook/ca.pem".to_owned())
        )
    );
    assert_eq!(
        parts("postgresql://u@h/d?options=-csearch_path%3Dph&sslrootcert=%2Ftmp%2Fa%20b.pem&application_name=x"),
        (
            "postgresql://u@h/d?options=-csearch_path%3Dph&application_name=x".to_owned(),
            None,
            Some("/tmp/a b.pem".to_owned())
        )
    );
    assert_eq!(
        parts("postgres://u@h/d?sslmode=require&sslmode=disable"),
        ("postgres://u@h/d".to_owned(), Some("disable".to_owned()), None),
        "the last one wins"
    );
    assert_eq!(parts("postgres://u@h/d"), ("postgres://u@h/d".to_owned(), None, None));
    assert!(matches!(split("postgres://u@h/d?sslrootcert=%zz"), Err(TlsConfigError::Encoding("sslrootcert"))));
}

#[test]
fn the_tls_keys_are_taken_out_of_a_key_value_string_quotes_and_escapes_included() {
    assert_eq!(
        parts("host=db user=u sslmode = verify-ca  sslrootcert='/etc/my ca\\'s.pem' dbname=d"),
        ("host=db user=u dbname=d".to_owned(), Some("verify-ca".to_owned()), Some("/etc/my ca's.pem".to_owned()))
    );
    assert_eq!(parts("host=db sslmode=disable"), ("host=db".to_owned(), Some("disable".to_owned()), None));
    // Not understood: left for tokio-postgres to refuse.
    assert_eq!(parts("host=db sslmode"), ("host=db sslmode".to_owned(), None, None));
    assert_eq!(parts("host='db sslmode=require"), ("host='db sslmode=require".to_owned(), None, None));
}

/// A CA certificate in PEM, made up for the test.
fn ca_pem() -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.self_signed(&key).unwrap().pem()
}

#[test]
fn every_mode_builds_with_and_without_a_root_file_and_says_what_it_uses() {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, ca_pem()).unwrap();
    for mode in SslMode::ALL {
        let plain = TlsOptions::new(mode, None).unwrap();
        assert_eq!((plain.to_string(), plain.connector().is_none()), (mode.to_string(), mode == SslMode::Disable));
        let rooted = TlsOptions::new(mode, Some(ca.clone())).unwrap();
        assert_eq!(rooted.to_string(), format!("{mode} with sslrootcert {}", ca.display()));
        assert_eq!(rooted.root_cert(), Some(ca.as_path()));
    }
    assert_eq!(TlsOptions::default().mode(), SslMode::Prefer);
}

#[test]
fn a_missing_empty_or_broken_root_file_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.pem");
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "").unwrap();
    let not_pem = dir.path().join("key-only.pem");
    std::fs::write(&not_pem, "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n").unwrap();
    let broken = dir.path().join("broken.pem");
    std::fs::write(&broken, "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n").unwrap();
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n").unwrap();
    for (path, expected) in [
        (&missing, "cannot read sslrootcert"),
        (&empty, "holds no PEM certificate"),
        (&not_pem, "holds no PEM certificate"),
        (&broken, "is not a valid PEM file"),
        (&garbage, "cannot be used as a root"),
    ] {
        let e = TlsOptions::new(SslMode::VerifyFull, Some(path.clone())).unwrap_err().to_string();
        assert!(e.contains(expected) && e.contains(&path.display().to_string()), "{}: {e}", path.display());
    }
}

#[test]
fn verify_ca_accepts_a_trusted_certificate_for_another_name_and_verify_full_does_not() {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["db.example".to_owned()])
        .unwrap()
        .signed_by(&leaf_key, &ca, &ca_key)
        .unwrap();
    let mut roots = RootCertStore::empty();
    roots.add(ca.der().clone()).unwrap();
    let roots = Arc::new(roots);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let webpki = WebPkiServerVerifier::builder_with_provider(Arc::clone(&roots), provider).build().unwrap();
    let chain_only = ChainOnly { webpki: Arc::clone(&webpki) };
    let other = ServerName::try_from("other.example").unwrap();
    let own = ServerName::try_from("db.example").unwrap();
    let now = UnixTime::now();
    assert!(chain_only.verify_server_cert(leaf.der(), &[], &other, &[], now).is_ok());
    assert!(webpki.verify_server_cert(leaf.der(), &[], &own, &[], now).is_ok());
    let refused = webpki.verify_server_cert(leaf.der(), &[], &other, &[], now).unwrap_err();
    assert_eq!(TlsProblem::of(&refused), TlsProblem::WrongHost, "{refused}");

    // A certificate from another CA is refused by both, as untrusted.
    let stranger_key = rcgen::KeyPair::generate().unwrap();
    let stranger =
        rcgen::CertificateParams::new(vec!["db.example".to_owned()]).unwrap().self_signed(&stranger_key).unwrap();
    let refused = chain_only.verify_server_cert(stranger.der(), &[], &own, &[], now).unwrap_err();
    assert_eq!(TlsProblem::of(&refused), TlsProblem::Untrusted, "{refused}");
}

#[test]
fn a_refused_handshake_is_explained_by_what_was_wrong() {
    use rustls::Error::{AlertReceived, InvalidCertificate};
    for (error, problem) in [
        (InvalidCertificate(CertificateError::UnknownIssuer), TlsProblem::Untrusted),
        (InvalidCertificate(CertificateError::BadSignature), TlsProblem::Untrusted),
        (InvalidCertificate(CertificateError::Revoked), TlsProblem::Untrusted),
        (InvalidCertificate(CertificateError::NotValidForName), TlsProblem::WrongHost),
        (InvalidCertificate(CertificateError::Expired), TlsProblem::Expired),
        (InvalidCertificate(CertificateError::NotValidYet), TlsProblem::Expired),
        (AlertReceived(rustls::AlertDescription::HandshakeFailure), TlsProblem::Other),
    ] {
        assert_eq!(TlsProblem::of(&error), problem, "{error}");
    }
}

#[tokio::test]
async fn require_against_a_server_that_declines_tls_is_a_tls_error_saying_so() {
    // A server that answers the SSLRequest with 'N', as PostgreSQL does with `ssl = off`.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut request = [0u8; 8];
        socket.read_exact(&mut request).await.unwrap();
        socket.write_all(b"N").await.unwrap();
    });
    let tls = TlsOptions::new(SslMode::Require, None).unwrap();
    let mut config: tokio_postgres::Config = format!("postgres://u@127.0.0.1:{port}/d").parse().unwrap();
    config.ssl_mode(tls.mode().wire());
    let e = config.connect(tls.connector().unwrap()).await.err().expect("refused");
    assert!(matches!(TlsError::behind(&e), Some(TlsError::NotOffered)), "{e:?}");
}
