//! `multiarch manifests --dir manifests`: writes the generated install manifests;
//! `multiarch certificates`: the certificates they mount, for installs without the
//! operator.

use anyhow::Context;
use multiarch_operator::{certificates::secrets::static_install_secrets, install};

use crate::args::{CertificatesArgs, ManifestsArgs};

pub fn run(args: &ManifestsArgs) -> anyhow::Result<()> {
    for (name, files) in std::iter::once(("", install::root())).chain(install::folders()?) {
        let dir = args.dir.join(name);
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        for (file, documents) in files {
            let path = dir.join(file);
            std::fs::write(&path, install::to_yaml(&documents)?)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
    }
    Ok(())
}

/// The Secrets on standard output, ready for `kubectl apply -f -`; the CA bundle the API
/// server needs for the webhook in `--ca-bundle`'s file.
pub fn certificates(args: &CertificatesArgs) -> anyhow::Result<()> {
    let settings = install::Settings {
        namespace: args.namespace.clone(),
        ..install::Settings::default()
    };
    let (secrets, bundle) = static_install_secrets(&settings, std::time::SystemTime::now())?;
    if let Some(path) = &args.ca_bundle {
        std::fs::write(path, &bundle)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    print!("{}", install::to_yaml(&secrets)?);
    Ok(())
}
