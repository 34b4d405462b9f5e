"""fastpath on live interfaces (``python -m fastpath.run``): AF_PACKET I/O
(``fastpath._afpacket``), the nftables guard that keeps the kernel from
routing the same packets (``nft``), the neighbour subsystem (``neigh``) and
the receive / process / transmit loop (``live``)."""
