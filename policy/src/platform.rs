//! Platforms (os/architecture/variant) of images and nodes, and the one definition of
//! "these images can run on that node" used by the scheduler, the gate path, `simulate`
//! and `audit`.

use std::fmt;

/// One platform an image has a build for, or a node is.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Platform {
    pub os: String,
    pub architecture: String,
    /// `v7` for arm/v7. `None` when the image does not say (any variant).
    pub variant: Option<String>,
}

impl Platform {
    /// Builds a platform with names normalized as the container runtimes do
    /// (`x86_64` → `amd64`, `aarch64` → `arm64`, arm64's default variant `v8` dropped).
    pub fn new(os: &str, architecture: &str, variant: Option<&str>) -> Self {
        let os = os.to_ascii_lowercase();
        let (architecture, variant) = normalize_architecture(architecture, variant);
        Platform {
            os,
            architecture,
            variant,
        }
    }

    /// `linux/arm64`, `linux/arm/v7`, `windows/amd64` (the notation of `docker
    /// --platform`, the scenario files and `audit --platforms`).
    pub fn parse(text: &str) -> Option<Self> {
        let mut parts = text.split('/');
        let os = parts.next().filter(|s| !s.is_empty())?;
        let arch = parts.next().filter(|s| !s.is_empty())?;
        let variant = parts.next();
        if parts.next().is_some() {
            return None;
        }
        Some(Platform::new(os, arch, variant))
    }

    /// `linux/amd64`.
    pub fn linux(architecture: &str) -> Self {
        Platform::new("linux", architecture, None)
    }

    /// Whether a container built for `self` runs on a node of platform `node`.
    pub fn runs_on(&self, node: &Platform) -> bool {
        self.os == node.os
            && self.architecture == node.architecture
            && variant_runs_on(
                &self.architecture,
                self.variant.as_deref(),
                node.variant.as_deref(),
            )
    }
}

fn normalize_architecture(architecture: &str, variant: Option<&str>) -> (String, Option<String>) {
    let architecture = architecture.to_ascii_lowercase();
    let variant = variant
        .filter(|v| !v.is_empty())
        .map(str::to_ascii_lowercase);
    match architecture.as_str() {
        // A node's `v1` is a known level (the baseline), not "any": kept.
        "x86_64" | "x86-64" | "amd64" => ("amd64".into(), variant),
        "aarch64" | "arm64" => ("arm64".into(), variant.filter(|v| v != "v8")),
        "armhf" | "armel" => ("arm".into(), variant),
        "i386" | "i686" => ("386".into(), None),
        _ => (architecture, variant),
    }
}

/// Whether the architecture's variants are levels, each running the builds of the
/// levels below: 32-bit arm (a v7 node runs v6 and v5 builds) and amd64 (the psABI's
/// x86-64-v2..v4: an x86-64-v3 CPU runs v2 builds). Elsewhere variants must be equal.
pub fn variants_are_levels(architecture: &str) -> bool {
    matches!(architecture, "arm" | "amd64")
}

/// Leveled variants run on nodes of their level or above; other variants must be equal.
/// A side that does not name its variant accepts any (a node without the variant label
/// runs every build of its architecture, as before the label existed).
fn variant_runs_on(architecture: &str, image: Option<&str>, node: Option<&str>) -> bool {
    match (image, node) {
        (None, _) | (_, None) => true,
        (Some(image), Some(node)) if variants_are_levels(architecture) => {
            match (variant_level(image), variant_level(node)) {
                (Some(i), Some(n)) => i <= n,
                _ => image == node,
            }
        }
        (Some(image), Some(node)) => image == node,
    }
}

/// `v7` → 7, `v3` → 3.
pub fn variant_level(variant: &str) -> Option<u32> {
    variant.strip_prefix('v').and_then(|n| n.parse().ok())
}

/// What a build's variant asks of a node, as users read it: `x86-64-v3` (the psABI's
/// name, what glibc's loader says when it refuses a CPU), `arm/v7`.
pub fn variant_need(platform: &Platform) -> Option<String> {
    let variant = platform.variant.as_deref()?;
    Some(if platform.architecture == "amd64" {
        format!("x86-64-{variant}")
    } else {
        format!("{}/{variant}", platform.architecture)
    })
}

impl fmt::Display for Platform {
    /// `amd64` for Linux without variant (the common case, as users write it), otherwise
    /// `windows/amd64`, `arm/v7`, `linux/arm64/v9`... as precise as needed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.os != "linux" {
            write!(f, "{}/", self.os)?;
        }
        f.write_str(&self.architecture)?;
        if let Some(variant) = &self.variant {
            write!(f, "/{variant}")?;
        }
        Ok(())
    }
}

/// The platforms of one container's image.
#[derive(Clone, Copy, Debug)]
pub struct ContainerPlatforms<'a> {
    pub container: &'a str,
    pub platforms: &'a [Platform],
}

/// [`compatible_platforms`] of the containers whose images confine the pod, given each
/// container's image platforms or `None` for an image that confines nothing (an OLM
/// bundle image: data, never executed); `None` when no image confines anything.
pub fn compatible_platforms_of(
    per_container: &[(String, Option<Vec<Platform>>)],
) -> Option<Vec<Platform>> {
    let containers: Vec<ContainerPlatforms<'_>> = per_container
        .iter()
        .filter_map(|(container, platforms)| {
            Some(ContainerPlatforms {
                container,
                platforms: platforms.as_ref()?,
            })
        })
        .collect();
    (!containers.is_empty()).then(|| compatible_platforms(&containers))
}

/// The platforms every container of a pod can run on, sorted and deduplicated: a node is
/// compatible with the pod when its platform is in this set (see [`Platform::runs_on`]).
///
/// For each os/architecture that every image has, the result keeps the most demanding
/// variant (arm/v7 and arm/v6 images together need a v7 node).
pub fn compatible_platforms(containers: &[ContainerPlatforms<'_>]) -> Vec<Platform> {
    let Some((first, rest)) = containers.split_first() else {
        return Vec::new();
    };
    let mut result: Vec<Platform> = Vec::new();
    for candidate in first.platforms {
        let mut required = candidate.clone();
        let everywhere = rest.iter().all(|other| {
            let matching: Vec<&Platform> = other
                .platforms
                .iter()
                .filter(|p| p.os == required.os && p.architecture == required.architecture)
                .collect();
            if matching.is_empty() {
                return false;
            }
            // The other image's least demanding build decides what it needs.
            let least = matching.iter().min_by(|a, b| demand(a).cmp(&demand(b)));
            if let Some(least) = least
                && demand(least) > demand(&required)
            {
                required.variant.clone_from(&least.variant);
            }
            true
        });
        if everywhere {
            result.push(required);
        }
    }
    result.sort();
    result.dedup();
    // Keep, per os/architecture, only the least demanding entry that all images allow.
    result.dedup_by(|later, earlier| {
        later.os == earlier.os && later.architecture == earlier.architecture && {
            if demand(later) < demand(earlier) {
                std::mem::swap(later, earlier);
            }
            true
        }
    });
    result
}

/// How much a build asks of a node's variant: none < v5 < v6 < v7 ...
fn demand(platform: &Platform) -> (u8, u32) {
    match &platform.variant {
        None => (0, 0),
        Some(v) => (1, variant_level(v).unwrap_or(u32::MAX)),
    }
}

/// Whether a node of platform `node` can run the pod whose compatible set is `compatible`.
pub fn node_is_compatible(compatible: &[Platform], node: &Platform) -> bool {
    compatible.iter().any(|p| p.runs_on(node))
}

/// A bit number for the common platforms (Linux or Windows on a known architecture), so
/// that the per-node check of a scheduling cycle is a bit test. The variant has no bit:
/// a node with one passes the bit test of its architecture and is then checked with
/// [`node_is_compatible`] when the pod's builds name variants (x86-64 levels are
/// common, and a cluster labelled with them keeps the bit test and the platform index).
pub fn platform_bit(platform: &Platform) -> Option<u8> {
    os_arch_bit(platform)
}

fn os_arch_bit(platform: &Platform) -> Option<u8> {
    let os = match platform.os.as_str() {
        "linux" => 0,
        "windows" => 1,
        _ => return None,
    };
    let arch = match platform.architecture.as_str() {
        "amd64" => 0,
        "arm64" => 1,
        "ppc64le" => 2,
        "s390x" => 3,
        "arm" => 4,
        "386" => 5,
        "riscv64" => 6,
        "mips64le" => 7,
        _ => return None,
    };
    Some(os * 8 + arch)
}

/// A node's variant read once, so that a cycle's per-node variant check compares numbers,
/// not names, and reads nothing of the node's [`Platform`] (a cache line no filter
/// touches otherwise): none (the node runs every build of its architecture), a level of
/// an architecture whose variants are levels (x86-64-v3: 3), or another variant, which
/// only [`node_is_compatible`] decides.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum VariantLevel {
    #[default]
    Unnamed,
    Level(u8),
    Other,
}

impl VariantLevel {
    pub fn of(node: &Platform) -> Self {
        match node.variant.as_deref() {
            None => VariantLevel::Unnamed,
            Some(variant) if variants_are_levels(&node.architecture) => variant_level(variant)
                .and_then(|level| u8::try_from(level).ok())
                .map_or(VariantLevel::Other, VariantLevel::Level),
            Some(_) => VariantLevel::Other,
        }
    }

    /// Whether a node of this level runs one of the builds whose [`lowest_levels`] entry
    /// for its bit is `lowest` (a build of its bit being among them); `None` when only
    /// the names decide ([`VariantLevel::Other`]).
    pub fn meets(self, lowest: u32) -> Option<bool> {
        match self {
            VariantLevel::Unnamed => Some(true),
            VariantLevel::Level(level) => Some(u32::from(level) >= lowest),
            VariantLevel::Other => None,
        }
    }
}

/// Per [`platform_bit`], the lowest level a node of that bit (whose [`VariantLevel`] is a
/// level) needs to run one of `platforms`: 0 when a build of the bit names no variant,
/// the least level its builds name otherwise; `u32::MAX` when none of them is a level (a
/// node with a level runs none of them) or no build has the bit.
pub fn lowest_levels(platforms: &[Platform]) -> [u32; 16] {
    let mut lowest = [u32::MAX; 16];
    for platform in platforms {
        let Some(bit) = os_arch_bit(platform) else {
            continue;
        };
        let level = match platform.variant.as_deref() {
            None => 0,
            Some(variant) => variant_level(variant).unwrap_or(u32::MAX),
        };
        let at = &mut lowest[usize::from(bit)];
        *at = (*at).min(level);
    }
    lowest
}

/// The nodes that have a [`platform_bit`] which `platforms` run on, as a bit set, variants
/// aside: a side that names no variant accepts any, so an `arm/v7` build counts as `arm`
/// and only nodes that name a variant need the precise check; a platform with an unknown
/// OS or architecture runs on no such node and sets no bit.
pub fn platform_bits(platforms: &[Platform]) -> u64 {
    platforms
        .iter()
        .filter_map(os_arch_bit)
        .fold(0u64, |bits, b| bits | (1 << b))
}

/// `amd64, arm64` for messages.
pub fn describe(platforms: &[Platform]) -> String {
    let mut names: Vec<String> = platforms.iter().map(ToString::to_string).collect();
    names.dedup();
    names.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The numeric check a cycle makes per node decides as the names do, for levels and
    /// other variants, on nodes with and without one.
    #[test]
    fn variant_levels_decide_as_the_names_do() {
        fn platform(name: &str) -> Platform {
            Platform::parse(&format!("linux/{name}")).unwrap_or_else(|| panic!("{name}"))
        }
        let nodes = [
            "amd64",
            "amd64/v1",
            "amd64/v2",
            "amd64/v3",
            "amd64/v4",
            "amd64/v300",
            "amd64/vx",
            "arm/v5",
            "arm/v7",
            "arm64",
            "arm64/v9",
        ];
        let builds: &[&[&str]] = &[
            &["amd64"],
            &["amd64/v3"],
            &["amd64/v2", "amd64/v4"],
            &["amd64/v3", "amd64"],
            &["amd64/vx"],
            &["amd64/vx", "amd64/v2"],
            &["arm/v6", "amd64/v4"],
            &["amd64/v3", "arm64"],
            &["arm64/v9"],
        ];
        let mut decided_by_number = 0;
        for builds in builds {
            let builds: Vec<Platform> = builds.iter().map(|b| platform(b)).collect();
            let (bits, lowest) = (platform_bits(&builds), lowest_levels(&builds));
            for node in nodes {
                let node = platform(node);
                let Some(bit) = platform_bit(&node) else {
                    panic!("{node} has no bit");
                };
                let by_number = VariantLevel::of(&node).meets(lowest[usize::from(bit)]);
                decided_by_number += usize::from(by_number.is_some());
                let decided = bits & (1 << bit) != 0
                    && by_number.unwrap_or_else(|| node_is_compatible(&builds, &node));
                assert_eq!(
                    decided,
                    node_is_compatible(&builds, &node),
                    "{builds:?} on {node}"
                );
            }
        }
        // Most of the table is decided by number, not handed back to the names.
        assert!(decided_by_number > builds.len() * 7, "{decided_by_number}");
    }

    fn set(list: &[(&str, &str, Option<&str>)]) -> Vec<Platform> {
        list.iter()
            .map(|(o, a, v)| Platform::new(o, a, *v))
            .collect()
    }

    fn compat(images: &[Vec<Platform>]) -> Vec<Platform> {
        let containers: Vec<ContainerPlatforms<'_>> = images
            .iter()
            .map(|p| ContainerPlatforms {
                container: "c",
                platforms: p,
            })
            .collect();
        compatible_platforms(&containers)
    }

    #[test]
    fn an_image_that_confines_nothing_leaves_the_others_to_decide() {
        let linux = |a: &str| Platform::linux(a);
        let per_container =
            |entries: &[(&str, Option<&[&str]>)]| -> Vec<(String, Option<Vec<Platform>>)> {
                entries
                    .iter()
                    .map(|(c, p)| {
                        (
                            (*c).to_owned(),
                            p.map(|p| p.iter().map(|a| linux(a)).collect()),
                        )
                    })
                    .collect()
            };
        let app_and_bundle = per_container(&[
            ("app", Some(&["amd64", "arm64"][..])),
            ("bundle", None),
            ("sidecar", Some(&["arm64", "s390x"][..])),
        ]);
        assert_eq!(
            compatible_platforms_of(&app_and_bundle),
            Some(vec![linux("arm64")])
        );
        assert_eq!(
            compatible_platforms_of(&per_container(&[("bundle", None)])),
            None
        );
        assert_eq!(compatible_platforms_of(&[]), None);
        let nothing_in_common =
            per_container(&[("a", Some(&["amd64"][..])), ("b", Some(&["arm64"][..]))]);
        assert_eq!(compatible_platforms_of(&nothing_in_common), Some(vec![]));
    }

    #[test]
    fn names_are_normalized() {
        assert_eq!(
            Platform::new("Linux", "x86_64", None),
            Platform::linux("amd64")
        );
        assert_eq!(
            Platform::new("linux", "aarch64", Some("v8")),
            Platform::linux("arm64")
        );
        assert_eq!(
            Platform::new("linux", "arm64", Some("")),
            Platform::linux("arm64")
        );
        assert_eq!(
            Platform::new("linux", "arm64", Some("v9"))
                .variant
                .as_deref(),
            Some("v9")
        );
    }

    #[test]
    fn intersection_of_images() {
        let multi = set(&[
            ("linux", "amd64", None),
            ("linux", "arm64", None),
            ("linux", "ppc64le", None),
            ("linux", "s390x", None),
        ]);
        let two = set(&[("linux", "amd64", None), ("linux", "arm64", None)]);
        let amd = set(&[("linux", "amd64", None)]);
        let arm = set(&[("linux", "arm64", None)]);
        assert_eq!(compat(&[multi.clone(), two.clone()]), two);
        assert_eq!(compat(&[multi, two, amd.clone()]), amd);
        assert_eq!(compat(&[amd, arm]), vec![]);
        assert_eq!(compat(&[]), vec![]);
    }

    #[test]
    fn os_is_part_of_the_platform() {
        let windows = set(&[("windows", "amd64", None)]);
        let linux = set(&[("linux", "amd64", None)]);
        assert_eq!(compat(&[windows.clone(), linux]), vec![]);
        assert!(!windows[0].runs_on(&Platform::linux("amd64")));
        assert_eq!(windows[0].to_string(), "windows/amd64");
    }

    #[test]
    fn arm_variants_run_on_newer_nodes() {
        let v6 = Platform::new("linux", "arm", Some("v6"));
        let v7 = Platform::new("linux", "arm", Some("v7"));
        assert!(v6.runs_on(&v7));
        assert!(!v7.runs_on(&v6));
        assert!(
            v7.runs_on(&Platform::linux("arm")),
            "a node that does not say accepts any"
        );
        // An arm/v7 image and an arm/v6 image together need a v7 node.
        let together = compat(&[vec![v7.clone()], vec![v6.clone()]]);
        assert_eq!(together, vec![v7.clone()]);
        // An image with v6 and v7 builds plus a v6-only image: v6 nodes are enough.
        assert_eq!(compat(&[vec![v6.clone(), v7], vec![v6.clone()]]), vec![v6]);
    }

    #[test]
    fn x86_64_levels_run_on_nodes_of_their_level_or_above() {
        let level = |v: Option<&str>| Platform::new("linux", "amd64", v);
        let cases: [(Option<&str>, Option<&str>, bool); 9] = [
            (Some("v3"), Some("v3"), true),
            (Some("v3"), Some("v4"), true),
            (Some("v3"), Some("v2"), false),
            (Some("v4"), Some("v3"), false),
            (Some("v2"), Some("v4"), true),
            // A node that does not say its level runs any build, as before the label.
            (Some("v4"), None, true),
            (None, Some("v2"), true),
            // v1 is the baseline; a node that says v1 is known to be below v2.
            (Some("v1"), Some("v2"), true),
            (Some("v2"), Some("v1"), false),
        ];
        for (image, node, runs) in cases {
            assert_eq!(
                level(image).runs_on(&level(node)),
                runs,
                "{image:?} on {node:?}"
            );
        }
        assert_eq!(
            Platform::new("linux", "x86_64", Some("v3")),
            level(Some("v3"))
        );
        // An image with v2 and v3 builds runs on v2 nodes; beside a v3-only image, no.
        let both = vec![level(Some("v2")), level(Some("v3"))];
        assert_eq!(compat(std::slice::from_ref(&both)), vec![level(Some("v2"))]);
        assert_eq!(
            compat(&[both, vec![level(Some("v3"))]]),
            vec![level(Some("v3"))]
        );
        // A baseline build beside the v3 one needs nothing.
        assert_eq!(
            compat(&[vec![level(None), level(Some("v3"))]]),
            vec![level(None)]
        );
        assert_eq!(
            variant_need(&level(Some("v3"))).as_deref(),
            Some("x86-64-v3")
        );
        assert_eq!(
            variant_need(&Platform::new("linux", "arm", Some("v7"))).as_deref(),
            Some("arm/v7")
        );
        assert_eq!(variant_need(&level(None)), None);
    }

    #[test]
    fn bits_agree_with_runs_on() {
        let images = [
            Platform::linux("amd64"),
            Platform::linux("arm64"),
            Platform::linux("s390x"),
            Platform::new("windows", "amd64", None),
            Platform::linux("riscv64"),
            Platform::new("linux", "arm", Some("v7")),
            Platform::new("linux", "arm64", Some("v8")),
            Platform::linux("loong64"),
            Platform::new("plan9", "amd64", None),
        ];
        let nodes = [
            Platform::linux("amd64"),
            Platform::linux("arm64"),
            Platform::linux("s390x"),
            Platform::new("windows", "amd64", None),
            Platform::linux("riscv64"),
            Platform::linux("arm"),
        ];
        for image in &images {
            for node in &nodes {
                let bits = platform_bits(std::slice::from_ref(image));
                let bit = platform_bit(node).unwrap();
                assert_eq!(
                    bits & (1 << bit) != 0,
                    image.runs_on(node),
                    "{image} on {node}"
                );
            }
        }
        // A node with a variant has its architecture's bit (the precise check follows);
        // an unknown architecture takes the slow path.
        assert_eq!(
            platform_bit(&Platform::new("linux", "arm", Some("v7"))),
            platform_bit(&Platform::linux("arm"))
        );
        assert_eq!(platform_bit(&Platform::linux("loong64")), None);
    }

    #[test]
    fn describe_lists_architectures() {
        let list = set(&[("linux", "amd64", None), ("linux", "arm", Some("v7"))]);
        assert_eq!(describe(&list), "amd64, arm/v7");
    }
}
