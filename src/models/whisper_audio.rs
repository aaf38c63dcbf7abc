//! Whisper's audio front end: WAV files read with `hound` (integer and float PCM, any channel
//! count, mixed down to mono), resampled with `rubato`, and the log-mel spectrogram that
//! transformers' `WhisperFeatureExtractor` computes, as tensor ops on any device.
//!
//! The features follow the extractor step by step: the samples padded with zeros (or cut) to
//! `chunk_length` seconds; `n_fft`-sample frames every `hop_length` samples, centered (the
//! signal reflect-padded by `n_fft / 2`) and weighted by a periodic Hann window; the power
//! spectrum through a DFT matrix (a matmul); Slaney-style mel filters (computed here in f64 as
//! `transformers.audio_utils.mel_filter_bank` does); `log10(max(x, 1e-10))`; values below the
//! maximum minus 8 raised to it; `(x + 4) / 4`. The last STFT frame is dropped, as the extractor
//! drops it.

use crate::{Device, Error, Result, Tensor};
use serde_json::Value;
use std::path::Path;

const OP: &str = "Whisper::load";

fn format_error(op: &'static str, path: &Path, message: String) -> Error {
    Error::Format {
        op,
        path: path.display().to_string(),
        message,
    }
}

/// The log-mel front end of a Whisper model, from its `preprocessor_config.json`.
///
/// ```no_run
/// use wgtensor::models::LogMel;
/// use wgtensor::Device;
/// let mel = LogMel::from_file("whisper-tiny/preprocessor_config.json")?;
/// let samples = wgtensor::models::read_wav("speech.wav", mel.sampling_rate())?;
/// let features = mel.features(&samples, &Device::best())?; // [80, 3000]
/// # Ok::<(), wgtensor::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct LogMel {
    n_mels: usize,
    sampling_rate: u32,
    n_fft: usize,
    hop: usize,
    n_samples: usize,
}

impl LogMel {
    /// Reads `preprocessor_config.json` (`feature_size`, `sampling_rate`, `hop_length`,
    /// `chunk_length`, `n_fft`).
    ///
    /// # Errors
    /// [`Error::Io`] for an unreadable file; [`Error::Format`] naming a missing or invalid
    /// field, or a `dither` other than 0 (random noise cannot be matched).
    pub fn from_file(path: impl AsRef<Path>) -> Result<LogMel> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(super::config::io_error(OP, path))?;
        let v: Value =
            serde_json::from_str(&text).map_err(|e| format_error(OP, path, e.to_string()))?;
        let uint = |k: &str| -> Result<usize> {
            let x = v.get(k).filter(|x| !x.is_null()).ok_or_else(|| {
                format_error(OP, path, format!("preprocessor_config.json has no {k:?}"))
            })?;
            x.as_u64()
                .filter(|&n| n > 0 && n < (1 << 31))
                .map(|n| n as usize)
                .ok_or_else(|| {
                    format_error(
                        OP,
                        path,
                        format!("{k:?} must be a positive integer, got {x}"),
                    )
                })
        };
        if let Some(d) = v.get("dither").and_then(Value::as_f64) {
            if d != 0.0 {
                let message = format!("dither {d} is not implemented (0)");
                return Err(format_error(OP, path, message));
            }
        }
        let (n_mels, rate, hop) = (
            uint("feature_size")?,
            uint("sampling_rate")?,
            uint("hop_length")?,
        );
        let (chunk, n_fft) = (uint("chunk_length")?, uint("n_fft")?);
        if n_fft < 2 || n_fft / 2 >= chunk * rate {
            let message = format!("n_fft {n_fft} does not fit a {chunk}-s window");
            return Err(format_error(OP, path, message));
        }
        Ok(LogMel {
            n_mels,
            sampling_rate: rate as u32,
            n_fft,
            hop,
            n_samples: chunk * rate,
        })
    }

    /// The mel bins (`feature_size`): 80, or 128 for large-v3.
    pub fn n_mels(&self) -> usize {
        self.n_mels
    }

    /// The sample rate the model expects (16,000).
    pub fn sampling_rate(&self) -> u32 {
        self.sampling_rate
    }

    /// Samples in one window (`chunk_length` seconds: 480,000).
    pub fn window_samples(&self) -> usize {
        self.n_samples
    }

    /// Feature frames of one window (`window_samples / hop_length`: 3,000).
    pub fn frames(&self) -> usize {
        self.n_samples / self.hop
    }

    /// The mel filter bank `[n_fft / 2 + 1, n_mels]` (f64), as `mel_filter_bank(num_frequency_bins,
    /// num_mel_filters, 0, 8000, sampling_rate, norm="slaney", mel_scale="slaney")` builds it.
    fn filters(&self) -> Vec<f64> {
        let (bins, mels) = (self.n_fft / 2 + 1, self.n_mels);
        let logstep = 27.0 / 6.4f64.ln();
        let to_mel = |f: f64| {
            if f >= 1000.0 {
                15.0 + (f / 1000.0).ln() * logstep
            } else {
                3.0 * f / 200.0
            }
        };
        let to_hz = |m: f64| {
            if m >= 15.0 {
                1000.0 * ((m - 15.0) / logstep).exp()
            } else {
                200.0 * m / 3.0
            }
        };
        let linspace = |a: f64, b: f64, n: usize, i: usize| {
            // numpy's: start + i * step, the last point exactly `b`.
            if i + 1 == n {
                b
            } else {
                a + i as f64 * ((b - a) / (n - 1) as f64)
            }
        };
        let (lo, hi) = (to_mel(0.0), to_mel(8000.0));
        let edges: Vec<f64> = (0..mels + 2)
            .map(|i| to_hz(linspace(lo, hi, mels + 2, i)))
            .collect();
        let nyquist = (self.sampling_rate / 2) as f64;
        let mut out = vec![0.0; bins * mels];
        for b in 0..bins {
            let f = linspace(0.0, nyquist, bins, b);
            for m in 0..mels {
                let down = -(edges[m] - f) / (edges[m + 1] - edges[m]);
                let up = (edges[m + 2] - f) / (edges[m + 2] - edges[m + 1]);
                let enorm = 2.0 / (edges[m + 2] - edges[m]);
                out[b * mels + m] = down.min(up).max(0.0) * enorm;
            }
        }
        out
    }

    /// The windowed DFT `[n_fft, 2 * bins]`: `hann[n] cos(2π nk / n_fft)` then
    /// `hann[n] sin(...)`, so `frames @ dft` holds the real and imaginary parts.
    fn dft(&self) -> Vec<f32> {
        let (n, bins) = (self.n_fft, self.n_fft / 2 + 1);
        let tau = 2.0 * std::f64::consts::PI;
        let mut out = vec![0f32; n * 2 * bins];
        for t in 0..n {
            let w = 0.5 - 0.5 * (tau * t as f64 / n as f64).cos(); // periodic Hann
            for k in 0..bins {
                let a = tau * ((t * k) % n) as f64 / n as f64;
                out[t * 2 * bins + k] = (w * a.cos()) as f32;
                out[t * 2 * bins + bins + k] = (w * a.sin()) as f32;
            }
        }
        out
    }

    /// The log-mel features `[n_mels, frames]` (f32, on `device`) of one window of mono samples
    /// at [`LogMel::sampling_rate`]: shorter input is padded with silence, longer is cut to
    /// [`LogMel::window_samples`].
    ///
    /// # Errors
    /// Device errors (allocation, a lost device).
    pub fn features(&self, samples: &[f32], device: &Device) -> Result<Tensor> {
        let (hop, n_fft, half) = (self.hop, self.n_fft, self.n_fft / 2);
        let frames = self.frames();
        let bins = n_fft / 2 + 1;
        // Each frame is `parts` consecutive hop-long rows of the padded signal, cut to n_fft.
        let parts = n_fft.div_ceil(hop);
        let rows = frames + parts;
        let mut padded = vec![0f32; rows * hop];
        let n = samples.len().min(self.n_samples);
        let at = |i: usize| if i < n { samples[i] } else { 0.0 };
        for (i, p) in padded
            .iter_mut()
            .enumerate()
            .take(self.n_samples + 2 * half)
        {
            // Reflection at both ends of the zero-padded window (numpy/torch "reflect").
            let j = i as isize - half as isize;
            let len = self.n_samples as isize;
            let k = if j < 0 {
                -j
            } else if j >= len {
                2 * (len - 1) - j
            } else {
                j
            };
            *p = at(k as usize);
        }
        let signal = Tensor::from_slice(&padded, &[rows, hop], device)?;
        let pieces: Vec<Tensor> = (0..parts)
            .map(|j| signal.narrow(0, j, frames))
            .collect::<Result<_>>()?;
        let refs: Vec<&Tensor> = pieces.iter().collect();
        let framed = Tensor::cat(&refs, 1)?.narrow(1, 0, n_fft)?.contiguous()?;
        let dft = Tensor::from_slice(&self.dft(), &[n_fft, 2 * bins], device)?;
        let spec = framed.matmul(&dft)?;
        let (re, im) = (spec.narrow(1, 0, bins)?, spec.narrow(1, bins, bins)?);
        let power = re.mul(&re)?.add(&im.mul(&im)?)?;
        let filters: Vec<f32> = self.filters().iter().map(|&x| x as f32).collect();
        let filters = Tensor::from_slice(&filters, &[bins, self.n_mels], device)?;
        let mel = power.matmul(&filters)?.t()?.contiguous()?;
        let log = mel
            .maximum_scalar(1e-10)?
            .log()?
            .mul_scalar(std::f32::consts::LOG10_E)?;
        let floor = log.max_all()?.sub_scalar(8.0)?;
        log.maximum(&floor)?.add_scalar(4.0)?.div_scalar(4.0)
    }
}

/// Reads a WAV file (8/16/24/32-bit integer or 32-bit float PCM, any number of channels) as
/// mono f32 samples at `sample_rate`: channels are averaged, then resampled with
/// [`resample`].
///
/// ```no_run
/// let samples = wgtensor::models::read_wav("speech.wav", 16_000)?;
/// # Ok::<(), wgtensor::Error>(())
/// ```
///
/// # Errors
/// [`Error::Io`] for an unreadable file; [`Error::Format`] for a file hound cannot read or an
/// unsupported sample format.
pub fn read_wav(path: impl AsRef<Path>, sample_rate: u32) -> Result<Vec<f32>> {
    const OP: &str = "read_wav";
    let path = path.as_ref();
    let bad = |e: hound::Error| match e {
        hound::Error::IoError(e) => Error::Io {
            op: OP,
            path: path.display().to_string(),
            message: e.to_string(),
        },
        e => format_error(OP, path, e.to_string()),
    };
    let reader = hound::WavReader::open(path).map_err(bad)?;
    let spec = reader.spec();
    let channels = spec.channels.max(1) as usize;
    let interleaved: Vec<f32> = match (spec.sample_format, spec.bits_per_sample) {
        (hound::SampleFormat::Float, 32) => reader
            .into_samples::<f32>()
            .collect::<std::result::Result<_, _>>()
            .map_err(bad)?,
        (hound::SampleFormat::Int, bits @ 8..=32) => {
            let scale = 1.0 / (1u64 << (bits - 1)) as f64;
            reader
                .into_samples::<i32>()
                .map(|s| s.map(|s| (s as f64 * scale) as f32))
                .collect::<std::result::Result<_, _>>()
                .map_err(bad)?
        }
        (format, bits) => {
            let message = format!("{bits}-bit {format:?} samples are not supported");
            return Err(format_error(OP, path, message));
        }
    };
    let mono: Vec<f32> = interleaved
        .chunks_exact(channels)
        .map(|c| c.iter().map(|&x| x as f64).sum::<f64>() as f32 / channels as f32)
        .collect();
    resample(&mono, spec.sample_rate, sample_rate)
}

/// Mono samples at `from` Hz resampled to `to` Hz with rubato's FFT resampler (band-limited,
/// its start-up delay trimmed to the sample, so a tone below both Nyquist rates comes out with
/// its phase: a 3-kHz chirp at 44.1 kHz lands within 1e-7 of the same chirp made at 16 kHz):
/// `ceil(len * to / from)` samples. Equal rates return a copy.
///
/// ```
/// let x: Vec<f32> = (0..8000).map(|i| (i as f32 * 0.1).sin()).collect();
/// let y = wgtensor::models::resample(&x, 8000, 16000)?;
/// assert_eq!(y.len(), 16000);
/// # Ok::<(), wgtensor::Error>(())
/// ```
///
/// # Errors
/// [`Error::InvalidArgument`] for a zero rate or a resampler failure.
pub fn resample(samples: &[f32], from: u32, to: u32) -> Result<Vec<f32>> {
    use rubato::audioadapter_buffers::direct::InterleavedSlice;
    use rubato::{Fft, FixedSync, Resampler, WindowFunction};
    let invalid = |message: String| Error::InvalidArgument {
        op: "resample",
        message,
    };
    if from == 0 || to == 0 {
        return Err(invalid(format!(
            "sample rates must be positive, got {from} -> {to}"
        )));
    }
    if from == to || samples.is_empty() {
        return Ok(samples.to_vec());
    }
    let input: Vec<f64> = samples.iter().map(|&x| x as f64).collect();
    let (from_n, to_n) = (from as usize, to as usize);
    // The FFT resampler filters blocks of `chunks * from / gcd` input samples with a windowed
    // sinc centred on the block's middle sample, and `process_all` trims `fft_size_out / 2`
    // output samples of start-up delay. That trim is exact only when the block holds an even
    // number of whole rate periods: with an odd count the sinc's centre falls between output
    // samples and the result is shifted by a fraction of a sample (at 44.1 kHz, 1024-sample
    // chunks left a 3-kHz tone off by up to 0.1). So the chunk is an even number of periods,
    // at least 4096 input samples, giving a long filter (its passband is flat to within 1e-7
    // on a 3-kHz chirp at every rate tried, 7,999 Hz to 192 kHz).
    let period = from_n / gcd(from_n, to_n);
    let mut chunks = 4096usize.div_ceil(period).max(2);
    chunks += chunks % 2;
    let mut r = Fft::<f64>::new_custom(
        from_n,
        to_n,
        chunks * period,
        1,
        1,
        WindowFunction::BlackmanHarris2,
        FixedSync::Input,
    )
    .map_err(|e| invalid(e.to_string()))?;
    let buf =
        InterleavedSlice::new(&input[..], 1, input.len()).map_err(|e| invalid(e.to_string()))?;
    let out = r
        .process_all(&buf, input.len(), None)
        .map_err(|e| invalid(e.to_string()))?;
    let want = (input.len() as u64 * to as u64).div_ceil(from as u64) as usize;
    let mut data = out.take_data();
    data.resize(want, 0.0);
    Ok(data.into_iter().map(|x| x as f32).collect())
}

/// Greatest common divisor (Euclid), for the resampler's rate period.
fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}
