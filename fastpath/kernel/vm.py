"""A real Linux with seg6 lwtunnels, seg6 HMAC and VRF, in a virtual machine.

The kernel is fastpath's judge, and the kernel a machine happens to run may
lack what the judge needs (a host built without ``CONFIG_IPV6_SEG6_LWTUNNEL``
or ``CONFIG_NET_VRF`` cannot answer for End or for a VRF).  ``run()`` boots an
installed kernel image that has them under QEMU with virtme-ng, on the host's
own root filesystem (read-only; ``/tmp``, ``/var``, ``/etc``, ``/usr`` are
throwaway overlays in the guest; the working directory and every ``rwdirs``
entry are shared read-write), and runs one command in it as root, in the
host's working directory, with the host's environment.  Its exit status is
the command's.

    from fastpath.kernel import vm
    status = vm.run(["python", "-m", "pytest", "-m", "kernel"])

Command line: ``python -m fastpath.kernel vm [--kernel IMAGE] [--cpus N]
[--memory M] [--rwdir DIR] [--kvm] -- CMD ...``.

What it needs (``check()`` names the package of whatever is missing):
Debian's ``linux-image-6.12-amd64`` (or any ``/boot/vmlinuz-*`` whose
``/boot/config-*`` has the options in ``REQUIRED_CONFIG`` and 9p over virtio,
which virtme-ng shares the root filesystem with; Debian's ``-cloud`` flavour
lacks 9p), ``qemu-system-x86``, ``busybox-static`` (virtme-ng's initramfs) and
PyPI's ``virtme-ng`` (``vng``).

Software emulation by default: on these machines ``/dev/kvm`` exists but a
KVM guest dies at its first instructions and QEMU waits forever, which no
quick probe tells from a slow boot.  ``kvm=True`` (``--kvm``) asks for it
where it is known to work.  Under emulation Python starts several times more
slowly than on the host (numpy and fastpath ~8 s, scapy ~17 s), so nothing
run in the guest may rely on a fixed start-up time of a few seconds.

Before the command, the guest loads the modules the comparisons use (``tun``,
``veth``, ``vrf``: Debian builds them as modules, and ``/dev/net/tun`` and
``net.vrf.strict_mode`` exist only once they are loaded).

SIGINT and SIGTERM stop the VM: virtme-ng and every process below it (QEMU,
which virtme-ng starts in a session of its own) get SIGTERM, then SIGKILL if
still there after ``STOP_GRACE`` seconds; nothing the VM started outlives it.
"""
from __future__ import annotations

import atexit
import glob
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Mapping, Sequence

__all__ = ["VMError", "VMStopped", "REQUIRED_CONFIG", "Kernel", "Guest", "find_kernel", "check", "run",
           "guest_script"]

# what a kernel image must have to judge fastpath, and to boot under virtme-ng
REQUIRED_CONFIG: dict[str, tuple[str, ...]] = {
    "CONFIG_IPV6_SEG6_LWTUNNEL": ("y",),
    "CONFIG_IPV6_SEG6_HMAC": ("y",),
    "CONFIG_NET_VRF": ("y", "m"),
    "CONFIG_TUN": ("y", "m"),
    "CONFIG_VETH": ("y", "m"),
    "CONFIG_NET_9P_VIRTIO": ("y", "m"),
    "CONFIG_9P_FS": ("y", "m"),
}
KERNEL_PACKAGE = "linux-image-6.12-amd64"
MODULES = ("tun", "veth", "vrf")
STOP_GRACE = 5.0
# host variables that describe the host's session, not the command's world
_ENV_LEFT_OUT = frozenset(("PWD", "OLDPWD", "SHLVL", "_", "TERM", "XDG_RUNTIME_DIR",
                           "XDG_SESSION_ID", "DBUS_SESSION_BUS_ADDRESS", "SSH_AUTH_SOCK",
                           "SSH_CONNECTION", "SSH_CLIENT", "SSH_TTY", "DISPLAY", "TMUX",
                           "TMUX_PANE", "COLUMNS", "LINES"))
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class VMError(RuntimeError):
    """The VM cannot be started (something is missing) or stopped before the
    command finished."""


class VMStopped(VMError):
    """SIGINT or SIGTERM (``signum``) stopped the VM before the command's end."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name}")


@dataclass(frozen=True)
class Kernel:
    image: str
    release: str
    config: str


def _config_of(path: str) -> dict[str, str]:
    out = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            name, eq, value = line.strip().partition("=")
            if eq and name.startswith("CONFIG_"):
                out[name] = value
    return out


def _missing_options(config: Mapping[str, str]) -> list[str]:
    return [name for name, ok in REQUIRED_CONFIG.items() if config.get(name) not in ok]


def _release_key(release: str):
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", release)]


def find_kernel(image: str | None = None, boot: str = "/boot") -> Kernel:
    """The kernel to boot: ``image`` if given (its options are checked when
    its ``config-*`` file is found beside it), else the newest
    ``BOOT/vmlinuz-*`` whose ``config-*`` has every option of
    ``REQUIRED_CONFIG``.  Raises VMError naming the package to install."""
    if image is not None:
        if not os.path.isfile(image):
            raise VMError(f"no kernel image {image}")
        release = os.path.basename(image).partition("-")[2]
        config = os.path.join(os.path.dirname(os.path.abspath(image)), f"config-{release}")
        if release and os.path.isfile(config):
            missing = _missing_options(_config_of(config))
            if missing:
                raise VMError(f"{image} lacks {', '.join(missing)} (see {config}); "
                              f"apt-get install {KERNEL_PACKAGE}")
        return Kernel(image, release, config)
    found = []
    for path in glob.glob(os.path.join(boot, "vmlinuz-*")):
        release = os.path.basename(path)[len("vmlinuz-"):]
        config = os.path.join(boot, f"config-{release}")
        try:
            if not _missing_options(_config_of(config)):
                found.append(Kernel(path, release, config))
        except OSError:
            continue
    if not found:
        raise VMError(f"no kernel image with seg6 lwtunnels, seg6 HMAC and VRF in {boot}: "
                      f"apt-get install {KERNEL_PACKAGE}")
    return max(found, key=lambda k: _release_key(k.release))


def _vng() -> str:
    path = shutil.which("vng")
    if path is None:
        # installed for this interpreter but not on PATH (a venv not activated)
        cand = os.path.join(os.path.dirname(sys.executable), "vng")
        if os.access(cand, os.X_OK):
            return cand
        raise VMError("virtme-ng's vng not found: pip install virtme-ng")
    return path


def check(image: str | None = None) -> tuple[Kernel, str]:
    """(kernel, vng): everything the VM needs, or VMError naming the one
    package to install for the first thing missing."""
    vng = _vng()
    if shutil.which("qemu-system-x86_64") is None:
        raise VMError("qemu-system-x86_64 not found: apt-get install qemu-system-x86")
    if shutil.which("busybox") is None:
        raise VMError("busybox not found (virtme-ng builds its initramfs with it): "
                      "apt-get install busybox-static")
    return find_kernel(image), vng


def guest_script(cmd: Sequence[str], cwd: str, env: Mapping[str, str], status_file: str) -> str:
    """The shell script the guest runs: load the modules, take the host's
    environment and working directory, run ``cmd``, write its status."""
    lines = ["#!/bin/sh", "# written by fastpath.kernel.vm for one guest"]
    lines.append(f"for m in {' '.join(MODULES)}; do modprobe -q $m 2>/dev/null; done")
    for name, value in sorted(env.items()):
        if name in _ENV_LEFT_OUT or not _ENV_NAME.match(name):
            continue
        lines.append(f"export {name}={shlex.quote(value)}")
    lines.append(f"cd {shlex.quote(cwd)} || exit 126")
    lines.append(shlex.join(cmd))
    lines.append(f"echo $? > {shlex.quote(status_file)}")
    return "\n".join(lines) + "\n"


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid``, from /proc (virtme-ng starts a session of
    its own, so the VM's processes are not all in the group we started)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # the command name may hold spaces and parentheses: split after the last ')'
        ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), ()):
            out.append(c)
            todo.append(c)
    return out


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to vng and every process below it (QEMU among them), SIGKILL
    to what is left after STOP_GRACE seconds."""
    tree = [proc.pid] + _descendants(proc.pid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in tree:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        # (after SIGKILL too: death is not instant, and the caller is told
        # the VM is gone only once it is)
        deadline = time.monotonic() + STOP_GRACE
        while time.monotonic() < deadline:
            proc.poll()
            tree = [p for p in tree if _alive(p)]
            if not tree:
                break
            time.sleep(0.05)
        if not tree:
            break
    proc.wait()


def _alive(pid: int) -> bool:
    """Still running (a zombie no longer is: it only waits for its parent)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2:][:1] != b"Z"


def _vng_argv(cmd: Sequence[str], tmp: str, *, kernel: str | None, cpus: int, memory: str,
              rwdirs: Sequence[str], cwd: str | None, env: Mapping[str, str] | None,
              kvm: bool) -> tuple[list[str], str, Kernel]:
    """(vng's argv, the status file, the kernel) for ``cmd`` in a guest; its
    script is written into ``tmp``, which the guest shares read-write."""
    if not cmd:
        raise VMError("no command to run")
    if cpus < 1:
        raise VMError("--cpus must be at least 1")
    k, vng = check(kernel)
    cwd = os.path.abspath(cwd or os.getcwd())
    env = dict(os.environ if env is None else env)
    status_file = os.path.join(tmp, "status")
    script = os.path.join(tmp, "run.sh")
    with open(script, "w") as f:
        f.write(guest_script(cmd, cwd, env, status_file))
    argv = [vng, "--run", k.image, "--cpus", str(cpus), "--memory", str(memory),
            "--cwd", cwd, "--rwdir", tmp, "--rwdir", cwd]
    for d in rwdirs:
        argv += ["--rwdir", os.path.abspath(d)]
    if not kvm:
        argv.append("--disable-kvm")
    argv += ["--exec", f"sh {shlex.quote(script)}"]
    return argv, status_file, k


def run(cmd: Sequence[str], *, kernel: str | None = None, cpus: int = 2, memory: str = "4G",
        rwdirs: Sequence[str] = (), cwd: str | None = None, env: Mapping[str, str] | None = None,
        kvm: bool = False, stdout=None, stderr=None) -> int:
    """Run ``cmd`` as root in a VM with a kernel that has seg6 and VRF, and
    return its exit status.  ``cwd`` (default: this one) is the command's
    working directory and is shared read-write, as is each of ``rwdirs``;
    the rest of the host's files are seen read-only.  ``env`` (default: this
    process's) is the command's environment, less the host session's own
    variables.  Raises VMError when the VM cannot start or stops before the
    command's end.  SIGINT/SIGTERM received meanwhile stop the VM, then
    raise VMStopped."""
    with tempfile.TemporaryDirectory(prefix="fastpath-vm-") as tmp:
        argv, status_file, k = _vng_argv(cmd, tmp, kernel=kernel, cpus=cpus, memory=memory,
                                         rwdirs=rwdirs, cwd=cwd, env=env, kvm=kvm)
        status = _boot(argv, stdout, stderr)
        try:
            with open(status_file) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            raise VMError(f"the VM ({k.release}) stopped before the command finished "
                          f"(vng exited {status})") from None


class Guest:
    """A VM kept running with ``cmd`` as its one process, talking over its
    standard input and output (``stdin``/``stdout``: binary pipes): what the
    remote kernel oracle (``fastpath.kernel.remote``) runs its agent in.
    ``close()`` (also at exit) ends the VM and everything below it."""

    def __init__(self, cmd: Sequence[str], *, kernel: str | None = None, cpus: int = 1,
                 memory: str = "1G", cwd: str | None = None, env=None, kvm: bool = False):
        self._tmp = tempfile.TemporaryDirectory(prefix="fastpath-vm-")
        try:
            argv, _, self.kernel = _vng_argv(cmd, self._tmp.name, kernel=kernel, cpus=cpus,
                                             memory=memory, rwdirs=(), cwd=cwd, env=env, kvm=kvm)
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         start_new_session=True)
        except BaseException:
            self._tmp.cleanup()
            raise
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        atexit.register(self.close)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.stdin.close()           # the agent ends at end of input ...
                self.proc.wait(STOP_GRACE)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if self.proc.poll() is None:
            _stop(self.proc)                 # ... or is stopped with all below it
        self._tmp.cleanup()
        atexit.unregister(self.close)


def _copy(src, fd: int) -> None:
    """Copy a pipe to a file descriptor until its end."""
    try:
        while True:
            chunk = src.read1(1 << 16)
            if not chunk:
                return
            while chunk:
                chunk = chunk[os.write(fd, chunk):]
    except OSError:
        return


class _Signalled(BaseException):
    def __init__(self, signum: int):
        self.signum = signum


def _boot(argv: list[str], stdout, stderr) -> int:
    """Run vng; on SIGINT/SIGTERM stop it and all below it, and raise
    VMStopped.  (The handler only raises: stopping, which waits, is done
    once Popen.wait has let go of its lock.)"""
    # The guest's output is relayed through pipes: virtme-ng reopens the
    # standard output it is given (seen: a log file it was handed was
    # truncated mid-run, what came before it lost).
    relay = []
    if stdout is None:
        stdout, out_fd = subprocess.PIPE, 1
        relay.append("stdout")
    if stderr is None:
        stderr, err_fd = subprocess.PIPE, 2
        relay.append("stderr")
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                            start_new_session=True)
    threads = []
    for name in relay:
        src, dst = (proc.stdout, out_fd) if name == "stdout" else (proc.stderr, err_fd)
        t = threading.Thread(target=_copy, args=(src, dst), daemon=True)
        t.start()
        threads.append(t)

    def on_signal(signum, frame):
        for sig in old:             # a second signal must not interrupt the stop
            signal.signal(sig, signal.SIG_IGN)
        raise _Signalled(signum)

    old = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            old[sig] = signal.signal(sig, on_signal)
    try:
        status = proc.wait()
        for t in threads:
            t.join()
        return status
    except _Signalled as e:
        _stop(proc)
        raise VMStopped(e.signum) from None
    except BaseException:
        _stop(proc)
        raise
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
