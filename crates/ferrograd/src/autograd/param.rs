//! Trainable parameters: leaves with a stable identity whose value optimizers replace.

use std::sync::{Arc, RwLock};

use super::node::Node;
use crate::tensor::Tensor;

/// A tracked leaf whose value can be replaced while its identity (what `Gradients` is keyed
/// by) stays. Clones share the same parameter.
#[derive(Clone)]
pub struct Param {
    node: Arc<Node>,
    value: Arc<RwLock<Tensor>>,
}

impl Param {
    pub fn new(value: Tensor) -> Param {
        let node = Arc::new(Node::leaf());
        let value = Tensor::from_parts(
            value.storage().clone(),
            value.layout().clone(),
            Some(node.clone()),
        );
        Param {
            node,
            value: Arc::new(RwLock::new(value)),
        }
    }

    pub(crate) fn id(&self) -> u64 {
        self.node.id
    }

    /// The current value, tracked as this parameter's leaf.
    pub fn tensor(&self) -> Tensor {
        self.value.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replaces the value (same shape and dtype), keeping the identity.
    pub fn set(&self, value: &Tensor) {
        let mut slot = self.value.write().unwrap_or_else(|e| e.into_inner());
        assert!(
            value.shape() == slot.shape() && value.dtype() == slot.dtype(),
            "Param::set: new value {:?} ({}) differs from the parameter's {:?} ({})",
            value.shape(),
            value.dtype(),
            slot.shape(),
            slot.dtype()
        );
        *slot = Tensor::from_parts(
            value.storage().clone(),
            value.layout().clone(),
            Some(self.node.clone()),
        );
    }

    pub fn shape(&self) -> Vec<usize> {
        self.tensor().shape().to_vec()
    }
}
