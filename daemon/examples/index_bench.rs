//! Cost of the per-memory search indexes (`recalld::index`): what one more open memory costs
//! (time and resident memory), a one-document commit, BM25 search latency by index size, and
//! the vector index's add, search and save/load. `cargo run --release -p recalld --example
//! index_bench`.

use std::time::Instant;

use recalld::index::vectors::Vectors;
use recalld::index::words::Words;

fn rss_kib() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4
}

fn percentile(mut v: Vec<f64>, p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p) as usize]
}

/// A deterministic pseudo-random stream (xorshift), so runs compare.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

const VOCAB: usize = 5_000;

fn sentence(rng: &mut Rng, words: usize) -> String {
    (0..words)
        .map(|_| format!("w{}", rng.next() as usize % VOCAB))
        .collect::<Vec<_>>()
        .join(" ")
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(0x9e3779b97f4a7c15);

    // One more memory: open its index, stage one document, commit (fsync), keep it open.
    let words = Words::open(&dir.path().join("open"), 1_000).unwrap();
    let before = rss_kib();
    let t = Instant::now();
    let memories = 100;
    for m in 0..memories {
        words.add(&format!("m{m}"), 1, &sentence(&mut rng, 20)).unwrap();
        words.commit(&format!("m{m}")).unwrap();
    }
    let per = t.elapsed().as_secs_f64() * 1e3 / memories as f64;
    let rss = (rss_kib() - before) as f64 / memories as f64;
    println!("words: open + add + commit per new memory {per:.1} ms; resident memory per open memory (with writer) {rss:.0} KiB");
    let t = Instant::now();
    for _ in 0..50 {
        words.add("m0", rng.next() % 1000 + 2, &sentence(&mut rng, 20)).unwrap();
        words.commit("m0").unwrap();
    }
    println!(
        "words: one-document commit {:.1} ms",
        t.elapsed().as_secs_f64() * 1e3 / 50.0
    );
    drop(words);

    for n in [1_000usize, 10_000, 100_000] {
        let words = Words::open(&dir.path().join(format!("n{n}")), 4).unwrap();
        let t = Instant::now();
        for i in 0..n {
            words.add("big", i as u64, &sentence(&mut rng, 30)).unwrap();
        }
        words.commit("big").unwrap();
        let build = t.elapsed().as_secs_f64();
        let lat: Vec<f64> = (0..300)
            .map(|_| {
                let q = sentence(&mut rng, 8);
                let t = Instant::now();
                words.search("big", &q, 10).unwrap();
                t.elapsed().as_secs_f64() * 1e6
            })
            .collect();
        println!(
            "words: {n} docs of 30 words: built in {build:.1} s; top-10 search p50 {:.0} µs, p99 {:.0} µs",
            percentile(lat.clone(), 0.5),
            percentile(lat, 0.99)
        );
    }

    let dim = 384;
    for n in [1_000usize, 10_000] {
        let vectors = Vectors::open(&dir.path().join(format!("v{n}")), dim, "vectors", 4).unwrap();
        let unit = |rng: &mut Rng| {
            let v: Vec<f32> = (0..dim).map(|_| (rng.next() % 2000) as f32 / 1000.0 - 1.0).collect();
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.into_iter().map(|x| x / norm).collect::<Vec<f32>>()
        };
        let data: Vec<Vec<f32>> = (0..n).map(|_| unit(&mut rng)).collect();
        let t = Instant::now();
        for (i, v) in data.iter().enumerate() {
            vectors.add("m", i as u64, v).unwrap();
        }
        let add = n as f64 / t.elapsed().as_secs_f64();
        let lat: Vec<f64> = (0..300)
            .map(|_| {
                let q = unit(&mut rng);
                let t = Instant::now();
                vectors.search("m", &q, 10).unwrap();
                t.elapsed().as_secs_f64() * 1e6
            })
            .collect();
        let t = Instant::now();
        vectors.save("m").unwrap();
        let save = t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        let again = Vectors::open(&dir.path().join(format!("v{n}")), dim, "vectors", 4).unwrap();
        assert_eq!(again.ids("m").unwrap().len(), n);
        let load = t.elapsed().as_secs_f64() * 1e3;
        println!(
            "vectors: {n} × {dim}: add {add:.0}/s; top-10 search p50 {:.0} µs, p99 {:.0} µs; save {save:.0} ms, load {load:.0} ms",
            percentile(lat.clone(), 0.5),
            percentile(lat, 0.99)
        );
    }
}
