//! The `recalld` binary: parses flags, loads config, starts logging, calls the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use recalld::config::{Overrides, ProcessEnv, Settings};

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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve {
            config,
            socket,
            data,
            log,
        } => {
            let over = Overrides {
                config,
                socket,
                data,
                log,
            };
            let settings = match Settings::resolve(&over, &ProcessEnv) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("recalld: {e}");
                    return ExitCode::from(2);
                }
            };
            init_logging(&settings.log);
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .expect("tokio runtime");
            match runtime.block_on(recalld::run(settings, recalld::server::shutdown::signals())) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("recalld: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Config { config } => {
            let over = Overrides {
                config,
                ..Default::default()
            };
            match Settings::resolve(&over, &ProcessEnv) {
                Ok(s) => {
                    println!("{s:#?}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("recalld: {e}");
                    ExitCode::from(2)
                }
            }
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
