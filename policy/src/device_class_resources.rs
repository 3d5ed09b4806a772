//! The extended resource names DeviceClasses provide under a name of their choosing
//! (`spec.extendedResourceName`, DRAExtendedResource, beta and on by default in 1.36):
//! kube-scheduler satisfies a request for such a name with devices its
//! DynamicResources plugin allocates where no device plugin advertises it, so a pod
//! asking for one is dynamic resource allocation, which multiarch-scheduler leaves to
//! kube-scheduler. Read from the cluster's DeviceClasses; bounded. No I/O.

use std::collections::BTreeMap;

/// At most this many DeviceClasses are read (cluster-scoped, made by administrators: a
/// cluster has a handful). Beyond it, the set is [`complete`](Self::complete) no more.
pub const MAX_DEVICE_CLASSES: usize = 10_000;

/// The mapped names, by the DeviceClass that maps each.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceClassResources {
    /// DeviceClass name → the extended resource name it maps.
    by_class: BTreeMap<String, String>,
    /// Each mapped name and how many classes map it.
    names: BTreeMap<String, usize>,
    /// Classes past [`MAX_DEVICE_CLASSES`] were seen and not kept.
    overflowed: bool,
}

impl DeviceClassResources {
    /// From every DeviceClass's name and `spec.extendedResourceName`.
    pub fn of<'a>(classes: impl IntoIterator<Item = (&'a str, Option<&'a str>)>) -> Self {
        let mut out = DeviceClassResources::default();
        for (class, name) in classes {
            out.set(class, name);
        }
        out
    }

    /// One DeviceClass added or changed (`name` `None`: it maps nothing).
    pub fn set(&mut self, class: &str, name: Option<&str>) {
        let Some(name) = name.filter(|n| !n.is_empty()) else {
            self.remove(class);
            return;
        };
        if self.by_class.get(class).is_some_and(|old| old == name) {
            return;
        }
        if !self.by_class.contains_key(class) && self.by_class.len() >= MAX_DEVICE_CLASSES {
            self.overflowed = true;
            return;
        }
        self.remove(class);
        self.by_class.insert(class.to_owned(), name.to_owned());
        *self.names.entry(name.to_owned()).or_default() += 1;
    }

    /// One DeviceClass deleted.
    pub fn remove(&mut self, class: &str) {
        let Some(old) = self.by_class.remove(class) else {
            return;
        };
        if let Some(count) = self.names.get_mut(&old) {
            *count -= 1;
            if *count == 0 {
                self.names.remove(&old);
            }
        }
    }

    /// Whether a DeviceClass maps `name`.
    pub fn maps(&self, name: &str) -> bool {
        self.names.contains_key(name)
    }

    /// Every DeviceClass was kept (see [`MAX_DEVICE_CLASSES`]).
    pub fn complete(&self) -> bool {
        !self.overflowed
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_classes() {
        let mut mapped = DeviceClassResources::of([
            ("gpu.example.com", Some("example.com/gpu")),
            ("fpga.example.com", None),
            ("empty.example.com", Some("")),
        ]);
        assert!(mapped.maps("example.com/gpu"));
        assert!(!mapped.maps("example.com/fpga") && !mapped.maps(""));
        mapped.set("fpga.example.com", Some("example.com/fpga"));
        assert!(mapped.maps("example.com/fpga"));
        // Two classes may map one name: it stays mapped while either does.
        mapped.set("gpu-2.example.com", Some("example.com/gpu"));
        mapped.remove("gpu.example.com");
        assert!(mapped.maps("example.com/gpu"));
        mapped.set("gpu-2.example.com", None);
        assert!(!mapped.maps("example.com/gpu"));
        assert!(mapped.complete());
    }

    #[test]
    fn classes_past_the_bound_are_not_kept_and_said() {
        let names: Vec<(String, String)> = (0..=MAX_DEVICE_CLASSES)
            .map(|i| (format!("c{i}"), format!("example.com/r{i}")))
            .collect();
        let mapped =
            DeviceClassResources::of(names.iter().map(|(c, n)| (c.as_str(), Some(n.as_str()))));
        assert!(!mapped.complete());
        assert!(mapped.maps("example.com/r0"));
        assert!(!mapped.maps(&format!("example.com/r{MAX_DEVICE_CLASSES}")));
    }
}
