//! Certificates for the tests that speak TLS to PostgreSQL (the TLS tests, the container
//! image's): a certificate authority and leaves signed by it, made in memory with `rcgen`.

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

/// A self-signed certificate authority named `name`.
pub fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("no names to check");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    CertifiedIssuer::self_signed(params, KeyPair::generate().expect("a key"))
        .expect("a self-signed CA")
}

/// A leaf certificate and its key (both PEM), signed by `issuer`, for `common_name` with `names`
/// as its subject alternative names.
pub fn leaf(
    issuer: &CertifiedIssuer<'static, KeyPair>,
    common_name: &str,
    names: &[&str],
) -> (String, String) {
    let names = names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
    let mut params = CertificateParams::new(names).expect("valid names");
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    let key = KeyPair::generate().expect("a key");
    let cert = params.signed_by(&key, issuer).expect("a signed leaf");
    (cert.pem(), key.serialize_pem())
}
