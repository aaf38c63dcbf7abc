//! PyTorch-style printing: `tensor([[1.0000, 2.0000], ...], device='gpu:0')`.

use super::Tensor;
use crate::DType;
use std::fmt;

/// Past this many elements only the first and last `EDGE` entries of each dim are printed.
const SUMMARY_THRESHOLD: usize = 1000;
const EDGE: usize = 3;

impl fmt::Display for Tensor {
    /// Prints the values (reading them back from the device) and the device.
    ///
    /// ```
    /// let t = wgtensor::Tensor::arange(0.0, 4.0, 1.0, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.to_string(), "tensor([0., 1., 2., 3.], device='cpu')");
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let summarize = self.numel() > SUMMARY_THRESHOLD;
        // Only the printed edges are read back (joined on the tensor's device), so printing a
        // huge tensor costs what printing a small one does.
        let values: Vec<f64> = match edges(self, summarize).and_then(|t| t.host_f64s("display")) {
            Ok(v) => v,
            Err(e) => return write!(f, "tensor(<unreadable: {e}>, device='{}')", self.device()),
        };
        let shown: Vec<f64> = shown_values(self.shape(), &values, summarize);
        let fmt_one = number_format(&shown, self.dtype());
        let width = shown.iter().map(|&v| fmt_one(v).len()).max().unwrap_or(0);
        let mut out = String::from("tensor(");
        let indent = out.len();
        write_dims(
            &mut out,
            self.shape(),
            &values,
            0,
            indent,
            summarize,
            &|v| format!("{:>width$}", fmt_one(v)),
        );
        out.push_str(&format!(", device='{}'", self.device()));
        if self.dtype() != DType::F32 {
            out.push_str(&format!(", dtype={}", self.dtype()));
        }
        out.push(')');
        f.write_str(&out)
    }
}

/// `t` with every dim longer than `2 * EDGE` cut to its first and last `EDGE` entries (when
/// summarising): exactly the values that are printed.
fn edges(t: &Tensor, summarize: bool) -> crate::Result<Tensor> {
    let mut small = t.clone();
    if summarize {
        for (d, &n) in t.shape().iter().enumerate() {
            if n > 2 * EDGE {
                let d = d as isize;
                let (head, tail) = (small.narrow(d, 0, EDGE)?, small.narrow(d, n - EDGE, EDGE)?);
                small = Tensor::cat(&[&head, &tail], d)?;
            }
        }
    }
    Ok(small)
}

/// Where entry `i` of a dim of size `n` sits in the [`edges`] tensor.
fn slot(i: usize, n: usize, summarize: bool) -> usize {
    if summarize && n > 2 * EDGE && i >= EDGE {
        i - (n - 2 * EDGE)
    } else {
        i
    }
}

/// The size of a dim of size `n` in the [`edges`] tensor.
fn kept(n: usize, summarize: bool) -> usize {
    if summarize && n > 2 * EDGE {
        2 * EDGE
    } else {
        n
    }
}

/// The values that will be printed (to pick one number format for all of them).
fn shown_values(shape: &[usize], values: &[f64], summarize: bool) -> Vec<f64> {
    let mut out = Vec::new();
    collect(shape, values, summarize, &mut out);
    out
}

fn collect(shape: &[usize], values: &[f64], summarize: bool, out: &mut Vec<f64>) {
    if shape.is_empty() {
        out.extend(values.first());
        return;
    }
    let n = shape[0];
    let inner: usize = shape[1..].iter().map(|&m| kept(m, summarize)).product();
    for i in visible(n, summarize) {
        let j = slot(i, n, summarize);
        collect(
            &shape[1..],
            &values[j * inner..(j + 1) * inner],
            summarize,
            out,
        );
    }
}

/// Indices printed along a dim of size `n`.
fn visible(n: usize, summarize: bool) -> Vec<usize> {
    if summarize && n > 2 * EDGE {
        (0..EDGE).chain(n - EDGE..n).collect()
    } else {
        (0..n).collect()
    }
}

/// PyTorch's choice: integers print as `1.`, ordinary magnitudes with 4 decimals, extreme ones
/// in scientific notation.
fn number_format(values: &[f64], dtype: DType) -> impl Fn(f64) -> String + use<> {
    let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    let max = finite.iter().fold(0f64, |m, v| m.max(v.abs()));
    let min_nonzero = finite
        .iter()
        .filter(|v| **v != 0.0)
        .fold(f64::INFINITY, |m, v| m.min(v.abs()));
    let integral = finite.iter().all(|v| v.fract() == 0.0);
    let float = dtype.is_float();
    let sci = float && (max >= 1e8 || (min_nonzero.is_finite() && min_nonzero < 1e-4 && !integral));
    move |v: f64| {
        if v.is_nan() {
            "nan".into()
        } else if v.is_infinite() {
            if v > 0.0 {
                "inf".into()
            } else {
                "-inf".into()
            }
        } else if !float {
            format!("{v}")
        } else if sci {
            format!("{v:.4e}")
        } else if integral {
            format!("{v}.")
        } else {
            format!("{v:.4}")
        }
    }
}

fn write_dims(
    out: &mut String,
    shape: &[usize],
    values: &[f64],
    depth: usize,
    indent: usize,
    summarize: bool,
    fmt_one: &dyn Fn(f64) -> String,
) {
    if shape.is_empty() {
        if let Some(&v) = values.first() {
            out.push_str(&fmt_one(v));
        }
        return;
    }
    out.push('[');
    let n = shape[0];
    let inner: usize = shape[1..].iter().map(|&m| kept(m, summarize)).product();
    let idx = visible(n, summarize);
    for (k, &i) in idx.iter().enumerate() {
        if k > 0 {
            out.push(',');
            if shape.len() == 1 {
                out.push(' ');
            } else {
                // Blank lines between blocks of 3-D and higher, as PyTorch prints them.
                out.push_str(&"\n".repeat(shape.len() - 1));
                out.push_str(&" ".repeat(indent + depth + 1));
            }
        }
        if summarize && n > 2 * EDGE && k == EDGE {
            out.push_str("...,");
            if shape.len() == 1 {
                out.push(' ');
            } else {
                out.push('\n');
                out.push_str(&" ".repeat(indent + depth + 1));
            }
        }
        let j = slot(i, n, summarize);
        write_dims(
            out,
            &shape[1..],
            &values[j * inner..(j + 1) * inner],
            depth + 1,
            indent,
            summarize,
            fmt_one,
        );
    }
    out.push(']');
}
