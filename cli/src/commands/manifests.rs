//! `multiarch manifests --dir manifests`: writes the generated install manifests.

use anyhow::Context;
use multiarch_operator::install;

use crate::args::ManifestsArgs;

pub fn run(args: &ManifestsArgs) -> anyhow::Result<()> {
    for (name, files) in std::iter::once(("", install::root())).chain(install::folders()) {
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
