//! Pods per topology domain for one scoring constraint, looked up once per scored node.
//!
//! Zones are read from the node's zone name, which the cluster model shares between the
//! nodes of a zone: the first node of a zone has its name read and matched, every other
//! node is matched by the address of its name (no string is read or hashed per node).
//! Nodes whose names are not shared (built outside the cluster model) only cost more.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::model::node::NodeInfo;

/// How a constraint's key is read from a node, decided once per cycle rather than by
/// comparing the key per node.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// Every node is its own domain.
    Hostname,
    /// Read from the node's cached zone.
    Zone,
    Label,
}

impl KeyKind {
    pub fn of(key: &str) -> Self {
        match key {
            super::HOSTNAME => KeyKind::Hostname,
            crate::model::node::ZONE_LABEL => KeyKind::Zone,
            _ => KeyKind::Label,
        }
    }

    pub fn value<'n>(self, key: &str, node: &'n NodeInfo) -> Option<&'n str> {
        match self {
            KeyKind::Zone => node.zone.as_deref(),
            KeyKind::Hostname | KeyKind::Label => node.label(key),
        }
    }
}

/// The address of a zone name's allocation: equal for the nodes that share it.
fn address(zone: &Arc<str>) -> usize {
    Arc::as_ptr(zone).cast::<u8>() as usize
}

/// Addresses remembered: a cluster has a few zones, each one shared name; names not
/// shared (nodes built outside the cluster model) past this many are found by name.
const MAX_ADDRESSES: usize = 16;

/// Zone domains by the address of their shared name, and by name.
#[derive(Clone, Default)]
pub struct ZoneCounts {
    /// (address of a node's zone name, position in `counts`): scanned, not hashed (a
    /// handful of entries, read once per scored node).
    by_address: Vec<(usize, usize)>,
    by_name: FxHashMap<Arc<str>, usize>,
    counts: Vec<(Arc<str>, i64)>,
}

impl ZoneCounts {
    fn position(&self, zone: &Arc<str>) -> Option<usize> {
        let at = address(zone);
        self.by_address
            .iter()
            .find(|(a, _)| *a == at)
            .map(|(_, position)| *position)
    }

    /// The zone's position among the noted domains (see [`counts`](Self::counts)).
    pub fn find(&self, zone: &Arc<str>) -> Option<usize> {
        self.position(zone)
            .or_else(|| self.by_name.get(zone).copied())
    }

    /// Pods counted per noted domain, by position.
    pub fn counts(&self) -> impl Iterator<Item = i64> + '_ {
        self.counts.iter().map(|(_, count)| *count)
    }

    /// Adds the zone as a domain; `true` when it is new.
    fn note(&mut self, zone: &Arc<str>) -> bool {
        if self.position(zone).is_some() {
            return false;
        }
        let (position, new) = match self.by_name.get(zone) {
            Some(&at) => (at, false),
            None => {
                self.counts.push((zone.clone(), 0));
                self.by_name.insert(zone.clone(), self.counts.len() - 1);
                (self.counts.len() - 1, true)
            }
        };
        if self.by_address.len() < MAX_ADDRESSES {
            self.by_address.push((address(zone), position));
        }
        new
    }

    /// The count of a zone, for a node that may not have been noted.
    fn count_mut(&mut self, zone: &Arc<str>) -> Option<&mut i64> {
        let at = self.find(zone)?;
        Some(&mut self.counts[at].1)
    }
}

/// The domains (and pods counted in each) of one constraint among the scored nodes.
#[derive(Clone)]
pub enum DomainCounts {
    /// Every node is its own domain: counted per node when scored.
    Hostname,
    Zone(ZoneCounts),
    Label(FxHashMap<String, i64>),
}

impl DomainCounts {
    pub fn new(kind: KeyKind) -> Self {
        match kind {
            KeyKind::Hostname => DomainCounts::Hostname,
            KeyKind::Zone => DomainCounts::Zone(ZoneCounts::default()),
            KeyKind::Label => DomainCounts::Label(FxHashMap::default()),
        }
    }

    /// Adds the node's domain (of `key`); `true` when it is a new one. Every node is a new
    /// hostname domain.
    pub fn note(&mut self, key: &str, node: &NodeInfo) -> bool {
        match self {
            DomainCounts::Hostname => true,
            DomainCounts::Zone(zones) => node.zone.as_ref().is_some_and(|z| zones.note(z)),
            DomainCounts::Label(counts) => match node.label(key) {
                Some(value) if !counts.contains_key(value) => {
                    counts.insert(value.to_owned(), 0);
                    true
                }
                _ => false,
            },
        }
    }

    /// Zone or label domains noted so far (none for hostnames: counted per node).
    pub fn is_empty(&self) -> bool {
        match self {
            DomainCounts::Hostname => true,
            DomainCounts::Zone(zones) => zones.counts.is_empty(),
            DomainCounts::Label(counts) => counts.is_empty(),
        }
    }

    /// The count of the node's domain when it is one of the noted domains.
    pub fn count_mut(&mut self, key: &str, node: &NodeInfo) -> Option<&mut i64> {
        match self {
            DomainCounts::Hostname => None,
            DomainCounts::Zone(zones) => zones.count_mut(node.zone.as_ref()?),
            DomainCounts::Label(counts) => counts.get_mut(node.label(key)?),
        }
    }

    /// Every noted domain by name, to be counted.
    pub fn named_mut(&mut self) -> Box<dyn Iterator<Item = (&str, &mut i64)> + '_> {
        match self {
            DomainCounts::Hostname => Box::new(std::iter::empty()),
            DomainCounts::Zone(zones) => Box::new(
                zones
                    .counts
                    .iter_mut()
                    .map(|(name, count)| (&**name, count)),
            ),
            DomainCounts::Label(counts) => Box::new(
                counts
                    .iter_mut()
                    .map(|(name, count)| (name.as_str(), count)),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::node::NodeBuilder;

    /// The count of the node's domain: `None` when the node has no value for the key, 0
    /// for a domain not noted.
    fn count(domains: &DomainCounts, key: &str, node: &NodeInfo) -> Option<i64> {
        match domains {
            DomainCounts::Hostname => None,
            DomainCounts::Zone(zones) => {
                let at = zones.find(node.zone.as_ref()?);
                Some(at.map_or(0, |at| zones.counts().nth(at).unwrap()))
            }
            DomainCounts::Label(counts) => Some(counts.get(node.label(key)?).copied().unwrap_or(0)),
        }
    }

    fn node(name: &str, zone: &Arc<str>) -> NodeInfo {
        let mut node = NodeBuilder::new(name, "amd64").info();
        node.zone = Some(zone.clone());
        node
    }

    #[test]
    fn zones_shared_or_not_are_one_domain_per_name() {
        let shared: Arc<str> = "zone-a".into();
        let copy: Arc<str> = "zone-a".into();
        let other: Arc<str> = "zone-b".into();
        let (a1, a2, a3, b) = (
            node("a1", &shared),
            node("a2", &shared),
            node("a3", &copy),
            node("b", &other),
        );
        let mut domains = DomainCounts::new(KeyKind::Zone);
        assert!(domains.note("", &a1));
        assert!(!domains.note("", &a2));
        assert!(!domains.note("", &a3), "an unshared copy of a noted name");
        assert!(domains.note("", &b));
        for (name, count) in domains.named_mut() {
            *count = if name == "zone-a" { 4 } else { 1 };
        }
        assert_eq!(count(&domains, "", &a1), Some(4));
        assert_eq!(count(&domains, "", &a3), Some(4));
        assert_eq!(count(&domains, "", &b), Some(1));
        *domains.count_mut("", &a2).unwrap() += 1;
        assert_eq!(count(&domains, "", &a3), Some(5));
        let unnoted = node("c", &"zone-c".into());
        assert_eq!(count(&domains, "", &unnoted), Some(0));
        assert!(domains.count_mut("", &unnoted).is_none());
        let mut zoneless = a1.clone();
        zoneless.zone = None;
        assert_eq!(count(&domains, "", &zoneless), None);
    }

    #[test]
    fn unshared_names_past_the_remembered_addresses_are_found_by_name() {
        // Every node holds its own allocation of one of 3 zones: 60 addresses.
        let nodes: Vec<NodeInfo> = (0..60)
            .map(|i| node(&format!("n{i}"), &format!("zone-{}", i % 3).into()))
            .collect();
        let mut domains = DomainCounts::new(KeyKind::Zone);
        let new: usize = nodes.iter().filter(|n| domains.note("", n)).count();
        assert_eq!(new, 3);
        for node in &nodes {
            *domains.count_mut("", node).unwrap() += 1;
        }
        for node in &nodes {
            assert_eq!(count(&domains, "", node), Some(20), "{}", node.name);
        }
    }

    #[test]
    fn labels_are_domains_by_value() {
        let n1 = NodeBuilder::new("n1", "amd64").label("rack", "r1").info();
        let n2 = NodeBuilder::new("n2", "amd64").label("rack", "r1").info();
        let n3 = NodeBuilder::new("n3", "amd64").info();
        let mut domains = DomainCounts::new(KeyKind::Label);
        assert!(domains.note("rack", &n1));
        assert!(!domains.note("rack", &n2));
        assert!(!domains.note("rack", &n3));
        *domains.count_mut("rack", &n2).unwrap() += 2;
        assert_eq!(count(&domains, "rack", &n1), Some(2));
        assert_eq!(count(&domains, "rack", &n3), None);
        let other_rack = NodeBuilder::new("n4", "amd64").label("rack", "r2").info();
        assert_eq!(count(&domains, "rack", &other_rack), Some(0));
    }
}
