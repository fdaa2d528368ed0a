//! One CA for everything on the loopback control plane: the apiserver's serving certificate,
//! client certificates (the admin, kubelets, the apiserver calling the authorizer) and the
//! webhooks' serving certificates.

use std::path::{Path, PathBuf};

use anyhow::Result;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// A certificate and its key, as PEM files.
#[derive(Clone, Debug)]
pub struct KeyPairFiles {
    /// The certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
}

/// The CA, with the files it wrote.
pub struct Pki {
    dir: PathBuf,
    issuer: Issuer<'static, KeyPair>,
    ca_pem: String,
}

impl Pki {
    /// A new CA, written to `dir/ca.crt`.
    pub fn new(dir: &Path) -> Result<Self> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, "e2e CA");
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = params.self_signed(&key)?;
        let ca_pem = ca.pem();
        std::fs::write(dir.join("ca.crt"), &ca_pem)?;
        Ok(Pki {
            dir: dir.to_owned(),
            issuer: Issuer::new(params, key),
            ca_pem,
        })
    }

    /// The CA certificate (PEM).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The CA certificate's file.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// A serving certificate for 127.0.0.1 and localhost, as `<name>.crt` and `<name>.key`.
    pub fn serving(&self, name: &str) -> Result<KeyPairFiles> {
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.write(name, params)
    }

    /// A client certificate: the apiserver reads the user from its CN and the groups from its
    /// O entries.
    pub fn client(&self, file_name: &str, user: &str, groups: &[&str]) -> Result<KeyPairFiles> {
        let mut params = CertificateParams::new(Vec::new())?;
        params.distinguished_name.push(DnType::CommonName, user);
        for group in groups {
            params
                .distinguished_name
                .push(DnType::OrganizationName, *group);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.write(file_name, params)
    }

    fn write(&self, name: &str, params: CertificateParams) -> Result<KeyPairFiles> {
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        let files = KeyPairFiles {
            cert: self.dir.join(format!("{name}.crt")),
            key: self.dir.join(format!("{name}.key")),
        };
        std::fs::write(&files.cert, cert.pem())?;
        std::fs::write(&files.key, key.serialize_pem())?;
        Ok(files)
    }
}
