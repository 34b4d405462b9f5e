"""Numbers the compiled kernels and the Python side both know, declared once
per side: they must agree (as tests/test_reasons.py does for the drop
reasons).  The Python side is the source of truth for names: the behaviour
table (config.SEG6LOCAL_ACTIONS, the kernel's seg6_action_table), the seg6
encap modes (tables.SEG6_MODES), the headend record's action
(tables.S6_HEADEND) and the trace event codes (trace.T_*)."""
import pathlib
import re

from fastpath import tables, trace
from fastpath.config import SEG6LOCAL_ACTIONS

PYX = pathlib.Path(__file__).resolve().parents[1] / "pyx"


def _enum(path, prefix):
    text = (PYX / path).read_text()
    return {m.group(1): int(m.group(2))
            for m in re.finditer(rf"^\s+{prefix}_(\w+) = (\d+)\b", text, re.M)}


def test_seg6local_action_codes_match_the_behaviour_table():
    enum = _enum("fp.pxd", "S6")
    assert enum.pop("HEADEND") == tables.S6_HEADEND
    want = {name.upper().replace(".", "_").replace("ENCAPS", "ENCAP"): d.uapi
            for name, d in SEG6LOCAL_ACTIONS.items()}
    assert enum == want


def test_seg6_modes_match():
    enum = _enum("fp.pxd", "SEG6_MODE")
    assert enum == {m.upper().replace(".", "_"): v for m, v in tables.SEG6_MODES.items()}


def test_trace_event_codes_match():
    enum = _enum("datapath/ctx.pxi", "T")
    assert enum == {name[2:]: getattr(trace, name) for name in dir(trace)
                    if re.fullmatch(r"T_[A-Z0-9_]+", name)}
    assert set(trace._ACTIONS.values()) == set(SEG6LOCAL_ACTIONS)
