//! `recalld-bench replay`: replays LoCoMo conversations through a real recalld daemon and
//! scores evidence availability per category against baselines at the same token count.
//! Progress goes to stderr; the markdown table to stdout; JSON (and the table) to `--out`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use recalld::client::Client;
use recalld::models::{MiniLm, Usage};
use recalld_bench::baselines::{self, Rankings};
use recalld_bench::evaluate::evaluate;
use recalld_bench::locomo::{self, Conversation};
use recalld_bench::replay::{self, Asked, Options, Stats};
use recalld_bench::table::Table;
use serde_json::json;

#[derive(Parser)]
#[command(name = "recalld-bench", about = "recalld's benchmarks")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Replay LoCoMo conversations through a real daemon; score evidence availability.
    Replay(ReplayArgs),
}

#[derive(clap::Args)]
struct ReplayArgs {
    /// The LoCoMo-format file.
    #[arg(long, default_value_os_t = default_data())]
    data: PathBuf,
    /// Token ceilings to replay at (repeat or comma-separate).
    #[arg(long, value_delimiter = ',', default_values_t = [200_000u64, 16_000, 8_000, 4_000])]
    ceiling: Vec<u64>,
    /// Only the first N conversations.
    #[arg(long)]
    conversations: Option<usize>,
    /// A running daemon's socket; without it a daemon is started on a temporary data dir.
    #[arg(long)]
    socket: Option<PathBuf>,
    /// The daemon binary to start (default: `recalld` beside this binary).
    #[arg(long)]
    recalld: Option<PathBuf>,
    /// Conversations replayed at once (separate memories, separate connections).
    #[arg(long, default_value_t = 1)]
    jobs: usize,
    /// Seconds between the turns of a session.
    #[arg(long, default_value_t = 30.0)]
    turn_gap: f64,
    /// Replayed seconds after which the background lane would have finished: `quiet` is called
    /// before any call that follows a gap at least this long.
    #[arg(long, default_value_t = 10.0)]
    quiet_gap: f64,
    /// Hours between the last turn and the questions.
    #[arg(long, default_value_t = 1.0)]
    question_delay_hours: f64,
    /// Where to write `replay.json` and `replay.md`.
    #[arg(long, default_value = "bench/results")]
    out: PathBuf,
    /// An engine setting for the started daemon, as a line of its `[engine]` section (repeat):
    /// `--engine 'recall_share = 0.4'`. Recorded in `replay.json` under `options.engine`.
    #[arg(long)]
    engine: Vec<String>,
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn default_data() -> PathBuf {
    match std::env::var_os("RECALLD_BENCH_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d).join("locomo-dev.json"),
        _ => repo().join("../shared/bench/locomo-dev.json"),
    }
}

fn model_dir() -> PathBuf {
    match std::env::var_os("RECALLD_MODEL_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => repo().join("models/all-MiniLM-L6-v2"),
    }
}

/// A daemon this program started: stopped (SIGTERM, then kill) when dropped.
struct Daemon {
    child: Child,
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Daemon {
    fn start(bin: &Path, engine: &[String]) -> Result<Daemon, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let socket = dir.path().join("recalld.sock");
        // The embedder gets as long as it needs for a question (the default recall deadline is
        // 300 ms): on a loaded machine a missed deadline would change the table from run to run.
        let config = dir.path().join("recalld.toml");
        let mut toml = String::from("[engine]\nrecall_deadline_ms = 10000\n");
        for line in engine {
            toml.push_str(line);
            toml.push('\n');
        }
        std::fs::write(&config, toml).map_err(|e| e.to_string())?;
        let mut child = Command::new(bin)
            .arg("serve")
            .arg("--socket")
            .arg(&socket)
            .arg("--data")
            .arg(dir.path().join("data"))
            .arg("--config")
            .arg(&config)
            .env_remove("RECALLD_CONFIG")
            .env(
                "RECALLD_LOG",
                std::env::var("RECALLD_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .env("RECALLD_MODEL_DIR", model_dir())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::os::unix::net::UnixStream::connect(&socket).is_err() {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!("{} exited early: {status}", bin.display()));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                return Err("the daemon did not listen within 60 s".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Daemon {
            child,
            socket,
            _dir: dir,
        })
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn main() {
    let cli = Cli::parse();
    let Cmd::Replay(args) = cli.command;
    if let Err(e) = run(args) {
        eprintln!("recalld-bench: {e}");
        std::process::exit(1);
    }
}

fn run(args: ReplayArgs) -> Result<(), String> {
    let started = Instant::now();
    let mut convs = locomo::load(&args.data).map_err(|e| e.to_string())?;
    if let Some(n) = args.conversations {
        convs.truncate(n);
    }
    eprintln!("{} conversations from {}", convs.len(), args.data.display());

    let daemon;
    let socket = match &args.socket {
        Some(s) => s.clone(),
        None => {
            let bin = match &args.recalld {
                Some(b) => b.clone(),
                None => std::env::current_exe()
                    .map_err(|e| e.to_string())?
                    .with_file_name("recalld"),
            };
            daemon = Daemon::start(&bin, &args.engine)?;
            eprintln!("started {} on {}", bin.display(), daemon.socket.display());
            daemon.socket.clone()
        }
    };
    let hello = Client::connect(&socket)
        .and_then(|mut c| c.call("hello", json!({"client": "recalld-bench"})))
        .map_err(|e| format!("cannot talk to {}: {e}", socket.display()))?;

    // Baseline rankings do not depend on the ceiling: once per conversation.
    let embedder = MiniLm::load(&model_dir(), 32, Arc::new(Usage::default())).map_err(|e| e.to_string())?;
    let scratch = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut rankings: Vec<Rankings> = Vec::new();
    for c in &convs {
        let t = Instant::now();
        rankings.push(baselines::rank(c, &embedder, scratch.path())?);
        eprintln!("{}: baselines ranked in {:.1}s", c.id, t.elapsed().as_secs_f64());
    }

    let run_tag = std::process::id();
    let mut per_ceiling = serde_json::Map::new();
    let mut markdown = String::new();
    let mut questions = Vec::new();
    for &ceiling in &args.ceiling {
        let o = Options {
            ceiling,
            turn_gap_s: args.turn_gap,
            quiet_gap_s: args.quiet_gap,
            question_delay_s: args.question_delay_hours * 3600.0,
            ..Options::default()
        };
        let t = Instant::now();
        let replays = replay_all(&socket, &convs, &o, args.jobs, run_tag)?;
        let mut table = Table::default();
        let mut stats = serde_json::Map::new();
        for ((c, r), (asked, st)) in convs.iter().zip(&rankings).zip(&replays) {
            questions.extend(evaluate(c, r, asked, ceiling, &mut table).into_iter().map(|mut q| {
                q["ceiling"] = json!(ceiling);
                q
            }));
            stats.insert(c.id.clone(), serde_json::to_value(st).unwrap_or_default());
        }
        let md = table.markdown(ceiling);
        eprintln!("ceiling {ceiling}: replayed in {:.1}s\n{md}", t.elapsed().as_secs_f64());
        markdown.push_str(&md);
        markdown.push('\n');
        per_ceiling.insert(
            ceiling.to_string(),
            json!({"systems": table.to_json(), "replay": stats, "seconds": t.elapsed().as_secs_f64()}),
        );
    }

    let quiet_note = format!(
        "The replay called `quiet` (wait until the memory's background lane is empty) before every \
         decorate or report that followed at least {} s of replayed time (turns are {} s apart, so \
         before every call): a replay gives the same table every time.",
        args.quiet_gap, args.turn_gap
    );
    let header = format!(
        "Evidence availability on {} ({} conversations, categories 1–4 with evidence), recalld {} \
         with a simulated model (notes = the file's observations). {quiet_note}\n\n",
        args.data.file_name().and_then(|f| f.to_str()).unwrap_or("?"),
        convs.len(),
        hello["server_version"].as_str().unwrap_or("?"),
    );
    let report = json!({
        "benchmark": "locomo replay",
        "data": args.data,
        "conversations": convs.iter().map(|c| &c.id).collect::<Vec<_>>(),
        "server": hello,
        "options": {
            "ceilings": args.ceiling, "turn_gap_s": args.turn_gap, "quiet_gap_s": args.quiet_gap,
            "question_delay_hours": args.question_delay_hours, "jobs": args.jobs,
            "engine": args.engine,
        },
        "quiet": quiet_note,
        "ceilings": per_ceiling,
        "questions": questions,
        "seconds": started.elapsed().as_secs_f64(),
    });
    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    let json_path = args.out.join("replay.json");
    let md_path = args.out.join("replay.md");
    std::fs::write(&json_path, serde_json::to_string_pretty(&report).unwrap_or_default())
        .map_err(|e| format!("{}: {e}", json_path.display()))?;
    std::fs::write(&md_path, format!("{header}{markdown}")).map_err(|e| format!("{}: {e}", md_path.display()))?;
    println!("{header}{markdown}");
    eprintln!(
        "wrote {} and {} in {:.1}s",
        json_path.display(),
        md_path.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Replays every conversation at one ceiling, `jobs` at a time; results in input order.
fn replay_all(
    socket: &Path,
    convs: &[Conversation],
    o: &Options,
    jobs: usize,
    tag: u32,
) -> Result<Vec<(Vec<Asked>, Stats)>, String> {
    let next = Mutex::new(0usize);
    let results: Mutex<Vec<Option<Result<(Vec<Asked>, Stats), String>>>> =
        Mutex::new((0..convs.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| loop {
                let i = {
                    let mut n = next.lock().unwrap_or_else(|e| e.into_inner());
                    let i = *n;
                    *n += 1;
                    i
                };
                let Some(c) = convs.get(i) else { break };
                let memory = format!("{}@{}#{tag}", c.id, o.ceiling);
                let out = Client::connect(socket)
                    .and_then(|mut client| replay::replay(&mut client, c, &memory, o, &mut |line| eprintln!("{line}")))
                    .map_err(|e| format!("{memory}: {e}"));
                results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(out);
            });
        }
    });
    results
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err("not run".into())))
        .collect()
}
