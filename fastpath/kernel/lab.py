"""fastpath in place of the routers of a lab script (``python -m fastpath.kernel lab``).

    python -m fastpath.kernel lab [--routers REGEX] [--control] [--log-dir DIR] -- SCRIPT [ARG ...]

A lab script -- the kernel's ``tools/testing/selftests/net/srv6_*.sh``, or
one of your own built the same way -- makes hosts and routers as network
namespaces joined by veth pairs, configures the routers with ``ip``, then
runs its checks (pings across).  This runs SCRIPT, unchanged, with bash
(from its own directory).  Right after its ``setup`` function returns and
before its first check, every namespace whose name matches REGEX (default
``^rt[-_]``: the labs' rt-1, rt_1-xxxxxx, rt-1-xxxxxx) is taken over with
the two commands a person would use:

    python -m fastpath.kernel import --netns NS -o NS.conf
    python -m fastpath.run --config NS.conf --netns NS --host-stack

From then on fastpath owns every interface of those routers (the kernel
there forwards nothing: the nftables ingress drop) and the router's own
stack sees only what fastpath hands it (``--host-stack``).  The checks then
run as they would against Linux.  When the script ends, the routers are
stopped (SIGTERM) and one line sums up: the checks that passed and failed
(the labs' ``[ OK ]``/``[FAIL]`` lines) and what fastpath forwarded.

``--control``: the routers' interfaces get the same ingress drop, but no
fastpath behind it: the checks that cross a router must fail, which shows
that, in the real run, what crossed went through fastpath.

The lab runs in a network and mount namespace of its own (``unshare``),
with a private ``/run/netns``: its namespaces, links and their names never
meet the host's or those of another lab running beside it, and they go
with it.  The hook is bash's: ``BASH_ENV`` names a file that sets a ``DEBUG`` trap
in the script's shell (top-level commands only); it notes the command
``setup`` and acts at the next one.  Exit status: the script's, or 1 when
the take-over failed (its reason on stderr), 2 for a person's error.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

DEFAULT_ROUTERS = r"^rt[-_]"

_HOOK = r"""# fastpath.kernel lab: take the routers over once the lab's setup is done
unset BASH_ENV
__fastpath_lab_setup=
__fastpath_lab_done=
__fastpath_lab_hook() {
    [[ -n $__fastpath_lab_done ]] && return 0
    if [[ $BASH_COMMAND == setup || $BASH_COMMAND == "setup "* ]]; then
        __fastpath_lab_setup=1
    elif [[ -n $__fastpath_lab_setup ]]; then
        __fastpath_lab_done=1
        %(cmd)s || true
    fi
}
trap __fastpath_lab_hook DEBUG
"""


class LabError(RuntimeError):
    """The take-over failed (a one-line message for a person)."""


def _netns_list() -> list:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.split()]


def take_over(state_dir: str) -> None:
    """The hook's work (in the script's shell, between setup and the
    checks): import each router, then fastpath.run in it, until every one
    owns its interfaces (or a control drop)."""
    with open(os.path.join(state_dir, "lab.json")) as f:
        cfg = json.load(f)
    pat = re.compile(cfg["routers"])
    routers = [ns for ns in _netns_list() if pat.search(ns)]
    record = {"routers": routers, "pids": {}}
    t0 = time.monotonic()
    try:
        if not routers:
            raise LabError(f"no namespace matches --routers {cfg['routers']!r} after setup "
                           f"(there are: {' '.join(_netns_list()) or 'none'})")
        from .netlink import KernelImportError, import_text
        confs = {}
        for ns in routers:
            try:
                confs[ns] = import_text(ns)
            except KernelImportError as e:
                raise LabError(f"import --netns {ns}: {e}") from None
            with open(os.path.join(state_dir, f"{ns}.conf"), "w") as f:
                f.write(confs[ns])
        if cfg["control"]:
            # the ingress drop fastpath.run would put on the devices it
            # attaches to, left there (the lab's cleanup deletes the namespace)
            from ..router import parse_config
            from ..wire import nft
            from ..wire.live import default_interfaces
            for ns in routers:
                try:
                    nft.Guard(default_interfaces(parse_config(confs[ns])),
                              netns=ns).install(keep=True)
                except nft.NftError as e:
                    raise LabError(f"{ns}: {e}") from None
            return
        procs = {}
        for ns in routers:
            base = os.path.join(state_dir, ns)
            cmd = [sys.executable, "-m", "fastpath.run", "--config", base + ".conf",
                   "--netns", ns, "--host-stack", "--json", "--ready-file", base + ".ready"]
            with open(base + ".json", "w") as out, open(base + ".err", "w") as err:
                p = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
            procs[ns] = p
            record["pids"][ns] = p.pid
        # each until it owns its interfaces, or has died (no time limit: under
        # emulation a start takes as long as it takes)
        waiting = dict(procs)
        while waiting:
            for ns, p in list(waiting.items()):
                if os.path.exists(os.path.join(state_dir, ns + ".ready")):
                    del waiting[ns]
                elif p.poll() is not None:
                    with open(os.path.join(state_dir, ns + ".err")) as f:
                        why = " ".join(f.read().split()) or f"exit status {p.returncode}"
                    raise LabError(f"fastpath.run --netns {ns}: {why}")
            time.sleep(0.05)
    except LabError as e:
        record["error"] = str(e)
        raise
    finally:
        record["seconds"] = round(time.monotonic() - t0, 1)
        with open(os.path.join(state_dir, "takeover.json"), "w") as f:
            json.dump(record, f)


_RESULT = re.compile(r"\[\s*(OK|FAIL)\s*\]")


def run(script, args=(), *, routers=DEFAULT_ROUTERS, control=False, kernel=False,
        log_dir=None, stdout=None) -> dict:
    """Run lab ``script`` with fastpath (or the control drop) taking its
    routers over; returns {"rc", "passed", "failed", "checks", "routers",
    "error", "counters": {ns: fastpath.run's --json summary}}.  The
    script's output goes to ``stdout`` (default: this process's) as it
    comes.  ``kernel``: no take-over, the kernel stays the routers (the
    baseline, in the same isolation)."""
    script = os.path.abspath(script)
    if not os.path.isfile(script):
        raise LabError(f"{script}: no such file")
    re.compile(routers)
    out = stdout or sys.stdout
    own_dir = log_dir is None
    state_dir = tempfile.mkdtemp(prefix="fastpath-lab-") if own_dir else log_dir
    os.makedirs(state_dir, exist_ok=True)
    with open(os.path.join(state_dir, "lab.json"), "w") as f:
        json.dump({"routers": routers, "control": control}, f)
    hook_cmd = " ".join(shlex.quote(a) for a in
                        (sys.executable, "-m", "fastpath.kernel", "lab", "--take-over",
                         state_dir))
    hook = os.path.join(state_dir, "hook.bash")
    with open(hook, "w") as f:
        f.write(_HOOK % {"cmd": hook_cmd})
    env = dict(os.environ) if kernel else dict(os.environ, BASH_ENV=hook)
    here = os.path.dirname(os.path.abspath(__file__))
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(os.path.dirname(here))] + [p for p in env.get("PYTHONPATH", "").split(
            os.pathsep) if p])
    checks = []
    # the lab in a network and mount namespace of its own, with its own
    # /run/netns: its namespaces, links and names never meet the host's (nor
    # another lab's run beside it) and go with it
    inner = 'mkdir -p /run/netns && mount -t tmpfs fastpath-lab /run/netns && exec "$@"'
    cmd = ["unshare", "--mount", "--net", "--propagation", "private", "sh", "-c", inner,
           "fastpath-lab", "bash", script, *args]
    p = subprocess.Popen(cmd, cwd=os.path.dirname(script), env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         errors="replace")
    try:
        for line in p.stdout:
            out.write(line)
            out.flush()
            m = _RESULT.search(line)
            if m:
                checks.append((line[:m.start()].strip(), m.group(1)))
        rc = p.wait()
    except BaseException:
        p.send_signal(signal.SIGTERM)
        p.wait()
        _stop_routers(state_dir)
        raise
    record = {}
    try:
        with open(os.path.join(state_dir, "takeover.json")) as f:
            record = json.load(f)
    except OSError:
        if not kernel:
            record = {"error": "the script never got past a 'setup' command (no take-over)"}
    counters = _stop_routers(state_dir)
    if own_dir and not record.get("error"):
        shutil.rmtree(state_dir, ignore_errors=True)
    passed = sum(1 for _, r in checks if r == "OK")
    return {"rc": rc, "passed": passed, "failed": len(checks) - passed, "checks": checks,
            "routers": record.get("routers", []),
            "error": record.get("error"), "counters": counters, "log_dir": state_dir,
            "takeover_s": record.get("seconds")}


def _stop_routers(state_dir) -> dict:
    """SIGTERM to each fastpath.run still running (the lab's cleanup may
    have deleted its namespace: it then stopped by itself), and their
    --json summaries."""
    try:
        with open(os.path.join(state_dir, "takeover.json")) as f:
            pids = json.load(f).get("pids", {})
    except OSError:
        return {}
    for pid in pids.values():
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for pid in pids.values():
        while True:                     # (not our child: wait for it to be gone)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
    counters = {}
    for ns in pids:
        try:
            with open(os.path.join(state_dir, ns + ".json")) as f:
                counters[ns] = json.load(f)
        except (OSError, ValueError):
            counters[ns] = None
    return counters


def summary(script, res, control=False, kernel=False) -> str:
    if kernel:
        return (f"fastpath lab: {os.path.basename(script)}: {res['passed']} passed, "
                f"{res['failed']} failed, with the kernel as the routers")
    fwd = sum(c["counters"]["verdicts"].get("forward", 0) for c in res["counters"].values() if c)
    host = sum(c["counters"]["wire"].get("host_delivered", 0)
               for c in res["counters"].values() if c)
    who = "control (ingress drop, no fastpath)" if control else "fastpath"
    line = (f"fastpath lab: {os.path.basename(script)}: {res['passed']} passed, "
            f"{res['failed']} failed, with {who} as {' '.join(res['routers']) or 'no router'}")
    if not control:
        line += f"; forwarded {fwd}, handed {host} to the routers' own stacks"
    if res.get("takeover_s") is not None:
        line += f" (take-over {res['takeover_s']} s)"
    return line
