fn main() { eprintln!("spindle-load: not built yet"); std::process::exit(2); }
