//! The local all-MiniLM-L6-v2 sentence embedder, run in-process on the CPU with candle.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use candle_core::{DType, Device, Tensor};
use candle_transformers::models::bert::Config;
use tokenizers::{Tokenizer, TruncationParams};

use super::bert::{Bert, Precision};
use super::Embedder;
use crate::error::{ProviderError, ProviderErrorKind, Result};

/// The identifier reported by [`LocalEmbedder::model_id`].
const MODEL_ID: &str = "all-MiniLM-L6-v2";
/// The provider name carried by every [`ProviderError`] this embedder returns.
const PROVIDER: &str = "local-embedder";
/// Longest window, in tokens including `[CLS]` and `[SEP]`: the length the model was trained on.
const MAX_TOKENS: usize = 256;
/// Tokens that consecutive windows of a long text share, so a sentence cut at a window's end is
/// whole in the next one.
const WINDOW_OVERLAP: usize = 32;
/// Default most windows of one text (about 1,800 tokens, 7,000 characters of English); the rest of
/// a longer text is not seen by the dense signal (BM25 and entities still see all of it).
pub const DEFAULT_MAX_WINDOWS: usize = 8;
/// Most texts run through the model in one forward pass.
const MAX_TEXTS_PER_PASS: usize = 32;
/// Most tokens (texts × padded width) in one forward pass, which bounds the memory a pass holds
/// however long its texts are (see the `long_turns` benchmark for the measured peak).
const MAX_TOKENS_PER_PASS: usize = 2_048;
/// Texts of up to this many tokens share a pass whatever their lengths (padding them costs less
/// than another pass); longer ones share a pass only with texts at least half as long.
const SHORT_TOKENS: usize = 16;
/// Files the model directory must hold.
const CONFIG_FILE: &str = "config.json";
const TOKENIZER_FILE: &str = "tokenizer.json";
const WEIGHTS_FILE: &str = "model.safetensors";

/// Fixes the thread count candle uses for its matrix products, once, for the whole process.
///
/// Unless `RAYON_NUM_THREADS` (or `CANDLE_NUM_THREADS`) is set, candle works the count out again
/// for every matrix product: it reads the CPU mask, sysfs and `/proc/cpuinfo`, which a profile of
/// the search drill put at ~5 % of the server's CPU. This computes the same count once and sets
/// `RAYON_NUM_THREADS` to it, so the behaviour is unchanged and the lookups are gone. Measured with
/// `cargo bench -p mem0-core --bench embedded` on a 2-core machine, one short query p50 9.8 / 8.1 ms
/// → 6.3 / 5.7 ms (two runs each). A count the operator set is kept.
///
/// Call it first thing in `main`, before an async runtime or anything else starts a thread: it sets
/// an environment variable, and another thread reading the environment at that moment is a data
/// race on most platforms.
pub fn pin_thread_count() {
    let set = |name: &str| std::env::var(name).is_ok_and(|value| value.trim().parse::<usize>().is_ok_and(|n| n > 0));
    if set("RAYON_NUM_THREADS") || set("CANDLE_NUM_THREADS") {
        return;
    }
    let threads = candle_core::utils::get_num_threads();
    std::env::set_var("RAYON_NUM_THREADS", threads.to_string());
}

/// all-MiniLM-L6-v2 run in-process on the CPU: BERT, masked mean pooling, L2 normalisation.
///
/// Texts longer than the model's 256-token window are cut into overlapping windows (up to
/// `max_windows`), each embedded, and the text's vector is the token-weighted mean of its
/// windows' vectors, normalised: a fact at the end of a long assistant reply moves the vector
/// instead of being cut off. A text of one window gets exactly the model's vector. Measured on
/// LoCoMo with 12 turns per memory (~1,500 characters; `LOCOMO_JOIN=12 cargo bench --bench
/// locomo`), against cutting at 256 tokens: dense recall@10 of evidence past the first 1,000
/// characters 0.357 → 0.630, before them 0.729 → 0.682 (a mean blurs every part a little),
/// overall 0.582 → 0.662; hybrid recall@10 unchanged (0.878), R@1 0.555 → 0.563.
///
/// The linear layers run with int8 weights by default where the CPU has AVX2 and FMA
/// ([`Precision`]): one short query 6.6 → 2.1 ms on 2 cores (`cargo bench --bench embedded`), vectors
/// within a cosine of 0.999 of the f32 model's. The model id is the same at either precision:
/// stored vectors stay comparable.
///
/// Cloning is cheap: the model and tokenizer are shared.
#[derive(Clone)]
pub struct LocalEmbedder {
    inner: Arc<Inner>,
}

/// The loaded model, shared with the blocking tasks that run it.
struct Inner {
    model: Bert,
    tokenizer: Tokenizer,
    device: Device,
    dimension: usize,
    /// Most windows embedded per text.
    max_windows: usize,
    /// `[CLS]` and `[SEP]`, which open and close every window.
    cls_id: u32,
    sep_id: u32,
    /// Token and type ids that fill a text up to the width of its pass.
    pad_id: u32,
    pad_type_id: u32,
    /// Forward passes running at once: one per core, at most four. Each pass already spreads its
    /// matrix products over the cores; more at once would only add memory (each holds its
    /// activations, up to [`MAX_TOKENS_PER_PASS`] tokens' worth) and contention.
    passes: Arc<tokio::sync::Semaphore>,
}

impl fmt::Debug for LocalEmbedder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalEmbedder")
            .field("model_id", &MODEL_ID)
            .field("dimension", &self.inner.dimension)
            .finish_non_exhaustive()
    }
}

impl LocalEmbedder {
    /// Loads the model from `model_dir`, which must hold `config.json`, `tokenizer.json` and
    /// `model.safetensors`. This reads about 90 MB and blocks: call it off the async runtime.
    ///
    /// # Errors
    /// [`crate::Error::Config`] naming the file when one is missing or cannot be parsed.
    pub fn load(model_dir: &Path) -> Result<Self> {
        Self::load_with_windows(model_dir, DEFAULT_MAX_WINDOWS)
    }

    /// Like [`LocalEmbedder::load`], embedding at most `max_windows` windows of 256 tokens per
    /// text (1: texts are cut after 256 tokens).
    ///
    /// # Errors
    /// As [`LocalEmbedder::load`].
    pub fn load_with_windows(model_dir: &Path, max_windows: usize) -> Result<Self> {
        Self::load_with(model_dir, max_windows, Precision::Auto)
    }

    /// Like [`LocalEmbedder::load_with_windows`], with the linear layers held at `precision`
    /// (`load` takes [`Precision::Auto`]).
    ///
    /// # Errors
    /// As [`LocalEmbedder::load`].
    pub fn load_with(model_dir: &Path, max_windows: usize, precision: Precision) -> Result<Self> {
        let config_path = required_file(model_dir, CONFIG_FILE)?;
        let tokenizer_path = required_file(model_dir, TOKENIZER_FILE)?;
        let weights_path = required_file(model_dir, WEIGHTS_FILE)?;

        let config_text = std::fs::read_to_string(&config_path)
            .map_err(|error| config_error(&config_path, "cannot be read", error))?;
        let config: Config = serde_json::from_str(&config_text)
            .map_err(|error| config_error(&config_path, "is not a valid bert config", error))?;

        let mut tokenizer = Tokenizer::from_file(&tokenizer_path)
            .map_err(|error| config_error(&tokenizer_path, "is not a valid tokenizer", error))?;
        // The shipped tokenizer pads every input to a fixed 128 tokens and truncates there;
        // texts are grouped by length and padded per forward pass instead (`plan_passes`), and
        // cut into windows here (`windows`): tokenizers 0.23 stops tokenizing at `max_length`
        // even when a stride asks for the overflowing windows, so its own windowing returns one
        // short overflow and loses the rest. Truncation only bounds the work to what the windows
        // can hold.
        let padding = tokenizer.get_padding().cloned().unwrap_or_default();
        tokenizer.with_padding(None);
        let max_windows = max_windows.max(1);
        let window_tokens = MAX_TOKENS.min(config.max_position_embeddings);
        let truncation = TruncationParams {
            max_length: window_tokens + (max_windows - 1) * (window_tokens - 2 - WINDOW_OVERLAP),
            ..TruncationParams::default()
        };
        tokenizer
            .with_truncation(Some(truncation))
            .map_err(|error| config_error(&tokenizer_path, "rejects truncation", error))?;
        let special = |token: &str| {
            tokenizer.token_to_id(token).ok_or_else(|| config_error(&tokenizer_path, "has no token", token))
        };
        let (cls_id, sep_id) = (special("[CLS]")?, special("[SEP]")?);

        let device = Device::Cpu;
        let tensors = candle_core::safetensors::load(&weights_path, &device)
            .map_err(|error| config_error(&weights_path, "cannot be read", error))?;
        let model = Bert::load(tensors, &config, precision)
            .map_err(|error| config_error(&weights_path, "does not match config.json", error))?;

        let passes = std::thread::available_parallelism().map_or(1, |cores| cores.get().min(4));
        Ok(Self {
            inner: Arc::new(Inner {
                model,
                tokenizer,
                device,
                dimension: config.hidden_size,
                max_windows,
                cls_id,
                sep_id,
                pad_id: padding.pad_id,
                pad_type_id: padding.pad_type_id,
                passes: Arc::new(tokio::sync::Semaphore::new(passes)),
            }),
        })
    }
}

#[async_trait]
impl Embedder for LocalEmbedder {
    fn dimension(&self) -> usize {
        self.inner.dimension
    }

    fn model_id(&self) -> &str {
        MODEL_ID
    }

    async fn embed_batch(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, ProviderError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let inner = Arc::clone(&self.inner);
        let texts = texts.to_vec();
        // The forward pass runs inside rayon's pool (`rayon::scope`), where the matrix products
        // split their work: started from outside, each of them would hand its work to the pool
        // and wait, dozens of handoffs per query (one short query 3.2 → 2.6 ms, measured before
        // the kernel's tiles grew to 6 rows).
        // A permit per call, not per pass: a call's passes run back to back on the cores. The
        // blocking task owns it, so a caller that gives up (a client that hangs up) does not free
        // its slot while its passes still run.
        let permit = Arc::clone(&self.inner.passes)
            .acquire_owned()
            .await
            .map_err(|error| bad_response("embedding task failed", error))?;
        tokio::task::spawn_blocking(move || {
            let vectors = rayon::scope(|_| inner.embed_all(&texts));
            drop(permit);
            vectors
        })
        .await
        .map_err(|error| bad_response("embedding task failed", error))?
    }
}

/// Splits texts into forward passes: each pass holds texts of similar length (indices into the
/// input, shortest first), so that a short text never pays for a long one's padding: a memory of
/// 256 tokens and the twenty entity names found in it cost one long pass and one short one, not
/// twenty-one long ones. Passes hold at most [`MAX_TEXTS_PER_PASS`] texts and
/// [`MAX_TOKENS_PER_PASS`] padded tokens.
fn plan_passes(lengths: &[usize]) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by_key(|&index| lengths[index]);
    let mut passes: Vec<Vec<usize>> = Vec::new();
    let mut shortest = 0;
    for index in order {
        let length = lengths[index];
        let fits = passes.last().is_some_and(|pass| {
            pass.len() < MAX_TEXTS_PER_PASS
                && (pass.len() + 1) * length <= MAX_TOKENS_PER_PASS
                && length <= (2 * shortest).max(SHORT_TOKENS)
        });
        if fits {
            passes.last_mut().expect("a pass").push(index);
        } else {
            shortest = length;
            passes.push(vec![index]);
        }
    }
    passes
}

impl Inner {
    /// Embeds every text, in passes of similar length, and returns the vectors in input order.
    fn embed_all(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, ProviderError> {
        let inputs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let encodings =
            self.tokenizer.encode_batch(inputs, true).map_err(|error| bad_response("tokenization failed", error))?;
        // Every window of every text, with the text it belongs to.
        let windows: Vec<(usize, Vec<u32>)> = encodings
            .iter()
            .enumerate()
            .flat_map(|(text, encoding)| self.windows(encoding.get_ids()).into_iter().map(move |ids| (text, ids)))
            .collect();
        let lengths: Vec<usize> = windows.iter().map(|(_, window)| window.len()).collect();
        // Per text: (tokens, vector) of each of its windows.
        let mut parts: Vec<Vec<(f32, Vec<f32>)>> = vec![Vec::new(); texts.len()];
        for pass in plan_passes(&lengths) {
            let width = pass.iter().map(|&index| lengths[index]).max().unwrap_or(0);
            let rows = pass.len();
            let mut ids = Vec::with_capacity(rows * width);
            let mut type_ids = Vec::with_capacity(rows * width);
            let mut mask = Vec::with_capacity(rows * width);
            for &index in &pass {
                let window = &windows[index].1;
                let padding = width - window.len();
                ids.extend(window.iter().copied().chain(std::iter::repeat_n(self.pad_id, padding)));
                // One sequence: type 0 throughout, attention on every real token.
                type_ids
                    .extend(std::iter::repeat_n(0, window.len()).chain(std::iter::repeat_n(self.pad_type_id, padding)));
                mask.extend(std::iter::repeat_n(1, window.len()).chain(std::iter::repeat_n(0, padding)));
            }
            let pass_vectors = self
                .forward(ids, type_ids, mask, (rows, width))
                .map_err(|error| bad_response("inference failed", error))?;
            for (index, vector) in pass.into_iter().zip(pass_vectors) {
                let (text, window) = &windows[index];
                parts[*text].push((window.len() as f32, vector));
            }
        }
        parts
            .into_iter()
            .map(|windows| combine(windows).ok_or_else(|| bad_response("inference failed", "a text was not embedded")))
            .collect()
    }

    /// The windows of one encoded text (`[CLS] … [SEP]`): the text itself when it fits in
    /// [`MAX_TOKENS`], else windows of that size overlapping by [`WINDOW_OVERLAP`] tokens, at
    /// most `max_windows`, each opened and closed by `[CLS]` and `[SEP]` again.
    fn windows(&self, ids: &[u32]) -> Vec<Vec<u32>> {
        if ids.len() <= MAX_TOKENS {
            return vec![ids.to_vec()];
        }
        let content = &ids[1..ids.len() - 1];
        let span = MAX_TOKENS - 2;
        let mut windows = Vec::new();
        let mut start = 0;
        loop {
            let stop = (start + span).min(content.len());
            let mut window = Vec::with_capacity(stop - start + 2);
            window.push(self.cls_id);
            window.extend_from_slice(&content[start..stop]);
            window.push(self.sep_id);
            windows.push(window);
            if stop == content.len() || windows.len() == self.max_windows {
                return windows;
            }
            start += span - WINDOW_OVERLAP;
        }
    }

    /// Runs BERT on a padded batch, then mean-pools over real tokens and L2-normalises.
    fn forward(
        &self,
        ids: Vec<u32>,
        type_ids: Vec<u32>,
        mask: Vec<u32>,
        shape: (usize, usize),
    ) -> candle_core::Result<Vec<Vec<f32>>> {
        let ids = Tensor::from_vec(ids, shape, &self.device)?;
        let type_ids = Tensor::from_vec(type_ids, shape, &self.device)?;
        let mask = Tensor::from_vec(mask, shape, &self.device)?;

        // (rows, width, hidden)
        let hidden = self.model.forward(&ids, &type_ids, &mask)?;
        // (rows, width, 1): 1.0 on real tokens, 0.0 on padding.
        let mask = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
        let summed = hidden.broadcast_mul(&mask)?.sum(1)?;
        let counts = mask.sum(1)?.maximum(1e-9)?;
        let mean = summed.broadcast_div(&counts)?;
        let norms = mean.sqr()?.sum_keepdim(1)?.sqrt()?.maximum(1e-12)?;
        mean.broadcast_div(&norms)?.to_vec2::<f32>()
    }
}

/// The vector of a text from its windows' (tokens, unit vector): the one window's vector as it
/// is, or the token-weighted mean of several, normalised. `None` without windows.
fn combine(mut windows: Vec<(f32, Vec<f32>)>) -> Option<Vec<f32>> {
    if windows.len() <= 1 {
        return windows.pop().map(|(_, vector)| vector);
    }
    let mut sum = vec![0.0_f32; windows[0].1.len()];
    for (weight, vector) in &windows {
        sum.iter_mut().zip(vector).for_each(|(total, value)| *total += weight * value);
    }
    let norm = sum.iter().map(|value| value * value).sum::<f32>().sqrt().max(1e-12);
    Some(sum.into_iter().map(|value| value / norm).collect())
}

/// Returns the path of `file` in `model_dir`, or a configuration error if it is not there.
fn required_file(model_dir: &Path, file: &str) -> Result<PathBuf> {
    let path = model_dir.join(file);
    if path.is_file() {
        Ok(path)
    } else {
        Err(crate::Error::Config(format!(
            "local embedder model file {} is missing (expected {file} in {}); run scripts/fetch-model.sh",
            path.display(),
            model_dir.display()
        )))
    }
}

/// Builds the configuration error for a model file that exists but cannot be used.
fn config_error(path: &Path, problem: &str, error: impl fmt::Display) -> crate::Error {
    crate::Error::Config(format!(
        "local embedder model file {} {problem}: {error}; run scripts/fetch-model.sh",
        path.display()
    ))
}

/// Builds the provider error for a failure while embedding.
fn bad_response(context: &str, error: impl fmt::Display) -> ProviderError {
    ProviderError::new(ProviderErrorKind::BadResponse, PROVIDER, format!("{context}: {error}"))
}

#[cfg(test)]
mod tests {
    use std::sync::OnceLock;

    use super::*;

    const MODEL_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/all-MiniLM-L6-v2");

    fn embedder() -> LocalEmbedder {
        static EMBEDDER: OnceLock<LocalEmbedder> = OnceLock::new();
        EMBEDDER.get_or_init(|| LocalEmbedder::load(Path::new(MODEL_DIR)).expect("model loads")).clone()
    }

    fn cosine(a: &[f32], b: &[f32]) -> f32 {
        let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
        let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
        dot / (norm(a) * norm(b))
    }

    fn strings(texts: &[&str]) -> Vec<String> {
        texts.iter().map(|text| (*text).to_owned()).collect()
    }

    #[tokio::test]
    async fn reports_dimension_and_model_id() {
        let embedder = embedder();
        assert_eq!(embedder.dimension(), 384);
        assert_eq!(embedder.model_id(), "all-MiniLM-L6-v2");
        let vector = embedder.embed("hello world").await.expect("embeds");
        assert_eq!(vector.len(), 384);
    }

    #[tokio::test]
    async fn vectors_are_unit_length() {
        let texts = strings(&["", "a", "I am allergic to peanuts", &"long text ".repeat(400)]);
        let vectors = embedder().embed_batch(&texts).await.expect("embeds");
        assert_eq!(vectors.len(), texts.len());
        for vector in &vectors {
            let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-5, "norm {norm}");
        }
    }

    /// A long reply whose last sentences, far past the first 256 tokens, are about one thing.
    fn long_reply(ending: &str) -> String {
        let opening = "We went through the quarterly budget spreadsheet line by line, checking the travel \
                       expenses, the office supplies and the software licences against last year. ";
        format!("{}{ending}", opening.repeat(10))
    }

    #[tokio::test]
    async fn long_texts_are_embedded_in_windows() {
        let windowed = embedder();
        static CUT: OnceLock<LocalEmbedder> = OnceLock::new();
        let cut = CUT.get_or_init(|| LocalEmbedder::load_with_windows(Path::new(MODEL_DIR), 1).expect("loads")).clone();
        let text = long_reply(
            "By the way, my daughter Lena has a severe peanut allergy. She carries an EpiPen to school, her \
             teachers know what to do if she eats peanuts by mistake, and we check every food label for nuts \
             before we buy anything.",
        );
        let encoding = windowed.inner.tokenizer.encode(text.as_str(), true).expect("tokenizes");
        let windows = windowed.inner.windows(encoding.get_ids());
        assert_eq!(windows.len(), 2, "{} tokens", encoding.len());
        for window in &windows {
            assert!(window.len() <= MAX_TOKENS);
            assert_eq!((window.first(), window.last()), (Some(&101), Some(&102)), "each window is [CLS] … [SEP]");
        }
        // Consecutive windows share WINDOW_OVERLAP tokens, and together cover the whole text.
        let (first, second) = (&windows[0][1..windows[0].len() - 1], &windows[1][1..windows[1].len() - 1]);
        assert_eq!(first[first.len() - WINDOW_OVERLAP..], second[..WINDOW_OVERLAP]);
        assert_eq!(first.len() + second.len() - WINDOW_OVERLAP, encoding.len() - 2);
        let query = windowed.embed("Which food allergy does the daughter have?").await.expect("embeds");
        let whole = windowed.embed(&text).await.expect("embeds");
        let first_window = cut.embed(&text).await.expect("embeds");
        let (seen, unseen) = (cosine(&query, &whole), cosine(&query, &first_window));
        assert!(seen > unseen + 0.05, "the ending moves the vector: {seen} vs {unseen}");
        // Short texts get the model's own vector whatever the window limit.
        let short = strings(&["I am allergic to peanuts", "hello"]);
        assert_eq!(windowed.embed_batch(&short).await.expect("embeds"), cut.embed_batch(&short).await.expect("embeds"));
        // Beyond the limit the rest is not embedded: a huge text costs at most `max_windows` windows.
        let huge = "word ".repeat(20_000);
        let encoding = windowed.inner.tokenizer.encode(huge.as_str(), true).expect("tokenizes");
        assert_eq!(
            windowed.inner.windows(encoding.get_ids()).len(),
            DEFAULT_MAX_WINDOWS,
            "tokenized only as far as needed"
        );
        let vector = windowed.embed(&huge).await.expect("embeds");
        assert!((vector.iter().map(|x| x * x).sum::<f32>().sqrt() - 1.0).abs() < 1e-5);
    }

    #[test]
    fn windows_combine_by_tokens() {
        let combined = combine(vec![(3.0, vec![1.0, 0.0]), (1.0, vec![0.0, 1.0])]).expect("vector");
        let expected = [3.0 / 10.0_f32.sqrt(), 1.0 / 10.0_f32.sqrt()];
        assert!(combined.iter().zip(expected).all(|(a, b)| (a - b).abs() < 1e-6), "{combined:?}");
        assert_eq!(combine(vec![(5.0, vec![0.6, 0.8])]), Some(vec![0.6, 0.8]), "one window as it is");
        assert_eq!(combine(Vec::new()), None);
    }

    /// The int8 weights move no vector further than a cosine of 0.999 from the f32 model's, on
    /// short and long texts alike.
    #[tokio::test]
    async fn int8_vectors_stay_within_a_cosine_of_0_999_of_f32() {
        static F32: OnceLock<LocalEmbedder> = OnceLock::new();
        let exact = F32
            .get_or_init(|| {
                LocalEmbedder::load_with(Path::new(MODEL_DIR), DEFAULT_MAX_WINDOWS, Precision::F32).expect("loads")
            })
            .clone();
        let int8 = LocalEmbedder::load_with(Path::new(MODEL_DIR), DEFAULT_MAX_WINDOWS, Precision::Int8).expect("loads");
        let texts = strings(&[
            "",
            "hello",
            "Paris",
            "I am allergic to peanuts",
            "what food should the user avoid?",
            "The user's daughter Lena moved to Lisbon in March and works as a nurse at the Riverside Clinic.",
            "Prefers aisle seats on flights longer than three hours; vegetarian meals; Star Alliance gold.",
            "¿Dónde vive el usuario? 用户住在哪里？ Где живёт пользователь?",
            &long_reply("My favourite programming language is Rust, although I still write a lot of Python at work."),
        ]);
        let (ours, reference) =
            (int8.embed_batch(&texts).await.expect("embeds"), exact.embed_batch(&texts).await.expect("embeds"));
        for ((text, ours), reference) in texts.iter().zip(&ours).zip(&reference) {
            let similarity = cosine(ours, reference);
            assert!(similarity >= 0.999, "{:?}: cosine {similarity}", text.chars().take(40).collect::<String>());
        }
    }

    #[tokio::test]
    async fn similar_sentences_are_close() {
        let texts = strings(&["I am allergic to peanuts", "The user cannot eat peanuts", "The weather is nice"]);
        let vectors = embedder().embed_batch(&texts).await.expect("embeds");
        let related = cosine(&vectors[0], &vectors[1]);
        let unrelated = cosine(&vectors[0], &vectors[2]);
        assert!((related - 0.580).abs() < 0.02, "related cosine {related}");
        assert!((unrelated - 0.076).abs() < 0.03, "unrelated cosine {unrelated}");
    }

    #[tokio::test]
    async fn padding_does_not_change_vectors() {
        let long = "My sister moved to Lisbon last spring and now works as a nurse at the \
                    children's hospital, which she says is the best job she has ever had.";
        let texts = strings(&["hi", "I am allergic to peanuts", long, "", "Paris"]);
        let embedder = embedder();
        let batch = embedder.embed_batch(&texts).await.expect("embeds batch");
        for (text, batched) in texts.iter().zip(&batch) {
            let alone = embedder.embed(text).await.expect("embeds one");
            let diff = alone.iter().zip(batched).map(|(a, b)| (a - b).abs()).fold(0.0_f32, f32::max);
            assert!(diff < 1e-4, "text {text:?} differs by {diff}");
        }
    }

    #[tokio::test]
    async fn large_batches_are_chunked_in_order() {
        let texts: Vec<String> = (0..MAX_TEXTS_PER_PASS * 2 + 3).map(|i| format!("memory number {i}")).collect();
        let embedder = embedder();
        let vectors = embedder.embed_batch(&texts).await.expect("embeds");
        assert_eq!(vectors.len(), texts.len());
        let last = embedder.embed(&texts[texts.len() - 1]).await.expect("embeds one");
        assert!(cosine(&last, &vectors[texts.len() - 1]) > 0.9999);
    }

    #[test]
    fn passes_group_texts_of_similar_length() {
        // A long memory text and the short entity names found in it: one long pass, one short.
        let mut lengths = vec![256];
        lengths.extend([4, 6, 3, 9, 5, 7, 4, 8, 6, 5]);
        let passes = plan_passes(&lengths);
        assert_eq!(passes.len(), 2, "{passes:?}");
        assert_eq!(passes[1], vec![0]);
        // Lengths more than twice apart go to separate passes; every index appears once.
        let lengths = [40, 100, 45, 30, 250, 90, 20, 120];
        let passes = plan_passes(&lengths);
        let mut seen: Vec<usize> = passes.iter().flatten().copied().collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..lengths.len()).collect::<Vec<_>>());
        for pass in &passes {
            let shortest = pass.iter().map(|&index| lengths[index]).min().expect("non-empty");
            let longest = pass.iter().map(|&index| lengths[index]).max().expect("non-empty");
            assert!(longest <= (2 * shortest).max(SHORT_TOKENS), "{pass:?}");
        }
        // Bounds: texts and padded tokens per pass.
        let passes = plan_passes(&[200; 40]);
        assert!(passes.iter().all(|pass| pass.len() * 200 <= MAX_TOKENS_PER_PASS), "{passes:?}");
        let passes = plan_passes(&[3; 100]);
        assert!(passes.iter().all(|pass| pass.len() <= MAX_TEXTS_PER_PASS), "{passes:?}");
        assert!(plan_passes(&[]).is_empty());
    }

    #[tokio::test]
    async fn mixed_lengths_come_back_in_input_order() {
        let long = "Maria moved to Lisbon in March and now works at the Riverside Clinic as a nurse. ".repeat(30);
        let texts = strings(&["Lisbon", &long, "Maria", "Riverside Clinic", "", &long[..400], "March"]);
        let embedder = embedder();
        let batch = embedder.embed_batch(&texts).await.expect("embeds batch");
        assert_eq!(batch.len(), texts.len());
        for (text, batched) in texts.iter().zip(&batch) {
            let alone = embedder.embed(text).await.expect("embeds one");
            assert!(cosine(&alone, batched) > 0.9999, "text {:?}", &text[..text.len().min(30)]);
        }
    }

    #[tokio::test]
    async fn empty_batch_gives_empty_output() {
        let vectors = embedder().embed_batch(&[]).await.expect("embeds");
        assert!(vectors.is_empty());
    }

    #[test]
    fn missing_model_is_a_config_error() {
        let error = LocalEmbedder::load(Path::new("/nonexistent/model")).expect_err("fails");
        let message = error.to_string();
        assert!(matches!(error, crate::Error::Config(_)), "{message}");
        assert!(message.contains("/nonexistent/model/config.json"), "{message}");
        assert!(message.contains("scripts/fetch-model.sh"), "{message}");
    }
}
