//! Lists every adapter wgpu finds, the device strings that reach each, and what
//! `Device::best()` picks and why.
//!
//! Run: `cargo run --example devices`

fn main() {
    let adapters = wgtensor::adapters();
    if adapters.is_empty() {
        println!("no GPU adapters found");
    }
    for a in &adapters {
        println!(
            "{:<28} {} [{}, {}{}]",
            a.names.join(" | "),
            a.name,
            a.backend,
            a.device_type,
            if a.is_software { ", software" } else { "" }
        );
        println!(
            "{:<28} driver: {}; max buffer {} MiB, max binding {} MiB, {} workgroups/dim, f16: {}, unified memory: {}",
            "",
            a.driver,
            a.max_buffer_size >> 20,
            a.max_storage_buffer_binding_size >> 20,
            a.max_compute_workgroups_per_dimension,
            a.shader_f16,
            a.unified_memory
        );
    }
    println!(
        "gpu_count() = {}, gpu_is_available() = {}",
        wgtensor::gpu_count(),
        wgtensor::gpu_is_available()
    );
    let (device, why) = wgtensor::Device::best_with_reason();
    println!("Device::best() = {device}: {why}");
}
