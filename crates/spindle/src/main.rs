use clap::Parser;

fn main() {
    let cli = spindle::config::Cli::parse();
    let result = spindle::config::Config::from_cli(cli).and_then(spindle::server::run);
    if let Err(e) = result {
        spindle::say!("spindle: error: {e}");
        std::process::exit(1);
    }
}
