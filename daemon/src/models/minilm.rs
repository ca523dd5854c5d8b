//! The built-in embedder: all-MiniLM-L6-v2 (sentence-transformers) run on the CPU by our BERT
//! encoder on candle (`bert`), tokenised with `tokenizers`; mean pooling over real tokens,
//! L2-normalised, 384 dims.
//! Loaded from a directory holding `model.safetensors`, `tokenizer.json` and `config.json`
//! (`scripts/fetch-model.sh` puts them there).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

use super::bert::{Bert, Config};
use super::usage::{Kind, Usage};
use super::{CallCtx, Embedder, ModelError, ModelId};

/// The directory name the model is looked for under `<data dir>/models/`.
pub(crate) const MODEL_DIR_NAME: &str = "all-MiniLM-L6-v2";
/// The name recorded in [`ModelId`].
pub const MODEL_NAME: &str = "sentence-transformers/all-MiniLM-L6-v2";
/// The files the model directory must hold.
pub const MODEL_FILES: [&str; 3] = ["model.safetensors", "tokenizer.json", "config.json"];
/// Longer inputs are cut to this many tokens (the model was trained on 256).
pub const MAX_TOKENS: usize = 256;

/// all-MiniLM-L6-v2 on the CPU.
pub struct MiniLm {
    model: Bert,
    tokenizer: Tokenizer,
    dim: usize,
    batch_size: usize,
    dir: PathBuf,
    usage: Arc<Usage>,
}

fn bad(e: impl std::fmt::Display) -> ModelError {
    ModelError::BadModel(e.to_string())
}

fn infer(e: impl std::fmt::Display) -> ModelError {
    ModelError::Inference(e.to_string())
}

impl MiniLm {
    /// Load from `dir`. Missing files give [`ModelError::MissingModel`], whose message names
    /// `scripts/fetch-model.sh <dir>`.
    pub fn load(dir: &Path, batch_size: usize, usage: Arc<Usage>) -> Result<MiniLm, ModelError> {
        let missing: Vec<&str> = MODEL_FILES.iter().copied().filter(|f| !dir.join(f).is_file()).collect();
        if !missing.is_empty() {
            return Err(ModelError::MissingModel {
                dir: dir.to_path_buf(),
                missing: missing.join(", "),
            });
        }
        let config_text = std::fs::read_to_string(dir.join("config.json")).map_err(bad)?;
        let config: Config = serde_json::from_str(&config_text).map_err(|e| bad(format!("config.json: {e}")))?;

        let mut tokenizer =
            Tokenizer::from_file(dir.join("tokenizer.json")).map_err(|e| bad(format!("tokenizer.json: {e}")))?;
        // The shipped tokenizer.json pads every input to 128 tokens; pad to the longest in the
        // batch instead (same vectors, about 3x faster) and cut at MAX_TOKENS.
        let padding = match tokenizer.get_padding() {
            Some(p) => PaddingParams {
                strategy: PaddingStrategy::BatchLongest,
                ..p.clone()
            },
            None => PaddingParams {
                strategy: PaddingStrategy::BatchLongest,
                ..Default::default()
            },
        };
        tokenizer.with_padding(Some(padding));
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: MAX_TOKENS,
                ..Default::default()
            }))
            .map_err(bad)?;

        let device = Device::Cpu;
        // SAFETY: the file is memory-mapped read-only; nothing in this process writes it, and
        // fetch-model.sh replaces files by rename, never in place.
        let vb = unsafe {
            VarBuilder::from_mmaped_safetensors(&[dir.join("model.safetensors")], DType::F32, &device)
                .map_err(|e| bad(format!("model.safetensors: {e}")))?
        };
        let model = Bert::load(vb, &config).map_err(|e| bad(format!("model.safetensors: {e}")))?;
        let mut me = MiniLm {
            model,
            tokenizer,
            dim: config.hidden_size,
            batch_size: batch_size.max(1),
            dir: dir.to_path_buf(),
            usage,
        };
        // Check the model behaves (right shape, finite values) once at start.
        let probe = me.embed_batch(&["recalld"])?;
        if probe.len() != 1 || probe[0].len() != me.dim || probe[0].iter().any(|x| !x.is_finite()) {
            return Err(bad("the model does not produce finite vectors of its hidden size"));
        }
        me.dim = probe[0].len();
        Ok(me)
    }

    /// The directory the model was loaded from.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Number of tokens (after truncation, with the special tokens) each text is embedded from.
    pub fn token_counts(&self, texts: &[&str]) -> Result<Vec<usize>, ModelError> {
        let enc = self.tokenizer.encode_batch(texts.to_vec(), true).map_err(infer)?;
        Ok(enc
            .iter()
            .map(|e| e.get_attention_mask().iter().filter(|&&m| m == 1).count())
            .collect())
    }

    /// One forward pass over tokenized texts (real tokens only; the caller bounds the batch).
    /// Returns the vectors and the number of real tokens.
    fn forward(&self, rows: &[&[u32]]) -> Result<(Vec<Vec<f32>>, u64), ModelError> {
        if rows.is_empty() {
            return Ok((Vec::new(), 0));
        }
        let n = rows.len();
        let len = rows.iter().map(|r| r.len()).max().unwrap_or(0);
        let mut ids = Vec::with_capacity(n * len);
        let mut mask = Vec::with_capacity(n * len);
        let mut tokens = 0u64;
        for r in rows {
            ids.extend_from_slice(r);
            ids.resize(ids.len() + (len - r.len()), 0);
            mask.resize(mask.len() + r.len(), 1u32);
            mask.resize(mask.len() + (len - r.len()), 0);
            tokens += r.len() as u64;
        }
        let device = &Device::Cpu;
        let padded = rows.iter().any(|r| r.len() < len);
        let ids = Tensor::from_vec(ids, (n, len), device).map_err(infer)?;
        let mask = Tensor::from_vec(mask, (n, len), device).map_err(infer)?;
        let hidden = self.model.forward(&ids, padded.then_some(&mask)).map_err(infer)?; // (n, len, dim)
        let pooled = (|| -> candle_core::Result<Tensor> {
            let m = mask.to_dtype(DType::F32)?.unsqueeze(2)?; // (n, len, 1)
            let summed = hidden.broadcast_mul(&m)?.sum(1)?; // (n, dim)
            let count = m.sum(1)?.clamp(1e-9f32, f32::MAX)?; // (n, 1)
            let mean = summed.broadcast_div(&count)?;
            let norm = mean.sqr()?.sum_keepdim(1)?.sqrt()?.clamp(1e-12f32, f32::MAX)?;
            mean.broadcast_div(&norm)
        })()
        .map_err(infer)?;
        let out = pooled.to_vec2::<f32>().map_err(infer)?;
        Ok((out, tokens))
    }

    /// Each text's real tokens (truncated, with the special tokens; the tokenizer pads a
    /// batch to its longest, and the padding is dropped here).
    fn tokenize(&self, texts: &[&str]) -> Result<Vec<Vec<u32>>, ModelError> {
        let enc = self.tokenizer.encode_batch(texts.to_vec(), true).map_err(infer)?;
        Ok(enc
            .iter()
            .map(|e| {
                e.get_ids()
                    .iter()
                    .zip(e.get_attention_mask())
                    .filter(|(_, &m)| m == 1)
                    .map(|(&id, _)| id)
                    .collect()
            })
            .collect())
    }

    fn embed_batch(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, ModelError> {
        let rows = self.tokenize(texts)?;
        let rows: Vec<&[u32]> = rows.iter().map(Vec::as_slice).collect();
        Ok(self.forward(&rows)?.0)
    }
}

/// A forward pass holds a few (batch × heads × len × len) attention tensors at once, so a
/// batch is bounded by batch × len² as well as by count: 8 texts of the full 256 tokens (25 MB
/// per such tensor), or 32 of up to 128. A batch of 32 full-length texts (100 MB per tensor)
/// made the daemon's RSS jump by ~250 MB and back on agent traffic.
const ATTENTION_BUDGET: usize = 8 * MAX_TOKENS * MAX_TOKENS;

/// Batches over texts sorted by length (`lens` ascending): consecutive ranges of at most
/// `max_batch` texts whose count times the longest one's length squared stays within
/// [`ATTENTION_BUDGET`] (a text alone always makes a batch).
fn batches(lens: &[usize], max_batch: usize) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, &len) in lens.iter().enumerate() {
        let n = i - start + 1;
        if n > 1 && (n > max_batch || n * len * len > ATTENTION_BUDGET) {
            out.push(start..i);
            start = i;
        }
    }
    if start < lens.len() {
        out.push(start..lens.len());
    }
    out
}

impl Embedder for MiniLm {
    fn id(&self) -> ModelId {
        ModelId {
            name: MODEL_NAME.to_string(),
            dim: self.dim,
        }
    }

    fn embed(&self, ctx: &CallCtx, texts: &[&str]) -> Result<Vec<Vec<f32>>, ModelError> {
        // Batch texts of similar length together (less padding), then restore the order.
        let rows = self
            .tokenize(texts)
            .inspect_err(|_| self.usage.record_error(ctx.memory))?;
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| rows[i].len());
        let lens: Vec<usize> = order.iter().map(|&i| rows[i].len()).collect();
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); texts.len()];
        let mut tokens = 0u64;
        for range in batches(&lens, self.batch_size) {
            let chunk = &order[range];
            let batch: Vec<&[u32]> = chunk.iter().map(|&i| rows[i].as_slice()).collect();
            match self.forward(&batch) {
                Ok((vs, t)) => {
                    for (&i, v) in chunk.iter().zip(vs) {
                        out[i] = v;
                    }
                    tokens += t;
                }
                Err(e) => {
                    self.usage.record_error(ctx.memory);
                    return Err(e);
                }
            }
        }
        self.usage.record(ctx.memory, Kind::Embed, tokens);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_are_bounded_by_count_and_by_attention_size() {
        // Short texts: by count.
        assert_eq!(batches(&[10; 70], 32), vec![0..32, 32..64, 64..70]);
        // Full-length texts: 8 at most, whatever the count allows.
        assert_eq!(batches(&[MAX_TOKENS; 20], 32), vec![0..8, 8..16, 16..20]);
        // Sorted lengths: a batch closes when its longest would overflow the budget.
        let lens = [100, 100, 100, 200, 200, 256];
        let b = batches(&lens, 32);
        assert_eq!(b.iter().map(|r| r.len()).sum::<usize>(), lens.len());
        for r in &b {
            let longest = lens[r.end - 1];
            assert!(r.len() == 1 || r.len() * longest * longest <= ATTENTION_BUDGET, "{r:?}");
        }
        assert!(batches(&[], 32).is_empty());
        assert_eq!(batches(&[5000], 32), vec![0..1], "a text alone is a batch");
    }
}
