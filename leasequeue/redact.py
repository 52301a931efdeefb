"""Keeps credentials out of everything leasequeue shows: the password of a
Redis URL becomes ``***`` in error messages, logs, ``repr(app)`` and the
command line. Pure string work; it never parses a URL to connect with."""

from __future__ import annotations

import re
from urllib.parse import unquote

MASK = "***"

# scheme://[user]:password@ -> scheme://[user]:***@ (the user name is kept:
# it names the ACL user, which an operator needs to read an error)
_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s]*):(?P<secret>[^/\s]*)@")
# ...?password=secret&... (redis-py reads a password from the query too)
_QUERY = re.compile(r"(?P<head>[?&]password=)(?P<secret>[^&#\s]*)", re.IGNORECASE)


def redact_url(url: str) -> str:
    """``url`` with its password (userinfo or ``?password=``) replaced by ***."""
    url = _USERINFO.sub(lambda m: f"{m['head']}:{MASK}@", url)
    return _QUERY.sub(lambda m: f"{m['head']}{MASK}", url)


def secrets_of(url: str) -> list[str]:
    """The passwords written in ``url`` (as written and percent-decoded)."""
    found = [m["secret"] for m in (*_USERINFO.finditer(url), *_QUERY.finditer(url))]
    out: list[str] = []
    for secret in found:
        for form in (secret, unquote(secret)):
            if form and form != MASK and form not in out:
                out.append(form)
    return out


def redact(text: str, url: str) -> str:
    """``text`` (an error message, say) without the password of ``url`` in
    any form, and with any URL it contains redacted."""
    for secret in sorted(secrets_of(url), key=len, reverse=True):
        text = text.replace(secret, MASK)
    return redact_url(text)
