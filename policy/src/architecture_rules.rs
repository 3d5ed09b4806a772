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
    cell::RefCell,
    collections::HashMap,
    num::NonZeroUsize,
    sync::{Arc, Mutex},
};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_cel::{
    KubeCelExt,
    cel::{Context, ExecutionError, FunctionContext, Program, Value, extractors::This},
};
use lru::LruCache;
use multiarch_crd::{
    CelArchitecturePlacement, PodPlacementConfig,
    cel::{
        patterns::CompiledPatterns,
        pod_rule::{CONFIG_COST_LIMIT, MapReads, MetadataReads, check_and_compile, metadata_reads},
    },
    cel_architecture_placement::{CLUSTER_RULE_BUDGET, NAMESPACE_RULE_BUDGET, RuleUsage},
};

use crate::{
    platform::{Platform, describe},
    pod_configs::NamespacedConfigs,
    selectors::{LabelSelector, Labels},
};

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
    name: String,
    selector: Option<LabelSelector>,
    /// The watch's own copy: an unchanged config is recognised without comparing specs.
    config: Arc<PodPlacementConfig>,
    /// `None`: the config does not enable the plugin.
    placement: Option<CompiledPlacement>,
}

struct CompiledPlacement {
    fallback: Vec<String>,
    rules: Vec<CompiledRule>,
    /// Every `matches()` pattern of the rules, compiled once (see `multiarch_crd::cel::patterns`).
    patterns: Arc<CompiledPatterns>,
    /// The rules were compiled (not left out of a spent budget): reusable while the
    /// config is unchanged.
    compiled: bool,
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
    /// configs; one stored without it never matches, the reason reported per pod), or
    /// its config is beyond the rule budget.
    program: Result<Program, String>,
}

/// What is left of the namespace's and the cluster's rule budgets while configs are
/// compiled.
struct Budgets {
    namespace: RuleUsage,
    cluster: RuleUsage,
}

impl Budgets {
    /// Takes `usage` from both, or says which is spent.
    fn take(&mut self, usage: RuleUsage, namespace: &str) -> Result<(), String> {
        let (in_namespace, in_cluster) = (self.namespace.plus(usage), self.cluster.plus(usage));
        if !in_namespace.within(NAMESPACE_RULE_BUDGET) {
            return Err(format!(
                "not compiled: namespace {namespace}'s configs hold more than the {} a namespace may have",
                NAMESPACE_RULE_BUDGET.describe()
            ));
        }
        if !in_cluster.within(CLUSTER_RULE_BUDGET) {
            return Err(format!(
                "not compiled: the cluster's configs hold more than the {} the cluster may have",
                CLUSTER_RULE_BUDGET.describe()
            ));
        }
        (self.namespace, self.cluster) = (in_namespace, in_cluster);
        Ok(())
    }
}

impl ArchitectureRules {
    /// Compiles the configs' rules, reusing `previous`'s programs for every config that
    /// is unchanged. Configs are compiled namespace by namespace (by name), each
    /// namespace's in the order they win, within [`NAMESPACE_RULE_BUDGET`] and
    /// [`CLUSTER_RULE_BUDGET`]: a config whose rules would go beyond either is kept
    /// uncompiled, its rules never matching (the reason reported with each decision), so
    /// configs stored past the operator's checks cannot take a component's memory.
    pub fn compile(configs: &NamespacedConfigs, previous: &ArchitectureRules) -> Self {
        let mut ruled: Vec<(&str, &[Arc<PodPlacementConfig>])> = configs
            .namespaces()
            .filter(|(_, configs)| {
                configs.iter().any(|c| {
                    c.spec
                        .plugins
                        .enabled_cel_architecture_placement()
                        .is_some()
                })
            })
            .collect();
        ruled.sort_by_key(|(namespace, _)| *namespace);
        let mut namespaces = HashMap::new();
        let mut cluster = RuleUsage::default();
        for (namespace, configs) in ruled {
            let mut ordered: Vec<&Arc<PodPlacementConfig>> = configs.iter().collect();
            // Highest priority first; equal priorities by name, so every component picks
            // the same winner.
            ordered.sort_by(|a, b| {
                b.spec
                    .priority
                    .cmp(&a.spec.priority)
                    .then_with(|| a.metadata.name.cmp(&b.metadata.name))
            });
            let known = previous.namespaces.get(namespace);
            let mut budgets = Budgets {
                namespace: RuleUsage::default(),
                cluster,
            };
            let compiled: Vec<Arc<CompiledConfig>> = ordered
                .into_iter()
                .map(|config| {
                    let placement = config.spec.plugins.enabled_cel_architecture_placement();
                    let room = budgets.take(RuleUsage::of(placement), namespace);
                    let reused = known.and_then(|known| {
                        known
                            .iter()
                            .find(|k| unchanged(&k.config, config))
                            .filter(|k| {
                                let was_compiled = k.placement.as_ref().is_none_or(|p| p.compiled);
                                was_compiled == room.is_ok()
                            })
                            .cloned()
                    });
                    reused.unwrap_or_else(|| Arc::new(CompiledConfig::new(config, room)))
                })
                .collect();
            cluster = budgets.cluster;
            namespaces.insert(namespace.to_owned(), compiled);
        }
        ArchitectureRules { namespaces }
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

/// The same config as compiled before: the watch's same copy, or the same object at the
/// same generation (a spec change bumps it), or failing both an equal spec.
fn unchanged(known: &Arc<PodPlacementConfig>, config: &Arc<PodPlacementConfig>) -> bool {
    if Arc::ptr_eq(known, config) {
        return true;
    }
    let (a, b) = (&known.metadata, &config.metadata);
    if a.name != b.name || a.uid != b.uid {
        return false;
    }
    (a.generation.is_some() && a.generation == b.generation) || known.spec == config.spec
}

impl CompiledConfig {
    /// The config compiled, or with `Err(why)` its rules left uncompiled.
    fn new(config: &Arc<PodPlacementConfig>, room: Result<(), String>) -> Self {
        CompiledConfig {
            name: config.metadata.name.clone().unwrap_or_default(),
            selector: config.spec.label_selector.as_ref().map(LabelSelector::from),
            config: config.clone(),
            placement: config
                .spec
                .plugins
                .enabled_cel_architecture_placement()
                .map(|placement| match room {
                    Ok(()) => CompiledPlacement::new(placement),
                    Err(why) => CompiledPlacement::uncompiled(placement, &why),
                }),
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
        let mut patterns = CompiledPatterns::new();
        let rules: Vec<CompiledRule> = placement
            .rules
            .iter()
            .map(|rule| {
                let program = check_and_compile(&rule.expression).and_then(|(checked, own)| {
                    budget = budget.checked_sub(checked.cost).ok_or_else(|| {
                        format!("over the config's cost budget of {CONFIG_COST_LIMIT}")
                    })?;
                    patterns.extend(own);
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
            patterns: Arc::new(patterns),
            compiled: true,
            reads,
            decisions: Mutex::new(LruCache::new(
                NonZeroUsize::new(CACHED_DECISIONS).unwrap_or(NonZeroUsize::MIN),
            )),
        }
    }

    /// Rules left uncompiled, each failing with `why`: the fallback decides every pod.
    fn uncompiled(placement: &CelArchitecturePlacement, why: &str) -> Self {
        CompiledPlacement {
            fallback: placement.fallback_names(),
            rules: placement
                .rules
                .iter()
                .map(|rule| CompiledRule {
                    name: rule.name.clone(),
                    architectures: rule.architecture_names(),
                    program: Err(why.to_owned()),
                })
                .collect(),
            patterns: Arc::default(),
            compiled: false,
            reads: Some(MetadataReads::default()),
            decisions: Mutex::new(LruCache::new(NonZeroUsize::MIN)),
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
        let _patterns = PatternsInUse::set(&self.patterns);
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
    /// (registering them costs more than evaluating a rule), `matches()` replaced by one
    /// that uses the patterns compiled with the rules.
    static FUNCTIONS: Context<'static> = {
        let mut functions = Context::default().with_all();
        functions.add_function("matches", matches_compiled);
        functions
    };
    /// The patterns of the rules being evaluated on this thread.
    static PATTERNS: RefCell<Option<Arc<CompiledPatterns>>> = const { RefCell::new(None) };
}

/// The patterns of a placement, in use on this thread while it lives.
struct PatternsInUse;

impl PatternsInUse {
    fn set(patterns: &Arc<CompiledPatterns>) -> Self {
        PATTERNS.with(|p| *p.borrow_mut() = Some(patterns.clone()));
        PatternsInUse
    }
}

impl Drop for PatternsInUse {
    fn drop(&mut self) {
        PATTERNS.with(|p| *p.borrow_mut() = None);
    }
}

/// `s.matches(pattern)` with the pattern compiled when the rule was: a pattern that was
/// not (it cannot be, the rules' checks require constants) is an error, never compiled
/// here.
fn matches_compiled(
    ftx: &FunctionContext,
    This(this): This<Arc<String>>,
    pattern: Arc<String>,
) -> Result<bool, ExecutionError> {
    PATTERNS.with(|patterns| {
        match patterns
            .borrow()
            .as_ref()
            .and_then(|p| p.get(pattern.as_str()))
        {
            Some(compiled) => Ok(compiled.is_match(&this)),
            None => Err(ftx.error(format!(
                "the pattern {pattern:?} was not compiled with the rules"
            ))),
        }
    })
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
