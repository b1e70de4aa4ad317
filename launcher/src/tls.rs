//! A local certificate authority for `tailstream dev --tls`, the tests and the benchmarks.
//!
//! [`make_dev_certificates`] writes, into one directory, a fresh CA (`ca.pem`) and one member
//! certificate every process of the local cluster shares (`member.pem`, `member.key`), valid
//! for `localhost`, `127.0.0.1`, `::1` and any further names given, for both server and client
//! use (members present it to each other's peer listeners). The CA's own key is not kept: no
//! further certificate can be issued from it, so the directory can never grant more than it
//! already holds.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use std::path::{Path, PathBuf};
use tailstream_config::{TLS_CA_FILE, TLS_CERT_FILE, TLS_KEY_FILE};

/// The names every local certificate is valid for.
const LOCAL_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// Writes a new CA and a member certificate into `dir` (created if missing), replacing what
/// was there. `extra_names`: further DNS names or IP addresses the certificate is valid for
/// (e.g. the loopback addresses of a test cluster whose processes each have their own).
pub fn make_dev_certificates(dir: &Path, extra_names: &[String]) -> Result<PathBuf, String> {
    let failed = |what: &str, e: rcgen::Error| format!("making the {what}: {e}");
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let ca_key = KeyPair::generate().map_err(|e| failed("CA key", e))?;
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(|e| failed("CA", e))?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "Tailstream local CA");
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_certificate = ca.self_signed(&ca_key).map_err(|e| failed("CA", e))?;
    let issuer = Issuer::new(ca, ca_key);

    let names: Vec<String> = LOCAL_NAMES
        .iter()
        .map(|name| name.to_string())
        .chain(extra_names.iter().cloned())
        .collect();
    let member_key = KeyPair::generate().map_err(|e| failed("member key", e))?;
    let mut member = CertificateParams::new(names).map_err(|e| failed("member", e))?;
    member
        .distinguished_name
        .push(DnType::CommonName, "Tailstream member");
    member.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    member.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let member_certificate = member
        .signed_by(&member_key, &issuer)
        .map_err(|e| failed("member", e))?;

    write(&dir.join(TLS_CA_FILE), &ca_certificate.pem(), 0o644)?;
    write(&dir.join(TLS_CERT_FILE), &member_certificate.pem(), 0o644)?;
    write(&dir.join(TLS_KEY_FILE), &member_key.serialize_pem(), 0o600)?;
    Ok(dir.to_owned())
}

fn write(path: &Path, text: &str, mode: u32) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|e| format!("creating {}: {e}", path.display()))?;
    file.write_all(text.as_bytes())
        .map_err(|e| format!("writing {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_holds_a_ca_and_a_member_certificate() {
        let dir = std::env::temp_dir().join(format!("tailstream-tls-{}", std::process::id()));
        make_dev_certificates(&dir, &["127.0.0.7".into()]).unwrap();
        for name in [TLS_CA_FILE, TLS_CERT_FILE, TLS_KEY_FILE] {
            let text = std::fs::read_to_string(dir.join(name)).unwrap();
            assert!(text.starts_with("-----BEGIN"), "{name}: {text}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
