//! `recalld-bench replay`: replays LoCoMo conversations through a real recalld daemon and
//! scores evidence availability per category against baselines at the same token count.
//! `recalld-bench load`: real agent traffic from concurrent clients, its latencies against the
//! `ping` floor, lanes, memory, disk and cold start (module `load`).
//! Progress goes to stderr; the markdown table to stdout; JSON (and the table) to `--out`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use recalld::client::Client;
use recalld::models::{MiniLm, Usage};
use recalld_bench::baselines::{self, Rankings};
use recalld_bench::daemon::{bench_dir, model_dir, Daemon};
use recalld_bench::evaluate::evaluate;
use recalld_bench::load::{self, LoadOptions};
use recalld_bench::locomo::{self, Conversation};
use recalld_bench::replay::{self, Ask, Asked, Options, Stats};
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
    /// Real agent traffic from concurrent clients: latency against the ping floor, lanes, RSS,
    /// bytes on disk, cold start.
    Load(LoadArgs),
}

#[derive(clap::Args)]
struct LoadArgs {
    /// The agent traces file (JSON lines of Chat Completions conversations).
    #[arg(long, default_value_os_t = bench_dir().join("agent-traces-dev.jsonl"))]
    traces: PathBuf,
    /// Concurrent clients, one connection each (at most one per memory).
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Memories, shared out among the clients.
    #[arg(long, default_value_t = 8)]
    memories: usize,
    /// Stored history messages to reach per memory (traces are replayed one after another).
    /// The default keeps the traffic near 40 s on a 2-core machine; 10k and 100k are long runs.
    #[arg(long, default_value_t = 300)]
    messages: u64,
    /// The token ceiling every decorate sends.
    #[arg(long, default_value_t = 16_000)]
    ceiling: u64,
    /// The daemon binary to start (default: `recalld` beside this binary).
    #[arg(long)]
    recalld: Option<PathBuf>,
    /// An engine setting for the started daemon, as a line of its `[engine]` section (repeat).
    #[arg(long)]
    engine: Vec<String>,
    /// Milliseconds between `stats` polls (lane depth) and RSS readings.
    #[arg(long, default_value_t = 250)]
    poll_ms: u64,
    /// Decorate requests kept to be echoed by `ping` (the floor).
    #[arg(long, default_value_t = 500)]
    floor_samples: usize,
    /// Seconds to wait for the lanes to drain after the traffic (`quiet` per memory). The
    /// default keeps the run near a minute; what is left then is reported, not hidden. Give
    /// 600 to measure a full drain.
    #[arg(long, default_value_t = 20)]
    drain_timeout: u64,
    /// The cost run: the embedder and judge are the OpenAI-compatible provider pointed at a
    /// local endpoint the benchmark starts, which counts calls and tokens per task.
    #[arg(long)]
    cost: bool,
    /// Milliseconds the simulated model takes per call, between decorate and report (0: the
    /// next call at once, far more traffic than agents waiting on a real model send).
    #[arg(long, default_value_t = 0)]
    think_ms: u64,
    /// Turns measured after the drain, each decorate sent once its memory's lane is quiet (as
    /// an agent waiting on its model leaves the lanes time): decorate and report at the
    /// memories' size with the lanes keeping up. Runs only when the lanes drained; 0: none.
    #[arg(long, default_value_t = 200)]
    paced: usize,
    /// Where to write `load.json` and `load.md`.
    #[arg(long, default_value = "bench/results")]
    out: PathBuf,
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
    /// Hours between the last turn and the questions (asked at the end).
    #[arg(long, default_value_t = 1.0)]
    question_delay_hours: f64,
    /// When each question is asked: `end`, after the last session (questions about the past);
    /// `after-evidence`, right after the session holding its last evidence turn, as the next
    /// message of the conversation in progress (the baselines then choose among the turns said
    /// so far).
    #[arg(long, value_enum, default_value_t = Ask::End)]
    ask: Ask,
    /// Where to write `replay.json` and `replay.md`.
    #[arg(long, default_value = "bench/results")]
    out: PathBuf,
    /// An engine setting for the started daemon, as a line of its `[engine]` section (repeat):
    /// `--engine 'recall_share = 0.4'`. Recorded in `replay.json` under `options.engine`.
    #[arg(long)]
    engine: Vec<String>,
}

fn default_data() -> PathBuf {
    bench_dir().join("locomo-dev.json")
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Replay(args) => run(args),
        Cmd::Load(args) => run_load(args),
    };
    if let Err(e) = result {
        eprintln!("recalld-bench: {e}");
        std::process::exit(1);
    }
}

fn daemon_bin(given: &Option<PathBuf>) -> Result<PathBuf, String> {
    match given {
        Some(b) => Ok(b.clone()),
        None => Ok(std::env::current_exe()
            .map_err(|e| e.to_string())?
            .with_file_name("recalld")),
    }
}

/// The command line as typed (arguments with spaces or quotes single-quoted), for the results.
fn command_line() -> String {
    std::env::args()
        .map(|a| {
            if a.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=,:".contains(c)) {
                a
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn run_load(args: LoadArgs) -> Result<(), String> {
    let o = LoadOptions {
        recalld: daemon_bin(&args.recalld)?,
        traces: args.traces,
        clients: args.clients,
        memories: args.memories,
        messages: args.messages,
        ceiling: args.ceiling,
        engine: args.engine,
        poll: Duration::from_millis(args.poll_ms),
        floor_samples: args.floor_samples,
        drain_timeout: Duration::from_secs(args.drain_timeout),
        cost: args.cost,
        think: Duration::from_millis(args.think_ms),
        paced: args.paced,
    };
    let report = load::run(&o, &mut |line| eprintln!("{line}"))?;
    let md = report.markdown(&command_line());
    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    let json_path = args.out.join("load.json");
    let md_path = args.out.join("load.md");
    let mut json = serde_json::to_value(&report).map_err(|e| e.to_string())?;
    json["command"] = json!(command_line());
    std::fs::write(&json_path, serde_json::to_string_pretty(&json).unwrap_or_default())
        .map_err(|e| format!("{}: {e}", json_path.display()))?;
    std::fs::write(&md_path, &md).map_err(|e| format!("{}: {e}", md_path.display()))?;
    println!("{md}");
    eprintln!(
        "wrote {} and {} in {:.1}s",
        json_path.display(),
        md_path.display(),
        report.seconds
    );
    Ok(())
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
            let bin = daemon_bin(&args.recalld)?;
            // The embedder gets as long as it needs for a question (the default recall deadline
            // is 300 ms): on a loaded machine a missed deadline would change the table from run
            // to run.
            let mut engine = vec!["recall_deadline_ms = 10000".to_string()];
            engine.extend(args.engine.iter().cloned());
            daemon = Daemon::start(&bin, &engine)?;
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
            ask: args.ask,
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
    let asked = match args.ask {
        Ask::End => format!(
            "Each question was asked after the last session ({} h after its last turn).",
            args.question_delay_hours
        ),
        Ask::AfterEvidence => "Each question was asked right after the session holding its last evidence turn \
             (`--ask after-evidence`), as the conversation's next message; the baselines chose among \
             the turns said by then."
            .to_string(),
    };
    let header = format!(
        "Evidence availability on {} ({} conversations, categories 1–4 with evidence), recalld {} \
         with a simulated model (notes = the file's observations). {asked} {quiet_note}\n\n",
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
            "ask": clap::ValueEnum::to_possible_value(&args.ask).map(|v| v.get_name().to_owned()),
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
    type Replayed = Result<(Vec<Asked>, Stats), String>;
    let results: Mutex<Vec<Option<Replayed>>> = Mutex::new((0..convs.len()).map(|_| None).collect());
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
