//! `Sequential`: layers applied in order, PyTorch's `nn.Sequential`.

use super::Module;
use crate::{Result, Tensor};
use std::ops::{Index, IndexMut};

/// A module stored so that it can be cloned behind a `Box` (what makes [`Sequential`] `Clone`,
/// and so replicable by [`super::DataParallel`]). Implemented for every `Module + Clone`.
trait Layer: Module {
    fn clone_box(&self) -> Box<dyn Layer>;
}

impl<T: Module + Clone + 'static> Layer for T {
    fn clone_box(&self) -> Box<dyn Layer> {
        Box::new(self.clone())
    }
}

/// Layers applied one after another (PyTorch's `nn.Sequential`). Parameters are named by the
/// layer's position: `"0.weight"`, `"0.bias"`, `"2.weight"`, ... exactly as PyTorch names them,
/// so weights saved from a PyTorch `nn.Sequential` load by name.
///
/// Any `Module + Clone` can be a layer (derive `Clone` on your own modules; tensors are cheap to
/// clone). An empty `Sequential` is the identity.
///
/// ```
/// use wgtensor::nn::{Linear, Module, ReLU, Sequential};
/// use wgtensor::{Device, Tensor};
/// let device = Device::best();
/// let mut mlp = Sequential::new()
///     .add(Linear::new(8, 16, true, &device)?)
///     .add(ReLU)
///     .add(Linear::new(16, 2, true, &device)?);
/// let names: Vec<String> = mlp.named_parameters().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["0.weight", "0.bias", "2.weight", "2.bias"]);
/// assert_eq!(mlp.forward(&Tensor::randn(&[4, 8], &device)?)?.shape(), &[4, 2]);
/// mlp.to(&Device::cpu())?;
/// assert!(mlp.parameters().iter().all(|p| p.is_cpu()));
/// assert_eq!(mlp.len(), 3);
/// assert_eq!(mlp[2].num_parameters(), 16 * 2 + 2);
/// # Ok::<(), wgtensor::Error>(())
/// ```
#[derive(Default)]
pub struct Sequential {
    layers: Vec<Box<dyn Layer>>,
}

impl Sequential {
    /// An empty container.
    ///
    /// ```
    /// let s = wgtensor::nn::Sequential::new();
    /// assert!(s.is_empty());
    /// ```
    pub fn new() -> Sequential {
        Sequential { layers: Vec::new() }
    }

    /// Appends `layer` (builder style).
    ///
    /// ```
    /// use wgtensor::nn::{Linear, Module, ReLU, Sequential};
    /// let cpu = wgtensor::Device::cpu();
    /// let s = Sequential::new().add(Linear::new(2, 3, true, &cpu)?).add(ReLU);
    /// assert_eq!(s.named_parameters()[0].0, "0.weight");
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    // The name PyTorch users expect (`nn.Sequential().add_module`, Keras' `add`); it takes a
    // layer, not another Sequential, so `std::ops::Add` would be the wrong trait.
    #[allow(clippy::should_implement_trait)]
    pub fn add<M: Module + Clone + 'static>(mut self, layer: M) -> Sequential {
        self.push(layer);
        self
    }

    /// Appends `layer`.
    ///
    /// ```
    /// use wgtensor::nn::{ReLU, Sequential};
    /// let mut s = Sequential::new();
    /// s.push(ReLU);
    /// assert_eq!(s.len(), 1);
    /// ```
    pub fn push<M: Module + Clone + 'static>(&mut self, layer: M) {
        self.layers.push(Box::new(layer));
    }

    /// Number of layers.
    ///
    /// ```
    /// let s = wgtensor::nn::Sequential::new().add(wgtensor::nn::ReLU).add(wgtensor::nn::Tanh);
    /// assert_eq!(s.len(), 2);
    /// ```
    pub fn len(&self) -> usize {
        self.layers.len()
    }

    /// Whether there are no layers.
    ///
    /// ```
    /// assert!(wgtensor::nn::Sequential::new().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// Layer `i`, or `None` past the end (indexing with `seq[i]` panics there instead).
    ///
    /// ```
    /// use wgtensor::nn::{ReLU, Sequential};
    /// let s = Sequential::new().add(ReLU);
    /// assert!(s.get(0).is_some() && s.get(1).is_none());
    /// ```
    pub fn get(&self, i: usize) -> Option<&dyn Module> {
        self.layers.get(i).map(|l| &**l as &dyn Module)
    }

    /// Layer `i` mutably, or `None` past the end.
    ///
    /// ```
    /// use wgtensor::nn::{Dropout, Module, Sequential};
    /// let mut s = Sequential::new().add(Dropout::new(0.5)?);
    /// s.get_mut(0).unwrap().eval(); // only this layer leaves training mode
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn get_mut(&mut self, i: usize) -> Option<&mut dyn Module> {
        self.layers.get_mut(i).map(|l| &mut **l as &mut dyn Module)
    }
}

impl Clone for Sequential {
    /// Clones every layer; the clones share parameter storage until one is replaced (tensors
    /// are immutable, so sharing is safe).
    fn clone(&self) -> Sequential {
        Sequential {
            layers: self.layers.iter().map(|l| l.clone_box()).collect(),
        }
    }
}

impl std::fmt::Debug for Sequential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Sequential({} layers, {} parameters)",
            self.len(),
            self.num_parameters()
        )
    }
}

impl Index<usize> for Sequential {
    type Output = dyn Module;

    fn index(&self, i: usize) -> &(dyn Module + 'static) {
        &*self.layers[i]
    }
}

impl IndexMut<usize> for Sequential {
    fn index_mut(&mut self, i: usize) -> &mut (dyn Module + 'static) {
        &mut *self.layers[i]
    }
}

impl Module for Sequential {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut y = x.clone();
        for layer in &self.layers {
            y = layer.forward(&y)?;
        }
        Ok(y)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let mut out = Vec::new();
        for (i, layer) in self.layers.iter().enumerate() {
            for (name, t) in layer.named_parameters() {
                out.push((format!("{i}.{name}"), t));
            }
        }
        out
    }

    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        let mut out = Vec::new();
        for (i, layer) in self.layers.iter_mut().enumerate() {
            for (name, t) in layer.named_parameters_mut() {
                out.push((format!("{i}.{name}"), t));
            }
        }
        out
    }

    fn set_training(&mut self, training: bool) {
        for layer in &mut self.layers {
            layer.set_training(training);
        }
    }
}
