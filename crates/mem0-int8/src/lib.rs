//! Linear layers with 8-bit weights, multiplied in f32: `y = x · Wᵀ + b`.
//!
//! Each weight is stored as a signed byte with a scale shared by [`BLOCK`] consecutive inputs of
//! one output (the largest magnitude in the block maps to 127). Activations stay f32: a weight is
//! widened to f32 as it is read and multiplied in f32, so the only error is the weights' rounding.
//! all-MiniLM-L6-v2's linear layers shrink from 42 MB to 11 MB, which fits a 16 MB last-level
//! cache: a short query no longer streams its weights from memory.
//!
//! Layout: outputs are grouped in panels of [`PANEL`], and a panel's weights are stored input by
//! input (`[panel][input][PANEL]`), so the kernel reads them strictly in order. The kernel computes
//! a tile of [`TILE_ROWS`] input rows × one panel, holding its partial sums in registers; panels
//! are shared among the rayon threads. The kernel is written with `pulp`'s safe wrappers of the
//! AVX2 and FMA intrinsics and chosen at run time when the CPU has them (no `unsafe` here, no
//! build flags); elsewhere a scalar loop computes the same sums, slower than candle's f32 products,
//! so the embedder keeps f32 weights there ([`Int8Linear::vectorised`]).

use rayon::prelude::*;

/// Outputs per panel: two 8-lane vectors.
const PANEL: usize = 16;
/// Inputs sharing one scale. 64 keeps every vector of all-MiniLM-L6-v2 within a cosine of 0.9997
/// of the f32 model's on the test sentences; a scale per whole row (one per output) fell to 0.998.
const BLOCK: usize = 64;
/// Input rows per tile: 6 rows × 2 vectors of a block's partial sums, the two vectors of widened
/// weights and a broadcast input fill 15 of the 16 AVX2 registers (the running sums wait in memory,
/// touched once per block). Measured against 3: a short query 2.45 → 2.08 ms, a 2,800-character
/// text 274 → 216 ms.
const TILE_ROWS: usize = 6;

/// A linear layer's weights, quantized.
pub struct Int8Linear {
    inputs: usize,
    outputs: usize,
    /// `[panel][input][PANEL]`, outputs past `outputs` zero.
    weights: Vec<i8>,
    /// `[panel][block][PANEL]`.
    scales: Vec<f32>,
    /// `[panel × PANEL]`, padded with zeros.
    bias: Vec<f32>,
    activation: Activation,
}

/// A function applied to each output after the bias.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    None,
    /// GELU with the exact (erf) form, `x · (1 + erf(x / √2)) / 2`, as BERT's feed-forward uses.
    GeluErf,
}

impl Int8Linear {
    /// Quantizes a `(outputs, inputs)` row-major `weight` and its `bias`.
    ///
    /// # Panics
    /// When the lengths do not match the dimensions, or a dimension is zero.
    pub fn quantize(weight: &[f32], bias: &[f32], outputs: usize, inputs: usize, activation: Activation) -> Self {
        assert!(inputs > 0 && outputs > 0, "a layer has inputs and outputs");
        assert_eq!(weight.len(), outputs * inputs, "weight is ({outputs}, {inputs})");
        assert_eq!(bias.len(), outputs, "one bias per output");
        let panels = outputs.div_ceil(PANEL);
        let blocks = inputs.div_ceil(BLOCK);
        let mut weights = vec![0_i8; panels * inputs * PANEL];
        let mut scales = vec![0.0_f32; panels * blocks * PANEL];
        for output in 0..outputs {
            let (panel, lane) = (output / PANEL, output % PANEL);
            let row = &weight[output * inputs..(output + 1) * inputs];
            for (block, values) in row.chunks(BLOCK).enumerate() {
                let largest = values.iter().fold(0.0_f32, |largest, value| largest.max(value.abs()));
                let scale = largest / 127.0;
                scales[(panel * blocks + block) * PANEL + lane] = scale;
                for (offset, value) in values.iter().enumerate() {
                    let input = block * BLOCK + offset;
                    // |value / scale| ≤ 127 by construction; a zero block stays zero.
                    let quantized = if scale > 0.0 { (value / scale).round().clamp(-127.0, 127.0) } else { 0.0 };
                    #[allow(clippy::cast_possible_truncation)]
                    let quantized = quantized as i8;
                    weights[(panel * inputs + input) * PANEL + lane] = quantized;
                }
            }
        }
        let mut padded_bias = bias.to_vec();
        padded_bias.resize(panels * PANEL, 0.0);
        Self { inputs, outputs, weights, scales, bias: padded_bias, activation }
    }

    /// Values per input row.
    pub fn inputs(&self) -> usize {
        self.inputs
    }

    /// Values per output row.
    pub fn outputs(&self) -> usize {
        self.outputs
    }

    /// `x` holds `rows` rows of `inputs` values; returns `rows` rows of `outputs` values.
    ///
    /// # Panics
    /// When `x` is not `rows × inputs` long.
    pub fn forward(&self, x: &[f32], rows: usize) -> Vec<f32> {
        self.forward_with(x, rows, true)
    }

    /// [`Int8Linear::forward`], through the vectorised kernel when `vectorise` and the CPU has it.
    fn forward_with(&self, x: &[f32], rows: usize, vectorise: bool) -> Vec<f32> {
        assert_eq!(x.len(), rows * self.inputs, "x is ({rows}, {})", self.inputs);
        if rows == 0 {
            return Vec::new();
        }
        // Rows in tiles, each tile interleaved input by input (`[input][rows of the tile]`), so the
        // kernel reads a tile's inputs in order.
        let tiles: Vec<(usize, Vec<f32>)> = x
            .chunks(TILE_ROWS * self.inputs)
            .map(|rows| {
                let count = rows.len() / self.inputs;
                let mut interleaved = vec![0.0; rows.len()];
                for (row, values) in rows.chunks_exact(self.inputs).enumerate() {
                    for (input, value) in values.iter().enumerate() {
                        interleaved[input * count + row] = *value;
                    }
                }
                (count, interleaved)
            })
            .collect();
        // Output panel by panel (`[panel][row][PANEL]`), so each thread writes a slice of its own.
        let panels = self.outputs.div_ceil(PANEL);
        let mut by_panel = vec![0.0_f32; panels * rows * PANEL];
        by_panel
            .par_chunks_mut(rows * PANEL)
            .enumerate()
            .for_each(|(panel, sums)| self.panel(panel, &tiles, sums, vectorise));
        let mut y = vec![0.0_f32; rows * self.outputs];
        for (panel, values) in by_panel.chunks_exact(rows * PANEL).enumerate() {
            let first = panel * PANEL;
            let width = PANEL.min(self.outputs - first);
            for (row, lanes) in values.chunks_exact(PANEL).enumerate() {
                y[row * self.outputs + first..][..width].copy_from_slice(&lanes[..width]);
            }
        }
        y
    }

    /// Whether this CPU runs the vectorised kernel (x86-64 with AVX2 and FMA). Elsewhere
    /// [`Int8Linear::forward`] computes the same sums one value at a time, which is slower than
    /// candle's f32 products: the local embedder then keeps f32 weights.
    pub fn vectorised() -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            pulp::x86::V3::try_new().is_some()
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    /// One panel's outputs for every tile of rows, into `sums` (`[row][PANEL]`, zero on entry).
    fn panel(&self, panel: usize, tiles: &[(usize, Vec<f32>)], sums: &mut [f32], vectorise: bool) {
        let blocks = self.inputs.div_ceil(BLOCK);
        let weights = &self.weights[panel * self.inputs * PANEL..][..self.inputs * PANEL];
        let scales = &self.scales[panel * blocks * PANEL..][..blocks * PANEL];
        let bias = &self.bias[panel * PANEL..][..PANEL];
        #[cfg(target_arch = "x86_64")]
        if let Some(v3) = pulp::x86::V3::try_new().filter(|_| vectorise) {
            let activation = self.activation;
            v3.vectorize(avx2::Panel { v3, inputs: self.inputs, weights, scales, bias, activation, tiles, sums });
            return;
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = vectorise;
        scalar_panel(self.inputs, weights, scales, tiles, sums);
        finish(bias, self.activation, sums);
    }
}

/// GELU (erf form) of each value, as [`Activation::GeluErf`] applies it.
pub fn gelu_erf(values: &mut [f32]) {
    for value in values {
        *value = gelu(*value);
    }
}

#[inline(always)]
fn gelu(value: f32) -> f32 {
    0.5 * value * (1.0 + erf(value * std::f32::consts::FRAC_1_SQRT_2))
}

/// Adds the bias to each row of a panel's sums (`[row][PANEL]`) and applies the activation.
/// Inlined where it is called, so it is vectorised with the kernel's instructions.
#[inline(always)]
fn finish(bias: &[f32], activation: Activation, sums: &mut [f32]) {
    for row in sums.chunks_exact_mut(PANEL) {
        for (sum, bias) in row.iter_mut().zip(bias) {
            *sum += bias;
        }
        if activation == Activation::GeluErf {
            for value in row.iter_mut() {
                *value = gelu(*value);
            }
        }
    }
}

/// erf in f32 without a library call, so that a loop of it vectorises: the rational minimax
/// approximation `x · P(x²) / Q(x²)` on [-4, 4] that Eigen and TensorFlow use for f32 (beyond ±4,
/// erf is ±1 in f32). GELU built on it stays within 1e-6 of candle's `gelu_erf` (tested in
/// mem0-core's `bert.rs`).
#[inline(always)]
fn erf(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let p = -2.726_142_3e-10_f32;
    let p = p.mul_add(x2, 2.770_681_4e-8);
    let p = p.mul_add(x2, -2.101_024e-6);
    let p = p.mul_add(x2, -5.692_506_4e-5);
    let p = p.mul_add(x2, -7.349_906_3e-4);
    let p = p.mul_add(x2, -2.954_6e-3);
    let p = p.mul_add(x2, -1.609_603_3e-2);
    let q = -1.456_607_2e-5_f32;
    let q = q.mul_add(x2, -2.133_740_6e-4);
    let q = q.mul_add(x2, -1.682_827e-3);
    let q = q.mul_add(x2, -7.373_329e-3);
    let q = q.mul_add(x2, -1.426_474e-2);
    (x * p / q).clamp(-1.0, 1.0)
}

/// [`Int8Linear::panel`] one value at a time.
fn scalar_panel(inputs: usize, weights: &[i8], scales: &[f32], tiles: &[(usize, Vec<f32>)], sums: &mut [f32]) {
    let mut start = 0;
    for (count, interleaved) in tiles {
        for row in 0..*count {
            let sums = &mut sums[(start + row) * PANEL..][..PANEL];
            for (block, scale) in scales.chunks_exact(PANEL).enumerate() {
                let mut partial = [0.0_f32; PANEL];
                for input in block * BLOCK..inputs.min((block + 1) * BLOCK) {
                    let x = interleaved[input * count + row];
                    for (lane, weight) in partial.iter_mut().zip(&weights[input * PANEL..][..PANEL]) {
                        *lane += f32::from(*weight) * x;
                    }
                }
                for ((sum, partial), scale) in sums.iter_mut().zip(partial).zip(scale) {
                    *sum += partial * scale;
                }
            }
        }
        start += count;
    }
}

/// The kernel for x86-64 with AVX2 and FMA, through `pulp`'s safe wrappers of the intrinsics.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use pulp::x86::V3;
    use pulp::{cast, f32x8, i8x16};

    use super::{finish, Activation, BLOCK, PANEL, TILE_ROWS};

    /// One panel's sums for every tile of rows; see [`super::Int8Linear::panel`].
    pub(super) struct Panel<'a> {
        pub v3: V3,
        pub inputs: usize,
        pub weights: &'a [i8],
        pub scales: &'a [f32],
        pub bias: &'a [f32],
        pub activation: Activation,
        pub tiles: &'a [(usize, Vec<f32>)],
        pub sums: &'a mut [f32],
    }

    impl pulp::NullaryFnOnce for Panel<'_> {
        type Output = ();

        /// Compiled with AVX2 and FMA enabled (`V3::vectorize`); everything below is inlined into it.
        #[inline(always)]
        fn call(self) {
            let Self { v3, inputs, weights, scales, bias, activation, tiles, sums } = self;
            // One block of the panel's weights widened to f32, reused by every tile of rows.
            let mut widened = [[v3.splat_f32x8(0.0); 2]; BLOCK];
            for (block, scale) in scales.chunks_exact(PANEL).enumerate() {
                let first = block * BLOCK;
                let length = BLOCK.min(inputs - first);
                for (wide, lanes) in widened.iter_mut().zip(weights[first * PANEL..].chunks_exact(PANEL).take(length)) {
                    let low: [i8; 16] = lanes.try_into().expect("a panel of weights");
                    let mut high = [0_i8; 16];
                    high[..8].copy_from_slice(&low[8..]);
                    let widen =
                        |bytes: [i8; 16]| v3.convert_i32x8_to_f32x8(v3.convert_i8x16_to_i32x8(cast::<_, i8x16>(bytes)));
                    *wide = [widen(low), widen(high)];
                }
                let scale = [load(&scale[..8]), load(&scale[8..])];
                let widened = &widened[..length];
                let mut start = 0;
                for (count, interleaved) in tiles {
                    let inputs = &interleaved[first * count..(first + length) * count];
                    let sums = &mut sums[start * PANEL..(start + count) * PANEL];
                    match *count {
                        1 => tile::<1>(v3, widened, inputs, scale, sums),
                        2 => tile::<2>(v3, widened, inputs, scale, sums),
                        3 => tile::<3>(v3, widened, inputs, scale, sums),
                        4 => tile::<4>(v3, widened, inputs, scale, sums),
                        5 => tile::<5>(v3, widened, inputs, scale, sums),
                        TILE_ROWS => tile::<TILE_ROWS>(v3, widened, inputs, scale, sums),
                        _ => unreachable!("tiles hold 1 to {TILE_ROWS} rows"),
                    }
                    start += count;
                }
            }
            finish(bias, activation, sums);
        }
    }

    #[inline(always)]
    fn load(values: &[f32]) -> f32x8 {
        cast::<[f32; 8], f32x8>(values.try_into().expect("eight values"))
    }

    /// Adds one block of `R` rows (interleaved `[input][R]`) times the widened weights, scaled, to
    /// the rows' sums (`[R][PANEL]`). The `R × 2` partial sums stay in registers.
    #[inline(always)]
    fn tile<const R: usize>(v3: V3, widened: &[[f32x8; 2]], inputs: &[f32], scale: [f32x8; 2], sums: &mut [f32]) {
        let mut low = [v3.splat_f32x8(0.0); R];
        let mut high = [v3.splat_f32x8(0.0); R];
        for (weights, inputs) in widened.iter().zip(inputs.chunks_exact(R)) {
            for row in 0..R {
                let input = v3.splat_f32x8(inputs[row]);
                low[row] = v3.mul_add_f32x8(weights[0], input, low[row]);
                high[row] = v3.mul_add_f32x8(weights[1], input, high[row]);
            }
        }
        for (row, sums) in sums.chunks_exact_mut(PANEL).enumerate() {
            let (sums_low, sums_high) = sums.split_at_mut(8);
            let new_low = v3.mul_add_f32x8(low[row], scale[0], load(sums_low));
            let new_high = v3.mul_add_f32x8(high[row], scale[1], load(sums_high));
            sums_low.copy_from_slice(&cast::<f32x8, [f32; 8]>(new_low));
            sums_high.copy_from_slice(&cast::<f32x8, [f32; 8]>(new_high));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator, so failures repeat.
    struct Lcg(u64);

    impl Lcg {
        fn next(&mut self) -> f32 {
            self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            #[allow(clippy::cast_precision_loss)]
            let unit = (self.0 >> 40) as f32 / (1_u64 << 24) as f32;
            unit - 0.5
        }

        fn values(&mut self, count: usize) -> Vec<f32> {
            (0..count).map(|_| self.next()).collect()
        }
    }

    fn reference(weight: &[f32], bias: &[f32], x: &[f32], rows: usize, outputs: usize, inputs: usize) -> Vec<f32> {
        let mut y = vec![0.0; rows * outputs];
        for row in 0..rows {
            for output in 0..outputs {
                let dot: f32 = (0..inputs).map(|input| x[row * inputs + input] * weight[output * inputs + input]).sum();
                y[row * outputs + output] = dot + bias[output];
            }
        }
        y
    }

    #[test]
    fn products_match_f32_within_the_rounding_of_the_weights() {
        let mut random = Lcg(7);
        // Shapes with partial panels, partial blocks and every tile remainder.
        let shapes = [
            (1, 16, 64),
            (2, 40, 100),
            (3, 384, 384),
            (10, 33, 130),
            (7, 1536, 384),
            (11, 48, 64),
            (5, 17, 200),
            (0, 16, 64),
        ];
        for (rows, outputs, inputs) in shapes {
            let weight = random.values(outputs * inputs);
            let bias = random.values(outputs);
            let x = random.values(rows * inputs);
            let layer = Int8Linear::quantize(&weight, &bias, outputs, inputs, Activation::None);
            assert_eq!((layer.inputs(), layer.outputs()), (inputs, outputs));
            let actual = layer.forward(&x, rows);
            let scalar = layer.forward_with(&x, rows, false);
            for (vectorised, scalar) in actual.iter().zip(&scalar) {
                assert!((vectorised - scalar).abs() <= 1e-5 * scalar.abs().max(1.0), "{vectorised} vs {scalar}");
            }
            let expected = reference(&weight, &bias, &x, rows, outputs, inputs);
            assert_eq!(actual.len(), expected.len());
            // Each weight is off by at most half a step (largest / 254) of its block: bound the
            // error of each output by that step times the sum of |x|.
            for row in 0..rows {
                let magnitude: f32 = x[row * inputs..(row + 1) * inputs].iter().map(|v| v.abs()).sum();
                for output in 0..outputs {
                    let index = row * outputs + output;
                    let error = (actual[index] - expected[index]).abs();
                    assert!(
                        error <= magnitude * 0.5 / 254.0 + 1e-5,
                        "({rows}, {outputs}, {inputs}) row {row} output {output}: {} vs {}",
                        actual[index],
                        expected[index]
                    );
                }
            }
        }
    }

    #[test]
    fn weights_that_fit_the_grid_are_exact() {
        // Integers up to 127 with a block maximum of 127 quantize without rounding.
        let (outputs, inputs, rows) = (20, 70, 4);
        let weight: Vec<f32> = (0..outputs * inputs)
            .map(|index| if index % inputs % BLOCK == 0 { 127.0 } else { (index % 255) as f32 - 127.0 })
            .collect();
        let bias: Vec<f32> = (0..outputs).map(|output| output as f32).collect();
        let x: Vec<f32> = (0..rows * inputs).map(|index| (index % 7) as f32 - 3.0).collect();
        let layer = Int8Linear::quantize(&weight, &bias, outputs, inputs, Activation::None);
        assert_eq!(layer.forward(&x, rows), reference(&weight, &bias, &x, rows, outputs, inputs));
    }
}
