"""ip rule (ip/iprule.c): the default rules of a namespace
(fib_default_rules_init in net/ipv4/fib_rules.c, fib6_rules_net_init in
net/ipv6/fib6_rules.c) and the State commands add / del (fib_nl_newrule,
fib_nl_delrule in net/core/fib_rules.c; l3mdev rules)."""
from __future__ import annotations

from .errors import _err, _unsupported
from .objects import RT_TABLE_DEFAULT, RT_TABLE_LOCAL, RT_TABLE_MAIN, Rule
from .lexer import _check_ifname, _Cur, _matches, _num, _parse_prefix, _table


_RULE_ACTIONS = ("lookup", "blackhole", "unreachable", "prohibit")


def _default_rules() -> dict:
    return {4: [Rule(4, 0, table=RT_TABLE_LOCAL), Rule(4, 32766, table=RT_TABLE_MAIN),
                Rule(4, 32767, table=RT_TABLE_DEFAULT)],
            6: [Rule(6, 0, table=RT_TABLE_LOCAL), Rule(6, 32766, table=RT_TABLE_MAIN)]}


class _RuleCommands:
    """State's ``ip rule`` commands."""

    # -- ip rule -----------------------------------------------------------------
    _RULE_UNSUPPORTED = frozenset({"tos", "dsfield", "fwmark", "realms", "protocol", "proto",
                                   "suppress_prefixlength", "suppress_ifgroup", "oif",
                                   "uidrange", "ipproto", "sport", "dport", "nat", "map-to",
                                   "not", "flowlabel", "dscp", "tun_id", "goto", "nop"})

    def _ip_rule(self, fam, args: list):
        if not args:
            return
        tok = args[0]
        sub = _matches(tok, ("list", "lst", "show", "flush", "save", "restore", "add", "delete",
                             "help"))
        if sub in ("list", "lst", "show"):
            return
        if sub not in ("add", "delete"):
            if sub is None:
                raise _err(f"unknown 'ip rule' command '{tok}' (expected add, del, show)", tok)
            raise _unsupported(f"ip rule {sub}")
        rest = args[1:]
        if not rest:
            raise _err(f"\"ip rule {'add' if sub == 'add' else 'del'}\" requires arguments.", tok)
        cur = _Cur(rest)
        f = [fam]
        pref = src = dst = iif = table = action = None
        l3mdev = False
        seen = set()

        def once(kw, t):
            if kw in seen:
                raise _err(f"duplicate '{t}'", t)
            seen.add(kw)

        def prefix(t):
            if t == "all":
                return None
            p = _parse_prefix(t, f[0])
            if p is None:
                return None
            if f[0] is None:
                f[0] = p[0].version
            return p[2]

        while cur.more():
            t = cur.take()
            if t == "from":
                once("from", t)
                src = prefix(cur.arg("a prefix"))
            elif t == "to":
                once("to", t)
                dst = prefix(cur.arg("a prefix"))
            elif t in ("pref", "preference", "prio", "priority", "order"):
                once("pref", t)
                pref = _num(cur, t, 0, 2**32 - 1)
            elif t in ("table", "lookup"):
                once("table", t)
                table = _table(cur.arg("a table id"), t)
            elif t in ("dev", "iif"):
                once("iif", t)
                iif = _check_ifname(cur.arg("an interface name"))
            elif t == "l3mdev":
                once("l3mdev", t)
                l3mdev = True
            elif t in self._RULE_UNSUPPORTED:
                raise _unsupported(t, "rule selector or action")
            else:
                if t == "type":
                    t = cur.arg("a rule type")
                if t == "unicast":
                    t = "lookup"
                if t not in _RULE_ACTIONS:
                    if t in ("goto", "nop"):
                        raise _unsupported(t)
                    raise _err(f"unknown rule selector or action '{t}' (expected from, to, pref, "
                               "iif, table, blackhole, unreachable, prohibit)", t)
                once("action", t)
                action = t
        fam = f[0] or 4
        if sub == "add" and l3mdev:
            # fib_nl2rule: an l3mdev rule looks up the VRF's table
            if table is not None:
                raise _err("Error: l3mdev and table are mutually exclusive.", "l3mdev")
            if action not in (None, "lookup"):
                raise _err(f"Error: l3mdev is a lookup rule, not {action}.", "l3mdev")
            table = 0
        if sub == "add":
            action = action or "lookup"
            if action == "lookup" and not l3mdev:
                if table is None:
                    table = RT_TABLE_MAIN
                if table == 0:
                    raise _err("a lookup rule needs a table other than 0", "0")
            elif table is None:
                table = 0
            rules = self.rules[fam]
            if pref is None:   # fib_default_rule_pref: the second rule's pref - 1
                pref = rules[1].pref - 1 if len(rules) >= 2 and rules[1].pref else 0
            if iif is not None:
                self._iface(iif)
            rule = Rule(fam, pref, src, dst, iif, table, action, l3mdev)
            # rule_exists(): same pref, action, table and iif, and the
            # selectors the new rule gives (fib[46]_rule_compare ignores the
            # ones it leaves out)
            if any(r.pref == pref and r.action == action and r.table == table and r.iif == iif
                   and r.l3mdev == l3mdev
                   and (src is None or r.src == src) and (dst is None or r.dst == dst)
                   for r in rules):
                raise _err(f"rule pref {pref}: RTNETLINK answers: File exists", str(pref))
            pos = len(rules)
            for k, r in enumerate(rules):
                if r.pref > pref:
                    pos = k
                    break
            rules.insert(pos, rule)
            return
        rules = self.rules[fam]
        for k, r in enumerate(rules):
            if pref is not None and r.pref != pref:
                continue
            if "from" in seen and r.src != src:
                continue
            if "to" in seen and r.dst != dst:
                continue
            if iif is not None and r.iif != iif:
                continue
            if table is not None and r.table != (table or RT_TABLE_MAIN):
                continue
            if action is not None and r.action != action:
                continue
            if l3mdev and not r.l3mdev:
                continue
            del rules[k]
            return
        spec = " ".join(rest)
        raise _err(f"rule '{spec}': RTNETLINK answers: No such file or directory", spec)
