//! Checkpoints of a [`Model`]: parameters and buffers (`model.{name}`), optimizer state
//! (`optim.{param}.{slot}`), the random streams (`rng.{name}` metadata) and the epoch, the
//! optimizer's step count and learning rate, in one safetensors file written atomically.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::tensors::{load_tensors, save_tensors};
use crate::autograd::Param;
use crate::error::{Error, Result};
use crate::model::{Model, Net};
use crate::nn::{Module, RngStream, StreamState};
use crate::tensor::Tensor;

const FORMAT: &str = "ferrograd-checkpoint-2";
/// Checkpoints of the first format named Dense's parameters `w` (`[in, out]`) and `b`, and the
/// norms' `gamma` and `beta`; they are refused with that explanation.
const FORMAT_1: &str = "ferrograd-checkpoint-1";

/// A loaded checkpoint.
pub struct Checkpoint {
    /// The file it was read from.
    pub path: PathBuf,
    /// Epochs completed when it was saved.
    pub epoch: u64,
    /// Every tensor in the file by name: `model.{name}` for the network, `optim.{param}.{slot}`
    /// for the optimizer.
    pub tensors: HashMap<String, Tensor>,
    /// The file's metadata: `format`, `epoch`, `optimizer_steps`, `lr` and the `rng.{name}`
    /// streams.
    pub metadata: HashMap<String, String>,
}

/// Saves the model's parameters, buffers and optimizer state after `epoch` epochs.
pub fn save_checkpoint(path: &Path, model: &Model, epoch: u64) -> Result<()> {
    let mut tensors: Vec<(String, Tensor)> = model
        .net()
        .state()
        .into_iter()
        .map(|(n, t)| (format!("model.{n}"), t))
        .collect();
    let (steps, state) = model.optimizer().state(&optim_names(model))?;
    tensors.extend(state);
    let metadata = HashMap::from([
        ("format".to_string(), FORMAT.to_string()),
        ("epoch".to_string(), epoch.to_string()),
        ("optimizer_steps".to_string(), steps.to_string()),
        ("lr".to_string(), format!("{:e}", model.optimizer().lr())),
    ]);
    let mut metadata = metadata;
    for (name, stream) in model.net().rng_streams() {
        metadata.insert(format!("rng.{name}"), stream.state().to_string());
    }
    save_tensors(path, &tensors, metadata)
}

/// The model's parameters named as their optimizer state is stored: `optim.{name}`.
fn optim_names(model: &Model) -> Vec<(String, Param)> {
    model
        .net()
        .params()
        .into_iter()
        .map(|(n, p)| (format!("optim.{n}"), p))
        .collect()
}

/// Reads a checkpoint written by [`save_checkpoint`].
pub fn load_checkpoint(path: &Path) -> Result<Checkpoint> {
    let (tensors, metadata) = load_tensors(path)?;
    if metadata.get("format").map(String::as_str) == Some(FORMAT_1) {
        return Err(Error::format(
            path,
            "a checkpoint of the first format, from before parameters took PyTorch's names and \
             layouts (Dense `w` [in, out] is now `weight` [out, in], `b` is `bias`, the norms' \
             `gamma`/`beta` are `weight`/`bias`); it cannot be read by this version",
        ));
    }
    if metadata.get("format").map(String::as_str) != Some(FORMAT) {
        return Err(Error::format(
            path,
            format!(
                "not a ferrograd checkpoint (format {:?})",
                metadata.get("format")
            ),
        ));
    }
    let number = |key: &str| -> Result<u64> {
        metadata
            .get(key)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| Error::format(path, format!("metadata {key:?} missing or not a number")))
    };
    let epoch = number("epoch")?;
    number("optimizer_steps")?;
    Ok(Checkpoint {
        path: path.to_path_buf(),
        epoch,
        tensors,
        metadata,
    })
}

impl Checkpoint {
    /// Sets the model's parameters, buffers and optimizer state. Every mismatch of names,
    /// shapes or dtypes is listed in the error, and then nothing is changed.
    pub fn restore(&self, model: &mut Model) -> Result<()> {
        let with_prefix = |prefix: &str| -> Vec<(String, Tensor)> {
            let mut v: Vec<(String, Tensor)> = self
                .tensors
                .iter()
                .filter_map(|(k, t)| k.strip_prefix(prefix).map(|n| (n.to_string(), t.clone())))
                .collect();
            v.sort_by(|a, b| a.0.cmp(&b.0));
            v
        };
        let net_state: HashMap<String, Tensor> = with_prefix("model.").into_iter().collect();
        let mut optim_state: Vec<(String, Tensor)> = self
            .tensors
            .iter()
            .filter(|(k, _)| k.starts_with("optim."))
            .map(|(k, t)| (k.clone(), t.clone()))
            .collect();
        optim_state.sort_by(|a, b| a.0.cmp(&b.0));
        let params = optim_names(model);
        // Every part is checked before anything changes, and every problem is reported.
        let mut problems = Vec::new();
        if let Err(e) = model.net().check_state(&net_state) {
            problems.push(e.to_string());
        }
        let streams = self.rng_states(model.net()).unwrap_or_else(|e| {
            problems.push(e);
            Vec::new()
        });
        if let Err(e) = model.optimizer().check_state(&params, &optim_state) {
            problems.push(e.to_string());
        }
        let lr = self.metadata.get("lr").and_then(|v| v.parse::<f64>().ok());
        let lr = lr
            .filter(|lr| lr.is_finite() && *lr >= 0.0)
            .unwrap_or_else(|| {
                problems.push(format!(
                    "metadata \"lr\" {:?} is not a learning rate",
                    self.metadata.get("lr")
                ));
                0.0
            });
        if !problems.is_empty() {
            return Err(Error::format(&self.path, problems.join("; ")));
        }
        let steps: u64 = self.metadata["optimizer_steps"]
            .parse()
            .expect("checked at load");
        let fail = |e: Error| Error::format(&self.path, e.to_string());
        let optimizer = model.optimizer_mut();
        optimizer
            .load_state(&params, steps, optim_state)
            .map_err(fail)?;
        optimizer.set_lr(lr);
        model.net().load_state(&net_state).map_err(fail)?;
        for (stream, state) in streams {
            stream.set_state(state);
        }
        Ok(())
    }

    /// The saved position of every random stream of `net` (metadata `rng.{name}`), checked
    /// against the network's streams: each one present and well-formed, none extra.
    fn rng_states(&self, net: &Net) -> std::result::Result<Vec<(RngStream, StreamState)>, String> {
        let streams = net.rng_streams();
        let mut problems = Vec::new();
        let mut out = Vec::new();
        for (name, stream) in &streams {
            match self.metadata.get(&format!("rng.{name}")).map(|v| v.parse()) {
                None => problems.push(format!("rng.{name}: missing")),
                Some(Err(e)) => problems.push(format!("rng.{name}: {e}")),
                Some(Ok(state)) => out.push((stream.clone(), state)),
            }
        }
        let mut extra: Vec<&String> = self
            .metadata
            .keys()
            .filter(|k| {
                k.strip_prefix("rng.")
                    .is_some_and(|n| !streams.iter().any(|(s, _)| s == n))
            })
            .collect();
        extra.sort();
        problems.extend(
            extra
                .into_iter()
                .map(|k| format!("{k}: not a random stream of this network")),
        );
        if problems.is_empty() {
            Ok(out)
        } else {
            Err(format!(
                "random streams do not fit the network: {}",
                problems.join("; ")
            ))
        }
    }
}
