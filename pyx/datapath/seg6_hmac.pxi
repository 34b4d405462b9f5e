# SRH HMAC: net/ipv6/seg6_hmac.c (seg6_hmac_compute, seg6_hmac_validate_skb,
# seg6_push_hmac).


cdef bint seg6_hmac_validate(const ctx_t* c, pkt_t* p) noexcept nogil:
    return seg6_hmac_validate_at(c, p, transport_offset(p))


cdef inline const fp_hmac_key* hmac_key_find(const ctx_t* c, uint32_t keyid) noexcept nogil:
    """seg6_hmac_info_lookup()."""
    cdef uint32_t k
    for k in range(c.nhmac):
        if c.hmac_keys[k].keyid == keyid:
            return &c.hmac_keys[k]
    return NULL


cdef bint seg6_hmac_compute(const fp_hmac_key* key, const uint8_t* srh, const uint8_t* saddr,
                            uint8_t* out) noexcept nogil:
    """seg6_hmac_compute(): the HMAC over source address (16), last entry
    (1), flags (1), key id (4) and every segment (16 each), truncated or
    zero-padded to the 32-byte field (SHA-1 gives 20).  False (-EMSGSIZE)
    when the text does not fit the kernel's 256-byte ring: 15 segments or
    more.  The caller has checked that the segments lie in the packet."""
    cdef uint8_t text[SEG6_HMAC_RING_SIZE]
    cdef uint8_t dg[32]
    cdef int32_t nseg = <int32_t>srh[4] + 1
    cdef int32_t plen = 16 + 1 + 1 + 4 + nseg * 16
    cdef int dlen
    if plen >= SEG6_HMAC_RING_SIZE:
        return False
    memcpy(text, saddr, 16)
    text[16] = srh[4]
    text[17] = srh[5]
    wr32(text + 18, key.keyid)
    memcpy(text + 22, srh + 8, nseg * 16)
    dlen = fp_hmac_prepared(key.algo, key.istate, key.ostate, text, plen, dg)
    if dlen > SEG6_HMAC_FIELD_LEN:
        dlen = SEG6_HMAC_FIELD_LEN
    memset(out, 0, SEG6_HMAC_FIELD_LEN)
    memcpy(out, dg, dlen)
    return True


cdef inline int32_t seg6_tlv_hmac(const uint8_t* srh, int32_t avail) noexcept nogil:
    """seg6_get_tlv_hmac(): offset (from the SRH) of the HMAC TLV, which the
    kernel expects as the SRH's last 40 bytes, or -1.  ``avail``: bytes of
    the packet from the SRH on (the kernel does not bound its reads; we
    return -1 rather than read past the packet)."""
    cdef int32_t srhlen, off
    if avail < 8:
        return -1
    if <int32_t>srh[1] < (<int32_t>srh[4] + 1) * 2 + 5:
        return -1
    if not (srh[5] & 0x08):
        return -1
    srhlen = (<int32_t>srh[1] + 1) << 3
    if srhlen > avail:
        return -1
    off = srhlen - 40
    if srh[off] != 5 or srh[off + 1] != 38:
        return -1
    return off


cdef bint seg6_hmac_validate_at(const ctx_t* c, pkt_t* p, int32_t th) noexcept nogil:
    """seg6_hmac_validate_skb(): as the kernel, reads the SRH at the
    transport header (``th``), whatever header is really there; per the
    ingress device's seg6_require_hmac: -1 ignore, 0 check an HMAC TLV when
    there is one, 1 require one.  A TLV whose key is unknown, or whose HMAC
    differs from the one computed, fails."""
    cdef const uint8_t* ip6 = p.row + p.l3
    cdef const uint8_t* srh = ip6 + th
    # __in6_dev_get(skb->dev): the VRF's for a packet received on an
    # enslaved device (vrf_ip6_rcv), the device's own otherwise
    cdef uint32_t v = l3mdev_of(c, p.iif)
    cdef const fp_dev* idev = dev_get(c, v if v else p.iif)
    cdef int require = idev.seg6_require_hmac if idev != NULL else 0
    cdef int32_t toff = seg6_tlv_hmac(srh, p.l3len - th) if th < p.l3len else -1
    cdef const fp_hmac_key* key
    cdef uint8_t out[SEG6_HMAC_FIELD_LEN]
    cdef uint64_t a0, a1, a2, a3, b0, b1, b2, b3
    if require > 0 and toff < 0:
        return False
    if require < 0 or toff < 0:
        return True
    key = hmac_key_find(c, rd32(srh + toff + 4))
    if key == NULL:
        return False
    if not seg6_hmac_compute(key, srh, ip6 + 8, out):
        return False
    # crypto_memneq: compare the 32 bytes without an early exit
    memcpy(&a0, out, 8)
    memcpy(&a1, out + 8, 8)
    memcpy(&a2, out + 16, 8)
    memcpy(&a3, out + 24, 8)
    memcpy(&b0, srh + toff + 8, 8)
    memcpy(&b1, srh + toff + 16, 8)
    memcpy(&b2, srh + toff + 24, 8)
    memcpy(&b3, srh + toff + 32, 8)
    return ((a0 ^ b0) | (a1 ^ b1) | (a2 ^ b2) | (a3 ^ b3)) == 0


cdef bint seg6_push_hmac(const ctx_t* c, const uint8_t* saddr, uint8_t* srh,
                         int32_t avail) noexcept nogil:
    """seg6_push_hmac(): fill the HMAC TLV of an SRH we build; False (the
    kernel's error, the packet is dropped) when the TLV is missing, the key
    unknown, or the segment list too long for the HMAC text."""
    cdef int32_t toff = seg6_tlv_hmac(srh, avail)
    cdef const fp_hmac_key* key
    if toff < 0:
        return False
    key = hmac_key_find(c, rd32(srh + toff + 4))
    if key == NULL:
        return False
    memset(srh + toff + 8, 0, SEG6_HMAC_FIELD_LEN)
    return seg6_hmac_compute(key, srh, saddr, srh + toff + 8)
