#!/usr/bin/env bash
# Boots this machine's own root file system (an overlay over /, so nothing
# on the host changes) as a container with systemd as PID 1 and a private
# network (nspawn.sh), then follows the README's "Under systemd"
# walkthrough in it with the files from contrib/ unchanged: ports 80 and
# 443 from spindle.socket, Type=notify, the hardened unit, a reload,
# logrotate, a binary handover during a download, systemd's supervision of
# the new process, and a stop.
# Usage: under_systemd.sh SPINDLE_BINARY REPO (as root; run by
# tests/under_systemd.rs).
set -euo pipefail
bin=$1 repo=$2
NAME=under-systemd
# shellcheck source=nspawn.sh
source "$(dirname "$0")/nspawn.sh"

step "1. install the binary"
install -m 755 "$bin" "$m/usr/local/bin/spindle"

step "2. user, content, certificate"
inside useradd --system --home-dir /nonexistent --shell /usr/sbin/nologin spindle
inside mkdir -p /srv/www /etc/spindle/tls
echo hello > "$m/srv/www/index.html"
head -c 67108864 /dev/urandom > "$m/srv/www/big.bin"
inside openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
  -subj /CN=localhost -addext subjectAltName=DNS:localhost \
  -keyout /etc/spindle/tls/privkey.pem -out /etc/spindle/tls/fullchain.pem 2>/dev/null
inside chgrp spindle /etc/spindle/tls/privkey.pem
inside chmod 640 /etc/spindle/tls/privkey.pem

step "3. configuration, units, log rotation (contrib/, unchanged)"
cp "$repo/contrib/spindle.toml" "$m/etc/spindle/"
cp "$repo/contrib/spindle.socket" "$repo/contrib/spindle.service" "$m/etc/systemd/system/"
cp "$repo/contrib/spindle.logrotate" "$m/etc/logrotate.d/spindle"
inside systemctl daemon-reload
inside systemctl enable --now spindle.socket spindle.service || fail "systemctl enable --now"

step "4. check it"
[ "$(inside systemctl is-active spindle.service)" = active ] || fail "spindle.service is not active"
pid1=$(inside systemctl show -p MainPID --value spindle.service)
code=$(inside curl -s -o /dev/null -w '%{http_code}' http://localhost/)
[ "$code" = 200 ] || fail "http://localhost/ gave $code"
body=$(inside curl -s --cacert /etc/spindle/tls/fullchain.pem https://localhost/)
[ "$body" = hello ] || fail "https://localhost/ gave '$body'"
inside curl -s -g 'http://[::1]/' | grep -qx hello || fail "http://[::1]/"
inside curl -s http://127.0.0.1:9100/metrics | grep -q '^spindle_requests_total' || fail "no metrics"
inside runuser -u nobody -- true
# The service runs as its own user, from sockets systemd bound.
user=$(inside ps -o user= -p "$pid1" | tr -d ' ')
[ "$user" = spindle ] || fail "spindle runs as $user"
# The error log is the journal, each line with its level as the priority
# (info is 6) and without spindle's own time and pid.
journal_has verbose '^ *PRIORITY=6$' _SYSTEMD_UNIT=spindle.service \
  || fail "no line of priority 6 (info) from spindle in the journal"
inside journalctl _SYSTEMD_UNIT=spindle.service --no-pager -o cat | grep -E '^[0-9]{4}-[0-9]{2}-' \
  && fail "journal lines carry their own timestamps"
echo "   serving as $user, pid $pid1, HTTP and HTTPS on 80 and 443 from spindle.socket, metrics on 9100"

step "5. systemctl reload (SIGHUP, RELOADING=1)"
inside systemctl reload spindle || fail "systemctl reload"
[ "$(inside systemctl is-active spindle.service)" = active ] || fail "not active after reload"
[ "$(inside systemctl show -p MainPID --value spindle.service)" = "$pid1" ] || fail "reload changed the main pid"
inside curl -s http://localhost/ | grep -qx hello || fail "not serving after reload"

step "6. logrotate (SIGUSR1)"
inside test -s /var/log/spindle/access.log || fail "no access log"
inside logrotate -f /etc/logrotate.d/spindle || fail "logrotate"
inside test -e /var/log/spindle/access.log.1 || fail "access.log not rotated"
inside curl -s -o /dev/null http://localhost/after-rotation
# (The log thread writes in its own time.)
for _ in $(seq 100); do
  inside grep -q 'GET /after-rotation' /var/log/spindle/access.log 2>/dev/null && break
  sleep 0.1
done
inside grep -q 'GET /after-rotation' /var/log/spindle/access.log || fail "new lines did not go to the new access.log"
! inside grep -q 'after-rotation' /var/log/spindle/access.log.1 || fail "new line in the rotated file"

step "7. a new binary takes over during a download (SIGUSR2)"
sum=$(sha256sum "$m/srv/www/big.bin" | cut -d' ' -f1)
inside sh -c 'curl -s --limit-rate 16M -o /root/big.out http://localhost/big.bin; echo $? > /root/big.rc' &
dl=$!
sleep 1
install -m 755 "$bin" "$m/usr/local/bin/spindle"
inside systemctl kill -s USR2 spindle.service
pid2=$(main_pid_after "$pid1") || fail "the main pid did not change after SIGUSR2"
inside curl -s http://localhost/ | grep -qx hello || fail "not serving during the handover"
wait "$dl"
[ "$(inside cat /root/big.rc)" = 0 ] || fail "the download across the handover failed"
[ "$(inside sha256sum /root/big.out | cut -d' ' -f1)" = "$sum" ] || fail "the download across the handover has wrong bytes"
for _ in $(seq 100); do inside kill -0 "$pid1" 2>/dev/null || break; sleep 0.1; done
inside kill -0 "$pid1" 2>/dev/null && fail "the old process did not exit after its download"
[ "$(inside systemctl is-active spindle.service)" = active ] || fail "not active after the handover"
journal_has cat "handed over to pid" -u spindle || fail "no handover line in the journal"
echo "   main pid $pid1 -> $pid2; 64 MiB download across it intact"

inside journalctl -u spindle --no-pager -o cat | grep -q "notification message from PID" \
  && fail "systemd rejected a notification during the handover"

step "8. systemd supervises the new main pid (Restart=on-failure)"
inside kill -KILL "$pid2"
pid3=$(main_pid_after "$pid2") || fail "systemd did not restart spindle after its new main pid was killed"
for _ in $(seq 100); do [ "$(inside systemctl is-active spindle.service)" = active ] && break; sleep 0.1; done
inside curl -s http://localhost/ | grep -qx hello || fail "not serving after the restart"
echo "   killed $pid2; systemd restarted it as $pid3"

step "9. systemctl stop (STOPPING=1)"
inside systemctl stop spindle.service spindle.socket
res=$(inside systemctl show -p Result --value spindle.service)
[ "$res" = success ] || fail "stop ended with result $res"
echo "under systemd: every step held"
