//! Which free Hardware a machine gets: pure functions over labels, so the policy is tested
//! without a cluster.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::HARDWARE_CLAIM_LABEL;
use super::v1beta1::HardwareAffinity;

/// Whether `labels` satisfy `selector` (Kubernetes semantics: every `matchLabels` pair and
/// every expression must hold; an empty selector matches everything). An unknown operator
/// matches nothing, so a typo never widens a selection.
pub fn matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let pairs = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let exprs = selector.match_expressions.iter().flatten().all(|e| {
        let value = labels.get(&e.key);
        let values = e.values.as_deref().unwrap_or_default();
        match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    });
    pairs && exprs
}

/// A Hardware as the selection sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate<'a> {
    /// The Hardware's name.
    pub name: &'a str,
    /// Its labels.
    pub labels: &'a BTreeMap<String, String>,
}

/// The failure domain a machine must be placed in: Hardware whose `label` is `value`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailureDomainFilter<'a> {
    /// The label key.
    pub label: &'a str,
    /// The value required.
    pub value: &'a str,
}

/// Whether the Hardware is claimed by no machine.
pub fn is_free(labels: &BTreeMap<String, String>) -> bool {
    labels
        .get(HARDWARE_CLAIM_LABEL)
        .is_none_or(|v| v.is_empty())
}

/// The free Hardware the machine may get, best first: eligible when free, in the failure
/// domain (if any) and matching one of the required terms (any when there are none); ordered
/// by the sum of the weights of the preferred terms they match, then by name.
pub fn rank<'a>(
    hardware: &[Candidate<'a>],
    affinity: Option<&HardwareAffinity>,
    domain: Option<&FailureDomainFilter<'_>>,
) -> Vec<&'a str> {
    let mut scored: Vec<(i64, &'a str)> = hardware
        .iter()
        .filter(|h| is_free(h.labels))
        .filter(|h| {
            domain.is_none_or(|d| h.labels.get(d.label).map(String::as_str) == Some(d.value))
        })
        .filter(|h| {
            affinity
                .map(|a| a.required.as_slice())
                .filter(|r| !r.is_empty())
                .is_none_or(|terms| terms.iter().any(|t| matches(&t.label_selector, h.labels)))
        })
        .map(|h| {
            let score = affinity
                .map(|a| {
                    a.preferred
                        .iter()
                        .filter(|p| matches(&p.hardware_affinity_term.label_selector, h.labels))
                        .map(|p| i64::from(p.weight.clamp(1, 100)))
                        .sum()
                })
                .unwrap_or(0);
            (score, h.name)
        })
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
    scored.into_iter().map(|(_, n)| n).collect()
}

/// The distinct values of `label` over the Hardware, sorted: the failure domains.
pub fn failure_domains<'a>(
    labels: impl IntoIterator<Item = &'a BTreeMap<String, String>>,
    label: &str,
) -> Vec<String> {
    let mut v: Vec<String> = labels
        .into_iter()
        .filter_map(|l| l.get(label))
        .filter(|v| !v.is_empty())
        .cloned()
        .collect();
    v.sort();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    use super::super::v1beta1::{HardwareAffinityTerm, WeightedHardwareAffinityTerm};
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn sel(pairs: &[(&str, &str)]) -> LabelSelector {
        LabelSelector {
            match_labels: Some(labels(pairs)),
            match_expressions: None,
        }
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelector {
        LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: key.into(),
                operator: op.into(),
                values: Some(values.iter().map(|s| s.to_string()).collect()),
            }]),
        }
    }

    #[test]
    fn selectors_follow_kubernetes_semantics() {
        let l = labels(&[("role", "cp"), ("rack", "a")]);
        let cases = [
            (LabelSelector::default(), true),
            (sel(&[("role", "cp")]), true),
            (sel(&[("role", "cp"), ("rack", "b")]), false),
            (expr("rack", "In", &["a", "b"]), true),
            (expr("rack", "In", &["b"]), false),
            (expr("rack", "NotIn", &["b"]), true),
            (expr("zone", "NotIn", &["b"]), true),
            (expr("rack", "NotIn", &["a"]), false),
            (expr("rack", "Exists", &[]), true),
            (expr("zone", "Exists", &[]), false),
            (expr("zone", "DoesNotExist", &[]), true),
            (expr("rack", "DoesNotExist", &[]), false),
            (expr("rack", "Gt", &["1"]), false),
        ];
        for (i, (s, want)) in cases.iter().enumerate() {
            assert_eq!(matches(s, &l), *want, "case {i}: {s:?}");
        }
    }

    #[test]
    fn ranking_filters_claimed_required_and_domain_then_orders_by_weight_and_name() {
        let hw = [
            ("a", labels(&[("role", "worker"), ("zone", "z1")])),
            (
                "b",
                labels(&[("role", "cp"), ("zone", "z1"), ("disk", "ssd")]),
            ),
            ("c", labels(&[("role", "cp"), ("zone", "z2")])),
            (
                "d",
                labels(&[
                    ("role", "cp"),
                    ("zone", "z1"),
                    (HARDWARE_CLAIM_LABEL, "uid"),
                ]),
            ),
            ("e", labels(&[("role", "gpu"), ("zone", "z1")])),
        ];
        let cands: Vec<Candidate> = hw
            .iter()
            .map(|(n, l)| Candidate { name: n, labels: l })
            .collect();
        // No affinity, no domain: every free one, by name.
        assert_eq!(rank(&cands, None, None), ["a", "b", "c", "e"]);
        let aff = HardwareAffinity {
            required: vec![
                HardwareAffinityTerm {
                    label_selector: sel(&[("role", "cp")]),
                },
                HardwareAffinityTerm {
                    label_selector: sel(&[("role", "gpu")]),
                },
            ],
            preferred: vec![
                WeightedHardwareAffinityTerm {
                    weight: 10,
                    hardware_affinity_term: HardwareAffinityTerm {
                        label_selector: sel(&[("disk", "ssd")]),
                    },
                },
                WeightedHardwareAffinityTerm {
                    weight: 50,
                    hardware_affinity_term: HardwareAffinityTerm {
                        label_selector: sel(&[("role", "gpu")]),
                    },
                },
            ],
        };
        // Required terms are OR'ed; the heavier preference wins.
        assert_eq!(rank(&cands, Some(&aff), None), ["e", "b", "c"]);
        let z1 = FailureDomainFilter {
            label: "zone",
            value: "z1",
        };
        assert_eq!(rank(&cands, Some(&aff), Some(&z1)), ["e", "b"]);
        let z3 = FailureDomainFilter {
            label: "zone",
            value: "z3",
        };
        assert!(rank(&cands, Some(&aff), Some(&z3)).is_empty());
    }

    #[test]
    fn failure_domains_are_the_distinct_values() {
        let ls = [
            labels(&[("zone", "b")]),
            labels(&[("zone", "a")]),
            labels(&[("zone", "b")]),
            labels(&[]),
        ];
        assert_eq!(failure_domains(ls.iter(), "zone"), ["a", "b"]);
    }
}
