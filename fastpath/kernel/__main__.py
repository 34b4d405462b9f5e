"""``python -m fastpath.kernel``: the Linux kernel as control plane and as judge.

    python -m fastpath.kernel import [--netns NS] [-o FILE] [--hmac-file FILE] [--follow]
        the live state of a network namespace (default: this process's) as
        fastpath configuration text; exit 0, or 2 with one line on stderr
        (a namespace that does not exist, an object fastpath does not model);
        --follow: then every change, one line each as it is applied, until
        SIGINT/SIGTERM (exit 0)

    python -m fastpath.kernel verify --config FILE (--pcap FILE | HEX ...)
                                     [--iif DEV] [--limit N] [--wait SECONDS]
        each packet through a throwaway kernel namespace configured from FILE
        and through fastpath; prints every difference and 'agree A/N'; exit 0
        when all agree, 1 when some differ, 2 when it cannot run

    python -m fastpath.kernel verify --vm [--kernel IMAGE] ...
        the same, the kernel side in a VM (below), fastpath here: for a host
        kernel without seg6 lwtunnels or VRF

    python -m fastpath.kernel vm [--kernel IMAGE] [--cpus N] [--memory M]
                                 [--rwdir DIR] [--kvm] -- CMD ...
        CMD as root in a VM whose Linux has seg6 lwtunnels, seg6 HMAC and
        VRF, on the host's files (the working directory read-write); exits
        with CMD's status, 2 with one line naming the package to install
        when the kernel image, qemu or virtme-ng is missing

    python -m fastpath.kernel lab [--routers REGEX] [--control|--kernel] [--log-dir DIR]
                                  -- SCRIPT [ARG ...]
        a lab script (the kernel's selftests/net/srv6_*.sh) with fastpath in
        place of its routers: right after the script's setup, each router
        namespace is imported and taken over by fastpath.run --host-stack;
        one summary line; exits with the script's status (1 when the
        take-over failed).  --control: the ingress drop without fastpath;
        --kernel: no take-over (the baseline)

    python -m fastpath.kernel bench-follow [--routes N] [--samples S] [--json PATH]
        follow's lag (ip route add -> fastpath forwarding by it) and sustained
        rate (an N-route ip -batch followed), as JSON
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import tempfile

PROG = "python -m fastpath.kernel"


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        print(f"{PROG}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def _fail(msg: str, code: int = 2) -> int:
    print(f"{PROG}: {' '.join(str(msg).split())}", file=sys.stderr)
    return code


_MAIN_PID = None


def _terminate(signum, frame):
    if os.getpid() != _MAIN_PID:      # a child forked by a library: not ours to unwind
        os._exit(128 + signum)
    raise KeyboardInterrupt


def _write_atomically(path: str, text: str) -> None:
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".fastpath-import-", dir=d)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def cmd_follow(args) -> int:
    """import --follow: the import, then every change as it is applied to a
    Router, one line each, until SIGINT/SIGTERM (exit 0)."""
    import threading
    from ..router import Router
    from .follow import FollowError, KernelFollower
    from .netlink import KernelImportError
    global _MAIN_PID
    if args.output not in (None, "-"):
        return _fail("--follow prints to standard output (no -o FILE)")
    _MAIN_PID = os.getpid()
    signal.signal(signal.SIGTERM, _terminate)
    ready = threading.Event()
    out_lock = threading.Lock()

    def emit(lines):
        if threading.current_thread() is threading.main_thread():
            return              # the initial import's own event: its text follows
        ready.wait()
        with out_lock:
            sys.stdout.write("".join(ln + "\n" for ln in lines))
            sys.stdout.flush()

    f = None
    try:
        try:
            f = KernelFollower(Router(), args.netns, hmac_file=args.hmac_file, on_apply=emit,
                               on_event=lambda text: emit([f"# {text}"]))
        except (KernelImportError, FollowError) as e:
            return _fail(e)
        except OSError as e:
            return _fail(f"following {args.netns or 'this namespace'}: {e}")
        where = f"namespace {args.netns}" if args.netns else "this network namespace"
        head = [f"# imported by {PROG} import --follow from {where}"]
        head += [f"# note: {n}" for n in f.import_notes]
        with out_lock:
            sys.stdout.write("\n".join(head) + "\n" + f.import_text)
            sys.stdout.write(f"# following {where}: the changes as they are applied "
                             "(Ctrl-C to stop)\n")
            sys.stdout.flush()
        ready.set()
        while f.running:
            f._thread.join(0.5)
        return _fail("the follower stopped unexpectedly", 1)
    except KeyboardInterrupt:
        return 0
    finally:
        ready.set()
        if f is not None:
            try:
                f.stop()
            except Exception:
                pass


def cmd_import(args) -> int:
    if args.follow:
        return cmd_follow(args)
    from .netlink import KernelImportError, import_text
    try:
        text = import_text(args.netns, args.hmac_file)
    except KernelImportError as e:
        return _fail(e)
    except OSError as e:
        return _fail(f"reading {args.netns or 'this namespace'}: {e}")
    if args.output in (None, "-"):
        sys.stdout.write(text)
        return 0
    try:
        _write_atomically(args.output, text)
    except OSError as e:
        return _fail(f"cannot write {args.output}: {e.strerror or e}")
    return 0


def _vm_options(p) -> None:
    p.add_argument("--kernel", metavar="IMAGE", help="the kernel image to boot (default: the newest "
                   "/boot/vmlinuz-* with seg6 lwtunnels, seg6 HMAC and VRF)")
    p.add_argument("--cpus", type=int, default=2, metavar="N", help="the VM's CPUs (default 2)")
    p.add_argument("--memory", default="4G", metavar="M", help="the VM's memory (default 4G)")
    p.add_argument("--kvm", action="store_true", help="use KVM (default: software emulation)")


def _in_vm(args, cmd, rwdirs=()) -> int:
    from .vm import VMError, VMStopped, run
    try:
        return run(cmd, kernel=args.kernel, cpus=args.cpus, memory=args.memory, kvm=args.kvm,
                   rwdirs=rwdirs)
    except VMStopped as e:
        return 128 + e.signum
    except VMError as e:
        return _fail(e)


def cmd_vm(args) -> int:
    cmd = list(args.command)
    if cmd[:1] == ["--"]:
        cmd = cmd[1:]
    if not cmd:
        return _fail("vm: no command (python -m fastpath.kernel vm [OPTIONS] -- CMD ...)")
    if args.cpus < 1:
        return _fail("--cpus must be at least 1")
    return _in_vm(args, cmd, args.rwdir or ())


def cmd_verify(args) -> int:
    from .verify import VerifyError, parse_hex, read_packets, verify
    global _MAIN_PID
    # killed with SIGTERM, verify unwinds as on an interrupt: its namespace goes
    _MAIN_PID = os.getpid()
    signal.signal(signal.SIGTERM, _terminate)
    try:
        try:
            with open(args.config, encoding="utf-8") as f:
                config = f.read()
        except OSError as e:
            raise VerifyError(f"cannot read {args.config}: {e.strerror or e}") from None
        notes = []
        if args.pcap is not None:
            if args.packets:
                raise VerifyError("give packets either with --pcap or as HEX arguments, not both")
            packets, names, notes = read_packets(args.pcap, args.limit)
            if args.iif is None and packets and all(names):
                # a pcapng capture whose interfaces are named after the
                # configuration's: each packet arrives where it was captured
                from ..config import ConfigError, State
                try:
                    have = set(State().apply(config).interfaces)
                except ConfigError:
                    have = set()
                if set(names) <= have - {"lo"}:
                    args.iif = names
                    notes.append("ingress interface of each packet: the capture interface's name")
        else:
            if not args.packets:
                raise VerifyError("no packets: give --pcap FILE or HEX arguments")
            packets = parse_hex(args.packets)
            if args.limit is not None:
                packets = packets[:args.limit]
        if not packets:
            raise VerifyError("no packets to send")
        if args.vm:
            from . import remote
            from .vm import VMError
            try:
                vm = remote.shared(kernel=args.kernel, cpus=args.cpus, memory=args.memory,
                                   kvm=args.kvm)
            except VMError as e:
                raise VerifyError(e) from None
            notes.append(f"the kernel: Linux {vm.release} in a VM")
        report = verify(config, packets, args.iif, wait=args.wait, notes=notes, vm=args.vm)
    except VerifyError as e:
        return _fail(e)
    print(report.format())
    return 0 if report.ok else 1


def cmd_lab(args) -> int:
    from . import lab
    if args.take_over:
        try:
            lab.take_over(args.take_over)
        except lab.LabError as e:
            print(f"fastpath lab: the take-over failed: {e}", file=sys.stderr)
            return 1
        return 0
    if args.control and args.kernel:
        return _fail("lab: --control and --kernel exclude each other")
    cmd = list(args.command)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        return _fail("lab: give the script: lab -- SCRIPT [ARG ...]")
    try:
        res = lab.run(cmd[0], cmd[1:], routers=args.routers, control=args.control,
                      kernel=args.kernel, log_dir=args.log_dir)
    except lab.LabError as e:
        return _fail(f"lab: {e}")
    except re.error as e:
        return _fail(f"lab: --routers: {e}")
    print(lab.summary(cmd[0], res, args.control, args.kernel), flush=True)
    if res["error"]:
        print(f"fastpath lab: the take-over failed: {res['error']} (logs: {res['log_dir']})",
              file=sys.stderr)
        return 1
    return res["rc"]


def cmd_bench_follow(args) -> int:
    from .bench_follow import main as bench_main
    from .oracle import KernelOracleError, oracle_available
    ok, reason = oracle_available(seg6=False)
    if not ok:
        return _fail(f"bench-follow needs root and network namespaces: {reason}")
    if args.routes < 1 or args.samples < 1:
        return _fail("--routes and --samples must be at least 1")
    global _MAIN_PID
    _MAIN_PID = os.getpid()
    signal.signal(signal.SIGTERM, _terminate)      # the namespace goes on SIGTERM too
    try:
        return bench_main(args)
    except (KernelOracleError, RuntimeError) as e:
        return _fail(e, 1)


def main(argv=None) -> int:
    ap = _Parser(prog=PROG, description="The Linux kernel as control plane (import) and as "
                 "judge (verify).")
    sub = ap.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    p = sub.add_parser("import", help="a namespace's live state as fastpath configuration")
    p.add_argument("--netns", metavar="NS", help="a named namespace (ip netns); default: this one")
    p.add_argument("-o", "--output", metavar="FILE", help="write here (default: standard output)")
    p.add_argument("--hmac-file", metavar="FILE",
                   help="'ip sr hmac set KEYID ALGO SECRET' lines: HMAC keys to add or override")
    p.add_argument("--follow", action="store_true",
                   help="then print every change as it is applied, until Ctrl-C/SIGTERM")
    p.set_defaults(func=cmd_import)
    p = sub.add_parser("verify", help="packets through the kernel and fastpath, compared")
    p.add_argument("--config", required=True, metavar="FILE")
    p.add_argument("--pcap", metavar="FILE", help="a pcap/pcapng capture (Ethernet is stripped to L3)")
    p.add_argument("--iif", metavar="DEV", help="the interface packets arrive on (default: the "
                   "pcapng capture interface when the configuration has it, else the "
                   "configuration's first)")
    p.add_argument("--limit", type=int, metavar="N", help="only the first N packets")
    p.add_argument("--wait", type=float, default=0.01, metavar="SECONDS",
                   help="how long to wait for more output after each packet (default 0.01)")
    p.add_argument("packets", nargs="*", metavar="HEX", help="raw IPv4/IPv6 packets in hex")
    p.add_argument("--vm", action="store_true", help="run the kernel side in a VM whose Linux has "
                   "seg6 and VRF (see 'vm')")
    _vm_options(p)
    p.set_defaults(func=cmd_verify)
    p = sub.add_parser("vm", help="a command in a VM whose Linux has seg6 lwtunnels and VRF")
    _vm_options(p)
    p.add_argument("--rwdir", action="append", metavar="DIR",
                   help="also share DIR read-write (the working directory always is)")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ...")
    p.set_defaults(func=cmd_vm)
    p = sub.add_parser("lab", help="a lab script with fastpath in place of its routers")
    p.add_argument("--routers", default=r"^rt[-_]", metavar="REGEX",
                   help="the router namespaces to take over (default: ^rt[-_])")
    p.add_argument("--control", action="store_true",
                   help="the routers' ingress drop only, no fastpath (crossing checks must fail)")
    p.add_argument("--kernel", action="store_true",
                   help="no take-over: the kernel as the routers (the baseline)")
    p.add_argument("--log-dir", metavar="DIR",
                   help="keep the imports, fastpath.run's output and the hook here")
    p.add_argument("--take-over", metavar="DIR", help=argparse.SUPPRESS)
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- SCRIPT ...")
    p.set_defaults(func=cmd_lab)
    p = sub.add_parser("bench-follow", help="follow's lag and sustained rate (JSON)")
    p.add_argument("--routes", type=int, default=100_000, metavar="N",
                   help="routes of the ip -batch followed (default 100000)")
    p.add_argument("--samples", type=int, default=30, metavar="S", help="lag samples (default 30)")
    p.add_argument("--json", metavar="PATH", help="also write the JSON here")
    p.set_defaults(func=cmd_bench_follow)
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    if getattr(args, "limit", None) is not None and args.limit < 1:
        return _fail("--limit must be at least 1")
    try:
        return args.func(args)
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return _fail("interrupted", 130)


if __name__ == "__main__":
    sys.exit(main())
