/* Atomics of the route caches and QSBR, as GCC/Clang __atomic builtins.
 *
 * Refcounts (refcount mode) use read-modify-write atomics (x86: lock xadd),
 * as the kernel's dst_hold()/dst_release() do; QSBR counters are plain
 * stores with release semantics and loads with acquire semantics, as
 * DPDK's rte_rcu_qsbr.  Kept in C so that Cython code can call them
 * `noexcept nogil` without any Python object.
 */
#ifndef FP_ATOMIC_H
#define FP_ATOMIC_H
#include <stdint.h>

static inline int32_t fp_atomic_fetch_add32(int32_t *p, int32_t v)
{
    return __atomic_fetch_add(p, v, __ATOMIC_ACQ_REL);
}

static inline int32_t fp_atomic_load32(const int32_t *p)
{
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static inline uint64_t fp_atomic_load64(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static inline void fp_atomic_store64(uint64_t *p, uint64_t v)
{
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
}

static inline uint64_t fp_atomic_fetch_add64(uint64_t *p, uint64_t v)
{
    return __atomic_fetch_add(p, v, __ATOMIC_ACQ_REL);
}

static inline void fp_atomic_fence(void)
{
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
#endif
