//! The BERT encoder the local embedder runs, written for inference on the CPU: its linear layers'
//! weights are laid out (or quantized) for the matrix products of short texts.
//!
//! candle's own `BertModel` computes the same function. It is not used because of how it holds
//! its linear layers' weights: as shipped, `(out, in)`, multiplied through a strided transpose.
//! The `gemm` crate copies such a weight into its packed layout on every product, and for a short
//! query (about ten tokens) that copy is most of the work; even without the copy, the 42 MB of
//! f32 weights do not fit a 16 MB last-level cache, so every query streams them from memory. Here
//! the weights are either
//! - [`Precision::F32`]: the shipped values, stored transposed so the products read them as they
//!   are. Hidden states within 1e-4 of candle's `BertModel` (tested);
//! - [`Precision::Int8`]: quantized once at load to bytes with a scale per 64 inputs, 11 MB in
//!   all, which stays in cache between queries (see the `mem0-int8` crate). Vectors stay within a
//!   cosine of 0.999 of the f32 ones (tested).
//!
//! The query, key and value projections of a layer are fused into one product.

use candle_core::{CpuStorage, CustomOp1, DType, Layout, Module, Result, Shape, Tensor};
use candle_nn::{Embedding, LayerNorm};
use candle_transformers::models::bert::{Config, HiddenAct};
use std::collections::HashMap;

use mem0_int8::{Activation, Int8Linear};

/// How the local embedder holds and multiplies the weights of its linear layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Precision {
    /// `int8` where the CPU runs its kernel (x86-64 with AVX2 and FMA), else `f32`.
    #[default]
    Auto,
    /// 8-bit weights with a scale per 64 inputs; activations stay f32. Vectors within a cosine
    /// of 0.999 of the f32 ones; a short query about 3× faster on a 2-core x86-64.
    Int8,
    /// The shipped f32 weights: the model's exact vectors.
    F32,
}

impl Precision {
    /// `Auto` settled for this CPU.
    pub fn resolve(self) -> Self {
        match self {
            Self::Auto if Int8Linear::vectorised() => Self::Int8,
            Self::Auto => Self::F32,
            chosen => chosen,
        }
    }
}

/// A linear layer: `activation(x · Wᵀ + b)`.
enum Linear {
    /// `Wᵀ` as a contiguous `(in, out)` tensor.
    F32 { weight_t: Tensor, bias: Tensor, activation: Activation },
    /// `W` quantized, with the bias.
    Int8(Int8Op),
}

impl Linear {
    /// Builds the layer from its `(out, in)` weight and `(out)` bias. An int8 layer applies
    /// `activation` in its kernel, as outputs are computed; an f32 one with candle afterwards.
    fn new(weight: &Tensor, bias: Tensor, precision: Precision, activation: Activation) -> Result<Self> {
        Ok(match precision.resolve() {
            Precision::F32 | Precision::Auto => Self::F32 { weight_t: weight.t()?.contiguous()?, bias, activation },
            Precision::Int8 => {
                let (outputs, inputs) = weight.dims2()?;
                let values = weight.flatten_all()?.to_vec1::<f32>()?;
                Self::Int8(Int8Op(Int8Linear::quantize(&values, &bias.to_vec1::<f32>()?, outputs, inputs, activation)))
            }
        })
    }

    /// `x` is `(rows, in)`; returns `(rows, out)`.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            Self::F32 { weight_t, bias, activation } => {
                let y = x.matmul(weight_t)?.broadcast_add(bias)?;
                match activation {
                    Activation::GeluErf => y.gelu_erf(),
                    Activation::None => Ok(y),
                }
            }
            Self::Int8(layer) => x.apply_op1_no_bwd(layer),
        }
    }
}

/// An [`Int8Linear`] as a candle operation on the CPU.
struct Int8Op(Int8Linear);

impl CustomOp1 for Int8Op {
    fn name(&self) -> &'static str {
        "int8-linear"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let CpuStorage::F32(values) = storage else { candle_core::bail!("int8-linear takes f32 inputs") };
        let Some((start, end)) = layout.contiguous_offsets() else {
            candle_core::bail!("int8-linear takes contiguous inputs")
        };
        let (rows, inputs) = layout.shape().dims2()?;
        if inputs != self.0.inputs() {
            candle_core::bail!("int8-linear takes {} inputs, got {inputs}", self.0.inputs());
        }
        let output = self.0.forward(&values[start..end], rows);
        Ok((CpuStorage::F32(output), Shape::from((rows, self.0.outputs()))))
    }
}

/// One encoder layer: self-attention, then the feed-forward block, each with a residual
/// connection and a layer norm.
struct Layer {
    /// Query, key and value projections side by side: `(rows, 3 × hidden)`.
    qkv: Linear,
    attention_out: Linear,
    attention_norm: LayerNorm,
    intermediate: Linear,
    output: Linear,
    output_norm: LayerNorm,
}

/// all-MiniLM-L6-v2's encoder (any BERT with absolute positions and a GELU).
pub struct Bert {
    word_embeddings: Embedding,
    position_embeddings: Embedding,
    token_type_embeddings: Embedding,
    embeddings_norm: LayerNorm,
    layers: Vec<Layer>,
    heads: usize,
    head_size: usize,
    /// The checkpoint asks for the tanh approximation of GELU, applied after the intermediate
    /// layer (the erf form is the layer's own activation).
    approximate_gelu: bool,
}

/// The tensors of a checkpoint by name, with the errors naming what is missing.
struct Weights {
    tensors: HashMap<String, Tensor>,
    prefix: &'static str,
}

impl Weights {
    fn get(&self, name: &str, shape: &[usize]) -> Result<Tensor> {
        let full = format!("{}{name}", self.prefix);
        let tensor = self.tensors.get(&full).ok_or_else(|| candle_core::Error::Msg(format!("no tensor {full}")))?;
        if tensor.dims() != shape {
            candle_core::bail!("tensor {full} has shape {:?}, expected {shape:?}", tensor.dims());
        }
        tensor.to_dtype(DType::F32)
    }

    fn embedding(&self, name: &str, rows: usize, hidden: usize) -> Result<Embedding> {
        Ok(Embedding::new(self.get(&format!("{name}.weight"), &[rows, hidden])?, hidden))
    }

    fn norm(&self, name: &str, hidden: usize, eps: f64) -> Result<LayerNorm> {
        Ok(LayerNorm::new(
            self.get(&format!("{name}.weight"), &[hidden])?,
            self.get(&format!("{name}.bias"), &[hidden])?,
            eps,
        ))
    }

    fn linear(
        &self,
        names: &[&str],
        (inputs, outputs): (usize, usize),
        precision: Precision,
        activation: Activation,
    ) -> Result<Linear> {
        let mut weights = Vec::with_capacity(names.len());
        let mut biases = Vec::with_capacity(names.len());
        for name in names {
            weights.push(self.get(&format!("{name}.weight"), &[outputs, inputs])?);
            biases.push(self.get(&format!("{name}.bias"), &[outputs])?);
        }
        Linear::new(&Tensor::cat(&weights, 0)?, Tensor::cat(&biases, 0)?, precision, activation)
    }
}

impl Bert {
    /// Builds the encoder from a checkpoint's tensors (names as in Hugging Face's `BertModel`,
    /// with or without a `bert.` prefix).
    ///
    /// # Errors
    /// When a tensor is missing or has another shape than `config` implies, or the activation is
    /// not a GELU.
    pub fn load(tensors: HashMap<String, Tensor>, config: &Config, precision: Precision) -> Result<Self> {
        let prefix = if tensors.keys().any(|name| name.starts_with("bert.")) { "bert." } else { "" };
        let weights = Weights { tensors, prefix };
        let (hidden, eps) = (config.hidden_size, config.layer_norm_eps);
        if config.num_attention_heads == 0 || hidden % config.num_attention_heads != 0 {
            candle_core::bail!("hidden size {hidden} is not a multiple of {} heads", config.num_attention_heads);
        }
        let gelu_erf = match config.hidden_act {
            HiddenAct::Gelu => true,
            HiddenAct::GeluApproximate => false,
            HiddenAct::Relu => candle_core::bail!("only GELU activations are supported"),
        };
        let layers = (0..config.num_hidden_layers)
            .map(|index| {
                let at = |name: &str| format!("encoder.layer.{index}.{name}");
                let (query, key, value) =
                    (at("attention.self.query"), at("attention.self.key"), at("attention.self.value"));
                let (square, up, down) =
                    ((hidden, hidden), (hidden, config.intermediate_size), (config.intermediate_size, hidden));
                let none = Activation::None;
                let gelu = if gelu_erf { Activation::GeluErf } else { Activation::None };
                Ok(Layer {
                    qkv: weights.linear(&[&query, &key, &value], square, precision, none)?,
                    attention_out: weights.linear(&[&at("attention.output.dense")], square, precision, none)?,
                    attention_norm: weights.norm(&at("attention.output.LayerNorm"), hidden, eps)?,
                    intermediate: weights.linear(&[&at("intermediate.dense")], up, precision, gelu)?,
                    output: weights.linear(&[&at("output.dense")], down, precision, none)?,
                    output_norm: weights.norm(&at("output.LayerNorm"), hidden, eps)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            word_embeddings: weights.embedding("embeddings.word_embeddings", config.vocab_size, hidden)?,
            position_embeddings: weights.embedding(
                "embeddings.position_embeddings",
                config.max_position_embeddings,
                hidden,
            )?,
            token_type_embeddings: weights.embedding(
                "embeddings.token_type_embeddings",
                config.type_vocab_size,
                hidden,
            )?,
            embeddings_norm: weights.norm("embeddings.LayerNorm", hidden, eps)?,
            layers,
            heads: config.num_attention_heads,
            head_size: hidden / config.num_attention_heads,
            approximate_gelu: !gelu_erf,
        })
    }

    /// The last hidden states, `(batch, width, hidden)`, of `(batch, width)` token ids, type ids
    /// and attention mask (1 on real tokens, 0 on padding).
    ///
    /// # Errors
    /// When the shapes disagree or a position is past the model's longest input.
    pub fn forward(&self, ids: &Tensor, type_ids: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let (batch, width) = ids.dims2()?;
        let hidden = self.heads * self.head_size;
        let positions = Tensor::arange(0_u32, u32::try_from(width).map_err(candle_core::Error::wrap)?, ids.device())?;
        let embedded = (self.word_embeddings.forward(ids)? + self.token_type_embeddings.forward(type_ids)?)?
            .broadcast_add(&self.position_embeddings.forward(&positions)?)?;
        // Rows are (text, position) pairs from here on: (batch × width, hidden).
        let mut states = self.embeddings_norm.forward(&embedded)?.reshape((batch * width, hidden))?;
        // (batch, 1, 1, width): 0 where attention may look, the lowest f32 on padding.
        let blocked =
            ((mask.ones_like()? - mask)?.to_dtype(DType::F32)? * f64::from(f32::MIN))?.reshape((batch, 1, 1, width))?;
        let scale = 1.0 / (self.head_size as f64).sqrt();
        for layer in &self.layers {
            // (3, batch, heads, width, head size)
            let qkv = layer
                .qkv
                .forward(&states)?
                .reshape((batch, width, 3, self.heads, self.head_size))?
                .permute((2, 0, 3, 1, 4))?
                .contiguous()?;
            let (query, key, value) = (qkv.get(0)?, qkv.get(1)?, qkv.get(2)?);
            let scores = (query.matmul(&key.t()?)? * scale)?.broadcast_add(&blocked)?;
            let probabilities = candle_nn::ops::softmax_last_dim(&scores)?;
            let context =
                probabilities.matmul(&value)?.transpose(1, 2)?.contiguous()?.reshape((batch * width, hidden))?;
            let attended = layer.attention_norm.forward(&(layer.attention_out.forward(&context)? + &states)?)?;
            let mut activated = layer.intermediate.forward(&attended)?;
            if self.approximate_gelu {
                activated = activated.gelu()?;
            }
            states = layer.output_norm.forward(&(layer.output.forward(&activated)? + &attended)?)?;
        }
        states.reshape((batch, width, hidden))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;
    use candle_nn::VarBuilder;
    use candle_transformers::models::bert::BertModel;
    use std::path::Path;

    const MODEL_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/all-MiniLM-L6-v2");

    fn load() -> (HashMap<String, Tensor>, Config) {
        let dir = Path::new(MODEL_DIR);
        let config: Config =
            serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).expect("config")).expect("parses");
        let tensors = candle_core::safetensors::load(dir.join("model.safetensors"), &Device::Cpu).expect("weights");
        (tensors, config)
    }

    /// A padded batch: a ten-token text and a three-token one.
    fn batch() -> (Tensor, Tensor, Tensor) {
        let ids = [101_u32, 2054, 2833, 2323, 1996, 5310, 4468, 1029, 2182, 102, 101, 7592, 102, 0, 0, 0, 0, 0, 0, 0];
        let mask = [1_u32, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0];
        let device = Device::Cpu;
        (
            Tensor::from_slice(&ids, (2, 10), &device).expect("ids"),
            Tensor::zeros((2, 10), DType::U32, &device).expect("types"),
            Tensor::from_slice(&mask, (2, 10), &device).expect("mask"),
        )
    }

    fn max_difference(a: &Tensor, b: &Tensor) -> f32 {
        (a - b)
            .expect("same shape")
            .abs()
            .expect("abs")
            .flatten_all()
            .expect("flat")
            .max(0)
            .expect("max")
            .to_scalar()
            .expect("scalar")
    }

    #[test]
    fn f32_weights_compute_what_candles_bert_computes() {
        let (tensors, config) = load();
        let reference = BertModel::load(VarBuilder::from_tensors(tensors.clone(), DType::F32, &Device::Cpu), &config)
            .expect("loads");
        let ours = Bert::load(tensors, &config, Precision::F32).expect("loads");
        let (ids, types, mask) = batch();
        let expected = reference.forward(&ids, &types, Some(&mask)).expect("forward");
        let actual = ours.forward(&ids, &types, &mask).expect("forward");
        // Real tokens only: padded positions are never pooled.
        for (row, real) in [(0, 10), (1, 3)] {
            let narrow = |t: &Tensor| t.get(row).expect("row").narrow(0, 0, real).expect("real tokens");
            let difference = max_difference(&narrow(&expected), &narrow(&actual));
            assert!(difference < 1e-4, "row {row}: hidden states differ by {difference}");
        }
    }

    #[test]
    fn the_int8_layers_gelu_is_candles_gelu_erf() {
        let inputs: Vec<f32> = (-12_000..=12_000).map(|step| step as f32 / 1_000.0).collect();
        let expected = Tensor::new(inputs.as_slice(), &Device::Cpu)
            .and_then(|tensor| tensor.gelu_erf())
            .and_then(|tensor| tensor.to_vec1::<f32>())
            .expect("candle's gelu");
        let mut actual = inputs.clone();
        mem0_int8::gelu_erf(&mut actual);
        for ((input, expected), actual) in inputs.iter().zip(&expected).zip(&actual) {
            assert!(
                (expected - actual).abs() <= 1e-6 * expected.abs().max(1.0),
                "gelu({input}): {actual} vs {expected}"
            );
        }
    }

    #[test]
    fn checkpoints_missing_a_tensor_are_refused() {
        let (mut tensors, config) = load();
        tensors.remove("encoder.layer.3.intermediate.dense.weight");
        let error = Bert::load(tensors, &config, Precision::Int8).err().expect("refused").to_string();
        assert!(error.contains("encoder.layer.3.intermediate.dense.weight"), "{error}");
    }
}
