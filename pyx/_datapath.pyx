"""The compiled datapath: IPv6/IPv4 input, policy-rule walk, FIB lookup,
forwarding checks and ICMP errors, over a whole batch at a time.

Mirrors, step by step, the kernel functions named in the comments
(``ip6_rcv_core``, ``fib6_rule_lookup``, ``ip6_forward``, ``icmp6_send``,
``ip_rcv_core``, ``ip_route_input_slow``, ``ip_forward``, ``__icmp_send``).

Structure (VPP style): ``Datapath.process`` takes the batch's arrays as typed
memoryviews and hands raw pointers to ``noexcept nogil`` helpers; each packet's
decision is written to the batch's metadata arrays (verdict, reason, oif,
nexthop), never returned as Python objects.  Tables (route entries,
nexthops, devices, addresses, rules, LPMs) are numpy arrays built by
``fastpath/tables.py``; ``Datapath.load`` keeps references to them and caches
their pointers.
"""
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int32_t, int64_t
from libc.string cimport memcpy, memmove, memset, memcmp
from libc.stdlib cimport malloc, free
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC

cimport numpy as cnp
import numpy as np

from fp cimport *
from lpm cimport lpm4_lookup, lpm6_lookup, LPM_EXT, LPM_VALUE_MASK

cnp.import_array()

cdef extern from *:
    """
    #ifdef FASTPATH_DEBUG
    #define FP_DEBUG_BUILD 1
    #else
    #define FP_DEBUG_BUILD 0
    #endif
    static const uint8_t FP_IN6_ANY[16] = {0};
    static const uint8_t FP_IN6_LOOPBACK[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    """
    const int FP_DEBUG_BUILD
    const uint8_t* FP_IN6_ANY           # constants, so that the compiler turns
    const uint8_t* FP_IN6_LOOPBACK      # memcmp(a, C, 16) into two 8-byte compares

cdef extern from *:
    void fp_prefetch "__builtin_prefetch"(const void* p) noexcept nogil

# SHA-1 / SHA-256 / HMAC in C (pyx/fp_sha.h explains why fastpath has its own)
cdef extern from "fp_sha.h":
    int fp_sha_use_accel(int on) noexcept nogil
    int fp_sha(int algo, const uint8_t* msg, size_t len, uint8_t* out) noexcept nogil
    void fp_hmac_prepare(int algo, const uint8_t* key, size_t klen, uint32_t* istate,
                         uint32_t* ostate) noexcept nogil
    int fp_hmac_prepared(int algo, const uint32_t* istate, const uint32_t* ostate,
                         const uint8_t* msg, size_t len, uint8_t* out) noexcept nogil
    int fp_hmac(int algo, const uint8_t* key, size_t klen, const uint8_t* msg, size_t len,
                uint8_t* out) noexcept nogil

# SHA-NI blocks where the CPU has them (same bytes as the portable code)
SHA_ACCEL = bool(fp_sha_use_accel(1))

# True when built with FASTPATH_DEBUG=1 (bounds checks on)
DEBUG_BUILD = bool(FP_DEBUG_BUILD)

# The kernels, cut as the kernel's own files are (pyx/datapath/*.pxi): one
# compilation unit, so that the C compiler inlines across them as it would
# in one file; each file says in its first lines which kernel file it mirrors.
include "datapath/consts.pxi"
include "datapath/ctx.pxi"
include "datapath/addrconf.pxi"
include "datapath/fib_rules.pxi"
include "datapath/route.pxi"
include "datapath/dst.pxi"
include "datapath/icmp.pxi"
include "datapath/ip4_options.pxi"
include "datapath/ip6_input.pxi"
include "datapath/ip6_output.pxi"
include "datapath/seg6.pxi"
include "datapath/seg6_hmac.pxi"
include "datapath/seg6_local.pxi"
include "datapath/seg6_iptunnel.pxi"
include "datapath/ip4.pxi"
include "datapath/l2.pxi"
include "datapath/fast_path.pxi"
include "datapath/batch_loop.pxi"
include "datapath/load.pxi"
