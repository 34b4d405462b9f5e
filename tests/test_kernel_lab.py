"""fastpath in place of the routers of lab scripts (python -m fastpath.kernel lab).

- ``labs/plain_router_test.sh``, a lab of our own in the kernel labs' shape
  that needs nothing the host kernel may lack: every check passes with
  fastpath as both routers (router-to-router and router-to-host pings
  included: the routers' own stacks behind fastpath), and every check fails
  in the control run (the routers' interfaces owned, no fastpath).
- The kernel's own SRv6 labs (``tools/testing/selftests/net/srv6_*.sh`` of
  the judging kernel's version, fetched unchanged by
  ``labs/get-kernel-selftests.sh``): run once with the kernel as the routers
  and once with fastpath; every check gives the same result.  The End.DT4
  lab's control run fails every check that crosses a router.  Each run is
  isolated in namespaces of its own, so they overlap: those with fastpath
  FASTPATH_LAB_JOBS (3) at a time, those with the kernel alone beside them.  These need
  seg6 and VRF (markers ``kernel_seg6``/``kernel_vrf``: in CI they run in
  the VM) and the scripts (``FASTPATH_SELFTESTS``: the directory holding
  them, default /usr/local/share/fastpath/selftests/tools/testing/selftests/net).
"""
import os
import pathlib
import re
import subprocess
import sys

import pytest

from test_wire import _why_skip

ROOT = pathlib.Path(__file__).resolve().parents[1]
PLAIN = str(ROOT / "tests" / "labs" / "plain_router_test.sh")
SELFTESTS = os.environ.get("FASTPATH_SELFTESTS",
                           "/usr/local/share/fastpath/selftests/tools/testing/selftests/net")
LABS = ("srv6_end_dt4_l3vpn_test.sh", "srv6_end_dt6_l3vpn_test.sh",
        "srv6_end_dt46_l3vpn_test.sh", "srv6_end_dx4_netfilter_test.sh",
        "srv6_end_dx6_netfilter_test.sh", "srv6_end_flavors_test.sh",
        "srv6_end_next_csid_l3vpn_test.sh", "srv6_end_x_next_csid_l3vpn_test.sh",
        "srv6_hencap_red_l3vpn_test.sh", "srv6_hl2encap_red_l2vpn_test.sh")

_SKIP = _why_skip()
pytestmark = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")

_CHECK = re.compile(r"TEST:\s*(.*?)\s*\[\s*(OK|FAIL)\s*\]")
_SUMMARY = re.compile(r"^fastpath lab: .*: (\d+) passed, (\d+) failed", re.M)


def _checks(out: str) -> list:
    """The script's checks, in order: (what, "OK" or "FAIL")."""
    return [(m.group(1), m.group(2)) for m in _CHECK.finditer(out)]


def _lab(script, *args):
    p = subprocess.run([sys.executable, "-m", "fastpath.kernel", "lab", *args, "--", script],
                       capture_output=True, text=True, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    return p.returncode, p.stdout, p.stderr


def test_plain_lab_with_fastpath_as_the_routers():
    rc, out, err = _lab(PLAIN)
    checks = _checks(out)
    assert rc == 0 and len(checks) == 13, out + err
    assert all(r == "OK" for _, r in checks), out
    m = re.search(r"forwarded (\d+), handed (\d+)", out)
    assert m and int(m.group(1)) > 0 and int(m.group(2)) > 0, out
    assert "Traceback" not in out + err


def test_plain_lab_control_fails_every_crossing_check():
    rc, out, err = _lab(PLAIN, "--control")
    checks = _checks(out)
    assert rc == 1 and len(checks) == 13, out + err
    assert all(r == "FAIL" for _, r in checks), out


def test_a_takeover_that_fails_says_why_and_fails_the_run(tmp_path):
    """No namespace matches: the lab runs on (against the kernel) but the
    run fails, naming the reason."""
    rc, out, err = _lab(PLAIN, "--routers", "^no-such-router")
    assert rc == 1, out + err
    assert "the take-over failed: no namespace matches --routers '^no-such-router'" in err


def test_lab_refuses_a_missing_script():
    rc, out, err = _lab("/nonexistent/lab.sh")
    assert rc == 2 and err.strip() == \
        "python -m fastpath.kernel: lab: /nonexistent/lab.sh: no such file", err


def _script(name):
    path = os.path.join(SELFTESTS, name)
    if not os.path.isfile(path):
        pytest.skip(f"the kernel's lab scripts are not at {SELFTESTS} (fetch them with "
                    f"tests/labs/get-kernel-selftests.sh, or set FASTPATH_SELFTESTS)")
    return path


# the runs with fastpath go JOBS at a time, those with the kernel alone
# (little CPU: most of a lab's time is its isolation checks waiting out
# their pings' 4 s timeout) beside them, KERNEL_JOBS at a time; each in
# namespaces of its own
JOBS = int(os.environ.get("FASTPATH_LAB_JOBS", "3"))
KERNEL_JOBS = 5


@pytest.fixture(scope="module")
def srv6_labs():
    """Every lab twice, with the kernel as the routers and with fastpath, and
    the End.DT4 lab's control run: {(name, mode): lab.run's result, with
    its output}."""
    import concurrent.futures
    import io

    from fastpath.kernel import lab
    paths = {name: _script(name) for name in LABS}
    jobs = [(n, m) for n in LABS for m in ("kernel", "fastpath")]
    jobs.append(("srv6_end_dt4_l3vpn_test.sh", "control"))

    def one(job):
        name, mode = job
        out = io.StringIO()
        res = lab.run(paths[name], control=mode == "control", kernel=mode == "kernel",
                      stdout=out)
        res["output"] = out.getvalue()
        return res

    kernel = [j for j in jobs if j[1] == "kernel"]
    mine = [j for j in jobs if j[1] != "kernel"]
    with concurrent.futures.ThreadPoolExecutor(KERNEL_JOBS) as kp, \
            concurrent.futures.ThreadPoolExecutor(JOBS) as fp:
        futures = {j: kp.submit(one, j) for j in kernel}
        futures.update({j: fp.submit(one, j) for j in mine})
        return {j: f.result() for j, f in futures.items()}


@pytest.mark.kernel_netns
@pytest.mark.kernel_seg6
@pytest.mark.kernel_vrf
@pytest.mark.parametrize("name", LABS, ids=[n[len("srv6_"):-len("_test.sh")] for n in LABS])
def test_kernel_srv6_lab_with_fastpath_as_the_routers(srv6_labs, name):
    k, f = srv6_labs[(name, "kernel")], srv6_labs[(name, "fastpath")]
    assert k["rc"] == 0 and k["checks"], \
        f"the lab fails with the kernel as the routers:\n{k['output']}"
    assert f["error"] is None, f["error"] + "\n" + f["output"]
    assert "Traceback" not in f["output"], f["output"]
    assert f["checks"] == k["checks"], "\n".join(
        f"{what}: kernel {kr}, fastpath {fr}" for (what, kr), (_, fr) in
        zip(k["checks"], f["checks"]) if kr != fr) or f["output"]
    assert f["rc"] == 0, f["output"]
    fwd = sum(c["counters"]["verdicts"].get("forward", 0) for c in f["counters"].values() if c)
    assert fwd > 0 and len(f["routers"]) >= 2, f


@pytest.mark.kernel_netns
@pytest.mark.kernel_seg6
@pytest.mark.kernel_vrf
def test_kernel_srv6_lab_control_fails_its_crossing_checks(srv6_labs):
    c = srv6_labs[("srv6_end_dt4_l3vpn_test.sh", "control")]
    assert c["error"] is None and c["rc"] == 1 and c["checks"], c["output"]
    crossing = [x for x in c["checks"] if "isolation" not in x[0].lower()]
    assert crossing and all(r == "FAIL" for _, r in crossing), c["output"]
