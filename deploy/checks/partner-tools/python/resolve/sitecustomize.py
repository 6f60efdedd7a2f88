"""Loaded by every Python of the partner tools when PYTHONPATH holds this directory (partner-tools.sh
against a cluster): PT_RESOLVE ("name=address[,name=address...]") connects to those addresses for
those names, as curl --resolve does, so a partner's library reaches the ingress by the name its
certificate is for and verifies TLS for that name (REQUESTS_CA_BUNDLE names the CA to trust)."""
import os
import socket

_names = {}
for _pair in os.environ.get("PT_RESOLVE", "").split(","):
    _name, _, _address = _pair.strip().partition("=")
    if _name and _address:
        _names[_name.lower()] = _address

if _names:
    _getaddrinfo = socket.getaddrinfo

    def _resolve_fixed(host, *args, **kwargs):
        if isinstance(host, str) and host.lower() in _names:
            host = _names[host.lower()]
        return _getaddrinfo(host, *args, **kwargs)

    socket.getaddrinfo = _resolve_fixed
