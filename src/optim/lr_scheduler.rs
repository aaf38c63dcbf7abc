//! Learning-rate schedules in the shape of `torch.optim.lr_scheduler`: a scheduler reads the
//! optimizer's learning rate once as its base, and every [`LrScheduler::step`] sets the rate of
//! the next epoch (or iteration) on the optimizer with [`Optimizer::set_lr`].
//!
//! The rate is a closed-form function of the step count ([`LrScheduler::lr_at`]), so resuming a
//! run only needs the count ([`LrScheduler::last_epoch`] / [`LrScheduler::set_last_epoch`]).

use super::Optimizer;
use crate::{Error, Result};

/// A schedule: the learning rate as a function of the step count, applied to an optimizer.
pub trait LrScheduler {
    /// The learning rate at step `epoch` (0 = before the first [`LrScheduler::step`]).
    fn lr_at(&self, epoch: usize) -> f32;

    /// Steps taken so far (PyTorch's `last_epoch`).
    fn last_epoch(&self) -> usize;

    /// Sets the step count (for resuming); call [`LrScheduler::apply`] to set its rate.
    fn set_last_epoch(&mut self, epoch: usize);

    /// The rate of the current step (PyTorch's `get_last_lr()[0]`).
    fn get_last_lr(&self) -> f32 {
        self.lr_at(self.last_epoch())
    }

    /// Sets the current step's rate on `optimizer`.
    fn apply(&self, optimizer: &mut dyn Optimizer) {
        optimizer.set_lr(self.get_last_lr());
    }

    /// Advances one step and sets the new rate on `optimizer` (call after `optimizer.step`).
    fn step(&mut self, optimizer: &mut dyn Optimizer) {
        self.set_last_epoch(self.last_epoch() + 1);
        self.apply(optimizer);
    }
}

fn check(op: &'static str, what: &str, ok: bool, value: impl std::fmt::Display) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidArgument {
            op,
            message: format!("invalid {what} {value}"),
        })
    }
}

/// `torch.optim.lr_scheduler.StepLR`: `lr(t) = base_lr * gamma^floor(t / step_size)`.
///
/// ```
/// use wgtensor::optim::{LrScheduler, Optimizer, Sgd, StepLR};
/// let mut opt = Sgd::new(0.1);
/// let mut sched = StepLR::new(&mut opt, 2, 0.5)?;
/// let mut seen = vec![opt.lr()];
/// for _ in 0..4 {
///     sched.step(&mut opt);
///     seen.push(opt.lr());
/// }
/// assert_eq!(seen, vec![0.1, 0.1, 0.05, 0.05, 0.025]);
/// # Ok::<(), wgtensor::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct StepLR {
    base_lr: f32,
    step_size: usize,
    gamma: f32,
    last_epoch: usize,
}

impl StepLR {
    /// Reads `optimizer`'s rate as `base_lr`; decays it by `gamma` every `step_size` steps.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `step_size` is 0 or `gamma` is negative or not finite.
    pub fn new(optimizer: &mut dyn Optimizer, step_size: usize, gamma: f32) -> Result<StepLR> {
        check("StepLR::new", "step_size", step_size > 0, step_size)?;
        check(
            "StepLR::new",
            "gamma",
            gamma.is_finite() && gamma >= 0.0,
            gamma,
        )?;
        let s = StepLR {
            base_lr: optimizer.lr(),
            step_size,
            gamma,
            last_epoch: 0,
        };
        s.apply(optimizer);
        Ok(s)
    }
}

impl LrScheduler for StepLR {
    fn lr_at(&self, epoch: usize) -> f32 {
        let k = i32::try_from(epoch / self.step_size).unwrap_or(i32::MAX);
        (f64::from(self.base_lr) * f64::from(self.gamma).powi(k)) as f32
    }
    fn last_epoch(&self) -> usize {
        self.last_epoch
    }
    fn set_last_epoch(&mut self, epoch: usize) {
        self.last_epoch = epoch;
    }
}

/// Linear warm-up then cosine decay (`transformers`' `get_cosine_schedule_with_warmup`, with an
/// optional floor): with `W = warmup_steps`, `T = total_steps`,
///
/// - `t < W`: `lr(t) = base_lr * t / W` (0 at the first step);
/// - `t >= W`: `p = min((t - W) / (T - W), 1)`,
///   `lr(t) = min_lr + (base_lr - min_lr) * 0.5 * (1 + cos(π p))`, so `base_lr` right after the
///   warm-up and `min_lr` from step `T` on.
///
/// ```
/// use wgtensor::optim::{CosineWithWarmup, LrScheduler, Optimizer, Sgd};
/// let mut opt = Sgd::new(1.0);
/// let mut sched = CosineWithWarmup::new(&mut opt, 2, 6, 0.0)?;
/// assert_eq!(opt.lr(), 0.0);          // t = 0
/// sched.step(&mut opt);
/// assert_eq!(opt.lr(), 0.5);          // t = 1: half-way through the warm-up
/// sched.step(&mut opt);
/// assert_eq!(opt.lr(), 1.0);          // t = 2: the base rate
/// sched.step(&mut opt);
/// sched.step(&mut opt);
/// assert!((opt.lr() - 0.5).abs() < 1e-6); // t = 4: cos(π/2), half-way down
/// # Ok::<(), wgtensor::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct CosineWithWarmup {
    base_lr: f32,
    warmup_steps: usize,
    total_steps: usize,
    min_lr: f32,
    last_epoch: usize,
}

impl CosineWithWarmup {
    /// Reads `optimizer`'s rate as `base_lr` and sets the rate of step 0.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `total_steps <= warmup_steps` or `min_lr` is negative,
    /// not finite or above `base_lr`.
    pub fn new(
        optimizer: &mut dyn Optimizer,
        warmup_steps: usize,
        total_steps: usize,
        min_lr: f32,
    ) -> Result<CosineWithWarmup> {
        let op = "CosineWithWarmup::new";
        check(
            op,
            "total_steps (must exceed warmup_steps)",
            total_steps > warmup_steps,
            format!("{total_steps} (warmup_steps {warmup_steps})"),
        )?;
        let base_lr = optimizer.lr();
        check(
            op,
            "min_lr (must be in [0, base_lr])",
            min_lr.is_finite() && (0.0..=base_lr).contains(&min_lr),
            format!("{min_lr} (base_lr {base_lr})"),
        )?;
        let s = CosineWithWarmup {
            base_lr,
            warmup_steps,
            total_steps,
            min_lr,
            last_epoch: 0,
        };
        s.apply(optimizer);
        Ok(s)
    }
}

impl LrScheduler for CosineWithWarmup {
    fn lr_at(&self, t: usize) -> f32 {
        let (base, min) = (f64::from(self.base_lr), f64::from(self.min_lr));
        if t < self.warmup_steps {
            return (base * t as f64 / self.warmup_steps as f64) as f32;
        }
        let span = (self.total_steps - self.warmup_steps) as f64;
        let p = ((t - self.warmup_steps) as f64 / span).min(1.0);
        (min + (base - min) * 0.5 * (1.0 + (std::f64::consts::PI * p).cos())) as f32
    }
    fn last_epoch(&self) -> usize {
        self.last_epoch
    }
    fn set_last_epoch(&mut self, epoch: usize) {
        self.last_epoch = epoch;
    }
}
