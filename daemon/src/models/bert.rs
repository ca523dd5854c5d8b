//! The BERT encoder all-MiniLM-L6-v2 is, written for what recalld asks of it: inference on the
//! CPU over one batch of token rows. candle's tensors and kernels do the work; where this
//! differs from a textbook forward pass, it is for speed on the lanes' one thread:
//! - the query, key and value projections are one product (a third of the calls, one larger
//!   matrix), with attention's 1/√d folded into the query's weights at load;
//! - each projection is one 2-D product over every token of the batch, its bias added in
//!   place, and GELU applied in the same pass over the up-projection's output;
//! - GELU's erf is a branch-free approximation the compiler vectorises (within 5e-7 of the
//!   exact erf in f32 arithmetic), where libm's scalar `erff` took 15% of a forward pass;
//! - the softmax is candle's fused last-dimension kernel, and a batch without padding adds no
//!   attention mask.

use candle_core::{bail, CpuStorage, DType, IndexOp, InplaceOp1, Layout, Module, Result, Tensor};
use candle_nn::{Embedding, LayerNorm, VarBuilder};
use serde::Deserialize;

/// The fields of `config.json` the encoder is built from; a model of another shape is refused.
#[derive(Debug, Clone, Deserialize)]
pub struct Config {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub max_position_embeddings: usize,
    pub type_vocab_size: usize,
    pub layer_norm_eps: f64,
    pub hidden_act: String,
    #[serde(default = "absolute")]
    pub position_embedding_type: String,
}

fn absolute() -> String {
    "absolute".into()
}

/// The encoder: embeddings, then the layers; [`Bert::forward`] gives each token's last hidden
/// state.
pub struct Bert {
    words: Embedding,
    /// Position embeddings with the token-type embedding of type 0 added (every input here is
    /// one segment).
    positions: Tensor,
    norm: LayerNorm,
    layers: Vec<Layer>,
    hidden: usize,
}

struct Layer {
    /// Query, key and value weights stacked (3·hidden × hidden), the query's scaled by 1/√d.
    qkv: Projection,
    out: Projection,
    attention_norm: LayerNorm,
    up: Projection,
    down: Projection,
    output_norm: LayerNorm,
    heads: usize,
}

/// A dense layer: `x·Wᵀ + b` over rows, the bias (and GELU, for the up-projection) applied in
/// place on the product.
struct Projection {
    weight_t: Tensor,
    bias: Vec<f32>,
}

impl Bert {
    pub fn load(vb: VarBuilder, config: &Config) -> Result<Bert> {
        if config.hidden_act != "gelu" || config.position_embedding_type != "absolute" {
            bail!(
                "unsupported model: hidden_act {:?}, position_embedding_type {:?} (expected \"gelu\", \"absolute\")",
                config.hidden_act,
                config.position_embedding_type
            );
        }
        let h = config.hidden_size;
        if config.num_attention_heads == 0 || !h.is_multiple_of(config.num_attention_heads) {
            bail!(
                "hidden_size {h} is not a multiple of num_attention_heads {}",
                config.num_attention_heads
            );
        }
        let e = vb.pp("embeddings");
        let words = Embedding::new(e.get((config.vocab_size, h), "word_embeddings.weight")?, h);
        let types = e.get((config.type_vocab_size, h), "token_type_embeddings.weight")?;
        let positions = e
            .get((config.max_position_embeddings, h), "position_embeddings.weight")?
            .broadcast_add(&types.i(0)?)?;
        let norm = layer_norm(e.pp("LayerNorm"), h, config.layer_norm_eps)?;
        let layers = (0..config.num_hidden_layers)
            .map(|i| Layer::load(vb.pp(format!("encoder.layer.{i}")), config))
            .collect::<Result<Vec<_>>>()?;
        Ok(Bert {
            words,
            positions,
            norm,
            layers,
            hidden: h,
        })
    }

    /// The last hidden states, (rows × len × hidden), of `ids` (rows × len, padded with 0);
    /// `mask` (rows × len, 1 for real tokens) is needed only when some row is padded.
    pub fn forward(&self, ids: &Tensor, mask: Option<&Tensor>) -> Result<Tensor> {
        let (n, len) = ids.dims2()?;
        let words = self.words.forward(ids)?; // (n, len, h)
        let x = words.broadcast_add(&self.positions.narrow(0, 0, len)?)?;
        let mut x = self.norm.forward(&x.reshape((n * len, self.hidden))?)?;
        // Padding gets a large negative score before the softmax, so it takes no attention.
        let padding = match mask {
            Some(m) => Some(((m.to_dtype(DType::F32)? - 1.0)? * 1e4)?.reshape((n, 1, 1, len))?),
            None => None,
        };
        for layer in &self.layers {
            x = layer.forward(&x, n, len, padding.as_ref())?;
        }
        x.reshape((n, len, self.hidden))
    }
}

impl Layer {
    fn load(vb: VarBuilder, config: &Config) -> Result<Layer> {
        let h = config.hidden_size;
        let heads = config.num_attention_heads;
        let scale = 1.0 / ((h / heads) as f64).sqrt();
        let a = vb.pp("attention.self");
        let (q, q_bias) = dense_weights(&a.pp("query"), h, h)?;
        let (k, k_bias) = dense_weights(&a.pp("key"), h, h)?;
        let (v, v_bias) = dense_weights(&a.pp("value"), h, h)?;
        let qkv = Projection::new(
            Tensor::cat(&[(q * scale)?, k, v], 0)?,
            Tensor::cat(&[(q_bias * scale)?, k_bias, v_bias], 0)?,
        )?;
        let (w, b) = dense_weights(&vb.pp("attention.output.dense"), h, h)?;
        let out = Projection::new(w, b)?;
        let attention_norm = layer_norm(vb.pp("attention.output.LayerNorm"), h, config.layer_norm_eps)?;
        let (w, b) = dense_weights(&vb.pp("intermediate.dense"), h, config.intermediate_size)?;
        let up = Projection::new(w, b)?;
        let (w, b) = dense_weights(&vb.pp("output.dense"), config.intermediate_size, h)?;
        let down = Projection::new(w, b)?;
        let output_norm = layer_norm(vb.pp("output.LayerNorm"), h, config.layer_norm_eps)?;
        Ok(Layer {
            qkv,
            out,
            attention_norm,
            up,
            down,
            output_norm,
            heads,
        })
    }

    /// One layer over `x`, (n·len × hidden): self-attention within each row, then the
    /// feed-forward block, each with its residual and layer norm.
    fn forward(&self, x: &Tensor, n: usize, len: usize, padding: Option<&Tensor>) -> Result<Tensor> {
        let h = x.dim(1)?;
        let d = h / self.heads;
        let qkv = self.qkv.forward(x, false)?.reshape((n, len, 3, self.heads, d))?;
        let part = |i: usize| qkv.i((.., .., i))?.transpose(1, 2)?.contiguous(); // (n, heads, len, d)
        let (q, k, v) = (part(0)?, part(1)?, part(2)?);
        let mut scores = q.matmul(&k.t()?)?; // (n, heads, len, len), already scaled
        if let Some(p) = padding {
            scores = scores.broadcast_add(p)?;
        }
        let weights = candle_nn::ops::softmax_last_dim(&scores)?;
        let context = weights
            .matmul(&v)?
            .transpose(1, 2)?
            .contiguous()?
            .reshape((n * len, h))?;
        let attended = self
            .attention_norm
            .forward(&(self.out.forward(&context, false)? + x)?)?;
        let inner = self.up.forward(&attended, true)?;
        self.output_norm
            .forward(&(self.down.forward(&inner, false)? + &attended)?)
    }
}

impl Projection {
    fn new(weight: Tensor, bias: Tensor) -> Result<Projection> {
        Ok(Projection {
            weight_t: weight.t()?,
            bias: bias.to_vec1::<f32>()?,
        })
    }

    fn forward(&self, x: &Tensor, gelu: bool) -> Result<Tensor> {
        let y = x.matmul(&self.weight_t)?;
        y.inplace_op1(&BiasThen { bias: &self.bias, gelu })?;
        Ok(y)
    }
}

fn dense_weights(vb: &VarBuilder, inputs: usize, outputs: usize) -> Result<(Tensor, Tensor)> {
    Ok((vb.get((outputs, inputs), "weight")?, vb.get(outputs, "bias")?))
}

fn layer_norm(vb: VarBuilder, size: usize, eps: f64) -> Result<LayerNorm> {
    Ok(LayerNorm::new(vb.get(size, "weight")?, vb.get(size, "bias")?, eps))
}

/// Adds a bias to every row of a fresh product, then (for the up-projection) GELU, in one pass.
struct BiasThen<'a> {
    bias: &'a [f32],
    gelu: bool,
}

impl InplaceOp1 for BiasThen<'_> {
    fn name(&self) -> &'static str {
        "bias-then-gelu"
    }

    fn cpu_fwd(&self, storage: &mut CpuStorage, layout: &Layout) -> Result<()> {
        let (CpuStorage::F32(values), Some((start, end))) = (storage, layout.contiguous_offsets()) else {
            bail!("bias-then-gelu: a contiguous f32 tensor");
        };
        let cols = self.bias.len();
        if cols == 0 || !(end - start).is_multiple_of(cols) {
            bail!("bias-then-gelu: rows of {cols} values");
        }
        for row in values[start..end].chunks_exact_mut(cols) {
            if self.gelu {
                for (x, b) in row.iter_mut().zip(self.bias) {
                    *x = gelu(*x + b);
                }
            } else {
                for (x, b) in row.iter_mut().zip(self.bias) {
                    *x += b;
                }
            }
        }
        Ok(())
    }
}

/// GELU as BERT defines it, x·Φ(x) = x/2·(1 + erf(x/√2)).
#[inline]
fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// erf by Abramowitz and Stegun's 7.1.26 (1.5e-7 in exact arithmetic, 4.7e-7 measured in f32),
/// without branches so that a loop over it vectorises.
#[inline]
fn erf(x: f32) -> f32 {
    let a = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * a);
    let poly = t * (0.254_829_6 + t * (-0.284_496_74 + t * (1.421_413_7 + t * (-1.453_152 + t * 1.061_405_4))));
    (1.0 - poly * exp_nonpositive(-a * a)).copysign(x)
}

/// e^z for z ≤ 0 (below -87 it is taken as e^-87, ~1.6e-38, which erf's use cannot tell from
/// 0): z = n·ln2 + r with |r| ≤ ln2/2, e^r by its Taylor series to r⁷ (relative error < 2e-8),
/// 2^n from the exponent bits. Branch-free, so that a loop over it vectorises.
#[inline]
fn exp_nonpositive(z: f32) -> f32 {
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    // Adding and taking away 1.5·2²³ rounds to the nearest integer in f32 arithmetic.
    const ROUND: f32 = 12_582_912.0;
    let z = z.max(-87.0);
    let n = (z * std::f32::consts::LOG2_E + ROUND) - ROUND;
    let r = (z - n * LN2_HI) - n * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    p * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// erf in double precision: its Taylor series up to |x| = 4 (beyond, erfc < 1.6e-8, below
    /// what an f32 near 1 can hold).
    fn erf_reference(x: f64) -> f64 {
        if x.abs() > 4.0 {
            return 1f64.copysign(x);
        }
        let (mut sum, mut term, mut k) = (0.0, x, 0.0);
        loop {
            let add = term / (2.0 * k + 1.0);
            sum += add;
            if add.abs() < 1e-18 {
                break;
            }
            k += 1.0;
            term *= -x * x / k;
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    }

    #[test]
    fn erf_and_exp_are_within_their_bounds_over_the_range_gelu_meets() {
        let mut worst_erf = 0f64;
        let mut worst_exp = 0f64;
        for i in -20_000..=20_000 {
            let x = i as f32 / 2_000.0; // -10 ..= 10
            worst_erf = worst_erf.max((erf(x) as f64 - erf_reference(x as f64)).abs());
            let z = -(x * x).min(87.0);
            let exact = (z as f64).exp();
            worst_exp = worst_exp.max((exp_nonpositive(z) as f64 - exact).abs() / exact);
        }
        println!("erf off by {worst_erf:e}, exp by {worst_exp:e} relative");
        assert!(worst_erf < 6e-7, "erf off by {worst_erf}");
        assert!(worst_exp < 3e-7, "exp off by {worst_exp} relative");
        assert!(erf(0.0).abs() < 6e-7 && gelu(0.0) == 0.0);
        assert_eq!(erf(-9.0), -1.0);
        assert!(gelu(-30.0).abs() < 1e-30 && gelu(30.0) == 30.0);
    }
}
