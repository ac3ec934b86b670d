//! The order in which named things that depend on each other start (a task's services): each
//! after everything it depends on, otherwise in the order given. Loading a task checks it and
//! the sandbox follows it, so neither needs the other.

use std::collections::{HashMap, HashSet};

/// Why no order exists.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OrderError {
    #[error("`{0}` is declared twice")]
    Duplicate(String),
    #[error("`{name}` depends on `{missing}`, which is not declared")]
    UnknownDependency { name: String, missing: String },
    #[error("they depend on each other in a cycle: {0}")]
    Cycle(String),
}

/// Indexes into `nodes` (name, what it depends on) in an order that starts every node after its
/// dependencies, otherwise keeping the given order.
pub fn dependency_order<S: AsRef<str>>(nodes: &[(&str, &[S])]) -> Result<Vec<usize>, OrderError> {
    let mut index = HashMap::new();
    for (i, (name, _)) in nodes.iter().enumerate() {
        if index.insert(*name, i).is_some() {
            return Err(OrderError::Duplicate(name.to_string()));
        }
    }
    for (name, deps) in nodes {
        if let Some(missing) = deps.iter().find(|d| !index.contains_key(d.as_ref())) {
            return Err(OrderError::UnknownDependency {
                name: name.to_string(),
                missing: missing.as_ref().into(),
            });
        }
    }
    let mut order = Vec::new();
    let mut placed = HashSet::new();
    while order.len() < nodes.len() {
        let next = (0..nodes.len())
            .find(|i| !placed.contains(i) && nodes[*i].1.iter().all(|d| placed.contains(&index[d.as_ref()])));
        match next {
            Some(i) => {
                placed.insert(i);
                order.push(i);
            }
            None => {
                let stuck: Vec<&str> =
                    (0..nodes.len()).filter(|i| !placed.contains(i)).map(|i| nodes[i].0).collect();
                return Err(OrderError::Cycle(stuck.join(", ")));
            }
        }
    }
    Ok(order)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dependencies_come_first() {
        let nodes: [(&str, &[&str]); 3] = [("web", &["db", "cache"]), ("db", &[]), ("cache", &["db"])];
        let order: Vec<&str> = dependency_order(&nodes).unwrap().iter().map(|&i| nodes[i].0).collect();
        assert_eq!(order, ["db", "cache", "web"]);
    }

    #[test]
    fn cycles_unknown_and_duplicate_names_are_errors() {
        let cycle: [(&str, &[&str]); 2] = [("a", &["b"]), ("b", &["a"])];
        assert_eq!(dependency_order(&cycle), Err(OrderError::Cycle("a, b".into())));
        let unknown: [(&str, &[&str]); 1] = [("a", &["nope"])];
        assert!(matches!(dependency_order(&unknown), Err(OrderError::UnknownDependency { .. })));
        let twice: [(&str, &[&str]); 2] = [("a", &[]), ("a", &[])];
        assert_eq!(dependency_order(&twice), Err(OrderError::Duplicate("a".into())));
    }
}
