//! Writes spindle's man page, spindle(8), and its bash, zsh and fish
//! completions into a directory, all from the clap definitions of the
//! command line (`spindle::config::Cli`), so that options, page and
//! completions cannot disagree. The Debian package's build runs it
//! (debian/rules).
//!
//! Usage: spindle-mangen DIR (writes DIR/spindle.8, DIR/spindle.bash,
//! DIR/_spindle and DIR/spindle.fish).

use std::io::Write;
use std::path::Path;

use clap::CommandFactory;
use clap_complete::Shell;

/// What the options cannot say: files, signals, exit status (roff).
const EXTRA: &str = r#".SH FILES
.TP
.I /etc/spindle/spindle.toml
The configuration the packaged \fBspindle.service\fR starts \fBspindle\fR with (\fB\-\-config\fR): the same keys as the long options, without the dashes.
.TP
.I /lib/systemd/system/spindle.socket
Port 80 (IPv4 and IPv6), bound by systemd and passed to \fBspindle\fR (socket activation). A socket whose address is one of \fBtls\-listen\fR serves HTTPS.
.TP
.I /var/www/html
The directory the packaged configuration serves.
.TP
.I /var/log/spindle/access.log
The access log, rotated daily by \fI/etc/logrotate.d/spindle\fR. Errors go to the journal (\fBjournalctl \-u spindle\fR).
.SH SIGNALS
.TP
.B SIGHUP
Read the configuration file and the certificates again and reopen the logs (\fBsystemctl reload spindle\fR).
.TP
.B SIGUSR1
Reopen the logs (logrotate).
.TP
.B SIGUSR2
Start the binary at the path this one was started from, with the same command line, and hand it the listening sockets; this process then finishes its responses and exits. If the new one cannot start, this one keeps serving. The Debian package's upgrade does this.
.TP
.B SIGTERM
Stop accepting, finish the responses in flight (up to \fB\-\-drain\-timeout\fR), and exit.
.SH EXIT STATUS
0 after a clean stop; 1 when the server cannot start (one line on standard error says why); 2 for a malformed command line.
.SH SEE ALSO
.BR systemctl (1),
.BR journalctl (1),
.BR logrotate (8)
"#;

fn main() {
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    let [dir] = args.as_slice() else {
        eprintln!("usage: spindle-mangen DIR (writes spindle.8 and the bash, zsh and fish completions there)");
        std::process::exit(2);
    };
    if let Err(e) = write_all(Path::new(dir)) {
        eprintln!("spindle-mangen: error: {e}");
        std::process::exit(1);
    }
}

fn write_all(dir: &Path) -> Result<(), String> {
    let mut cmd = spindle::config::Cli::command();
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .section("8")
        .manual("System Manager's Manual")
        .source(format!("spindle {}", env!("CARGO_PKG_VERSION")))
        .render(&mut page)
        .map_err(|e| e.to_string())?;
    page.extend_from_slice(EXTRA.as_bytes());
    write(dir, "spindle.8", &page)?;
    for (shell, name) in [
        (Shell::Bash, "spindle.bash"),
        (Shell::Zsh, "_spindle"),
        (Shell::Fish, "spindle.fish"),
    ] {
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut cmd, "spindle", &mut script);
        write(dir, name, &script)?;
    }
    Ok(())
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), String> {
    let path = dir.join(name);
    std::fs::File::create(&path)
        .and_then(|mut f| f.write_all(bytes))
        .map_err(|e| format!("{}: {e}", path.display()))
}
