"""Which webhook URLs the server may call, and how they are shown.

A webhook target must be http:// or https:// with a host name; every address the host resolves to
must be public: loopback, private (10/8, 172.16/12, 192.168/16, fc00::/7), link-local (169.254/16,
fe80::/10, cloud metadata), multicast, reserved and unspecified addresses are refused, so an alert
cannot make the server call into its own network. PLATFORM_ALERT_WEBHOOK_ALLOW lists exceptions the
admin allows: host names (exact) or addresses / CIDR blocks (127.0.0.1, 10.0.0.0/8, ::1).

The check runs when a rule is saved and again right before each request; the request then connects
to the very address that was checked (`alerts.webhook`), so a name that resolves differently the
second time (DNS rebinding) cannot slip through. Redirects are not followed.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable
from urllib.parse import urlsplit

from django.conf import settings

Resolver = Callable[[str, int], list[str]]
MASK_KEEP_CHARS = 4


class UrlRefused(ValueError):
    """The URL may not be called; the message says why, naming the setting where that helps."""


def resolve(host: str, port: int) -> list[str]:
    """Every address `host` resolves to (IPv4 and IPv6)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return sorted({info[4][0] for info in infos})


def allow_list() -> list[str]:
    return list(getattr(settings, "PLATFORM_ALERT_WEBHOOK_ALLOW", []))


def _networks(entries: Iterable[str]) -> tuple[set[str], list[ipaddress._BaseNetwork]]:
    """Allow-list entries as (host names, networks)."""
    names, networks = set(), []
    for entry in entries:
        entry = entry.strip()
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            names.add(entry.lower().rstrip("."))
    return names, networks


def internal(address: ipaddress._BaseAddress) -> bool:
    """Whether an address belongs to a server's own network rather than the public internet."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return (
        address.is_loopback
        or address.is_private
        or address.is_link_local
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
        or not address.is_global
    )


def parts(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of a webhook URL, or UrlRefused."""
    if not isinstance(url, str) or not url.strip():
        raise UrlRefused("a webhook URL is required, e.g. https://hooks.slack.com/services/...")
    if len(url) > 500:
        raise UrlRefused("a webhook URL is at most 500 characters")
    if any(c.isspace() or ord(c) < 32 for c in url):
        raise UrlRefused("a webhook URL may not contain spaces or control characters")
    try:
        split = urlsplit(url)
        port = split.port
    except ValueError as exc:
        raise UrlRefused(f"not a valid URL: {exc}") from None
    if split.scheme not in ("http", "https"):
        raise UrlRefused("only http:// and https:// webhook URLs are allowed")
    if not split.hostname:
        raise UrlRefused("the webhook URL has no host")
    return split.scheme, split.hostname.lower().rstrip("."), port or (443 if split.scheme == "https" else 80)


def checked_addresses(url: str, *, allow: Iterable[str] | None = None, resolver: Resolver | None = None) -> list[str]:
    """The addresses a request to `url` may connect to (all that its host resolves to), or
    UrlRefused: bad scheme, unresolvable host, or any address internal and not allowed.
    allow: default PLATFORM_ALERT_WEBHOOK_ALLOW; resolver: default `resolve`."""
    resolver = resolver or resolve
    _scheme, host, port = parts(url)
    names, networks = _networks(allow_list() if allow is None else allow)
    try:
        literal = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        literal = None
    if literal is not None:
        addresses = [str(literal)]
    else:
        try:
            addresses = resolver(host, port)
        except (OSError, UnicodeError) as exc:
            raise UrlRefused(f"cannot resolve the webhook's host {host}: {exc}") from None
        if not addresses:
            raise UrlRefused(f"the webhook's host {host} resolves to no address")
        if host in names:
            return addresses
    for text in addresses:
        address = ipaddress.ip_address(text.split("%")[0])
        if internal(address) and not any(address in net for net in networks if net.version == address.version):
            shown = host if literal is not None else f"{host} ({text})"
            raise UrlRefused(
                f"the webhook's host {shown} is in a local or private network; an admin can allow "
                "it in PLATFORM_ALERT_WEBHOOK_ALLOW"
            )
    return addresses


def refusal(
    url: str, *, resolve_required: bool = True, allow: Iterable[str] | None = None, resolver: Resolver | None = None
) -> str:
    """Why `url` may not be a webhook target ("" when it may). With resolve_required False (saving
    a rule), a host that does not resolve now is accepted: sending checks again and records the error."""
    try:
        checked_addresses(url, allow=allow, resolver=resolver)
    except UrlRefused as exc:
        if not resolve_required and str(exc).startswith("cannot resolve"):
            return ""
        return str(exc)
    return ""


def masked(url: str) -> str:
    """scheme://host[:port]/… and the last few characters: the path and query (where webhook
    services put the secret) and any user:password are never shown back."""
    try:
        split = urlsplit(url)
        host = split.hostname or ""
        port = f":{split.port}" if split.port else ""
    except ValueError:
        return "…"
    rest = url[url.find(split.netloc) + len(split.netloc) :] if split.netloc else url
    tail = rest[-MASK_KEEP_CHARS:] if len(rest) >= 4 * MASK_KEEP_CHARS else ""
    shown_host = f"[{host}]" if ":" in host else host
    base = f"{split.scheme}://{shown_host}{port}/"
    return f"{base}…{tail}" if rest.strip("/") else base
