"""ip sr (ip/ipseg6.c): the seg6 tunnel source (``ip sr tunsrc set``,
seg6_genl_set_tunsrc in net/ipv6/seg6.c) and the HMAC keys (``ip sr hmac
set``, seg6_genl_sethmac; struct seg6_hmac_info, net/ipv6/seg6_hmac.c)."""
from __future__ import annotations

from .errors import _err
from .lexer import _Cur, _int, _matches, _parse_addr


SEG6_HMAC_SECRET_LEN = 64
HMAC_ALGOS = ("sha1", "sha256")


class _SrCommands:
    """State's ``ip sr`` commands."""

    # -- ip sr --------------------------------------------------------------------
    def _ip_sr(self, args: list):
        if not args:
            raise _err("missing 'tunsrc' or 'hmac' after 'ip sr'", "sr")
        what = _matches(args[0], ("hmac", "tunsrc"))
        if what is None:
            raise _err(f"unknown 'ip sr' command '{args[0]}' (expected tunsrc or hmac)", args[0])
        if len(args) < 2:
            raise _err(f"missing 'set' or 'show' after '{args[0]}'", args[0])
        verb = _matches(args[1], ("show", "set"))
        if verb == "show":
            return
        if verb != "set":
            raise _err(f"unknown 'ip sr {what}' command '{args[1]}' (expected set or show)",
                       args[1])
        cur = _Cur(args, 2)
        if what == "tunsrc":
            a = _parse_addr(cur.arg("an address"), 6, "address")
            self.sr_tunsrc = None if int(a) == 0 else a
        else:
            keyid = _int(cur.arg("a key id"), "hmac key id", 1, 2**32 - 1)
            algo = cur.arg("an algorithm (sha1 or sha256)")
            if algo not in HMAC_ALGOS:
                raise _err(f"Invalid HMAC algorithm '{algo}' (sha1 or sha256)", algo)
            secret = cur.arg("a secret (on the line; \"\" removes the key)").encode("utf-8",
                                                                                      "surrogateescape")
            if len(secret) > SEG6_HMAC_SECRET_LEN:
                raise _err(f"HMAC secret longer than {SEG6_HMAC_SECRET_LEN} bytes", "secret")
            if not secret:
                if keyid not in self.hmac_keys:
                    raise _err(f"hmac key {keyid}: No such file or directory", str(keyid))
                del self.hmac_keys[keyid]
            else:
                self.hmac_keys[keyid] = (algo, secret)
        if cur.more():
            raise _err(f"unexpected '{cur.peek()}'", cur.peek())
