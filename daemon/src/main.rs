//! The `recalld` binary: parses flags, loads config, starts logging, calls the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use recalld::config::{Overrides, ProcessEnv, Settings};
use serde_json::{json, Value};

#[derive(Parser)]
#[command(name = "recalld", version, about = "A memory sidecar for LLM agents")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon in the foreground.
    Serve {
        /// TOML config file (also $RECALLD_CONFIG).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Socket path (also $RECALLD_SOCKET).
        #[arg(long)]
        socket: Option<PathBuf>,
        /// Data directory (also $RECALLD_DATA).
        #[arg(long)]
        data: Option<PathBuf>,
        /// Log filter, e.g. info or recalld=debug (also $RECALLD_LOG).
        #[arg(long)]
        log: Option<String>,
    },
    /// Print the resolved settings and exit.
    Config {
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Write the systemd unit and socket files (ExecStart names this binary) and print the
    /// commands that enable them.
    InstallUnits {
        /// Units for `systemctl --user` (default: system-wide units).
        #[arg(long)]
        user: bool,
        /// Directory to write to (default /etc/systemd/system, or ~/.config/systemd/user).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// The binary ExecStart runs (default: this one).
        #[arg(long)]
        bin: Option<PathBuf>,
    },
    /// Copy the store to a new directory PATH: consistent and compacted, while a daemon serves.
    Backup {
        path: PathBuf,
        #[command(flatten)]
        at: Where,
    },
    /// Put a backup in place of the store (stop the daemon first; the old file is kept aside).
    Restore {
        path: PathBuf,
        #[command(flatten)]
        at: Where,
    },
    /// Remove a memory and everything derived from it; prints what was removed.
    Forget {
        memory: String,
        #[command(flatten)]
        at: Where,
    },
    /// Print the daemon's metrics (Prometheus text, or JSON with --json).
    Metrics {
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        at: Where,
    },
    /// Print everything stored for a memory, as JSON (or MessagePack with --msgpack).
    Export {
        memory: String,
        /// Write MessagePack: every float bit-exact through a file (JSON text is read back
        /// by a parser that may round the last bit).
        #[arg(long)]
        msgpack: bool,
        #[command(flatten)]
        at: Where,
    },
    /// Show a memory: its episodes with their activation, facts, the last decorates'
    /// decisions and the lane (readable in 80 columns; --json prints the op's reply).
    Inspect {
        memory: String,
        /// Activation as of this time: Unix seconds, RFC 3339 or "YYYY-MM-DD HH:MM" (UTC).
        #[arg(long)]
        at: Option<String>,
        /// Print the `inspect` op's reply as JSON.
        #[arg(long)]
        json: bool,
        /// How many of the last decisions to show (at most 32).
        #[arg(long, default_value_t = 8)]
        decisions: u64,
        #[command(flatten)]
        daemon: Where,
    },
    /// Create MEMORY from an export (a JSON or MessagePack file, or - for stdin).
    Import {
        memory: String,
        file: PathBuf,
        #[command(flatten)]
        at: Where,
    },
    /// An agent's knowledge base: curated documents searched beside its memory.
    Documents {
        #[command(subcommand)]
        action: DocumentsAction,
    },
    /// Serve the web inspector on 127.0.0.1 and print its address (with a random token).
    Ui {
        /// The port to listen on (0: any free one).
        #[arg(long, default_value_t = 0)]
        port: u16,
        /// The token API requests must carry (default: 128 random bits).
        #[arg(long)]
        token: Option<String>,
        #[command(flatten)]
        at: Where,
    },
    /// Send any op with JSON arguments and print the reply (for scripts and debugging).
    Call {
        op: String,
        /// The op's arguments as a JSON object.
        #[arg(default_value = "{}")]
        args: String,
        #[command(flatten)]
        at: Where,
    },
}

#[derive(Subcommand)]
enum DocumentsAction {
    /// Add a text or Markdown FILE (- for stdin) to AGENT's documents; a document of the same
    /// name is replaced.
    Add {
        agent: String,
        file: PathBuf,
        /// The document's name (default: the file's name).
        #[arg(long)]
        name: Option<String>,
        #[command(flatten)]
        at: Where,
    },
    /// List AGENT's documents.
    List {
        agent: String,
        #[command(flatten)]
        at: Where,
    },
    /// Remove document ID from AGENT's documents.
    Remove {
        agent: String,
        id: u64,
        #[command(flatten)]
        at: Where,
    },
}

/// Which daemon or store a command means (the same resolution as `serve`).
#[derive(Args)]
struct Where {
    #[arg(long)]
    config: Option<PathBuf>,
    #[arg(long)]
    socket: Option<PathBuf>,
    #[arg(long)]
    data: Option<PathBuf>,
}

impl Where {
    fn settings(&self) -> Result<Settings, ExitCode> {
        let over = Overrides {
            config: self.config.clone(),
            socket: self.socket.clone(),
            data: self.data.clone(),
            log: None,
        };
        Settings::resolve(&over, &ProcessEnv).map_err(|e| {
            eprintln!("recalld: {e}");
            ExitCode::from(2)
        })
    }
}

/// Runs candle's large elementwise ops on the calling thread (unless `CANDLE_NUM_THREADS` is
/// set). Its default is a process-wide pool whose workers and callers spin at a barrier and
/// whose one lock every forward pass shares: the lanes' passes (nice 10) and recall's query
/// then wait on each other, and a worker the lanes started keeps a core busy beside the
/// request path. Off, report's p99 on the agent traces went from 5.1–5.7 to 2.8–3.5 ms
/// (docs/benchmarks.md). Matrix products keep their own parallelism. Set before any thread
/// starts, so nothing reads the environment meanwhile.
fn no_spinning_elementwise_pool() {
    if std::env::var_os("CANDLE_NUM_THREADS").is_none() {
        std::env::set_var("CANDLE_NUM_THREADS", "1");
    }
}

fn main() -> ExitCode {
    no_spinning_elementwise_pool();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve {
            config,
            socket,
            data,
            log,
        } => serve(Overrides {
            config,
            socket,
            data,
            log,
        }),
        Command::Config { config } => {
            let over = Overrides {
                config,
                ..Default::default()
            };
            match Settings::resolve(&over, &ProcessEnv) {
                Ok(s) => {
                    println!("{s:#?}");
                    Ok(())
                }
                Err(e) => {
                    eprintln!("recalld: {e}");
                    Err(ExitCode::from(2))
                }
            }
        }
        Command::InstallUnits { user, dir, bin } => install_units(user, dir, bin),
        Command::Backup { path, at } => {
            let s = match at.settings() {
                Ok(s) => s,
                Err(code) => return code,
            };
            report(recalld::store::backup::backup_dir(&s.data_dir, &path).map(|i| {
                json!({"backup": i.path, "bytes": i.bytes, "memories": i.memories, "schema_version": i.schema_version})
            }))
        }
        Command::Restore { path, at } => {
            let s = match at.settings() {
                Ok(s) => s,
                Err(code) => return code,
            };
            if recalld::admin::is_serving(&s.socket) {
                eprintln!(
                    "recalld: a daemon is serving {}; stop it before restoring",
                    s.socket.display()
                );
                return ExitCode::FAILURE;
            }
            report(recalld::store::backup::restore_dir(&path, &s.data_dir).map(|(i, kept)| {
                json!({"restored": s.data_dir, "from": i.path, "memories": i.memories, "replaced_file_kept_at": kept})
            }))
        }
        Command::Documents { action } => documents(action),
        Command::Forget { memory, at } => op(&at, "forget_memory", json!({ "memory": memory }), false),
        Command::Metrics { json, at } => {
            if json {
                op(&at, "metrics", json!({}), false)
            } else {
                op(&at, "metrics", json!({"format": "prometheus"}), true)
            }
        }
        Command::Export {
            memory,
            msgpack: false,
            at,
        } => op(&at, "export", json!({ "memory": memory }), false),
        Command::Export {
            memory,
            msgpack: true,
            at,
        } => export_msgpack(&at, &memory),
        Command::Inspect {
            memory,
            at,
            json,
            decisions,
            daemon,
        } => inspect(&daemon, &memory, at.as_deref(), decisions, json),
        Command::Import { memory, file, at } => {
            let bytes = if file.as_os_str() == "-" {
                let mut b = Vec::new();
                std::io::Read::read_to_end(&mut std::io::stdin(), &mut b).map(|_| b)
            } else {
                std::fs::read(&file)
            };
            let export: Value = match bytes.map_err(|e| e.to_string()).and_then(|b| read_export(&b)) {
                Ok(v) => v,
                Err(e) => {
                    eprintln!("recalld: {}: {e}", file.display());
                    return ExitCode::from(2);
                }
            };
            op(&at, "import", json!({ "memory": memory, "export": export }), false)
        }
        Command::Ui { port, token, at } => ui(&at, port, token),
        Command::Call { op: name, args, at } => match serde_json::from_str::<Value>(&args) {
            Ok(args) => op(&at, &name, args, false),
            Err(e) => {
                eprintln!("recalld: arguments are not JSON: {e}");
                Err(ExitCode::from(2))
            }
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(code) => code,
    }
}

fn serve(over: Overrides) -> Result<(), ExitCode> {
    let settings = match Settings::resolve(&over, &ProcessEnv) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("recalld: {e}");
            return Err(ExitCode::from(2));
        }
    };
    init_logging(&settings.log);
    if !recalld::cpu::request_path_model_pool() {
        tracing::debug!("rayon's global pool was built before; its threads keep their slices");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        // Its threads (the workers, which run the engine's ops, and the blocking pool) are the
        // request path.
        .on_thread_start(|| {
            recalld::cpu::request_path_thread();
        })
        // Decoding a request nested as deep as the decoder allows (1,024 levels) took more than
        // the 2 MB default in a debug build (test `bad_input::a_request_nested_a_million…`);
        // address space, touched only as far as it is used.
        .thread_stack_size(8 << 20)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let stop = {
        let _inside = runtime.enter();
        recalld::server::shutdown::signals()
    };
    runtime.block_on(recalld::run(settings, stop)).map_err(|e| {
        eprintln!("recalld: {e}");
        ExitCode::FAILURE
    })
}

/// `recalld ui`: binds loopback, prints the page's address, serves until SIGINT or SIGTERM.
fn ui(at: &Where, port: u16, token: Option<String>) -> Result<(), ExitCode> {
    let s = at.settings()?;
    init_logging(&s.log);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let stop = {
        let _inside = runtime.enter();
        recalld::server::shutdown::signals()
    };
    runtime.block_on(async {
        let opts = recalld::ui::Options {
            socket: s.socket.clone(),
            port,
            token,
        };
        let server = recalld::ui::Server::bind(&opts).await.map_err(|e| {
            eprintln!("recalld: {e}");
            ExitCode::from(2)
        })?;
        if let Err(e) = recalld::admin::call(&s.socket, "health", json!({})) {
            eprintln!(
                "recalld: no daemon answers on {} yet ({e}); the page will say so until one does",
                s.socket.display()
            );
        }
        println!("recalld ui: {}", server.url());
        server.serve(stop).await;
        Ok(())
    })
}

fn install_units(user: bool, dir: Option<PathBuf>, bin: Option<PathBuf>) -> Result<(), ExitCode> {
    use recalld::units::{self, Scope};
    let scope = if user { Scope::User } else { Scope::System };
    let Some(dir) = dir.or_else(|| units::default_dir(scope)) else {
        eprintln!("recalld: cannot tell where user units go: set HOME or pass --dir");
        return Err(ExitCode::from(2));
    };
    let bin = match bin.map(Ok).unwrap_or_else(std::env::current_exe) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("recalld: cannot tell which binary this is ({e}); pass --bin");
            return Err(ExitCode::from(2));
        }
    };
    match units::install(scope, &dir, &bin) {
        Ok(paths) => {
            for p in paths {
                println!("wrote {}", p.display());
            }
            println!("{}", units::next_steps(scope));
            Ok(())
        }
        Err(e) => {
            eprintln!("recalld: cannot write units to {}: {e}", dir.display());
            Err(ExitCode::FAILURE)
        }
    }
}

/// Writes a command's output to stdout. A reader that stops early (`recalld export … | head`)
/// is not an error: what it did not read is dropped. Any other failure (a full disk) is, with
/// exit status 1.
fn write_out(bytes: &[u8]) -> Result<(), ExitCode> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            eprintln!("recalld: cannot write the output: {e}");
            Err(ExitCode::FAILURE)
        }
        _ => Ok(()),
    }
}

/// Sends one op to the daemon; prints the reply as JSON (or its `text` when `text` is set).
/// An error reply goes to stderr as `{code, message}` with exit status 1.
fn op(at: &Where, name: &str, args: Value, text: bool) -> Result<(), ExitCode> {
    let s = at.settings()?;
    match recalld::admin::call(&s.socket, name, args) {
        Ok(v) if text => write_out(v["text"].as_str().unwrap_or_default().as_bytes()),
        Ok(v) => write_out(format!("{}\n", serde_json::to_string_pretty(&v).unwrap_or_default()).as_bytes()),
        Err(recalld::client::ClientError::Server(e)) => {
            eprintln!("{}", json!({"code": e.code.as_str(), "message": e.message}));
            Err(ExitCode::FAILURE)
        }
        Err(e) => {
            eprintln!("recalld: {}: {e}", s.socket.display());
            Err(ExitCode::from(3))
        }
    }
}

fn inspect(daemon: &Where, memory: &str, at: Option<&str>, decisions: u64, json: bool) -> Result<(), ExitCode> {
    let at = match at.map(recalld::inspect::parse_time).transpose() {
        Ok(at) => at,
        Err(e) => {
            eprintln!("recalld: --at: {e}");
            return Err(ExitCode::from(2));
        }
    };
    let s = daemon.settings()?;
    match recalld::admin::inspect(&s.socket, memory, at, decisions, json) {
        Ok(text) => write_out(text.as_bytes()),
        Err(recalld::client::ClientError::Server(e)) => {
            eprintln!("{}", json!({"code": e.code.as_str(), "message": e.message}));
            Err(ExitCode::FAILURE)
        }
        Err(e) => {
            eprintln!("recalld: {}: {e}", s.socket.display());
            Err(ExitCode::from(3))
        }
    }
}

fn documents(action: DocumentsAction) -> Result<(), ExitCode> {
    match action {
        DocumentsAction::Add { agent, file, name, at } => {
            let text = if file.as_os_str() == "-" {
                std::io::read_to_string(std::io::stdin())
            } else {
                std::fs::read_to_string(&file)
            }
            .map_err(|e| {
                eprintln!("recalld: cannot read {}: {e}", file.display());
                ExitCode::from(2)
            })?;
            let name = name.unwrap_or_else(|| {
                file.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| "stdin".into())
            });
            op(
                &at,
                "add_document",
                json!({"agent": agent, "name": name, "text": text}),
                false,
            )
        }
        DocumentsAction::List { agent, at } => op(&at, "list_documents", json!({"agent": agent}), false),
        DocumentsAction::Remove { agent, id, at } => {
            op(&at, "remove_document", json!({"agent": agent, "id": id}), false)
        }
    }
}

/// An export file: JSON text (starts with `{`) or a MessagePack map.
fn read_export(bytes: &[u8]) -> Result<Value, String> {
    match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {e}")),
        _ => rmp_serde::from_slice(bytes).map_err(|e| format!("neither JSON nor MessagePack: {e}")),
    }
}

fn export_msgpack(at: &Where, memory: &str) -> Result<(), ExitCode> {
    let s = at.settings()?;
    match recalld::admin::call(&s.socket, "export", json!({ "memory": memory })) {
        Ok(v) => write_out(&rmp_serde::to_vec_named(&v).expect("a JSON value always encodes")),
        Err(recalld::client::ClientError::Server(e)) => {
            eprintln!("{}", json!({"code": e.code.as_str(), "message": e.message}));
            Err(ExitCode::FAILURE)
        }
        Err(e) => {
            eprintln!("recalld: {}: {e}", s.socket.display());
            Err(ExitCode::from(3))
        }
    }
}

fn report<E: std::fmt::Display>(r: Result<Value, E>) -> Result<(), ExitCode> {
    match r {
        Ok(v) => write_out(format!("{}\n", serde_json::to_string_pretty(&v).unwrap_or_default()).as_bytes()),
        Err(e) => {
            eprintln!("recalld: {e}");
            Err(ExitCode::FAILURE)
        }
    }
}

fn init_logging(filter: &str) {
    let filter =
        tracing_subscriber::EnvFilter::try_new(filter).unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
