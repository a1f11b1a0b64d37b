"""The kubelet's `$(VAR)` expansion of command and args (k8s.io/kubernetes
third_party/forked/golang/expansion): `$(NAME)` from the container's env, `$$` an escaped `$`, an
incomplete or unknown reference left as written.

One pass over the text: each `$(` looks for its `)` once, and once no `)` is left, no later `$(` looks
again (a run of `$(` without a `)` would otherwise rescan the rest of the word each time).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from webhook.workloads.torchrun.limits import Meter
from webhook.workloads.torchrun.unknown import UNK

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")


def expand(text: str, env: Mapping[str, str | None], meter: Meter) -> str:
    if "$" not in text:
        return text  # nothing for the kubelet to do
    meter.charge(len(text))
    out: list[str] = []
    i, n = 0, len(text)
    no_close_after = n + 1  # no `)` at or after this index
    while i < n:
        j = text.find("$", i)
        if j < 0 or j + 1 >= n:
            out.append(text[i:])
            break
        out.append(text[i:j])
        nxt = text[j + 1]
        if nxt == "$":  # escaped operator
            out.append("$")
            i = j + 2
            continue
        if nxt != "(":
            out.append("$")
            i = j + 1
            continue
        close = text.find(")", j + 2) if j + 2 < no_close_after else -1
        if close < 0:  # incomplete reference: kept as is
            no_close_after = min(no_close_after, j + 2)
            out.append("$(")
            i = j + 2
            continue
        name = text[j + 2 : close]
        if name in env:
            value = env[name]
            value = value if value is not None else UNK
            meter.charge(len(value))
            out.append(value)
        elif _ENV_NAME.fullmatch(name):
            # The kubelet leaves an undefined reference as is, but envFrom (which we do not see)
            # may define it, and in a script `$(name)` is a command substitution: unknown.
            out.append(UNK)
        else:
            out.append(text[j : close + 1])  # `$((1+2))` and the like: left to the shell
        i = close + 1
    return "".join(out)
