"""The drop reason table is declared twice (Python for names, fp.pxd for the
compiled kernels); they must agree name for name and number for number."""
import pathlib
import re

from fastpath.reasons import REASON_NAMES, REASONS, VERDICTS
from fastpath import _datapath

PXD = pathlib.Path(__file__).resolve().parents[1] / "pyx" / "fp.pxd"


def _enum(prefix):
    text = PXD.read_text()
    return {m.group(1): int(m.group(2)) for m in re.finditer(rf"^\s+{prefix}_(\w+) = (\d+)$", text, re.M)}


def test_reasons_match_pxd():
    enum = _enum("R")
    count = enum.pop("COUNT")
    assert count == len(REASONS) == _datapath.Datapath.record_sizes()["reasons"]
    assert {name.upper(): i for i, name in enumerate(REASON_NAMES)} == enum


def test_verdicts_match_pxd():
    enum = _enum("V")
    assert {v.upper(): i for i, v in enumerate(VERDICTS)} == enum


def test_every_reason_documented():
    for name, kernel, desc in REASONS:
        assert re.fullmatch(r"[a-z0-9_]+", name)
        assert desc
