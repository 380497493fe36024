//! Modules: anything that holds parameters (a layer, a `Net`, a user's struct of layers, with
//! `#[derive(Module)]`). Parameter and buffer names are nested paths, the keys PyTorch's
//! `state_dict` gives the same structure (`"encoder.0.weight"`), so weights move between the
//! two unchanged.

use std::collections::HashMap;
use std::path::Path;

use super::RngStream;
use crate::autograd::{no_grad, Param};
use crate::error::{Error, Result};
use crate::io::tensors::{load_file_tensors, save_tensors, whole_numbers, FileTensor};
use crate::tensor::{DType, Tensor};

/// A holder of parameters, buffers and random streams, each named by its path.
///
/// Leaf layers list their own (`"weight"`, `"bias"`); containers prefix their children's
/// names with the child's field name or index. Everything else (saving, loading, copying,
/// freezing) is provided on top of these three lists.
pub trait Module: Send + Sync {
    /// Trainable parameters by name; optimizers update them in place.
    fn params(&self) -> Vec<(String, Param)> {
        Vec::new()
    }

    /// State that is saved but not trained (BatchNorm's running statistics).
    fn buffers(&self) -> Vec<(String, Param)> {
        Vec::new()
    }

    /// Random streams drawn from in training (Dropout's masks), so that a checkpoint resumes
    /// them exactly.
    fn rng_streams(&self) -> Vec<(String, RngStream)> {
        Vec::new()
    }

    /// A short name for messages and summaries (the type's name unless overridden).
    fn name(&self) -> String {
        short_type_name(std::any::type_name::<Self>())
    }

    /// Makes `to` this layer's own parameter `name`, shared from then on with whoever else
    /// holds it: tied weights, PyTorch's `head.weight = tok.weight`. `to` must have the number
    /// of axes and the dtype of the parameter it replaces; other sizes are taken where the
    /// layer's parameters still fit together. The layers that hold their parameters
    /// directly (`Dense`, `Embedding`) allow it; for the others, and for a name the layer
    /// does not own, an error says so.
    fn tie(&mut self, name: &str, to: &Param) -> Result<()> {
        let _ = to;
        Err(Error::Shape(format!(
            "{}: cannot tie {name:?} to another parameter (Dense and Embedding can tie theirs)",
            self.name()
        )))
    }

    /// Parameters and buffers: everything `state` saves, in PyTorch's `state_dict` order
    /// (containers list each child's parameters and buffers together).
    fn state_params(&self) -> Vec<(String, Param)> {
        let mut all = self.params();
        all.extend(self.buffers());
        all
    }

    /// Every parameter and buffer value by name (PyTorch's `state_dict`).
    fn state(&self) -> Vec<(String, Tensor)> {
        self.state_params()
            .into_iter()
            .map(|(n, p)| (n, p.tensor().detach()))
            .collect()
    }

    /// Whether `state` fits (every name present, same shapes and dtypes, nothing extra); the
    /// error lists every mismatch.
    fn check_state(&self, state: &HashMap<String, Tensor>) -> Result<()> {
        compare_state(self, state).to_result(true)
    }

    /// Sets every parameter and buffer from `state`, after checking it all with
    /// [`Module::check_state`]; nothing changes on error.
    fn load_state(&self, state: &HashMap<String, Tensor>) -> Result<()> {
        let report = compare_state(self, state);
        report.to_result(true)?;
        report.apply();
        Ok(())
    }

    /// As [`Module::load_state`], but missing and unexpected keys are skipped and returned
    /// (PyTorch's `strict=False`); shape and dtype mismatches are still errors, and then
    /// nothing changes.
    fn load_state_partial(&self, state: &HashMap<String, Tensor>) -> Result<LoadReport> {
        let report = compare_state(self, state);
        report.to_result(false)?;
        Ok(report.apply())
    }

    /// Loads a safetensors file of this structure's names and shapes, such as one written by
    /// `safetensors.torch.save_file(model.state_dict(), path)`. Every mismatch (missing or
    /// unexpected key, shape, dtype) is listed in the error, and then nothing changes.
    /// Half-precision and integer tensors convert to the parameter's dtype when no value
    /// changes (PyTorch's int64 `num_batches_tracked`, say); f64 into an f32 parameter does not.
    fn load_safetensors<P: AsRef<Path>>(&self, path: P) -> Result<()>
    where
        Self: Sized,
    {
        let path = path.as_ref();
        let report = read_and_compare(self, path)?;
        report.to_result(true).map_err(|e| in_file(path, e))?;
        report.apply();
        Ok(())
    }

    /// As [`Module::load_safetensors`], but missing and unexpected keys are skipped and
    /// returned (PyTorch's `strict=False`); shape and dtype mismatches are still errors.
    fn load_safetensors_partial<P: AsRef<Path>>(&self, path: P) -> Result<LoadReport>
    where
        Self: Sized,
    {
        let path = path.as_ref();
        let report = read_and_compare(self, path)?;
        report.to_result(false).map_err(|e| in_file(path, e))?;
        Ok(report.apply())
    }

    /// Writes [`Module::state`] to a safetensors file, atomically.
    fn save_safetensors<P: AsRef<Path>>(&self, path: P) -> Result<()>
    where
        Self: Sized,
    {
        save_tensors(path.as_ref(), &self.state(), HashMap::new())
    }

    /// Copies every parameter and buffer of `other`, a module of the same structure (a DQN's
    /// target network, say); nothing changes on a mismatch.
    fn copy_from(&self, other: &dyn Module) -> Result<()> {
        self.load_state(&other.state().into_iter().collect())
    }

    /// Moves every parameter and buffer a fraction `tau` of the way towards `other`'s:
    /// `p ← (1 − tau)·p + tau·q` (Polyak averaging of target networks, EMA weights).
    /// Buffers (running statistics, counts) are copied, not averaged.
    fn soft_update_from(&self, other: &dyn Module, tau: f64) -> Result<()> {
        if !(0.0..=1.0).contains(&tau) {
            return Err(Error::Shape(format!(
                "soft_update_from: tau {tau} must be in [0, 1]"
            )));
        }
        let theirs: HashMap<String, Tensor> = other.state().into_iter().collect();
        self.check_state(&theirs)?;
        move_towards(&self.params(), &self.buffers(), &theirs, tau);
        Ok(())
    }

    /// Stops gradients to every parameter, and with them their updates.
    fn freeze(&self) {
        self.params().iter().for_each(|(_, p)| p.set_frozen(true));
    }

    /// Undoes [`Module::freeze`].
    fn unfreeze(&self) {
        self.params().iter().for_each(|(_, p)| p.set_frozen(false));
    }

    /// Number of trainable parameter elements.
    fn num_params(&self) -> usize {
        self.params().iter().map(|(_, p)| p.numel()).sum()
    }

    /// One line per parameter and buffer with its shape, then the total.
    fn summary(&self) -> String {
        summary_text(
            &self.name(),
            &self.params(),
            &self.buffers(),
            self.num_params(),
        )
    }
}

// The default methods above are compiled once per module type that is used through a
// `dyn Module`; their bodies stay a few calls, and the work is in the functions below.

/// [`Module::soft_update_from`] once `theirs` is checked against the module.
fn move_towards(
    params: &[(String, Param)],
    buffers: &[(String, Param)],
    theirs: &HashMap<String, Tensor>,
    tau: f64,
) {
    no_grad(|| {
        for (name, p) in params {
            let mixed = &p.tensor().mul_scalar(1.0 - tau) + &theirs[name].mul_scalar(tau);
            p.set(&mixed);
        }
        for (name, p) in buffers {
            p.set(&theirs[name]);
        }
    });
}

/// [`Module::summary`]'s text.
fn summary_text(
    name: &str,
    params: &[(String, Param)],
    buffers: &[(String, Param)],
    total: usize,
) -> String {
    let mut out = format!("{name}\n");
    for (name, p) in params {
        out += &format!(
            "  {name:<32} {:<16} {:>10}\n",
            format!("{:?}", p.shape()),
            p.numel()
        );
    }
    for (name, p) in buffers {
        out += &format!("  {name:<32} {:<16} (buffer)\n", format!("{:?}", p.shape()));
    }
    out + &format!("  {:<32} {:<16} {:>10}\n", "total parameters", "", total)
}

/// `state` against the module's parameters and buffers: the same dtype, or a count saved as a
/// float (before buffers had an integer dtype) whose values are all whole.
fn compare_state<M: Module + ?Sized>(module: &M, state: &HashMap<String, Tensor>) -> LoadReport {
    compare(&module.state_params(), state, state_value)
}

/// The value `compare_state` takes for `p` from a tensor of its shape.
fn state_value(t: &Tensor, p: &Param) -> std::result::Result<Tensor, String> {
    if t.dtype() == p.dtype() {
        Ok(t.clone())
    } else if p.dtype() == DType::I64 && t.dtype().is_float() {
        whole(t).ok_or_else(String::new)
    } else {
        Err(String::new())
    }
}

/// `t`'s values as an i64 tensor when every one is whole and within i64's range.
fn whole(t: &Tensor) -> Option<Tensor> {
    Some(Tensor::from_vec(
        whole_numbers(t.to_vec::<f64>())?,
        t.shape(),
    ))
}

/// `path::to::Name<T>` → `Name`.
fn short_type_name(full: &str) -> String {
    let base = full.split('<').next().unwrap_or(full);
    base.rsplit("::").next().unwrap_or(base).to_string()
}

/// `named` with each parameter once, under the first name it was met by: a parameter that two
/// layers share (tied weights) is counted, trained and saved once, as PyTorch's
/// `named_parameters` lists it. Containers pass their lists through this.
pub fn distinct(named: Vec<(String, Param)>) -> Vec<(String, Param)> {
    let mut seen = std::collections::HashSet::new();
    named
        .into_iter()
        .filter(|(_, p)| seen.insert(p.id()))
        .collect()
}

/// `name` prefixed by `prefix.` (what containers do to their children's names).
pub fn prefixed<V>(prefix: &str, named: Vec<(String, V)>) -> Vec<(String, V)> {
    named
        .into_iter()
        .map(|(n, v)| (format!("{prefix}.{n}"), v))
        .collect()
}

/// A boxed or shared module (one that a closure also holds: a checkpointed block, say) is the
/// module.
macro_rules! module_behind_pointer {
    ($($pointer:ident)::+) => {
        impl<M: Module + ?Sized> Module for $($pointer)::+<M> {
            fn params(&self) -> Vec<(String, Param)> {
                (**self).params()
            }
            fn buffers(&self) -> Vec<(String, Param)> {
                (**self).buffers()
            }
            fn rng_streams(&self) -> Vec<(String, RngStream)> {
                (**self).rng_streams()
            }
            fn name(&self) -> String {
                (**self).name()
            }
            fn state_params(&self) -> Vec<(String, Param)> {
                (**self).state_params()
            }
        }
    };
}

module_behind_pointer!(Box);
module_behind_pointer!(std::sync::Arc);

/// A list of modules, named by index as PyTorch's `ModuleList`.
impl<M: Module> Module for Vec<M> {
    fn params(&self) -> Vec<(String, Param)> {
        distinct(indexed(self, |m| m.params()))
    }
    fn buffers(&self) -> Vec<(String, Param)> {
        distinct(indexed(self, |m| m.buffers()))
    }
    fn rng_streams(&self) -> Vec<(String, RngStream)> {
        indexed(self, |m| m.rng_streams())
    }
    fn state_params(&self) -> Vec<(String, Param)> {
        distinct(indexed(self, |m| m.state_params()))
    }
    fn name(&self) -> String {
        format!(
            "[{}]",
            self.iter().map(|m| m.name()).collect::<Vec<_>>().join(", ")
        )
    }
}

/// Children's lists, each prefixed by the child's index.
pub(crate) fn indexed<M, V>(
    children: &[M],
    of: impl Fn(&M) -> Vec<(String, V)>,
) -> Vec<(String, V)> {
    children
        .iter()
        .enumerate()
        .flat_map(|(i, m)| prefixed(&i.to_string(), of(m)))
        .collect()
}

/// What a load found: the keys the module wanted and the file lacked, the keys the file had
/// and the module did not know, and (internally) what can be set.
#[derive(Debug, Default)]
pub struct LoadReport {
    /// Keys of parameters and buffers that the file did not hold.
    pub missing: Vec<String>,
    /// Keys in the file that name no parameter or buffer of the module.
    pub unexpected: Vec<String>,
    mismatched: Vec<String>,
    fits: Vec<(Param, Tensor)>,
}

impl LoadReport {
    /// An error listing every problem (missing and unexpected keys only when `strict`).
    fn to_result(&self, strict: bool) -> Result<()> {
        let mut problems: Vec<String> = self.mismatched.clone();
        if strict {
            problems.extend(self.missing.iter().map(|k| format!("{k}: missing")));
            problems.extend(
                self.unexpected
                    .iter()
                    .map(|k| format!("{k}: unexpected, not a parameter or buffer of this module")),
            );
        }
        if problems.is_empty() {
            return Ok(());
        }
        Err(Error::Shape(format!(
            "state does not fit the module: {}",
            problems.join("; ")
        )))
    }

    /// Sets everything that fits; returns the report without the values.
    fn apply(self) -> LoadReport {
        for (p, t) in &self.fits {
            p.set(t);
        }
        LoadReport {
            fits: Vec::new(),
            ..self
        }
    }
}

/// Compares `state` with the module's `slots`; `convert` gives the value for a parameter, or
/// why its dtype cannot be taken (appended to the mismatch message).
fn compare<T>(
    slots: &[(String, Param)],
    state: &HashMap<String, T>,
    convert: impl Fn(&T, &Param) -> std::result::Result<Tensor, String>,
) -> LoadReport
where
    T: Described,
{
    let mut report = LoadReport::default();
    for (name, p) in slots {
        let Some(t) = state.get(name) else {
            report.missing.push(name.clone());
            continue;
        };
        let value = if t.shape() == p.shape().as_slice() {
            convert(t, p)
        } else {
            Err(String::new())
        };
        match value {
            Ok(v) => report.fits.push((p.clone(), v)),
            Err(why) => report.mismatched.push(format!(
                "{name}: expected {:?} {}, found {:?} {}{why}",
                p.shape(),
                p.dtype(),
                t.shape(),
                t.dtype_name()
            )),
        }
    }
    let known: std::collections::HashSet<&str> = slots.iter().map(|(n, _)| n.as_str()).collect();
    report.unexpected = state
        .keys()
        .filter(|k| !known.contains(k.as_str()))
        .cloned()
        .collect();
    report.unexpected.sort();
    report
}

/// What `compare` needs to know of a value before converting it.
trait Described {
    fn shape(&self) -> &[usize];
    fn dtype_name(&self) -> String;
}

impl Described for Tensor {
    fn shape(&self) -> &[usize] {
        Tensor::shape(self)
    }
    fn dtype_name(&self) -> String {
        self.dtype().to_string()
    }
}

impl Described for FileTensor {
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn dtype_name(&self) -> String {
        self.dtype_name()
    }
}

fn read_and_compare(module: &dyn Module, path: &Path) -> Result<LoadReport> {
    let file = load_file_tensors(path)?;
    Ok(compare(&module.state_params(), &file, |t, p| {
        t.to_tensor_exact(p.dtype())
            .ok_or_else(|| format!(" (not every value converts to {} exactly)", p.dtype()))
    }))
}

fn in_file(path: &Path, e: Error) -> Error {
    Error::Format {
        path: path.to_path_buf(),
        msg: e.to_string(),
    }
}

/// `*slot = to.clone()` for [`Module::tie`], when `to` has the slot's number of axes and
/// dtype. Its sizes may differ, as PyTorch's attribute assignment replaces a parameter by
/// any other (cropping an embedding table to a shorter context); a layer whose other
/// parameters must fit it checks them.
pub(crate) fn tie_slot(layer: &str, name: &str, slot: &mut Param, to: &Param) -> Result<()> {
    if to.shape().len() != slot.shape().len() || to.dtype() != slot.dtype() {
        return Err(Error::Shape(format!(
            "{layer}: {name} is {:?} {}, cannot take a {:?} {} parameter",
            slot.shape(),
            slot.dtype(),
            to.shape(),
            to.dtype()
        )));
    }
    *slot = to.clone();
    Ok(())
}

/// `torch.func.functional_call`: runs `f` while `module`'s parameters and buffers named in
/// `values` (nested names, `"0.weight"`) compute with the given tensors instead, on this
/// thread; gradients reach what those tensors were computed from, and the module itself does
/// not change. Every unknown name and every shape or dtype mismatch is an error, before `f`
/// runs.
///
/// ```
/// use ferrograd::nn::functional_call;
/// use ferrograd::prelude::*;
///
/// let layer = Dense::new(2, 1);
/// let x = Tensor::ones(&[1, 2], DType::F32);
/// let w = Tensor::from_vec(vec![3.0f32, 4.0], &[1, 2]).requires_grad();
/// let b = Tensor::zeros(&[1], DType::F32);
/// let y = functional_call(&layer, &[("weight", w.clone()), ("bias", b)], || {
///     layer.forward(&x, Mode::Eval)
/// })?;
/// assert_eq!(y.item(), 7.0);
/// assert_eq!(grad(&y.sum(), &[&w])[0].to_vec::<f32>(), vec![1.0, 1.0]);
/// # Ok::<(), ferrograd::Error>(())
/// ```
pub fn functional_call<M: Module + ?Sized, R>(
    module: &M,
    values: &[(&str, Tensor)],
    f: impl FnOnce() -> R,
) -> Result<R> {
    let mut named: HashMap<String, Param> = module.params().into_iter().collect();
    named.extend(module.buffers());
    let unknown: Vec<&str> = values
        .iter()
        .map(|(n, _)| *n)
        .filter(|n| !named.contains_key(*n))
        .collect();
    if !unknown.is_empty() {
        let mut known: Vec<&String> = named.keys().collect();
        known.sort();
        return Err(Error::Shape(format!(
            "functional_call: no parameter or buffer named {unknown:?} (the module has {known:?})"
        )));
    }
    let pairs: Vec<(&Param, Tensor)> = values
        .iter()
        .map(|(n, t)| (&named[*n], t.clone()))
        .collect();
    crate::autograd::with_substitutes(&pairs, f)
}
