"""A KernelOracle whose kernel runs in a VM: the kernel side of a
comparison where the kernel is, the fastpath side where Python is fast.

Under software emulation a guest runs Python 20-50 times more slowly than
the host, so running a whole comparison there spends nearly all its time
building packets and running fastpath, which need no particular kernel.
Here only the kernel's part crosses: a ``RemoteKernel`` boots one VM
(``fastpath.kernel.vm.Guest``) whose one process is ``agent.py``; each
``RemoteOracle`` is a ``KernelOracle`` in that guest, driven with the same
methods (``configure``, ``send``, ``send_many``, ``collect``, ``sysctl``,
``ip``, ``ip_run``) and attributes (``ifaces``, ``taps``, ``netns`` -- the guest's name --,
``skipped``, ``stray``, ``filtered``, ``last_write_error``).  Errors come
back as the same exceptions (KernelConfigError with its line, command and
ip's stderr).

    from fastpath.kernel import remote
    with remote.KernelOracle(ifaces=("tun0", "tun1")) as k:   # the shared VM
        k.configure("ip -6 route add fc00::1/128 encap seg6local action End dev tun0")
        k.send("tun0", packet)

``shared()`` is the process's one RemoteKernel, started at first use (a
boot, ~20 s) and ended at exit.  The tests use it with
``FASTPATH_KERNEL_VM=1`` (tests/kernel_oracle.py), and ``python -m
fastpath.kernel verify --vm`` does.  A test that needs the kernel in its
own process (a namespace it enters, ``ip -n`` it runs itself) cannot use
it; such tests carry the marker ``kernel_netns`` and run whole in the VM.
"""
from __future__ import annotations

import json
import os
import select
import sys
import threading
from typing import Iterable

from .agent import MORE, PREFIX
from .oracle import KernelConfigError, KernelOracleError
from .vm import Guest, VMError

__all__ = ["RemoteKernel", "RemoteOracle", "KernelOracle", "oracle_available", "shared", "running"]

AGENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "agent.py")


class RemoteKernel:
    """One VM running the oracle agent; ``oracle()`` opens an oracle in it."""

    def __init__(self, **vm_options):
        self.guest = Guest([sys.executable, AGENT], **vm_options)
        self._lock = threading.Lock()
        self._noise: list[str] = []
        self._buf = b""
        self._pieces: list[str] = []
        try:
            hello = self.request("hello")
        except BaseException:
            self.guest.close()
            raise
        self.release = hello["release"]

    def request(self, op: str, **kw):
        """Send one request and wait for its answer, as long as the VM runs
        (a boot under emulation takes tens of seconds, a big configure more).
        Writing and reading go together: the guest's console may echo what
        it is given, and a request bigger than the pipes would otherwise
        wait on an answer channel nobody drains (seen with 60 kB)."""
        data = memoryview((json.dumps(dict(kw, op=op)) + "\n").encode())
        with self._lock:
            text = self._exchange(data)
        answer = json.loads(text)
        if "error" in answer:
            raise _exception(answer["error"])
        return answer["ok"]

    def _exchange(self, data: memoryview) -> str:
        win, rout = self.guest.stdin.fileno(), self.guest.stdout.fileno()
        while True:
            # a whole line already read?
            nl = self._buf.find(b"\n")
            if nl >= 0 and not data:
                line, self._buf = self._buf[:nl], self._buf[nl + 1:]
                text = line.decode(errors="replace").rstrip("\r")
                if text.startswith(MORE):
                    self._pieces.append(text[len(MORE):])
                    continue
                if text.startswith(PREFIX):
                    whole, self._pieces = "".join(self._pieces) + text[len(PREFIX):], []
                    return whole
                self._noise = (self._noise + [text[:200]])[-5:]   # the guest's console, for errors
                continue
            ready_r, ready_w, _ = select.select([rout], [win] if data else [], [])
            if ready_w:
                try:
                    n = os.write(win, data[:65536])
                except OSError as e:
                    raise KernelOracleError(f"the VM's oracle agent is gone: {e}{self._tail()}") from None
                data = data[n:]
            if ready_r:
                chunk = os.read(rout, 1 << 20)
                if not chunk:
                    raise KernelOracleError(f"the VM's oracle agent stopped{self._tail()}")
                self._buf += chunk

    def _tail(self) -> str:
        return (" (it printed: " + " | ".join(self._noise) + ")") if self._noise else ""

    def oracle(self, ifaces: Iterable[str] | None = None, settle: float = 0.0, *,
               sysctls=None, taps: Iterable[str] = ()) -> "RemoteOracle":
        return RemoteOracle(self, ifaces, sysctls=sysctls, taps=taps)

    def available(self, seg6: bool = True, vrf: bool = False) -> tuple[bool, str]:
        ok, reason = self.request("available", seg6=seg6, vrf=vrf)
        return bool(ok), f"{reason} (in the VM, Linux {self.release})"

    def close(self) -> None:
        self.guest.close()


def _exception(err: dict) -> Exception:
    kind = err.get("type")
    if kind == "KernelConfigError":
        return KernelConfigError(err["lineno"], err["line"], err["message"], err.get("command"),
                                 err.get("stderr", ""))
    if kind == "KernelOracleError":
        return KernelOracleError(err["message"])
    if kind == "KeyError":
        return KeyError(err["message"].strip("'\""))
    where = "\n" + err["traceback"] if err.get("traceback") else ""
    return KernelOracleError(f"in the VM: {kind}: {err.get('message')}{where}")


class RemoteOracle:
    """A KernelOracle in a RemoteKernel's VM, used as the local one is (a
    context manager; see ``fastpath.kernel.oracle``)."""

    def __init__(self, kernel: RemoteKernel, ifaces: Iterable[str] | None = None, *, sysctls=None,
                 taps: Iterable[str] = ()):
        self.kernel = kernel
        self.ifaces = tuple(ifaces) if ifaces is not None else None
        self.taps = (taps,) if isinstance(taps, str) else tuple(taps)
        self.sysctls = {k: str(v) for k, v in (sysctls or {}).items()} or None
        self.netns = None                    # the guest's name for its namespace, once open
        self._h = None
        self.skipped: list[str] = []
        self.stray: list[tuple[str, bytes]] = []
        self.filtered = 0
        self.last_write_error = None

    def __enter__(self) -> "RemoteOracle":
        kw = {"taps": list(self.taps)} if self.taps else {}
        r = self.kernel.request("open", ifaces=self.ifaces, sysctls=self.sysctls, **kw)
        self._h, self.netns, self.ifaces = r["handle"], r["netns"], tuple(r["ifaces"])
        if set(r.get("taps", ())) != set(self.taps):
            self.close()
            raise KernelOracleError(f"the VM's oracle agent made no TAP devices {self.taps} "
                                    "(an agent older than TAP support?)")
        self.taps = tuple(r.get("taps", ()))
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.close()
        return False

    def close(self) -> None:
        if self._h is not None:
            h, self._h, self.netns = self._h, None, None
            try:
                self.kernel.request("close", h=h)
            except KernelOracleError:
                pass                            # the VM is gone, and its namespace with it

    def _call(self, op, **kw):
        if self._h is None:
            raise KernelOracleError("oracle not open (use it as a context manager)")
        return self.kernel.request(op, h=self._h, **kw)

    @staticmethod
    def _packets(pairs):
        return [(dev, bytes.fromhex(pkt)) for dev, pkt in pairs]

    def _took(self, r):
        self.stray += self._packets(r["stray"])
        self.filtered = r["filtered"]
        self.last_write_error = r["last_write_error"]
        return self._packets(r["out"])

    def configure(self, text: str) -> None:
        self.skipped += self._call("configure", text=text)["skipped"]

    def send(self, iif: str, packet: bytes, wait: float = 0.05) -> list[tuple[str, bytes]]:
        return self._took(self._call("send", iif=iif, pkt=bytes(packet).hex(), wait=wait))

    def send_many(self, iif: str, packets, wait: float = 0.05):
        return [self.send(iif, p, wait=wait) for p in packets]

    def collect(self, wait: float = 0.05) -> list[tuple[str, bytes]]:
        return self._took(self._call("collect", wait=wait))

    def sysctl(self, name: str, value=None) -> str:
        return self._call("sysctl", name=name, value=None if value is None else str(value))

    def ip(self, *args: str, input=None, check: bool = True) -> str:
        rc, out, err = self.ip_run(*args, input=input)
        if check and rc != 0:
            raise KernelOracleError(f"ip -n {self.netns} {' '.join(args)} failed ({rc}): {err.strip()}")
        return out

    def ip_run(self, *args: str, input=None, timeout: float = 120.0) -> tuple[int, str, str]:
        if isinstance(input, str):
            input = input.encode()
        rc, out, err = self._call("ip_run", args=list(args), timeout=timeout,
                                  input=None if input is None else input.hex())
        return rc, out, err


_shared: RemoteKernel | None = None
_shared_error: str | None = None
_shared_lock = threading.Lock()


def shared(**vm_options) -> RemoteKernel:
    """The process's one RemoteKernel (booted at first use, ended at exit).
    ``vm_options`` (``Guest``'s: kernel, cpus, memory, kvm) apply to the
    boot, the first call's only.  Raises VMError when no VM can be had here;
    that answer is kept."""
    global _shared, _shared_error
    with _shared_lock:
        if _shared_error is not None:
            raise VMError(_shared_error)
        if _shared is None:
            try:
                _shared = RemoteKernel(**vm_options)
            except VMError as e:
                _shared_error = str(e)
                raise
        return _shared


def running() -> RemoteKernel | None:
    """The shared RemoteKernel if one was started, else None."""
    return _shared


def KernelOracle(ifaces: Iterable[str] = ("tun0", "tun1", "tun2"), settle: float = 0.0, *,
                 sysctls=None, taps: Iterable[str] = ()) -> RemoteOracle:
    """``fastpath.kernel.oracle.KernelOracle``'s signature, in the shared VM."""
    return shared().oracle(ifaces, settle, sysctls=sysctls, taps=taps)


def oracle_available(seg6: bool = True, vrf: bool = False) -> tuple[bool, str]:
    """``fastpath.kernel.oracle.oracle_available`` asked of the shared VM."""
    try:
        return shared().available(seg6=seg6, vrf=vrf)
    except VMError as e:
        return False, f"no VM for the kernel oracle: {e}"
    except KernelOracleError as e:
        return False, f"the VM's kernel oracle failed: {e}"

