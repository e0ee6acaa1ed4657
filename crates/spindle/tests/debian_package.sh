#!/usr/bin/env bash
# The Debian package (debian/), built, checked and used as an
# administrator would: dpkg-buildpackage builds it twice (the second a
# newer version), lintian checks it, and in this machine's own root booted
# under systemd (nspawn.sh) apt-get installs it, it serves a page on port
# 80, the newer version is installed during a 64 MiB download (the binary
# handover), an upgrade whose new binary cannot start leaves the old one
# serving, and apt-get remove and purge leave what they should.
# Usage: debian_package.sh BIN_DIR REPO (as root; run by
# tests/debian_package.rs). BIN_DIR holds the spindle and spindle-mangen
# binaries to package (the test's debug build: the package is what this
# checks, not the compiler's output).
set -euo pipefail
bin_dir=$1 repo=$2
NAME=debian-package
# shellcheck source=nspawn.sh
source "$(dirname "$0")/nspawn.sh"

# build VERSION: the package of that version in $work/build, from a copy
# of what debian/rules reads (the checkout stays as it is).
build() {
  local src=$work/build/src
  rm -rf "$src" && mkdir -p "$src"
  cp -r "$repo/debian" "$repo/contrib" "$repo/Cargo.toml" "$src/"
  if [ "$1" != "$(cd "$repo" && dpkg-parsechangelog -SVersion)" ]; then
    local who
    who=$(cd "$repo" && dpkg-parsechangelog -SMaintainer)
    { printf 'spindle (%s) unstable; urgency=medium\n\n  * A rebuild.\n\n' "$1"
      printf ' -- %s  %s\n\n' "$who" "$(date -R)"
      cat "$repo/debian/changelog"; } > "$src/debian/changelog"
  fi
  (cd "$src" && SPINDLE_BIN_DIR=$bin_dir DEB_BUILD_OPTIONS=noautodbgsym \
    dpkg-buildpackage -b --no-sign > "$work/build-$1.log" 2>&1) \
    || { tail -30 "$work/build-$1.log" >&2; fail "dpkg-buildpackage ($1)"; }
  [ -f "$work/build/spindle_$1_amd64.deb" ] || fail "no spindle_$1_amd64.deb"
  cp "$work/build/spindle_$1_amd64.deb" "$m/root/"
}

step "1. build the package twice, the second one newer (dpkg-buildpackage)"
v1=$(cd "$repo" && dpkg-parsechangelog -SVersion)
v2=$v1+1
build "$v1"
build "$v2"
dpkg-deb -f "$m/root/spindle_${v1}_amd64.deb" Depends Provides | sed 's/^/   /'

step "2. lintian"
lintian "$m/root/spindle_${v1}_amd64.deb" > "$work/lintian.log" 2>&1 || true
sed 's/^/   /' "$work/lintian.log"
grep -q '^E: ' "$work/lintian.log" && fail "lintian reports errors"

# A container image's policy-rc.d (exit 101: start no service) would keep
# the package's scripts from starting spindle, and its dpkg path-exclude
# lines (a slim image's) would drop the man page; a machine has neither.
rm -f "$m/usr/sbin/policy-rc.d"
for f in "$m"/etc/dpkg/dpkg.cfg.d/*; do
  if [ -f "$f" ]; then sed -i '/^path-exclude/d' "$f"; fi
done

# What the container's root holds beyond the host's (the overlay's upper
# directory, less what any boot or apt-get run changes; deb-systemd-helper's
# state in /var/lib/systemd counts): a new path, a file whose bytes differ,
# a host file deleted (a whiteout).
changes() {
  (cd "$up" && find . -mindepth 1 | sed 's|^\.||' | sort) \
    | grep -vE '^/(root|tmp|run|var/(www|tmp|log/journal|log/(apt|dpkg\.log|alternatives\.log)|cache|lib/(apt|dpkg|systemd/(linger|random-seed|timers|timesync|coredump|pstore|backlight|rfkill|catalog)|private|man-db|PackageKit))|etc/(machine-id|ld\.so\.cache|(passwd|group|shadow|gshadow|subuid|subgid)-))(/|$)' \
    | while read -r p; do
        if [ -c "$up$p" ]; then echo "deleted $p"
        elif [ -d "$up$p" ]; then [ -d "$p" ] || echo "$p"
        elif [ ! -e "$p" ] && [ ! -L "$p" ]; then echo "$p"
        elif [ -f "$up$p" ] && ! cmp -s "$up$p" "$p"; then echo "changed $p"
        fi
      done
}
before=$(changes)

step "3. apt-get install ./spindle_${v1}_amd64.deb, and a first request"
inside sh -c "cd /root && apt-get install -y -q ./spindle_${v1}_amd64.deb" > "$work/apt.log" 2>&1 \
  || { cat "$work/apt.log" >&2; fail "apt-get install"; }
inside systemctl -q is-active spindle.socket \
  || { cat "$work/apt.log" >&2; fail "spindle.socket is not active"; }
inside systemctl -q is-enabled spindle.socket || fail "spindle.socket is not enabled"
# spindle.service is static: the socket starts it at the first connection.
inside curl -sf http://localhost/ | grep -q 'spindle is serving' || fail "http://localhost/ is not the package's page"
inside systemctl -q is-active spindle.service || fail "spindle.service is not active"
pid1=$(inside systemctl show -p MainPID --value spindle.service)
user=$(inside ps -o user= -p "$pid1" | tr -d ' ')
[ "$user" = spindle ] || fail "spindle runs as $user"
[ "$(inside readlink "/proc/$pid1/exe")" = /usr/sbin/spindle ] || fail "not /usr/sbin/spindle"
[ "$(inside stat -c %U /var/log/spindle)" = spindle ] || fail "/var/log/spindle is not spindle's"
grep -qx /etc/spindle/spindle.toml "$m/var/lib/dpkg/info/spindle.conffiles" || fail "spindle.toml is no conffile"
echo "   serving as $user, pid $pid1, from /usr/sbin/spindle"

step "4. the page on port 80, the man page, the completions"
inside curl -sf -g 'http://[::1]/' | grep -q 'spindle is serving' || fail "http://[::1]/"
inside man -l /usr/share/man/man8/spindle.8.gz > "$work/man.txt" 2>&1 || fail "man -l"
head -4 "$work/man.txt" | sed 's/^/   /'
grep -q -- '--drain-timeout' "$work/man.txt" && grep -q SIGUSR2 "$work/man.txt" || fail "the man page lacks options or signals"
complete=$(inside bash -c 'source /usr/share/bash-completion/completions/spindle; complete -p spindle')
echo "   $complete"
[[ $complete == *"-F _spindle spindle" ]] || fail "bash completion not loaded"
grep -q '^#compdef spindle' "$m/usr/share/zsh/vendor-completions/_spindle" || fail "zsh completion"
grep -q '^complete -c spindle' "$m/usr/share/fish/vendor_completions.d/spindle.fish" || fail "fish completion"

step "5. apt-get install the newer package during a 64 MiB download (the handover)"
head -c 67108864 /dev/urandom > "$m/var/www/html/big.bin"
sum=$(sha256sum "$m/var/www/html/big.bin" | cut -d' ' -f1)
started=$(inside systemctl show -p ActiveEnterTimestampMonotonic --value spindle.service)
# 8 s at 8 MiB/s: apt-get takes a second or two to reach the postinst.
inside sh -c 'curl -s --limit-rate 8M -o /root/big.out http://localhost/big.bin; echo $? > /root/big.rc' &
dl=$!
for _ in $(seq 100); do [ "$(stat -c %s "$m/root/big.out" 2>/dev/null || echo 0)" -gt 1048576 ] && break; sleep 0.1; done
inside sh -c "cd /root && apt-get install -y -q ./spindle_${v2}_amd64.deb" > "$work/apt.log" 2>&1 \
  || { cat "$work/apt.log" >&2; fail "apt-get install (upgrade)"; }
grep 'handed its sockets' "$work/apt.log" | sed 's/^/   /'
pid2=$(inside systemctl show -p MainPID --value spindle.service)
[ "$pid2" != "$pid1" ] || fail "the main pid did not change"
[ "$(inside dpkg-query -W -f='${Version}' spindle)" = "$v2" ] || fail "$v2 is not installed"
[ "$(inside readlink "/proc/$pid2/exe")" = /usr/sbin/spindle ] || fail "the new pid runs no /usr/sbin/spindle"
inside curl -sf http://localhost/ | grep -q 'spindle is serving' || fail "not serving after the upgrade"
wait "$dl"
[ "$(inside cat /root/big.rc)" = 0 ] || fail "the download across the upgrade failed"
[ "$(inside sha256sum /root/big.out | cut -d' ' -f1)" = "$sum" ] || fail "the download across the upgrade has wrong bytes"
# (postinst waits for the old process to finish its download.)
inside kill -0 "$pid1" 2>/dev/null && fail "the old process did not exit after its download"
journal_has cat "handed over to pid $pid2" -u spindle || fail "no handover line in the journal"
# The handover came while the download was under way.
handed=$(inside journalctl -u spindle --no-pager -o short-unix | grep "handed over to pid $pid2" | cut -d' ' -f1)
ended=$(inside stat -c %.6Y /root/big.rc)
awk -v a="$handed" -v b="$ended" 'BEGIN { exit !(a < b) }' \
  || fail "the handover ($handed) came after the download ended ($ended)"
# No restart: the unit never left the active state, and systemd started it once.
[ "$(inside systemctl show -p ActiveEnterTimestampMonotonic --value spindle.service)" = "$started" ] \
  || fail "spindle.service was restarted"
[ "$(inside systemctl show -p NRestarts --value spindle.service)" = 0 ] || fail "NRestarts is not 0"
n=$(inside journalctl -u spindle.service --no-pager -o cat | grep -c '^Started spindle' || true)
[ "$n" = 1 ] || fail "the journal shows spindle.service started $n times"
inside journalctl -u spindle.service --no-pager -o cat | grep -qE '^(Stopping|Stopped) spindle' \
  && fail "the journal shows a stop"
echo "   main pid $pid1 -> $pid2 by the upgrade, $(awk -v a="$handed" -v b="$ended" 'BEGIN { printf "%.1f", b - a }') s before the end of a 64 MiB download, which is intact; started once"

step "6. an upgrade whose new binary cannot start leaves the old one serving"
echo 'no-such-key = 1' >> "$m/etc/spindle/spindle.toml"
inside sh -c "cd /root && apt-get install -y -q --reinstall ./spindle_${v2}_amd64.deb" > "$work/apt.log" 2>&1 \
  && fail "apt-get install succeeded with a configuration the new binary cannot load"
grep 'did not take over' "$work/apt.log" | sed 's/^/   /'
grep -q "did not take over; pid $pid2, the old one, keeps serving" "$work/apt.log" || { cat "$work/apt.log" >&2; fail "postinst did not say why"; }
[ "$(inside systemctl show -p MainPID --value spindle.service)" = "$pid2" ] || fail "the main pid changed"
inside curl -sf http://localhost/ | grep -q 'spindle is serving' || fail "not serving after the failed upgrade"
sed -i '/^no-such-key/d' "$m/etc/spindle/spindle.toml"
inside dpkg --configure -a > "$work/apt.log" 2>&1 || { cat "$work/apt.log" >&2; fail "dpkg --configure -a"; }
pid3=$(inside systemctl show -p MainPID --value spindle.service)
[ "$pid3" != "$pid2" ] || fail "dpkg --configure -a did not hand over"
inside curl -sf http://localhost/ | grep -q 'spindle is serving' || fail "not serving after dpkg --configure -a"
echo "   pid $pid2 kept serving; after the fix, dpkg --configure -a handed over to pid $pid3"

step "7. apt-get remove: units stopped and gone, configuration, logs and user kept"
inside apt-get remove -y -q spindle > "$work/apt.log" 2>&1 || { cat "$work/apt.log" >&2; fail "apt-get remove"; }
for u in spindle.socket spindle.service; do
  inside systemctl -q is-active "$u" && fail "$u is active after remove"
  inside systemctl -q is-enabled "$u" 2>/dev/null && fail "$u is enabled after remove"
done
inside pgrep -x spindle > /dev/null && fail "a spindle process is left"
# The stop drained the process the last handover started, as systemd's
# own child (postinst's daemon-reload), instead of killing it.
journal_has cat '^spindle.service: Deactivated successfully' -u spindle.service \
  || fail "the stop did not end in success"
inside journalctl -u spindle.service --no-pager -o cat | grep -E 'SIGKILL|Failed with result' \
  && fail "the stop killed spindle"
inside curl -s -o /dev/null http://localhost/ && fail "port 80 still answers"
[ -e "$m/usr/sbin/spindle" ] && fail "/usr/sbin/spindle is left"
[ -f "$m/etc/spindle/spindle.toml" ] || fail "remove took the configuration"
[ -s "$m/var/log/spindle/access.log" ] || fail "remove took the access log"
inside getent passwd spindle > /dev/null || fail "remove took the user"
[ "$(inside dpkg-query -W -f='${db:Status-Abbrev}' spindle)" = "rc " ] || fail "not in state rc"

step "8. apt-get purge: configuration, logs and user gone, nothing else"
inside apt-get purge -y -q spindle > "$work/apt.log" 2>&1 || { cat "$work/apt.log" >&2; fail "apt-get purge"; }
for p in /etc/spindle /var/log/spindle /var/cache/spindle /etc/logrotate.d/spindle; do
  [ -e "$m$p" ] && fail "$p is left after purge"
done
inside getent passwd spindle > /dev/null && fail "the user is left"
inside getent group spindle > /dev/null && fail "the group is left"
[ -f "$m/var/www/html/index.html" ] || fail "purge took the content"
rm -f "$m/var/www/html/index.html" "$m/var/www/html/big.bin"
left=$(comm -13 <(echo "$before") <(changes))
[ -z "$left" ] || fail "left after purge, beyond the host's root: $left"
echo "   nothing left but the content in /var/www/html"
echo "debian package: every step held"
