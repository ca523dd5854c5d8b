#!/usr/bin/env bash
# Installs what `make dist` built, the way a host without a Rust toolchain would, and checks it.
#
#   scripts/test-dist.sh [DIST_DIR]      (default <repo>/dist; `make test-dist` builds a debug one)
#
# 1. The .deb (root and dpkg only; otherwise skipped with a message): `dpkg -i`, then what it put
#    in place (binary, units, conffile, model, user and group, /var/lib/recalld 0700); the
#    installed binary started as recalld.socket + recalld.service would start it (socket bound
#    and handed over on fd 3 with LISTEN_FDS, NOTIFY_SOCKET, the unit's User, Group, Environment
#    and UMask, its ExecStart word for word): READY=1, `health` and a decorate through the
#    installed CLI, SIGTERM → STOPPING=1 and exit 0. `dpkg --remove` keeps the data, the user and
#    the config; `dpkg --purge` removes everything. The package is purged on any failure too.
# 2. The wheel: a fresh venv, `pip install --no-index` of the abi3 wheel (no build step), then
#    `import recalld` talks to a daemon (target/debug/recalld or $RECALLD_BIN on a temp socket).
# 3. The npm tarball: a fresh `npm init -y` project, `npm install` of the .tgz, a node script
#    imports `recalld` and calls ping and health on the same daemon.
# Everything temporary is removed at the end, pass or fail.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIST="$(cd "${1:-$REPO/dist}" && pwd)"
BIN="${RECALLD_BIN:-$REPO/target/debug/recalld}"
export RECALLD_MODEL_DIR="${RECALLD_MODEL_DIR:-$REPO/models/all-MiniLM-L6-v2}"
START=$SECONDS

say() { echo "test-dist: $*"; }
fail() {
  echo "test-dist: FAIL: $*" >&2
  exit 1
}

one() { # the single file in DIST matching a glob
  local matches=("$DIST"/$1)
  [[ ${#matches[@]} -eq 1 && -f "${matches[0]}" ]] || fail "want exactly one $1 in $DIST, found: ${matches[*]}"
  echo "${matches[0]}"
}
DEB="$(one 'recalld_*.deb')"
WHEEL="$(one 'recalld-*.whl')"
TGZ="$(one 'recalld-*.tgz')"

TMP="$(mktemp -d)"
INSTALLED=0
DAEMON_PID=
cleanup() {
  local rc=$?
  if [[ -n "$DAEMON_PID" ]] && kill -0 "$DAEMON_PID" 2>/dev/null; then
    kill -TERM "$DAEMON_PID" 2>/dev/null || true
    wait "$DAEMON_PID" 2>/dev/null || true
  fi
  if [[ "$INSTALLED" == 1 ]]; then
    say "purging the package after a failure"
    dpkg --purge recalld >/dev/null 2>&1 || true
    rm -rf /run/recalld
  fi
  rm -rf "$TMP"
  if [[ $rc -ne 0 ]]; then
    echo "test-dist: FAILED after $((SECONDS - START)) s" >&2
  fi
}
trap cleanup EXIT

# ---------------------------------------------------------------------------------------------
# 1. The Debian package.
pkg_status() { # installed, config-files, … or not-installed
  local st
  st="$(dpkg-query -W -f='${db:Status-Status}' recalld 2>/dev/null || true)"
  echo "${st:-not-installed}"
}
deb_test() {
  local log="$TMP/dpkg.log"
  dpkg -i "$DEB" >"$log" 2>&1 || { cat "$log" >&2; INSTALLED=1; fail "dpkg -i $DEB"; }
  INSTALLED=1
  [[ "$(dpkg-query -W -f='${Status}' recalld)" == "install ok installed" ]] || fail "dpkg does not list recalld as installed"
  dpkg --verify recalld || fail "dpkg --verify recalld: installed files differ from the package's"

  # Files.
  [[ -x /usr/bin/recalld ]] || fail "/usr/bin/recalld is not an executable"
  for u in recalld.service recalld.socket; do
    cmp -s "/lib/systemd/system/$u" "$REPO/systemd/system/$u" || fail "/lib/systemd/system/$u is not systemd/system/$u"
  done
  for f in model.safetensors tokenizer.json config.json; do
    cmp -s "/usr/share/recalld/models/all-MiniLM-L6-v2/$f" "$RECALLD_MODEL_DIR/$f" \
      || fail "/usr/share/recalld/models/all-MiniLM-L6-v2/$f is not the built-in model's $f"
  done
  [[ -f /usr/share/doc/recalld/copyright ]] || fail "no /usr/share/doc/recalld/copyright"
  dpkg-query -W -f='${Conffiles}\n' recalld | grep -q '^ /etc/recalld/recalld.toml ' \
    || fail "/etc/recalld/recalld.toml is not a conffile"
  [[ "$(stat -c '%U:%G %a' /etc/recalld/recalld.toml)" == "root:recalld 640" ]] \
    || fail "/etc/recalld/recalld.toml is $(stat -c '%U:%G %a' /etc/recalld/recalld.toml), want root:recalld 640"
  grep -q '^path = "/usr/share/recalld/models/all-MiniLM-L6-v2"$' /etc/recalld/recalld.toml \
    || fail "the default config does not point at the installed model"
  /usr/bin/recalld config --config /etc/recalld/recalld.toml >/dev/null || fail "the installed binary refuses the installed config"

  # User, group, state directory.
  local pw uid gid shell home
  pw="$(getent passwd recalld)" || fail "no user recalld"
  IFS=: read -r _ _ uid gid _ home shell <<<"$pw"
  getent group recalld >/dev/null || fail "no group recalld"
  [[ "$gid" == "$(getent group recalld | cut -d: -f3)" ]] || fail "recalld's primary group is not recalld"
  ((uid < 1000)) || fail "recalld is not a system user (uid $uid)"
  [[ "$home" == /var/lib/recalld ]] || fail "recalld's home is $home"
  [[ "$shell" == */nologin ]] || fail "recalld's shell is $shell"
  [[ "$(stat -c '%U:%G %a' /var/lib/recalld)" == "recalld:recalld 700" ]] \
    || fail "/var/lib/recalld is $(stat -c '%U:%G %a' /var/lib/recalld), want recalld:recalld 700"

  # Started as the units start it.
  python3 - /lib/systemd/system/recalld.socket /lib/systemd/system/recalld.service "$TMP" <<'PY' || fail "the installed daemon, started as its units say"
import grp, os, pwd, signal, socket, subprocess, sys, time

socket_unit, service_unit, tmp = sys.argv[1:]

def entries(path):
    out = []
    for line in open(path):
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")) and "=" in line:
            k, v = line.split("=", 1)
            out.append((k.strip(), v.strip()))
    return out

sock, svc = entries(socket_unit), entries(service_unit)
one = lambda es, k: [v for kk, v in es if kk == k][-1]
path = one(sock, "ListenStream")
exec_start = one(svc, "ExecStart").split()
user, group = one(svc, "User"), one(svc, "Group")
env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
for k, v in svc:
    if k == "Environment":
        name, value = v.split("=", 1)
        env[name] = value
assert exec_start[0] == "/usr/bin/recalld", exec_start

# What recalld.socket does: the directory, the socket with its owner and mode, listening.
run_dir = os.path.dirname(path)
made_dir = not os.path.isdir(run_dir)
os.makedirs(run_dir, mode=int(one(sock, "DirectoryMode"), 8), exist_ok=True)
if os.path.exists(path):
    os.unlink(path)
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(path)
os.chown(path, pwd.getpwnam(one(sock, "SocketUser")).pw_uid, grp.getgrnam(one(sock, "SocketGroup")).gr_gid)
os.chmod(path, int(one(sock, "SocketMode"), 8))
listener.listen(128)
notify_path = os.path.join(tmp, "notify.sock")
notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
notify.bind(notify_path)
os.chmod(tmp, 0o755)
os.chmod(notify_path, 0o777)  # the daemon runs as recalld
notify.settimeout(60)
env.update(LISTEN_FDS="1", LISTEN_FDNAMES="recalld.socket", NOTIFY_SOCKET=notify_path)
uid, gid = pwd.getpwnam(user).pw_uid, grp.getgrnam(group).gr_gid
umask = int(one(svc, "UMask"), 8)
fd = listener.fileno()

def as_the_service():
    # What recalld.service does between fork and exec.
    os.dup2(fd, 3)
    os.set_inheritable(3, True)
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    os.umask(umask)
    os.chdir("/")
    os.environ["LISTEN_PID"] = str(os.getpid())

# LISTEN_PID must be the daemon's own pid: set in the child, passed on by exec (env=None).
os.environ.clear()
os.environ.update(env)
log = open(os.path.join(tmp, "installed-daemon.log"), "wb")
# close_fds=False: fd 3, made in the child, must survive; every other fd Python opened is
# close-on-exec (PEP 446).
proc = subprocess.Popen(exec_start, preexec_fn=as_the_service, close_fds=False, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
listener.close()

def show_log():
    log.flush()
    sys.stderr.write(open(os.path.join(tmp, "installed-daemon.log"), errors="replace").read()[-3000:])

def state():
    try:
        return notify.recv(512).decode()
    except socket.timeout:
        show_log()
        raise SystemExit("no notification from the daemon within 60 s")

try:
    got = state()
    if got != "READY=1":
        show_log()
        raise SystemExit(f"first notification {got!r}, want READY=1")
    status = open(f"/proc/{proc.pid}/status").read()
    uids = [l for l in status.splitlines() if l.startswith(("Uid:", "Gid:"))]
    assert uids[0].split()[1:] == [str(uid)] * 4, uids
    assert uids[1].split()[1:] == [str(gid)] * 4, uids
    cli = lambda *args: subprocess.run(["/usr/bin/recalld", "call", *args, "--socket", path],
                                       capture_output=True, text=True, timeout=60)
    r = cli("health", "{}")
    assert r.returncode == 0 and '"ok"' in r.stdout, (r.returncode, r.stdout, r.stderr)
    # A decorate: the store under /var/lib/recalld takes a write, the built-in model embeds.
    r = cli("decorate", '{"memory": "dist-test", "request": {"model": "gpt-4o", "messages": [{"role": "user", "content": "hello from the package test"}]}}')
    assert r.returncode == 0 and "hello from the package test" in r.stdout, (r.returncode, r.stdout, r.stderr)
    r = cli("stats", "{}")
    assert r.returncode == 0 and "minilm" in r.stdout.lower(), (r.stdout, r.stderr)
    owned = [os.path.join(d, f) for d, _, fs in os.walk("/var/lib/recalld") for f in fs]
    assert owned, "nothing written under /var/lib/recalld"
    for f in owned:
        st = os.stat(f)
        assert (st.st_uid, st.st_gid) == (uid, gid), f"{f} is not owned by recalld"
        assert st.st_mode & 0o077 == 0, f"{f} is readable by others ({oct(st.st_mode)})"
    proc.send_signal(signal.SIGTERM)
    got = state()
    assert got == "STOPPING=1", got
    code = proc.wait(timeout=30)
    assert code == 0, f"exit code {code} after SIGTERM"
except BaseException:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    show_log()
    raise
finally:
    # recalld.socket's RemoveOnStop.
    if os.path.exists(path):
        os.unlink(path)
    if made_dir:
        os.rmdir(run_dir)
print(f"test-dist: installed daemon (pid {proc.pid}, uid {user}) served {path}: READY=1, health, decorate, STOPPING=1, exit 0")
PY

  # remove keeps the memories, the user and the config; purge takes everything.
  dpkg --remove recalld >"$log" 2>&1 || { cat "$log" >&2; fail "dpkg --remove recalld"; }
  [[ ! -e /usr/bin/recalld ]] || fail "/usr/bin/recalld is still there after dpkg --remove"
  [[ -n "$(ls -A /var/lib/recalld)" ]] || fail "dpkg --remove removed the stored memories"
  getent passwd recalld >/dev/null || fail "dpkg --remove removed the user"
  [[ -f /etc/recalld/recalld.toml ]] || fail "dpkg --remove removed the conffile"
  dpkg --purge recalld >"$log" 2>&1 || { cat "$log" >&2; fail "dpkg --purge recalld"; }
  INSTALLED=0
  local left=()
  for p in /usr/bin/recalld /lib/systemd/system/recalld.service /lib/systemd/system/recalld.socket \
    /etc/recalld /usr/share/recalld /usr/share/doc/recalld /var/lib/recalld /run/recalld; do
    [[ -e "$p" ]] && left+=("$p")
  done
  [[ ${#left[@]} -eq 0 ]] || fail "left after dpkg --purge: ${left[*]}"
  ! getent passwd recalld >/dev/null || fail "user recalld is left after dpkg --purge"
  ! getent group recalld >/dev/null || fail "group recalld is left after dpkg --purge"
  [[ "$(pkg_status)" == not-installed ]] || fail "dpkg still lists recalld as $(pkg_status)"
  say "deb ok: $(basename "$DEB") installed, checked, started as its units say, removed and purged"
}

if [[ "$(id -u)" != 0 ]]; then
  say "SKIPPED the .deb install: needs root (dpkg -i); run as root to test it"
elif ! command -v dpkg >/dev/null; then
  say "SKIPPED the .deb install: no dpkg on this machine"
elif [[ "$(pkg_status)" != not-installed ]]; then
  say "SKIPPED the .deb install: a recalld package is on this machine ($(pkg_status)); not touching it"
elif getent passwd recalld >/dev/null || getent group recalld >/dev/null; then
  say "SKIPPED the .deb install: a user or group recalld already exists; purge would remove it"
else
  deb_test
fi
DEB_DONE=$SECONDS

# ---------------------------------------------------------------------------------------------
# 2 and 3: the wheel and the npm tarball against a daemon on a temp socket.
[[ "$(basename "$WHEEL")" =~ ^recalld-[0-9][^-]*-cp3[0-9]+-abi3-[a-z0-9_.]+\.whl$ ]] \
  || fail "$(basename "$WHEEL") is not an abi3 wheel"
[[ -x "$BIN" ]] || fail "no daemon at $BIN (make build)"
SOCK="$TMP/d.sock"
"$BIN" serve --socket "$SOCK" --data "$TMP/data" >"$TMP/daemon.log" 2>&1 &
DAEMON_PID=$!

# A venv without pip of its own (ensurepip alone takes seconds), the wheel installed into it by
# the outer pip (pip >= 22.3: --python); with an older pip, a venv with its own.
python3 -m venv --without-pip "$TMP/venv"
PIP=(python3 -m pip --python "$TMP/venv/bin/python")
if ! "${PIP[@]}" --version >/dev/null 2>&1; then
  python3 -m venv --clear "$TMP/venv"
  PIP=("$TMP/venv/bin/python" -m pip)
fi
"${PIP[@]}" install --quiet --no-index --disable-pip-version-check "$WHEEL" \
  || fail "pip install --no-index $(basename "$WHEEL")"

mkdir "$TMP/npm"
(cd "$TMP/npm" && npm init -y >/dev/null && npm install --no-audit --no-fund --prefer-offline --loglevel=error "$TGZ" >/dev/null) \
  || fail "npm install $(basename "$TGZ")"
[[ -f "$TMP/npm/node_modules/recalld/dist/src/index.d.ts" ]] || fail "the npm package has no types"
[[ ! -e "$TMP/npm/node_modules/recalld/dist/test" ]] || fail "the npm package holds the tests"

for _ in $(seq 300); do
  [[ -S "$SOCK" ]] && break
  kill -0 "$DAEMON_PID" 2>/dev/null || { cat "$TMP/daemon.log" >&2; fail "the daemon exited before listening"; }
  sleep 0.1
done
[[ -S "$SOCK" ]] || { cat "$TMP/daemon.log" >&2; fail "the daemon did not listen within 30 s"; }

(cd "$TMP" && "$TMP/venv/bin/python" - "$SOCK" "$TMP/venv" <<'PY') || fail "the installed wheel"
import sys
import recalld
import recalld._native as native
sock, venv = sys.argv[1:]
assert recalld.__file__.startswith(venv), f"recalld imported from {recalld.__file__}, not the venv"
assert native.__file__.endswith(".abi3.so"), native.__file__
with recalld.Client(sock) as c:
    assert c.health()["status"] == "ok"
    assert c.ping({"from": "wheel"})["payload"] == {"from": "wheel"}
    print(f"test-dist: wheel ok: recalld {c.server['server_version']} from {recalld.__file__}")
PY

(cd "$TMP/npm" && node --input-type=module - "$SOCK" <<'JS') || fail "the installed npm package"
import { Client, VERSION } from "recalld";
import { createRequire } from "node:module";
const sock = process.argv[2];
const where = createRequire(import.meta.url).resolve("recalld/package.json");
if (!where.startsWith(process.cwd())) throw new Error(`recalld resolved to ${where}`);
const c = await Client.connect(sock);
const h = await c.health();
if (h.status !== "ok") throw new Error(JSON.stringify(h));
const p = await c.ping({ from: "npm" });
if (p.payload?.from !== "npm") throw new Error(JSON.stringify(p));
await c.close();
console.log(`test-dist: npm ok: recalld ${VERSION} from ${where}`);
JS

kill -TERM "$DAEMON_PID"
wait "$DAEMON_PID" || fail "the daemon exited with $? after SIGTERM"
DAEMON_PID=
say "passed in $((SECONDS - START)) s (deb $((DEB_DONE - START)) s, wheel and npm $((SECONDS - DEB_DONE)) s)"
