//! Certificates and keys for one env, written as PEM files into its directory.

use std::fs;
use std::path::Path;

use rcgen::ExtendedKeyUsagePurpose::{ClientAuth, ServerAuth};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};

/// The webhook server's certificate directory, relative to the env's.
pub(super) const WEBHOOK_DIR: &str = "webhook";
/// `webhook/tls` + `.crt` / `.key`.
const WEBHOOK_STEM: &str = "webhook/tls";

/// Writes a CA (`ca.crt`), a serving cert for 127.0.0.1/localhost (`serving.crt`/`.key`), another for
/// the webhook server under test (`webhook/tls.crt`/`tls.key`, the names of a `kubernetes.io/tls`
/// Secret) and an admin client cert (`admin.crt`/`.key`), all signed by the CA, and a key pair that
/// signs ServiceAccount tokens (`sa.key`/`sa.pub`). Keys are PKCS#8 ECDSA P-256 PEM, which Go and
/// rustls both read.
pub(super) fn write(dir: &Path) {
    let write = |name: &str, pem: String| fs::write(dir.join(name), pem).expect("envtest: PKI");
    let new_key = || KeyPair::generate().expect("envtest: key generation");
    let ca_key = new_key();
    let mut ca = CertificateParams::default();
    ca.distinguished_name.push(DnType::CommonName, "envtest-ca");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    write(
        "ca.crt",
        ca.self_signed(&ca_key).expect("envtest: CA").pem(),
    );
    let issuer = Issuer::new(ca, &ca_key);

    // Kubernetes reads a client cert's CN as the user name and its O entries as groups.
    let leaf = |stem: &str, sans: &[&str], subject: &[(DnType, &str)], usage| {
        let key = new_key();
        let sans: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(sans).expect("envtest: subject alt names");
        for (kind, value) in subject {
            params.distinguished_name.push(kind.clone(), *value);
        }
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![usage];
        let cert = params
            .signed_by(&key, &issuer)
            .expect("envtest: certificate");
        write(&format!("{stem}.crt"), cert.pem());
        write(&format!("{stem}.key"), key.serialize_pem());
    };
    let server = [(DnType::CommonName, "kube-apiserver")];
    leaf("serving", &["127.0.0.1", "localhost"], &server, ServerAuth);
    fs::create_dir_all(dir.join(WEBHOOK_DIR)).expect("envtest: PKI");
    let webhook = [(DnType::CommonName, "webhook-server")];
    leaf(
        WEBHOOK_STEM,
        &["127.0.0.1", "localhost"],
        &webhook,
        ServerAuth,
    );
    let admin = [
        (DnType::CommonName, "envtest-admin"),
        (DnType::OrganizationName, "system:masters"),
    ];
    leaf("admin", &[], &admin, ClientAuth);

    let sa = new_key();
    write("sa.key", sa.serialize_pem());
    write("sa.pub", sa.public_key_pem());
}

/// Writes a self-signed certificate for 127.0.0.1 and localhost and its key into `dir` (created if
/// missing) as `tls.crt` and `tls.key`, the names of a `kubernetes.io/tls` Secret: a webhook server
/// run on this machine serves with them. The key is readable by its owner only.
pub(crate) fn write_serving_pair(dir: &Path) -> std::io::Result<()> {
    let other = std::io::Error::other;
    fs::create_dir_all(dir)?;
    let key = KeyPair::generate().map_err(other)?;
    let names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    let mut params = CertificateParams::new(names).map_err(other)?;
    params
        .distinguished_name
        .push(DnType::CommonName, "webhook-server");
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ServerAuth];
    let cert = params.self_signed(&key).map_err(other)?;
    let key_path = dir.join("tls.key");
    let _ = fs::remove_file(&key_path);
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    std::io::Write::write_all(
        &mut options.open(&key_path)?,
        key.serialize_pem().as_bytes(),
    )?;
    fs::write(dir.join("tls.crt"), cert.pem())
}
