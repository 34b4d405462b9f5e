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
  lab's control run fails every check that crosses a router.  These need
  seg6 and VRF (markers ``kernel_seg6``/``kernel_vrf``: in CI they run in
  the VM) and the scripts (``FASTPATH_SELFTESTS``: the directory holding
  them, default /usr/local/share/fastpath/selftests/tools/testing/selftests/net).
"""
import glob
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


def _as_the_kernel(path):
    p = subprocess.run(["bash", path], capture_output=True, text=True,
                       cwd=os.path.dirname(path))
    return p.returncode, p.stdout + p.stderr


@pytest.mark.kernel_netns
@pytest.mark.kernel_seg6
@pytest.mark.kernel_vrf
@pytest.mark.parametrize("name", LABS, ids=[n[len("srv6_"):-len("_test.sh")] for n in LABS])
def test_kernel_srv6_lab_with_fastpath_as_the_routers(name):
    path = _script(name)
    krc, kout = _as_the_kernel(path)
    kernel = _checks(kout)
    assert krc == 0 and kernel, f"the lab fails with the kernel as the routers:\n{kout}"
    rc, out, err = _lab(path)
    mine = _checks(out)
    assert "Traceback" not in out + err, out + err
    assert mine == kernel, "\n".join(
        f"{what}: kernel {k}, fastpath {m}" for (what, k), (_, m) in zip(kernel, mine)
        if k != m) or out + err
    assert rc == 0, out + err
    m = re.search(r"forwarded (\d+), handed (\d+)", out)
    assert m and int(m.group(1)) > 0, out


@pytest.mark.kernel_netns
@pytest.mark.kernel_seg6
@pytest.mark.kernel_vrf
def test_kernel_srv6_lab_control_fails_its_crossing_checks():
    path = _script("srv6_end_dt4_l3vpn_test.sh")
    rc, out, err = _lab(path, "--control")
    checks = _checks(out)
    assert rc == 1 and checks, out + err
    crossing = [c for c in checks if "isolation" not in c[0].lower()]
    assert crossing and all(r == "FAIL" for _, r in crossing), out
