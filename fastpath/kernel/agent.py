"""The kernel side of a remote KernelOracle: run inside a VM (or any Linux
whose kernel should judge), it serves ``fastpath.kernel.remote`` over its
standard input and output.

Started as a plain script (``python .../fastpath/kernel/agent.py``), it loads
``oracle.py`` from beside it without importing the ``fastpath`` package: the
package imports numpy and the compiled datapath, seconds of start-up under
software emulation that the kernel side never needs.

Protocol: one request per line on standard input, one answer per line on
standard output, both JSON; packets are hex.  An answer line starts with
``@fp `` so that anything else the guest may print on the same console is
told apart and ignored; an answer longer than PIECE characters comes as
lines ``@fp+PIECE`` ... then ``@fp REST`` (one long line stalls the
guest's console channel).  Requests: ``{"op": ..., ...}``; answers: ``{"ok":
value}`` or ``{"error": {"type": ..., "message": ..., ...}}``.  ``open``
takes ``ifaces``, ``sysctls`` and ``taps`` (KernelOracle's arguments of
those names) and answers the handle, the namespace, ``ifaces`` and ``taps``.  The agent
ends at end of input, closing every oracle it opened (their namespaces go).
"""
from __future__ import annotations

import importlib.util
import json
import os
import platform
import sys
import traceback

PREFIX = "@fp "
MORE = "@fp+"          # a piece of an answer whose end follows
PIECE = 4096           # answer lines are cut to this: the guest's console channel
                       # stalls on a line of ~64 kB (seen with virtme-ng 1.42)


def _load_oracle():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "oracle.py")
    spec = importlib.util.spec_from_file_location("_fastpath_kernel_oracle", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


class Agent:
    def __init__(self, oracle_module):
        self.o = oracle_module
        self.oracles: dict = {}
        self.next = 1

    def _get(self, h):
        try:
            return self.oracles[h]
        except KeyError:
            raise self.o.KernelOracleError(f"no open oracle {h}") from None

    @staticmethod
    def _packets(pairs):
        return [[dev, pkt.hex()] for dev, pkt in pairs]

    def _state(self, k, stray_seen):
        return {"stray": self._packets(k.stray[stray_seen:]), "filtered": k.filtered,
                "last_write_error": k.last_write_error}

    def handle(self, req: dict):
        op = req["op"]
        if op == "hello":
            return {"release": platform.release(), "pid": os.getpid()}
        if op == "available":
            return list(self.o.oracle_available(seg6=req.get("seg6", True), vrf=req.get("vrf", False)))
        if op == "open":
            kw = {}
            if req.get("ifaces") is not None:
                kw["ifaces"] = tuple(req["ifaces"])
            if req.get("taps"):
                kw["taps"] = tuple(req["taps"])
            k = self.o.KernelOracle(sysctls=req.get("sysctls"), **kw)
            k.__enter__()
            h = self.next
            self.next += 1
            self.oracles[h] = k
            return {"handle": h, "netns": k.netns, "ifaces": list(k.ifaces), "taps": list(k.taps)}
        k = self._get(req["h"])
        if op == "close":
            del self.oracles[req["h"]]
            k.close()
            return None
        seen = len(k.stray)
        if op == "configure":
            before = len(k.skipped)
            k.configure(req["text"])
            return {"skipped": k.skipped[before:]}
        if op == "send":
            out = k.send(req["iif"], bytes.fromhex(req["pkt"]), wait=req["wait"])
            return dict(self._state(k, seen), out=self._packets(out))
        if op == "collect":
            return dict(self._state(k, seen), out=self._packets(k.collect(req["wait"])))
        if op == "sysctl":
            return k.sysctl(req["name"], req.get("value"))
        if op == "ip_run":
            inp = req.get("input")
            return list(k.ip_run(*req["args"], input=None if inp is None else bytes.fromhex(inp),
                                 timeout=req.get("timeout", 120.0)))
        raise ValueError(f"unknown request {op!r}")

    def error(self, e: BaseException) -> dict:
        err = {"type": type(e).__name__, "message": str(e)}
        if isinstance(e, self.o.KernelConfigError):
            err.update(lineno=e.lineno, line=e.line, command=e.command, stderr=e.stderr,
                       message=e.message)
        elif not isinstance(e, (self.o.KernelOracleError, OSError, KeyError, ValueError)):
            err["traceback"] = traceback.format_exc()
        return err

    def close(self):
        for k in self.oracles.values():
            try:
                k.close()
            except Exception:
                pass
        self.oracles.clear()


def serve(inp=None, out=None) -> int:
    inp = inp or sys.stdin
    out = out or sys.stdout
    agent = Agent(_load_oracle())
    try:
        for line in inp:
            line = line.strip()
            if not line:
                continue
            try:
                answer = {"ok": agent.handle(json.loads(line))}
            except Exception as e:
                answer = {"error": agent.error(e)}
            text = json.dumps(answer)
            for i in range(0, len(text) - PIECE, PIECE):
                out.write(MORE + text[i:i + PIECE] + "\n")
            last = len(text) - (len(text) - 1) % PIECE - 1 if text else 0
            out.write(PREFIX + text[last:] + "\n")
            out.flush()
    finally:
        agent.close()
    return 0


if __name__ == "__main__":
    sys.exit(serve())
