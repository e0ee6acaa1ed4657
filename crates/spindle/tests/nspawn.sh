# Sourced (bash) by the tests that need a real systemd: boots this
# machine's own root file system (an overlay over /, so nothing on the
# host changes) as a container with systemd as PID 1 and a private
# network, to basic.target, and cleans it all up on exit, INT or TERM.
# Usage: NAME=short-name; source nspawn.sh (as root).
# Gives: $work (a temporary directory), $m (the container's root, as the
# host sees it), $up (the overlay's upper directory: every change the
# container made), inside CMD... (runs CMD in the container), step, fail,
# journal_has and main_pid_after.
work=$(mktemp -d "/tmp/spindle-$NAME.XXXXXX")
m=$work/root
up=$work/up
nspawn_pid=
leader=
cleanup() {
  set +e
  if [ -n "$nspawn_pid" ]; then
    kill -TERM "$nspawn_pid" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$nspawn_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$nspawn_pid" 2>/dev/null
  fi
  umount -l "$m" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
fail() { echo "FAILED: $*" >&2; [ -n "${leader:-}" ] && inside journalctl -u spindle.socket -u spindle.service --no-pager -n 40 >&2; exit 1; }
step() { echo "== $*"; }

mkdir -p "$work"/{up,wd,root}
mount -t overlay overlay -o "lowerdir=/,upperdir=$up,workdir=$work/wd" "$m"
# A machine id of its own (nspawn will not share the host's journal), and
# boot to basic.target, so that services the host has installed (a web
# server on port 80, say) stay stopped.
systemd-id128 new > "$m/etc/machine-id"
systemd-nspawn -D "$m" -b --private-network --register=no --keep-unit \
  --link-journal=no -M "spindle-$NAME" --console=pipe -- systemd.unit=basic.target \
  > "$work/console.log" 2>&1 &
nspawn_pid=$!
# The container's PID 1, as the host sees it: a descendant of nspawn whose
# own PID namespace numbers it 1.
for _ in $(seq 200); do
  for p in $(pgrep -P "$nspawn_pid") ; do
    for q in $p $(pgrep -P "$p"); do
      if grep -qE '^NSpid:\s+[0-9]+\s+1$' "/proc/$q/status" 2>/dev/null; then leader=$q; fi
    done
  done
  [ -n "$leader" ] && break
  kill -0 "$nspawn_pid" 2>/dev/null || { cat "$work/console.log" >&2; fail "systemd-nspawn exited"; }
  sleep 0.1
done
[ -n "$leader" ] || fail "no PID 1 in the container"
inside() { nsenter -t "$leader" -a -- "$@"; }
# journal_has FORMAT PATTERN FILTER...: whether the journal's entries that
# match FILTER, printed in FORMAT, have a line matching PATTERN within 10 s
# (journald takes lines from a service's stream in its own time).
journal_has() {
  local format=$1 pattern=$2
  shift 2
  for _ in $(seq 100); do
    inside journalctl "$@" --no-pager -o "$format" | grep -qE "$pattern" && return 0
    sleep 0.1
  done
  return 1
}
# Waits up to 10 s for spindle.service's main pid to be another than $1
# (and not 0); prints it.
main_pid_after() {
  local p
  for _ in $(seq 100); do
    p=$(inside systemctl show -p MainPID --value spindle.service)
    if [ "$p" != "$1" ] && [ "$p" != 0 ]; then echo "$p"; return 0; fi
    sleep 0.1
  done
  return 1
}
for _ in $(seq 100); do state=$(inside systemctl is-system-running --wait 2>/dev/null) && break; case $state in running|degraded) break;; esac; sleep 0.2; done
step "container booted: systemd $(inside systemctl --version | head -1 | cut -d' ' -f2), state $state"
