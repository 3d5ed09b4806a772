//! The text users read in `kubectl describe pod`.

/// What the handler knows about the failing container.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Failure<'a> {
    /// The container's name and image, when the pod's status still lists its ID.
    pub container: Option<(&'a str, &'a str)>,
    /// The node's `kubernetes.io/arch`.
    pub node_arch: Option<&'a str>,
    /// Whether the image has a build for the node's architecture, when it was inspected.
    pub image_has_arch: Option<bool>,
    /// The file the container tried to execute, when the node could read it.
    pub executable: Option<&'a str>,
}

/// e.g. `container app (image quay.io/x/y:1) cannot run /app on this arm64 node: exec
/// format error; the image has no arm64 build`.
pub fn message(failure: &Failure<'_>) -> String {
    let container = match failure.container {
        Some((name, image)) => format!("container {name} (image {image})"),
        None => "a container of this pod".to_owned(),
    };
    let who = match failure.executable.filter(|e| !e.is_empty()) {
        Some(executable) => format!("{container} cannot run {executable}"),
        None => format!("{container} cannot run"),
    };
    let Some(arch) = failure.node_arch.filter(|a| !a.is_empty()) else {
        return format!(
            "{who} on this node: exec format error; a binary in it is built for another architecture"
        );
    };
    let why = match failure.image_has_arch {
        Some(false) => format!("the image has no {arch} build"),
        Some(true) => {
            format!("the image's {arch} build contains a binary built for another architecture")
        }
        None => format!("check that the image is built for {arch}"),
    };
    format!("{who} on this {arch} node: exec format error; {why}")
}

/// What the handler knows about a program glibc's loader refused to start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoaderFailure<'a> {
    /// The container's name and image, when the pod's status still lists its ID.
    pub container: Option<(&'a str, &'a str)>,
    /// The loader's line, as the container's log has it.
    pub loader_line: &'a str,
    /// The node's x86-64 level (its label, or node-feature-discovery's), when it says.
    pub node_level: Option<u32>,
    /// The level the image needs: as the loader says, else as its inspected builds say.
    pub level_needed: Option<u32>,
}

/// e.g. `container app (image ubi10:1) cannot start on this node: glibc's loader refused
/// its CPU (Fatal glibc error: CPU does not support x86-64-v3); the node is x86-64-v2,
/// the image needs x86-64-v3`.
pub fn loader_message(failure: &LoaderFailure<'_>) -> String {
    let container = match failure.container {
        Some((name, image)) => format!("container {name} (image {image})"),
        None => "a container of this pod".to_owned(),
    };
    let node = match failure.node_level {
        Some(level) => format!("the node is x86-64-v{level}"),
        None => "the node does not say its x86-64 level".to_owned(),
    };
    let needed = match failure.level_needed {
        Some(level) => format!("the image needs x86-64-v{level}"),
        None => {
            "the level its program needs was not read from the image (binaryInspection reads it)"
                .to_owned()
        }
    };
    format!(
        "{container} cannot start on this node: glibc's loader refused its CPU ({}); {node}, {needed}",
        failure.loader_line
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loader_refusal_names_the_loaders_words_and_both_levels() {
        let app = Some(("app", "ubi10:1"));
        let cases = [
            (
                LoaderFailure {
                    container: app,
                    loader_line: "Fatal glibc error: CPU does not support x86-64-v3",
                    node_level: Some(2),
                    level_needed: Some(3),
                },
                "container app (image ubi10:1) cannot start on this node: glibc's loader refused its CPU (Fatal glibc error: CPU does not support x86-64-v3); the node is x86-64-v2, the image needs x86-64-v3",
            ),
            (
                LoaderFailure {
                    container: None,
                    loader_line: "/app: CPU ISA level is lower than required",
                    node_level: None,
                    level_needed: None,
                },
                "a container of this pod cannot start on this node: glibc's loader refused its CPU (/app: CPU ISA level is lower than required); the node does not say its x86-64 level, the level its program needs was not read from the image (binaryInspection reads it)",
            ),
        ];
        for (failure, expected) in cases {
            assert_eq!(loader_message(&failure), expected);
        }
    }

    #[test]
    fn every_combination_reads_as_a_sentence() {
        let app = Some(("app", "quay.io/x/y:1"));
        let cases = [
            (
                Failure {
                    container: app,
                    node_arch: Some("arm64"),
                    image_has_arch: Some(false),
                    executable: None,
                },
                "container app (image quay.io/x/y:1) cannot run on this arm64 node: exec format error; the image has no arm64 build",
            ),
            (
                Failure {
                    container: app,
                    node_arch: Some("arm64"),
                    image_has_arch: Some(true),
                    executable: None,
                },
                "container app (image quay.io/x/y:1) cannot run on this arm64 node: exec format error; the image's arm64 build contains a binary built for another architecture",
            ),
            (
                Failure {
                    container: app,
                    node_arch: Some("s390x"),
                    image_has_arch: None,
                    executable: None,
                },
                "container app (image quay.io/x/y:1) cannot run on this s390x node: exec format error; check that the image is built for s390x",
            ),
            (
                Failure {
                    container: None,
                    node_arch: Some("amd64"),
                    image_has_arch: None,
                    executable: None,
                },
                "a container of this pod cannot run on this amd64 node: exec format error; check that the image is built for amd64",
            ),
            (
                Failure {
                    container: app,
                    node_arch: Some(""),
                    image_has_arch: Some(false),
                    executable: None,
                },
                "container app (image quay.io/x/y:1) cannot run on this node: exec format error; a binary in it is built for another architecture",
            ),
        ];
        let with_path = Failure {
            container: app,
            node_arch: Some("arm64"),
            image_has_arch: Some(false),
            executable: Some("/usr/local/bin/app"),
        };
        assert_eq!(
            message(&with_path),
            "container app (image quay.io/x/y:1) cannot run /usr/local/bin/app on this arm64 node: exec format error; the image has no arm64 build"
        );
        for (failure, expected) in cases {
            assert_eq!(message(&failure), expected);
        }
    }
}
