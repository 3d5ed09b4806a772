//! `multiarch crds`.

use std::io::Write;

use anyhow::Context;
use multiarch_crd::render;

use crate::args::CrdsArgs;

pub fn run(args: &CrdsArgs) -> anyhow::Result<()> {
    match &args.dir {
        None => {
            let yaml = render::all_yaml()?;
            std::io::stdout()
                .write_all(yaml.as_bytes())
                .context("cannot write to stdout")?;
        }
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            for crd in render::crds()? {
                let path = dir.join(render::file_name(&crd));
                std::fs::write(&path, render::to_yaml(&crd)?)
                    .with_context(|| format!("cannot write {}", path.display()))?;
            }
        }
    }
    Ok(())
}
