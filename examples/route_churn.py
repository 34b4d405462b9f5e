"""Route churn while forwarding: two workers loop over End traffic for 3 s
while the control plane replaces the route they use (and 100 others) as
fast as it can, in each route-cache mode.  Prints the update rate, the
forwarding rate, the dead-entry fallbacks (noref: packets dropped as
route_dead; refcount: references refused, which fall back to the null entry
and an ICMP unreachable), the generation check (packets that used a freed
or reused entry: must be 0) and the reference counts afterwards (must be
back at base: nothing listed).

    python examples/route_churn.py
"""
import threading
import time

import numpy as np

import fastpath
from fastpath.scenarios import SCENARIOS
from fastpath.reasons import REASON_IDS
cfg, pkts, iif = SCENARIOS["End"][1](1000, 256, 256, np.random.default_rng(1))
for mode in ("noref", "refcount"):
    with fastpath.Dataplane(cfg, workers=2, mode=mode, check_gen=True) as dp:
        out = {}
        th = threading.Thread(target=lambda: out.setdefault("r", dp.bench(pkts, iif, duration=3.0, start_delay=0.1)))
        th.start(); time.sleep(0.15)
        k = routes = 0; t0 = time.monotonic()
        while time.monotonic() - t0 < 2.7:
            dp.configure(f"ip -6 route replace fc00:2::/32 via 2001:db8:2::2 dev eth1 metric {k % 3}\n" +
                         "\n".join(f"ip -6 route replace 2600:{k % 7}:{j:x}::/48 via 2001:db8:2::2 dev eth1" for j in range(100)))
            k += 1; routes += 101
        dt = time.monotonic() - t0
        th.join()
        res = out["r"]
        pk = sum(r["packets"] for r in res)
        dead = sum(r["reasons"][REASON_IDS["route_dead"]] for r in res)
        nor = sum(r["reasons"][REASON_IDS["no_route"]] for r in res)
        c = dp.counters()
        dp.configure("")
        print(f"{mode}: {k} configures ({routes/dt:.0f} route changes/s), {pk/1e6:.1f} M packets "
              f"({sum(r['packets']/r['busy_s'] for r in res)/1e6:.1f} Mpps), route_dead {dead}, hold_fail {sum(r['hold_fail'] for r in res)}, "
              f"no_route {nor}, gen_violations {c['gen_violations']}, refcounts after {dp.refcounts()}")
