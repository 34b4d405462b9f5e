"""fastpath's own SHA-1 / SHA-256 / HMAC (pyx/fp_sha.h) against Python's
hashlib and hmac: many random lengths, the block boundaries (55/56/63/64,
119/120, ...) where padding spills into a second block, long keys, and both
the SHA-NI and the portable C blocks."""
import hashlib
import hmac
import random

import pytest
from hypothesis import given, settings, strategies as st

from fastpath import _datapath

ALGOS = {1: hashlib.sha1, 2: hashlib.sha256}
EDGES = [0, 1, 3, 54, 55, 56, 57, 63, 64, 65, 118, 119, 120, 121, 127, 128, 129, 183, 184,
         191, 192, 246, 255, 256, 1000]


@pytest.fixture(params=[True, False], ids=["accel", "portable"])
def accel(request):
    before = _datapath.sha_accel()
    _datapath.sha_accel(request.param)
    if request.param and not _datapath.sha_accel():
        _datapath.sha_accel(before)
        pytest.skip("no SHA extensions on this CPU")
    yield request.param
    _datapath.sha_accel(before)


@pytest.mark.parametrize("algo", [1, 2])
def test_sha_block_boundaries(accel, algo):
    rng = random.Random(algo)
    for n in EDGES + [rng.randrange(0, 600) for _ in range(200)]:
        msg = rng.randbytes(n)
        assert _datapath.sha_digest(algo, msg) == ALGOS[algo](msg).digest(), n


@pytest.mark.parametrize("algo", [1, 2])
def test_hmac_block_boundaries(accel, algo):
    rng = random.Random(10 + algo)
    for n in EDGES:
        for klen in (0, 1, 16, 32, 63, 64, 65, 100, 200):
            key, msg = rng.randbytes(klen), rng.randbytes(n)
            assert _datapath.hmac_digest(algo, key, msg) == \
                hmac.new(key, msg, ALGOS[algo]).digest(), (n, klen)


@settings(max_examples=300, deadline=None)
@given(algo=st.sampled_from([1, 2]), key=st.binary(max_size=80), msg=st.binary(max_size=400))
def test_hmac_random(algo, key, msg):
    assert _datapath.hmac_digest(algo, key, msg) == hmac.new(key, msg, ALGOS[algo]).digest()


def test_rejects_unknown_algorithm():
    with pytest.raises(ValueError):
        _datapath.sha_digest(3, b"x")
    with pytest.raises(ValueError):
        _datapath.hmac_digest(0, b"k", b"x")
