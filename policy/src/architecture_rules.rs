//! `celArchitecturePlacement`: which architectures the namespace admin's rules give a pod.
//! One definition, used by the webhook (admission), the scheduler (in place of the
//! images' platforms), the gate controller and `multiarch audit`.
//!
//! Among the namespace's PodPlacementConfigs whose `labelSelector` selects the pod, the
//! one with the highest `priority` wins (equal priorities: the name first in byte order);
//! rules are never merged across configs. When the winner enables the plugin, its rules
//! run in order and the first that is true decides; none true, its fallback decides.
//! A rule that cannot be evaluated for a pod (a label it indexes is missing, a value of
//! the wrong type) does not match it; the error is reported with the decision.
//!
//! Programs are compiled once per config spec and reused while the spec is unchanged;
//! decisions are cached per config by the metadata fields its rules read.

use std::{
    collections::{HashMap, HashSet},
    num::NonZeroUsize,
    sync::{Arc, Mutex},
};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_cel::{
    KubeCelExt,
    cel::{Context, Program, Value},
};
use lru::LruCache;
use multiarch_crd::{
    CelArchitecturePlacement, PodPlacementConfig,
    cel::pod_rule::{CONFIG_COST_LIMIT, MapReads, MetadataReads, check_rule, metadata_reads},
};

use crate::{
    platform::{Platform, describe},
    selectors::{LabelSelector, Labels},
};
pub use multiarch_crd::names::ANNOTATION_ARCHITECTURE_RULE;

/// The pod as a rule sees it.
#[derive(Clone, Copy, Debug)]
pub struct RuleSubject<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    pub labels: &'a Labels,
    pub annotations: &'a Labels,
}

impl<'a> RuleSubject<'a> {
    /// A pod (or pod template) of `namespace` by its metadata, seen by `name`.
    pub fn of(meta: &'a ObjectMeta, name: &'a str, namespace: &'a str) -> Self {
        static NONE: Labels = Labels::new();
        RuleSubject {
            name,
            namespace,
            labels: meta.labels.as_ref().unwrap_or(&NONE),
            annotations: meta.annotations.as_ref().unwrap_or(&NONE),
        }
    }
}

/// What the rules decided for one pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArchitectureDecision {
    /// The winning config's name.
    pub config: String,
    /// The rule that matched; `None` when the fallback decided.
    pub rule: Option<String>,
    /// The architectures, in the order the rule (or fallback) lists them.
    pub architectures: Vec<String>,
    /// Rules that could not be evaluated for the pod, with the reason.
    pub errors: Vec<(String, String)>,
}

impl ArchitectureDecision {
    /// `PodPlacementConfig-<config>/<rule or fallback>`: the annotation's value and how
    /// events name the decision.
    pub fn source(&self) -> String {
        format!(
            "PodPlacementConfig-{}/{}",
            self.config,
            self.rule.as_deref().unwrap_or("fallback")
        )
    }

    /// One phrase for events and messages: `rule "db" of PodPlacementConfig tiers` or
    /// `the fallback of PodPlacementConfig tiers`.
    pub fn describe(&self) -> String {
        match &self.rule {
            Some(rule) => format!("rule {rule:?} of PodPlacementConfig {}", self.config),
            None => format!("the fallback of PodPlacementConfig {}", self.config),
        }
    }

    pub fn allows(&self, architecture: &str) -> bool {
        self.architectures.iter().any(|a| a == architecture)
    }

    /// The Warning (event `ArchitectureRuleOverridesImages`) when the images, whose
    /// common platforms are `compatible`, have no build on the decided architectures.
    pub fn overrides_images(&self, compatible: &[Platform]) -> Option<String> {
        if compatible.iter().any(|p| self.allows(&p.architecture)) {
            return None;
        }
        let images = if compatible.is_empty() {
            "no architecture in common".to_owned()
        } else {
            describe(compatible)
        };
        Some(format!(
            "{} places the pod on {}, where its images have no build (images support {images}); the rule is obeyed",
            self.describe(),
            self.architectures.join(", ")
        ))
    }
}

/// The compiled rules of every PodPlacementConfig, by namespace.
#[derive(Clone, Default)]
pub struct ArchitectureRules {
    /// Only namespaces where some config enables the plugin; every config of such a
    /// namespace, since a config without the plugin can still win the selection.
    namespaces: HashMap<String, Vec<Arc<CompiledConfig>>>,
}

impl std::fmt::Debug for ArchitectureRules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArchitectureRules")
            .field("namespaces", &self.namespaces.keys().collect::<Vec<_>>())
            .finish()
    }
}

struct CompiledConfig {
    uid: Option<String>,
    name: String,
    priority: u8,
    selector: Option<LabelSelector>,
    config: PodPlacementConfig,
    placement: Option<CompiledPlacement>,
}

struct CompiledPlacement {
    fallback: Vec<String>,
    rules: Vec<CompiledRule>,
    /// What the rules read of the pod; `None` when a rule reads `self` some other way
    /// (stored before the operator's check): then nothing is cached.
    reads: Option<MetadataReads>,
    /// Decisions by what the rules read: the pods of a workload share the labels rules
    /// look at, so the rules run once for them (names and their own labels differ, but
    /// rules that do not read those do not see them).
    decisions: Mutex<LruCache<SubjectKey, ArchitectureDecision>>,
}

/// The part of a pod the rules read: its name if they read it, and of its labels and
/// annotations the keys they look up (`None`: absent) or the whole map.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct SubjectKey {
    name: Option<String>,
    labels: Option<Vec<(String, Option<String>)>>,
    annotations: Option<Vec<(String, Option<String>)>>,
}

/// Decisions kept per config.
const CACHED_DECISIONS: usize = 1024;
/// The largest key cached (bytes of the fields read): larger subjects are evaluated
/// every time, so the cache stays within about `CACHED_DECISIONS` times this.
const MAX_CACHED_KEY_BYTES: usize = 2048;

impl SubjectKey {
    fn of(pod: RuleSubject<'_>, reads: &MetadataReads) -> Option<SubjectKey> {
        let entries = |map: &Labels, read: &Option<MapReads>| {
            read.as_ref().map(|read| match read {
                MapReads::Keys(keys) => keys
                    .iter()
                    .map(|k| (k.clone(), map.get(k).cloned()))
                    .collect::<Vec<_>>(),
                MapReads::Whole => map
                    .iter()
                    .map(|(k, v)| (k.clone(), Some(v.clone())))
                    .collect(),
            })
        };
        let key = SubjectKey {
            name: reads.name.then(|| pod.name.to_owned()),
            labels: entries(pod.labels, &reads.labels),
            annotations: entries(pod.annotations, &reads.annotations),
        };
        let bytes = |entries: &Vec<(String, Option<String>)>| {
            entries
                .iter()
                .map(|(k, v)| k.len() + v.as_ref().map_or(0, String::len))
                .sum::<usize>()
        };
        let size = key.name.as_ref().map_or(0, String::len)
            + key.labels.as_ref().map_or(0, bytes)
            + key.annotations.as_ref().map_or(0, bytes);
        (size <= MAX_CACHED_KEY_BYTES).then_some(key)
    }
}

struct CompiledRule {
    name: String,
    architectures: Vec<String>,
    /// `Err`: the expression fails the rule checks (the operator's webhook refuses such
    /// configs; one stored without it never matches, the reason reported per pod).
    program: Result<Program, String>,
}

impl ArchitectureRules {
    /// Compiles the configs' rules, reusing `previous`'s programs for every config whose
    /// spec is unchanged.
    pub fn compile(configs: &[PodPlacementConfig], previous: &ArchitectureRules) -> Self {
        let mut namespaces: HashMap<String, Vec<Arc<CompiledConfig>>> = HashMap::new();
        let ruled: HashSet<&str> = configs
            .iter()
            .filter(|c| {
                c.spec
                    .plugins
                    .enabled_cel_architecture_placement()
                    .is_some()
            })
            .filter_map(|c| c.metadata.namespace.as_deref())
            .collect();
        for config in configs {
            let Some(namespace) = config.metadata.namespace.as_deref() else {
                continue;
            };
            if !ruled.contains(namespace) {
                continue;
            }
            let name = config.metadata.name.clone().unwrap_or_default();
            let reused = previous.namespaces.get(namespace).and_then(|known| {
                known
                    .iter()
                    .find(|k| {
                        k.name == name
                            && k.uid == config.metadata.uid
                            && k.config.spec == config.spec
                    })
                    .cloned()
            });
            let compiled = reused.unwrap_or_else(|| Arc::new(CompiledConfig::new(config)));
            namespaces
                .entry(namespace.to_owned())
                .or_default()
                .push(compiled);
        }
        for configs in namespaces.values_mut() {
            // Highest priority first; equal priorities by name, so every component picks
            // the same winner.
            configs.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.name.cmp(&b.name)));
        }
        ArchitectureRules { namespaces }
    }

    /// Replaces one namespace's configs with `configs` (that namespace's, as read now),
    /// reusing the programs of unchanged specs; returns the rules of that namespace alone.
    /// For a component that reads configs per namespace (the gate controller) and keeps
    /// this as its cache: a namespace whose configs no longer enable rules leaves it.
    pub fn refresh_namespace(
        &mut self,
        namespace: &str,
        configs: &[PodPlacementConfig],
    ) -> ArchitectureRules {
        let own: Vec<PodPlacementConfig> = configs
            .iter()
            .filter(|c| c.metadata.namespace.as_deref() == Some(namespace))
            .cloned()
            .collect();
        let fresh = ArchitectureRules::compile(&own, self);
        match fresh.namespaces.get(namespace) {
            Some(compiled) => {
                self.namespaces
                    .insert(namespace.to_owned(), compiled.clone());
            }
            None => {
                self.namespaces.remove(namespace);
            }
        }
        fresh
    }

    /// Rules of no config, for inputs that have none.
    pub fn none() -> &'static ArchitectureRules {
        static NONE: std::sync::LazyLock<ArchitectureRules> =
            std::sync::LazyLock::new(ArchitectureRules::default);
        &NONE
    }

    /// No config anywhere enables the plugin.
    pub fn is_empty(&self) -> bool {
        self.namespaces.is_empty()
    }

    /// Whether some config of this namespace enables the plugin (so a pod of it may be
    /// decided by rules).
    pub fn governs_namespace(&self, namespace: &str) -> bool {
        self.namespaces.contains_key(namespace)
    }

    /// The decision for a pod: `None` when the winning config does not enable the plugin
    /// (or no config selects the pod), and the pod is placed by its images.
    pub fn decide(&self, pod: RuleSubject<'_>) -> Option<ArchitectureDecision> {
        let configs = self.namespaces.get(pod.namespace)?;
        let winner = configs.iter().find(|c| {
            c.selector
                .as_ref()
                .is_none_or(|selector| selector.matches(pod.labels))
        })?;
        winner.placement.as_ref()?.decide(&winner.name, pod)
    }
}

impl CompiledConfig {
    fn new(config: &PodPlacementConfig) -> Self {
        CompiledConfig {
            uid: config.metadata.uid.clone(),
            name: config.metadata.name.clone().unwrap_or_default(),
            priority: config.spec.priority,
            selector: config.spec.label_selector.as_ref().map(LabelSelector::from),
            config: config.clone(),
            placement: config
                .spec
                .plugins
                .enabled_cel_architecture_placement()
                .map(CompiledPlacement::new),
        }
    }
}

impl CompiledPlacement {
    fn new(placement: &CelArchitecturePlacement) -> Self {
        // The operator's webhook checks rules when they are written; they are checked
        // again here, so that a config stored without it (the operator not running)
        // cannot make evaluation unbounded: a rule that fails, or that the config's cost
        // budget has no room left for, never matches.
        let mut budget = CONFIG_COST_LIMIT;
        let rules: Vec<CompiledRule> = placement
            .rules
            .iter()
            .map(|rule| {
                let program = check_rule(&rule.expression).and_then(|checked| {
                    budget = budget.checked_sub(checked.cost).ok_or_else(|| {
                        format!("over the config's cost budget of {CONFIG_COST_LIMIT}")
                    })?;
                    Program::compile(&rule.expression).map_err(|e| e.to_string())
                });
                CompiledRule {
                    name: rule.name.clone(),
                    architectures: rule.architecture_names(),
                    program,
                }
            })
            .collect();
        let reads = rules
            .iter()
            .try_fold(MetadataReads::default(), |mut all, rule| {
                if let Ok(program) = &rule.program {
                    all.merge(metadata_reads(program.expression()).ok()?);
                }
                Some(all)
            });
        CompiledPlacement {
            fallback: placement.fallback_names(),
            rules,
            reads,
            decisions: Mutex::new(LruCache::new(
                NonZeroUsize::new(CACHED_DECISIONS).unwrap_or(NonZeroUsize::MIN),
            )),
        }
    }

    /// The decision for the pod, from the cache when the fields the rules read are
    /// those of a pod decided before.
    fn decide(&self, config: &str, pod: RuleSubject<'_>) -> Option<ArchitectureDecision> {
        let key = self
            .reads
            .as_ref()
            .and_then(|reads| SubjectKey::of(pod, reads));
        if let Some(key) = &key
            && let Some(known) = self.cache().get(key)
        {
            return Some(known.clone());
        }
        let decision = self.evaluate(config, pod)?;
        if let Some(key) = key {
            self.cache().put(key, decision.clone());
        }
        Some(decision)
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, LruCache<SubjectKey, ArchitectureDecision>> {
        self.decisions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn evaluate(&self, config: &str, pod: RuleSubject<'_>) -> Option<ArchitectureDecision> {
        let mut errors = Vec::new();
        let matched = FUNCTIONS.with(|functions| {
            let mut scope = functions.new_inner_scope();
            scope.add_variable_from_value("self", subject_value(pod));
            self.rules.iter().find(|rule| {
                let program = match &rule.program {
                    Ok(program) => program,
                    Err(e) => {
                        errors.push((rule.name.clone(), e.clone()));
                        return false;
                    }
                };
                match program.execute(&scope) {
                    Ok(Value::Bool(matched)) => matched,
                    Ok(other) => {
                        errors.push((rule.name.clone(), format!("returned {other:?}, not a bool")));
                        false
                    }
                    Err(e) => {
                        errors.push((rule.name.clone(), e.to_string()));
                        false
                    }
                }
            })
        });
        Some(match matched {
            Some(rule) => ArchitectureDecision {
                config: config.to_owned(),
                rule: Some(rule.name.clone()),
                architectures: rule.architectures.clone(),
                errors,
            },
            None => ArchitectureDecision {
                config: config.to_owned(),
                rule: None,
                architectures: self.fallback.clone(),
                errors,
            },
        })
    }
}

thread_local! {
    /// CEL's standard functions and the Kubernetes library, registered once per thread
    /// (registering them costs more than evaluating a rule).
    static FUNCTIONS: Context<'static> = Context::default().with_all();
}

/// `self` for the rules: exactly the four fields the rule checker lets them read.
fn subject_value(pod: RuleSubject<'_>) -> Value {
    let map = |labels: &Labels| {
        Value::from(
            labels
                .iter()
                .map(|(k, v)| (k.clone(), Value::from(v.clone())))
                .collect::<HashMap<String, Value>>(),
        )
    };
    let metadata: HashMap<String, Value> = [
        ("name".to_owned(), Value::from(pod.name.to_owned())),
        (
            "namespace".to_owned(),
            Value::from(pod.namespace.to_owned()),
        ),
        ("labels".to_owned(), map(pod.labels)),
        ("annotations".to_owned(), map(pod.annotations)),
    ]
    .into();
    Value::from(HashMap::from([(
        "metadata".to_owned(),
        Value::from(metadata),
    )]))
}

#[cfg(test)]
#[path = "architecture_rules_tests.rs"]
mod tests;
