"""Record layouts: the numpy dtypes of fastpath/tables.py against the C
structs of pyx/fp.pxd."""
from fastpath import _datapath, tables


def test_record_sizes_match_structs():
    sizes = _datapath.Datapath.record_sizes()
    assert tables.DST_DTYPE.itemsize == sizes["dst"] == 64   # one cache line
    assert tables.NH_DTYPE.itemsize == sizes["nh"]
    assert tables.DEV_DTYPE.itemsize == sizes["dev"]
    assert tables.ADDR_DTYPE.itemsize == sizes["addr"]
    assert tables.RULE_DTYPE.itemsize == sizes["rule"]
    assert tables.NEIGH_DTYPE.itemsize == sizes["neigh"]
    assert tables.S6L_DTYPE.itemsize == sizes["s6l"]
    assert tables.HMAC_KEY_DTYPE.itemsize == sizes["hmac_key"]


def test_upper_bounds_are_kernel_hash_thresholds():
    # fib_rebalance: DIV_ROUND_CLOSEST(w << 31, total) - 1
    assert tables._upper_bounds([1]) == [(1 << 31) - 1]
    assert tables._upper_bounds([1, 1]) == [(1 << 30) - 1, (1 << 31) - 1]
    assert tables._upper_bounds([1, 2]) == [round((1 << 31) / 3) - 1, (1 << 31) - 1]


def test_field_offsets_match_structs():
    offs = _datapath.record_offsets()
    for name, dtype in (("dst", tables.DST_DTYPE), ("nh", tables.NH_DTYPE), ("dev", tables.DEV_DTYPE),
                        ("addr", tables.ADDR_DTYPE), ("rule", tables.RULE_DTYPE),
                        ("neigh", tables.NEIGH_DTYPE), ("s6l", tables.S6L_DTYPE),
                        ("hmac_key", tables.HMAC_KEY_DTYPE)):
        want = {f: dtype.fields[f][1] for f in dtype.names}
        assert offs[name] == want, name
