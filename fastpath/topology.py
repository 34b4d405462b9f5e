"""CPU topology from sysfs, and the choice of CPUs for workers.

``read_topology(root="/sys")`` reads, for each online CPU
(``devices/system/cpu/online``), its socket
(``cpuN/topology/physical_package_id``), core (``core_id``), hyperthread
siblings (``thread_siblings_list``) and NUMA node (the
``devices/system/node/nodeM/cpulist`` that lists it), plus the process's
affinity mask (``os.sched_getaffinity(0)``), the CPU model (``/proc/cpuinfo``)
and the kernel release.  ``root`` is a parameter so that tests can point it at
a fake tree.

``place(topology, n, placement)`` picks ``n`` CPUs for workers:

* ``"one-socket"``: fill one socket (``socket=``, e.g. the NIC's; default the
  lowest-numbered socket with a usable CPU) before the next: first one
  thread of each physical core, then the hyperthread siblings, and only
  when the socket is full the next socket, in the same order.  With
  ``smt=False`` siblings are never used, so on a 2 x 10-core machine 10
  workers take the 10 cores of the first socket and 16 take those 10 plus 6
  cores of the second, hyperthreading or not.
* ``"spread"``: sockets in turn (round robin), physical cores of every
  socket before any sibling.
* ``cpus=[...]`` (or a cpulist string): exactly those CPUs, in that order,
  each checked to be online and in the affinity mask.

Usable CPUs are the online ones in the affinity mask (``allowed=`` replaces
the mask read by ``read_topology``).  Asking for more workers than usable
CPUs is a ``ValueError`` unless ``oversubscribe=True`` (the list then wraps
around).  Every error is a ``ValueError`` with a one-line message.
"""
from __future__ import annotations

import os
import platform
import re
from dataclasses import asdict, dataclass, field

SYS = "/sys"
CPUINFO = "/proc/cpuinfo"
PLACEMENTS = ("one-socket", "spread")

_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+)(?::([0-9]+)/([0-9]+))?)?")


# ---------------------------------------------------------------------------
# cpulists
# ---------------------------------------------------------------------------

def usable_cpus() -> int:
    """How many CPUs this process may run on: its affinity mask, else (no
    ``sched_getaffinity`` on the platform) every CPU."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def parse_cpulist(text: str) -> list[int]:
    """The CPUs of a kernel cpulist (``"0-3,8,10-11"``; also the kernel's
    ``"0-15:2/4"`` groups: from each group of 4 starting at 0, the first 2),
    sorted, without duplicates.  Surrounding whitespace is ignored; an empty
    list (``""``, ``"\\n"``: a CPU-less NUMA node) is ``[]``.  Anything else
    is a ``ValueError`` naming the offending element."""
    if not isinstance(text, str):
        raise TypeError(f"a cpulist is a str, not {type(text).__name__}")
    s = text.strip()
    if not s:
        return []
    out: set[int] = set()
    for part in s.split(","):
        m = _RANGE.fullmatch(part)
        if m is None:
            raise ValueError(f"bad cpulist {text.strip()!r}: {part!r} is not N, N-M or N-M:U/G")
        a = int(m.group(1))
        b = int(m.group(2)) if m.group(2) is not None else a
        if b < a:
            raise ValueError(f"bad cpulist {text.strip()!r}: range {part!r} goes backwards")
        if m.group(3) is not None:
            used, group = int(m.group(3)), int(m.group(4))
            if group == 0 or used == 0 or used > group:
                raise ValueError(f"bad cpulist {text.strip()!r}: group {part!r} needs 0 < U <= G")
            out.update(x for x in range(a, b + 1) if (x - a) % group < used)
        else:
            out.update(range(a, b + 1))
    return sorted(out)


def format_cpulist(cpus) -> str:
    """The kernel's cpulist of ``cpus`` (any iterable of ints): sorted,
    consecutive runs as ``a-b``: ``[0, 1, 2, 3, 8, 10, 11]`` ->
    ``"0-3,8,10-11"``; ``[]`` -> ``""``."""
    xs = sorted(set(int(c) for c in cpus))
    if xs and xs[0] < 0:
        raise ValueError(f"CPU numbers are >= 0, not {xs[0]}")
    parts = []
    i = 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[j] + 1:
            j += 1
        parts.append(str(xs[i]) if i == j else f"{xs[i]}-{xs[j]}")
        i = j + 1
    return ",".join(parts)


# ---------------------------------------------------------------------------
# the topology
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Cpu:
    """One online CPU (a hardware thread)."""
    cpu: int
    socket: int                  # physical_package_id
    core: int                    # core_id (unique within a socket only)
    node: int                    # NUMA node: 0 without NUMA in sysfs, -1 if no node lists it
    siblings: tuple = ()         # online hyperthread siblings, this CPU included, sorted
    thread: int = 0              # index of this CPU among its siblings (0: first thread)


@dataclass
class Topology:
    """The online CPUs of a machine and the process's affinity mask."""
    cpus: list                   # [Cpu], by CPU number
    allowed: tuple = ()          # the affinity mask (CPU numbers, sorted)
    model: str = "unknown CPU"
    kernel: str = ""
    offline: tuple = ()          # present (possible) but offline CPUs, where known
    node_ids: tuple = ()         # every NUMA node in sysfs, CPU-less ones included
    _by_id: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self):
        self.cpus = sorted(self.cpus, key=lambda c: c.cpu)
        self._by_id = {c.cpu: c for c in self.cpus}

    def cpu(self, n: int) -> Cpu:
        """The ``Cpu`` of CPU number ``n`` (``KeyError`` if not online)."""
        return self._by_id[n]

    @property
    def online(self) -> list:
        return [c.cpu for c in self.cpus]

    @property
    def sockets(self) -> dict:
        """socket -> [CPU numbers]."""
        out: dict = {}
        for c in self.cpus:
            out.setdefault(c.socket, []).append(c.cpu)
        return dict(sorted(out.items()))

    @property
    def nodes(self) -> dict:
        """NUMA node -> [CPU numbers] (nodes that hold online CPUs)."""
        out: dict = {}
        for c in self.cpus:
            out.setdefault(c.node, []).append(c.cpu)
        return dict(sorted(out.items()))

    @property
    def cores(self) -> dict:
        """(socket, first thread) -> [CPU numbers of that physical core]."""
        out: dict = {}
        for c in self.cpus:
            out.setdefault((c.socket, c.siblings[0] if c.siblings else c.cpu), []).append(c.cpu)
        return dict(sorted(out.items()))

    def describe(self) -> str:
        """One line: model, sockets x cores x threads, NUMA nodes, kernel."""
        per_socket: dict = {}
        threads = set()
        for (sock, _), cpus in self.cores.items():
            per_socket[sock] = per_socket.get(sock, 0) + 1
            threads.add(len(cpus))
        nsock = len(per_socket)
        cores = _span(per_socket.values())
        thr = _span(threads)
        nnodes = len(self.node_ids) if self.node_ids else len(self.nodes)
        mask = ""
        if set(self.allowed) != set(self.online):
            mask = f", affinity {format_cpulist(self.allowed) or 'none'}"
        off = f", {len(self.offline)} offline" if self.offline else ""
        return (f"{self.model}: {nsock} socket{'s' if nsock != 1 else ''} x {cores} cores"
                f" x {thr} thread{'s' if thr != '1' else ''} ({len(self.cpus)} CPUs online{off}{mask}),"
                f" {nnodes} NUMA node{'s' if nnodes != 1 else ''}, kernel {self.kernel or 'unknown'}")

    def to_dict(self) -> dict:
        """A JSON-ready dict (string keys)."""
        return {
            "model": self.model,
            "kernel": self.kernel,
            "online": format_cpulist(self.online),
            "offline": format_cpulist(self.offline),
            "allowed": format_cpulist(self.allowed),
            "sockets": {str(k): format_cpulist(v) for k, v in self.sockets.items()},
            "nodes": {str(k): format_cpulist(v) for k, v in self.nodes.items()},
            "node_ids": list(self.node_ids),
            "cpus": [dict(asdict(c), siblings=list(c.siblings)) for c in self.cpus],
            "describe": self.describe(),
        }


def _span(values) -> str:
    vs = sorted(set(values))
    if not vs:
        return "0"
    return str(vs[0]) if len(vs) == 1 else f"{vs[0]}-{vs[-1]}"


def _read(path: str):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _read_int(path: str):
    s = _read(path)
    if s is None:
        return None
    try:
        return int(s)
    except ValueError:
        raise ValueError(f"{path}: not an integer: {s!r}") from None


def _cpu_model(cpuinfo) -> str:
    text = _read(cpuinfo) if cpuinfo else None
    if text:
        for key in ("model name", "Model", "cpu model", "Hardware", "cpu"):
            for line in text.splitlines():
                k, sep, v = line.partition(":")
                if sep and k.strip() == key and v.strip():
                    return " ".join(v.split())
    return platform.processor() or "unknown CPU"


def read_topology(root: str = SYS, *, cpuinfo: str | None = None, allowed=None,
                  kernel: str | None = None) -> Topology:
    """The topology under ``root`` (a sysfs mount, or a fake tree in tests).

    ``cpuinfo``: the file with the CPU model (default ``/proc/cpuinfo`` for
    the real ``/sys``, none for another root).  ``allowed``: the affinity
    mask (default ``os.sched_getaffinity(0)`` for the real ``/sys``, every
    online CPU for another root).  ``kernel``: default
    ``platform.release()``."""
    real = os.path.realpath(root) == os.path.realpath(SYS)
    cpudir = os.path.join(root, "devices", "system", "cpu")
    if not os.path.isdir(cpudir):
        raise ValueError(f"{cpudir}: no such directory (is {root} a sysfs tree?)")
    text = _read(os.path.join(cpudir, "online"))
    present = sorted(int(m.group(1)) for e in os.listdir(cpudir)
                     if (m := re.fullmatch(r"cpu(\d+)", e)))
    if text is not None:
        online = parse_cpulist(text)
    else:   # old kernels / odd trees: cpuN/online ("0"/"1"; cpu0 often has none)
        online = [n for n in present
                  if _read(os.path.join(cpudir, f"cpu{n}", "online")) in (None, "1")]
    if not online:
        raise ValueError(f"{cpudir}: no online CPU")
    offline = tuple(n for n in present if n not in set(online))

    # NUMA nodes
    nodedir = os.path.join(root, "devices", "system", "node")
    node_of: dict = {}
    node_ids: list = []
    if os.path.isdir(nodedir):
        for e in os.listdir(nodedir):
            m = re.fullmatch(r"node(\d+)", e)
            if not m:
                continue
            node_ids.append(int(m.group(1)))
            cl = _read(os.path.join(nodedir, e, "cpulist"))
            for c in parse_cpulist(cl or ""):
                node_of.setdefault(c, int(m.group(1)))
    default_node = -1 if node_ids else 0

    onl = set(online)
    cpus = []
    for n in online:
        tdir = os.path.join(cpudir, f"cpu{n}", "topology")
        sock = _read_int(os.path.join(tdir, "physical_package_id"))
        core = _read_int(os.path.join(tdir, "core_id"))
        sib = _read(os.path.join(tdir, "thread_siblings_list"))
        sibs = [c for c in parse_cpulist(sib) if c in onl] if sib is not None else []
        if n not in sibs:
            sibs = sorted(set(sibs) | {n})
        cpus.append(Cpu(cpu=n,
                        socket=sock if sock is not None and sock >= 0 else 0,
                        core=core if core is not None and core >= 0 else n,
                        node=node_of.get(n, default_node),
                        siblings=tuple(sibs),
                        thread=sibs.index(n)))
    if allowed is None:
        allowed = os.sched_getaffinity(0) if real else online
    return Topology(cpus=cpus, allowed=tuple(sorted(set(int(c) for c in allowed))),
                    model=_cpu_model(cpuinfo if cpuinfo is not None else (CPUINFO if real else None)),
                    kernel=platform.release() if kernel is None else kernel,
                    offline=offline, node_ids=tuple(sorted(node_ids)))


# ---------------------------------------------------------------------------
# placement
# ---------------------------------------------------------------------------

def _interleave(seqs):
    out = []
    seqs = [list(s) for s in seqs]
    i = 0
    while any(i < len(s) for s in seqs):
        out.extend(s[i] for s in seqs if i < len(s))
        i += 1
    return out


def placement_order(topology: Topology, placement: str = "one-socket", *, allowed=None,
                    socket: int | None = None, smt: bool = True) -> list:
    """Every usable CPU in the order ``place`` hands them out."""
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {', '.join(PLACEMENTS)}, not {placement!r}")
    mask = set(topology.allowed if allowed is None else _cpus_arg(allowed, "allowed"))
    usable = [c for c in topology.cpus if c.cpu in mask]
    # socket -> cores (by first usable thread) -> usable threads
    per_socket: dict = {}
    for c in usable:
        key = c.siblings[0] if c.siblings else c.cpu
        per_socket.setdefault(c.socket, {}).setdefault(key, []).append(c.cpu)
    if socket is not None and socket not in per_socket:
        raise ValueError(f"socket {socket} has no usable CPU (sockets with usable CPUs: "
                         f"{', '.join(map(str, sorted(per_socket))) or 'none'})")
    order = sorted(per_socket)
    if socket is not None:
        order.remove(socket)
        order.insert(0, socket)
    levels = {}                       # socket -> [[first threads], [second threads], ...]
    for s in order:
        cores = sorted((sorted(t) for t in per_socket[s].values()), key=lambda t: t[0])
        depth = max(len(t) for t in cores) if smt else 1
        levels[s] = [[t[k] for t in cores if len(t) > k] for k in range(depth)]
    if placement == "one-socket":
        return [c for s in order for lvl in levels[s] for c in lvl]
    depth = max(len(levels[s]) for s in order) if order else 0
    return [c for k in range(depth)
            for c in _interleave(levels[s][k] if k < len(levels[s]) else [] for s in order)]


def _cpus_arg(cpus, name):
    if isinstance(cpus, str):
        return parse_cpulist(cpus)
    out = []
    for c in cpus:
        if isinstance(c, bool) or not isinstance(c, int) and not hasattr(c, "__index__"):
            raise ValueError(f"{name}: {c!r} is not a CPU number")
        out.append(int(c))
    return out


def place(topology: Topology, n: int, placement: str = "one-socket", cpus=None, allowed=None,
          *, oversubscribe: bool = False, socket: int | None = None, smt: bool = True) -> list:
    """``n`` CPU numbers for ``n`` workers (see the module docstring).

    ``cpus``: an explicit list (or cpulist string), used in its order; each
    must be online and in ``allowed`` (default: the topology's affinity
    mask).  ``socket``: the socket to fill first (``one-socket``) or start
    from (``spread``).  ``smt=False``: one thread per physical core only.
    ``oversubscribe=True``: wrap around when ``n`` exceeds the CPUs."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise ValueError(f"the number of workers must be an int, not {n!r}")
    if n < 0:
        raise ValueError(f"the number of workers must be >= 0, not {n}")
    mask = set(topology.allowed if allowed is None else _cpus_arg(allowed, "allowed"))
    if cpus is not None:
        chosen = _cpus_arg(cpus, "cpus")
        online = set(topology.online)
        seen = set()
        for c in chosen:
            if c not in online:
                raise ValueError(f"CPU {c} is not online (online: {format_cpulist(online)})")
            if c not in mask:
                raise ValueError(f"CPU {c} is not in the affinity mask "
                                 f"(allowed: {format_cpulist(mask) or 'none'})")
            if c in seen:
                raise ValueError(f"CPU {c} is listed twice")
            seen.add(c)
        pool = chosen
        what = f"{len(pool)} CPU{'s' if len(pool) != 1 else ''} given ({format_cpulist(pool)})"
    else:
        pool = placement_order(topology, placement, allowed=mask, socket=socket, smt=smt)
        what = (f"{len(pool)} usable CPU{'s' if len(pool) != 1 else ''}"
                f" ({format_cpulist(pool) or 'none'}{'' if smt else ', one per core'})")
    if n == 0:
        return []
    if n > len(pool):
        if not oversubscribe or not pool:
            raise ValueError(f"{n} workers but only {what}"
                             + ("; oversubscribe=True shares CPUs" if pool else ""))
        return [pool[i % len(pool)] for i in range(n)]
    return list(pool[:n])
