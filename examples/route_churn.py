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
from fastpath.reasons import REASON_IDS
from fastpath.scenarios import SCENARIOS


def churn(mode, seconds=3.0):
    cfg, pkts, iif = SCENARIOS["End"][1](1000, 256, 256, np.random.default_rng(1))
    with fastpath.Dataplane(cfg, workers=2, mode=mode, check_gen=True) as dp:
        out = {}
        traffic = threading.Thread(target=lambda: out.setdefault(
            "res", dp.bench(pkts, iif, duration=seconds, start_delay=0.1)))
        traffic.start()
        time.sleep(0.15)
        k = changes = 0
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds - 0.3:
            dp.configure(f"ip -6 route replace fc00:2::/32 via 2001:db8:2::2 dev eth1 metric {k % 3}\n"
                         + "\n".join(f"ip -6 route replace 2600:{k % 7}:{j:x}::/48 via 2001:db8:2::2 dev eth1"
                                      for j in range(100)))
            k += 1
            changes += 101
        dt = time.monotonic() - t0
        traffic.join()
        res = out["res"]
        reason = lambda name: sum(r["reasons"][REASON_IDS[name]] for r in res)  # noqa: E731
        gen = dp.counters()["gen_violations"]
        dp.configure("")                     # one more grace period: reclaim what is left
        print(f"{mode}: {k} configures ({changes / dt:.0f} route changes/s), "
              f"{sum(r['packets'] for r in res) / 1e6:.1f} M packets "
              f"({sum(r['packets'] / r['busy_s'] for r in res) / 1e6:.1f} Mpps), "
              f"route_dead {reason('route_dead')}, hold_fail {sum(r['hold_fail'] for r in res)}, "
              f"no_route {reason('no_route')}, gen_violations {gen}, refcounts after {dp.refcounts()}")


if __name__ == "__main__":
    for m in ("noref", "refcount"):
        churn(m)
