#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# A small lab in the shape of the kernel's selftests/net/srv6_*.sh (hosts
# and routers as namespaces, a setup function, then checks printing
# "TEST: ... [ OK ]" / "[FAIL]"), with nothing the host kernel may lack:
#
#   hs-1 (10.0.1.1, fd00:1::1) -- rt-1 -- (fd00:12::/64) -- rt-2 -- hs-2 (10.0.2.1, fd00:2::1)
#
# The routers answer proxy ARP for a far host, and ping each other and the
# hosts.  Used by tests/test_kernel_lab.py to
# check python -m fastpath.kernel lab on any host.

SUFFIX=$(mktemp -u XXXXXX)
RT1=rt-1-$SUFFIX RT2=rt-2-$SUFFIX HS1=hs-1-$SUFFIX HS2=hs-2-$SUFFIX
ret=0 nsuccess=0 nfail=0

log_test()
{
	if [ "$1" -eq "$2" ]; then
		nsuccess=$((nsuccess+1)); printf "    TEST: %-60s  [ OK ]\n" "$3"
	else
		ret=1; nfail=$((nfail+1)); printf "    TEST: %-60s  [FAIL]\n" "$3"
	fi
}

cleanup()
{
	for ns in $RT1 $RT2 $HS1 $HS2; do ip netns del $ns 2>/dev/null; done
}

setup()
{
	for ns in $RT1 $RT2 $HS1 $HS2; do
		ip netns add $ns
		ip -n $ns link set lo up
		ip netns exec $ns sysctl -wq net.ipv6.conf.all.accept_dad=0
		ip netns exec $ns sysctl -wq net.ipv6.conf.default.accept_dad=0
	done
	ip -n $RT1 link add veth0 type veth peer name veth0 netns $RT2
	ip -n $RT1 addr add fd00:12::1/64 dev veth0 nodad
	ip -n $RT2 addr add fd00:12::2/64 dev veth0 nodad
	ip -n $RT1 addr add 10.0.12.1/24 dev veth0
	ip -n $RT2 addr add 10.0.12.2/24 dev veth0
	for i in 1 2; do
		eval rt=\$RT$i hs=\$HS$i
		ip -n $rt link add veth-hs type veth peer name veth0 netns $hs
		ip -n $rt addr add 10.0.$i.254/24 dev veth-hs
		ip -n $rt addr add fd00:$i::254/64 dev veth-hs nodad
		ip -n $hs addr add 10.0.$i.1/24 dev veth0
		ip -n $hs addr add fd00:$i::1/64 dev veth0 nodad
		ip -n $rt link set veth0 up
		ip -n $rt link set veth-hs up
		ip -n $hs link set veth0 up
		ip -n $hs route add default via 10.0.$i.254
		ip -n $hs -6 route add default via fd00:$i::254
		ip netns exec $rt sysctl -wq net.ipv4.ip_forward=1
		ip netns exec $rt sysctl -wq net.ipv6.conf.all.forwarding=1
	done
	ip -n $RT1 route add 10.0.2.0/24 via 10.0.12.2 dev veth0
	ip -n $RT1 -6 route add fd00:2::/64 via fd00:12::2 dev veth0
	ip -n $RT2 route add 10.0.1.0/24 via 10.0.12.1 dev veth0
	ip -n $RT2 -6 route add fd00:1::/64 via fd00:12::1 dev veth0
	# hs-1 thinks 10.0.9.1 is on its link: rt-1 answers ARP for it (proxy
	# ARP) and routes it on to hs-2, which has it on lo
	ip -n $HS1 addr add 10.0.9.2/24 dev veth0
	ip -n $HS2 addr add 10.0.9.1/32 dev lo
	ip -n $RT1 route add 10.0.9.1/32 via 10.0.12.2 dev veth0
	ip -n $RT1 route add 10.0.9.2/32 dev veth-hs
	ip -n $RT2 route add 10.0.9.1/32 via 10.0.2.1 dev veth-hs
	ip -n $RT2 route add 10.0.9.0/24 via 10.0.12.1 dev veth0
	ip -n $RT1 neigh add proxy 10.0.9.1 dev veth-hs 2>/dev/null
	ip netns exec $RT1 sysctl -wq net.ipv4.conf.veth-hs.proxy_arp=1
	sleep 1
}

check()
{
	local ns=$1 addr=$2 msg=$3
	ip netns exec $ns ping -c 1 -W 2 $addr >/dev/null 2>&1
	log_test $? 0 "$msg"
}

router_tests()
{
	check $RT1 fd00:12::2 "rt-1 -> rt-2 (IPv6, the core link)"
	check $RT2 fd00:12::1 "rt-2 -> rt-1 (IPv6, the core link)"
	check $RT1 10.0.12.2 "rt-1 -> rt-2 (IPv4, the core link)"
	check $RT1 10.0.1.1 "rt-1 -> hs-1 (IPv4)"
	check $RT2 10.0.1.1 "rt-2 -> hs-1 (IPv4, across rt-1)"
	check $RT1 fd00:2::1 "rt-1 -> hs-2 (IPv6, across rt-2)"
}

host_tests()
{
	check $HS1 10.0.1.254 "hs-1 -> its gateway rt-1 (IPv4)"
	check $HS1 fd00:1::254 "hs-1 -> its gateway rt-1 (IPv6)"
	check $HS1 10.0.2.1 "hs-1 -> hs-2 (IPv4)"
	check $HS1 fd00:2::1 "hs-1 -> hs-2 (IPv6)"
	check $HS2 10.0.1.1 "hs-2 -> hs-1 (IPv4)"
	check $HS1 10.0.9.1 "hs-1 -> 10.0.9.1 on its link (proxy ARP on rt-1)"
	check $HS1 10.0.2.254 "hs-1 -> rt-2's host-side address (IPv4)"
}

if [ "$(id -u)" -ne 0 ]; then
	echo "SKIP: Need root privileges"
	exit 4
fi

set -e
trap cleanup EXIT
setup
set +e

router_tests
host_tests

printf "\nTests passed: %3d\nTests failed: %3d\n" $nsuccess $nfail
exit $ret
