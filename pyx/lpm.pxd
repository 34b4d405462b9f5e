# cython: language_level=3
"""C-level interface of the longest-prefix-match tables (see ``_lpm.pyx``).

``cimport lpm`` from any Cython module of the fast path (the include path is
``pyx/``).  This file holds only constants and ``cdef inline`` functions, so
cimporting it needs no runtime import of ``fastpath._lpm``.

Layout (DIR-24-8, as DPDK ``rte_lpm`` / ``rte_lpm6``):

* ``tbl24``: uint32[1 << 24], indexed by the first 24 address bits.
* ``groups``: uint32[G, 256] (used flat as uint32[G * 256]); a group is indexed
  by the next 8 address bits.  IPv4 uses at most one group level, IPv6 up to 13
  (bytes 3..15 of the address).  Group 0 is never used (and stays all zero).

Entry (uint32), same encoding for both families:

* bits 0..22  value (0 = no route); for an EXT entry, the group index;
* bits 23..30 depth (prefix length 0..128) of the prefix that wrote the entry
  (0 in EXT entries);
* bit 31      EXT: the entry points to a group.

The arrays only ever hold indices, never pointers, so they may live in shared
memory.  NB: ``Lpm`` reallocates ``groups`` when it grows; re-fetch the array
(``Lpm.groups``) after a route update.
"""
from libc.stdint cimport uint8_t, uint32_t

cdef extern from *:
    """
    #ifndef FASTPATH_LPM_CONSTANTS
    #define FASTPATH_LPM_CONSTANTS
    #define FP_LPM_VALUE_MASK   0x007FFFFFu  /* bits 0..22 */
    #define FP_LPM_DEPTH_SHIFT  23
    #define FP_LPM_DEPTH_MASK   0xFFu        /* after the shift */
    #define FP_LPM_EXT          0x80000000u  /* bit 31 */
    #define FP_LPM_TBL24_SIZE   (1u << 24)
    #define FP_LPM_GROUP_SIZE   256u
    #define FP_LPM_MAX_VALUE    0x007FFFFFu
    #endif
    """
    const uint32_t LPM_VALUE_MASK "FP_LPM_VALUE_MASK"
    const uint32_t LPM_DEPTH_SHIFT "FP_LPM_DEPTH_SHIFT"
    const uint32_t LPM_DEPTH_MASK "FP_LPM_DEPTH_MASK"
    const uint32_t LPM_EXT "FP_LPM_EXT"
    const uint32_t LPM_TBL24_SIZE "FP_LPM_TBL24_SIZE"
    const uint32_t LPM_GROUP_SIZE "FP_LPM_GROUP_SIZE"
    const uint32_t LPM_MAX_VALUE "FP_LPM_MAX_VALUE"


cdef inline uint32_t lpm_entry(uint32_t value, uint32_t depth) noexcept nogil:
    """Encode a (non-EXT) entry."""
    return (value & LPM_VALUE_MASK) | ((depth & LPM_DEPTH_MASK) << LPM_DEPTH_SHIFT)


cdef inline uint32_t lpm_entry_value(uint32_t e) noexcept nogil:
    return e & LPM_VALUE_MASK


cdef inline uint32_t lpm_entry_depth(uint32_t e) noexcept nogil:
    return (e >> LPM_DEPTH_SHIFT) & LPM_DEPTH_MASK


cdef inline bint lpm_entry_is_ext(uint32_t e) noexcept nogil:
    return (e & LPM_EXT) != 0


cdef inline uint32_t lpm4_lookup(const uint32_t* tbl24, const uint32_t* groups,
                                 uint32_t addr_host_order) noexcept nogil:
    """Value of the longest prefix matching an IPv4 address (0 = miss)."""
    cdef uint32_t e = tbl24[addr_host_order >> 8]
    if e & LPM_EXT:
        e = groups[(<size_t>(e & LPM_VALUE_MASK) << 8) | (addr_host_order & 0xFFu)]
        if e & LPM_EXT:      # never written for IPv4: corrupt table
            return 0
    return e & LPM_VALUE_MASK


cdef inline uint32_t lpm6_lookup(const uint32_t* tbl24, const uint32_t* groups,
                                 const uint8_t* addr) noexcept nogil:
    """Value of the longest prefix matching a 16-byte IPv6 address (0 = miss).

    Never reads past ``addr[15]``, whatever the table holds.
    """
    cdef uint32_t e = tbl24[(<uint32_t>addr[0] << 16) | (<uint32_t>addr[1] << 8) | addr[2]]
    cdef unsigned int i = 3
    while e & LPM_EXT:
        if i >= 16:          # deeper than 128 bits: corrupt table
            return 0
        e = groups[(<size_t>(e & LPM_VALUE_MASK) << 8) | addr[i]]
        i += 1
    return e & LPM_VALUE_MASK
