//! The correctness part of `examples/device_report.rs` on the CPU and every adapter: every op
//! family (elementwise, comparisons, reductions, rows, matmul in each dtype and GPU kernel, conv,
//! attention, quantized products in each format, sampling) against a host reference in f64.

use crate::common;

#[path = "../../examples/common/report_checks.rs"]
mod report_checks;

#[test]
fn every_report_check_is_ok_on_every_device() {
    for dev in common::devices() {
        let checks = report_checks::correctness(&dev);
        // Every family is there, and every entry of each op table.
        let count = |prefix: &str| checks.iter().filter(|c| c.name.starts_with(prefix)).count();
        for family in [
            "matmul f32",
            "matmul f16",
            "conv2d",
            "attention",
            "quantized",
            "sampling",
        ] {
            assert!(count(family) > 0, "{dev}: no {family} check");
        }
        assert_eq!(
            count("unary "),
            wgtensor::testing::unary_ops().len(),
            "{dev}"
        );
        assert_eq!(
            count("binary "),
            wgtensor::testing::binary_ops().len(),
            "{dev}"
        );
        assert_eq!(
            count("compare "),
            wgtensor::testing::compare_ops().len(),
            "{dev}"
        );
        assert_eq!(
            count("reduce "),
            wgtensor::testing::reduce_ops().len(),
            "{dev}"
        );
        assert_eq!(count("rows "), wgtensor::testing::row_ops().len(), "{dev}");
        assert_eq!(count("quantized "), 2 * wgtensor::QType::ALL.len(), "{dev}");
        let failed: Vec<String> = checks
            .iter()
            .filter(|c| !c.ok())
            .map(|c| format!("{dev} {}: {}", c.name, c.line()))
            .collect();
        assert!(failed.is_empty(), "{}", failed.join("\n"));
    }
}

#[test]
fn a_mismatch_is_reported_with_its_place() {
    let r = report_checks::compare(&[1.0, 2.5], &[1.0, 2.0], 1e-4, 1e-4);
    let e = r.expect_err("2.5 against 2.0 is a mismatch");
    assert!(e.contains("at 1"), "{e}");
    assert!(report_checks::compare(&[f32::NAN], &[f64::NAN], 0.0, 0.0).is_ok());
    assert!(report_checks::compare(&[f32::NAN], &[1.0], 1.0, 1.0).is_err());
    assert!(report_checks::compare(&[1.0], &[1.0, 2.0], 0.0, 0.0).is_err());
}
