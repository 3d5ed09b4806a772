//! Resource amounts as the scheduler adds and compares them.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use thin_vec::ThinVec;

use super::quantity::{InvalidQuantity, parse_scaled};

pub const CPU: &str = "cpu";
pub const MEMORY: &str = "memory";
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
pub const PODS: &str = "pods";

/// Requests or capacity: cpu in millicores, memory and ephemeral storage in bytes, and
/// extended resources (`nvidia.com/gpu`, `hugepages-2Mi`) in their units.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    pub milli_cpu: i64,
    pub memory: i64,
    pub ephemeral_storage: i64,
    /// Extended and hugepages resources; small, so a sorted vector beats a map. Thin
    /// (one pointer; empty ones share a static header): a node's requests and capacity
    /// then fit its first cache line (see `NodeInfo`).
    pub scalar: ThinVec<(String, i64)>,
}

impl Resources {
    /// Reads a `resources.requests`-style map. Unknown quantities are an error rather than
    /// zero, so a typo never makes a pod look smaller than it is.
    pub fn from_map(map: &BTreeMap<String, Quantity>) -> Result<Self, InvalidQuantity> {
        let mut out = Resources::default();
        for (name, quantity) in map {
            match name.as_str() {
                CPU => out.milli_cpu = parse_scaled(&quantity.0, 1000)?,
                MEMORY => out.memory = parse_scaled(&quantity.0, 1)?,
                EPHEMERAL_STORAGE => out.ephemeral_storage = parse_scaled(&quantity.0, 1)?,
                PODS => {}
                other if is_scalar(other) => {
                    out.set_scalar(other, parse_scaled(&quantity.0, 1)?);
                }
                _ => {}
            }
        }
        Ok(out)
    }

    pub fn scalar(&self, name: &str) -> i64 {
        self.scalar
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .map_or(0, |i| self.scalar[i].1)
    }

    pub fn set_scalar(&mut self, name: &str, value: i64) {
        match self.scalar.binary_search_by(|(n, _)| n.as_str().cmp(name)) {
            Ok(i) => self.scalar[i].1 = value,
            Err(i) => self.scalar.insert(i, (name.to_owned(), value)),
        }
    }

    pub fn add(&mut self, other: &Resources) {
        self.milli_cpu += other.milli_cpu;
        self.memory += other.memory;
        self.ephemeral_storage += other.ephemeral_storage;
        for (name, value) in &other.scalar {
            let sum = self.scalar(name) + value;
            self.set_scalar(name, sum);
        }
    }

    pub fn subtract(&mut self, other: &Resources) {
        self.milli_cpu -= other.milli_cpu;
        self.memory -= other.memory;
        self.ephemeral_storage -= other.ephemeral_storage;
        for (name, value) in &other.scalar {
            let diff = self.scalar(name) - value;
            self.set_scalar(name, diff);
        }
    }

    /// Each field the larger of the two (the init-container rule).
    pub fn max_with(&mut self, other: &Resources) {
        self.milli_cpu = self.milli_cpu.max(other.milli_cpu);
        self.memory = self.memory.max(other.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(other.ephemeral_storage);
        for (name, value) in &other.scalar {
            let max = self.scalar(name).max(*value);
            self.set_scalar(name, max);
        }
    }

    pub fn is_zero(&self) -> bool {
        self.milli_cpu == 0
            && self.memory == 0
            && self.ephemeral_storage == 0
            && self.scalar.iter().all(|(_, v)| *v == 0)
    }
}

/// Extended resources (`domain/name`), hugepages and attachable volumes count; native
/// resources without a prefix (other than these) are ignored, as in kube-scheduler.
fn is_scalar(name: &str) -> bool {
    name.contains('/') || name.starts_with("hugepages-")
}

/// The cpu and memory a pod counts for in scoring: requests, or kube-scheduler's defaults
/// (100m, 200Mi) for containers that request nothing, so best-effort pods still spread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NonZero {
    pub milli_cpu: i64,
    pub memory: i64,
}

pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

impl NonZero {
    pub fn of_container(requests: &Resources, has_cpu: bool, has_memory: bool) -> Self {
        NonZero {
            milli_cpu: if has_cpu {
                requests.milli_cpu
            } else {
                DEFAULT_MILLI_CPU_REQUEST
            },
            memory: if has_memory {
                requests.memory
            } else {
                DEFAULT_MEMORY_REQUEST
            },
        }
    }

    pub fn add(&mut self, other: NonZero) {
        self.milli_cpu += other.milli_cpu;
        self.memory += other.memory;
    }

    pub fn subtract(&mut self, other: NonZero) {
        self.milli_cpu -= other.milli_cpu;
        self.memory -= other.memory;
    }

    pub fn max_with(&mut self, other: NonZero) {
        self.milli_cpu = self.milli_cpu.max(other.milli_cpu);
        self.memory = self.memory.max(other.memory);
    }
}
