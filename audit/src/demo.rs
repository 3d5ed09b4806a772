//! The embedded example of `multiarch audit --demo`: a small shop's manifests and what
//! the registries would answer for its images (one is missing: an image the audit could
//! not inspect).

pub const MANIFESTS: &str = include_str!("../demo/manifests.yaml");
pub const PLATFORMS: &str = include_str!("../demo/platforms.yaml");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{platforms_file, workloads::Manifests};

    #[test]
    fn the_demo_reads() {
        let manifests = Manifests::read(MANIFESTS, "default").unwrap();
        assert_eq!(manifests.workloads.len(), 6);
        let images = platforms_file::read(PLATFORMS).unwrap();
        assert_eq!(images.len(), 7);
    }
}
