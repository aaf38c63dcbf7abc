use std::time::Instant;
use wgtensor::{DType, Device, Tensor};
fn main() -> wgtensor::Result<()> {
    let d = Device::gpu(0)?;
    let n = 1 << 20;
    let a = Tensor::rand(&[n], &d)?;
    let b = Tensor::rand(&[n], &d)?;
    d.synchronize()?;
    for label in [
        "add",
        "sync-empty",
        "fill",
        "add4chain",
        "sum+read",
        "sum+sync",
        "read1",
    ] {
        let t = Instant::now();
        let reps = 50;
        for _ in 0..reps {
            match label {
                "add" => {
                    let c = a.add(&b)?;
                    d.synchronize()?;
                    drop(c);
                }
                "sync-empty" => {
                    d.synchronize()?;
                }
                "fill" => {
                    let c = Tensor::full(&[n], 1.0, DType::F32, &d)?;
                    d.synchronize()?;
                    drop(c);
                }
                "sum+read" => {
                    let s = a.sum_all()?.to_scalar::<f32>()?;
                    std::hint::black_box(s);
                }
                "sum+sync" => {
                    let s = a.sum_all()?;
                    d.synchronize()?;
                    drop(s);
                }
                "read1" => {
                    let s = a.narrow(0, 0, 1)?.to_vec::<f32>()?;
                    std::hint::black_box(s);
                }
                _ => {
                    let c = a.add(&b)?.mul(&a)?.add(&b)?.sub(&a)?;
                    d.synchronize()?;
                    drop(c);
                }
            }
        }
        println!(
            "{label}: {:.3} ms",
            t.elapsed().as_secs_f64() * 1e3 / reps as f64
        );
    }
    Ok(())
}
