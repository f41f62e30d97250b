#!/usr/bin/env python3
"""Verify a Berth erasure certificate without Berth.

Usage: verify-erasure-certificate.py [--allow-keys-without-host] CERT KEYS [PREVIOUS]

CERT is a certificate (a compact JWS, as `berth cleanup certificate --save`
writes it), KEYS the agents' public keys as a JWK Set (`berth host keys
--save`: each key names its host), PREVIOUS optionally the previous
certificate of the same media. The certificate must be signed by a key of
the host it claims; a key the set names no host for is refused unless
--allow-keys-without-host trusts it for any host.
Needs only Python 3 and the `cryptography` package (Debian: python3-cryptography).
Exit 0 and the claims on stdout when valid; exit 1 and one line
`INVALID: <why>` on stderr otherwise, a malformed input included.
"""
import base64
import binascii
import hashlib
import json
import re
import sys

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey


class Invalid(Exception):
    """What makes the certificate invalid, in words."""


def b64url(s, what):
    if not isinstance(s, str) or not re.fullmatch(r"[A-Za-z0-9_-]+", s):
        raise Invalid(f"{what} is not base64url")
    try:
        return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
    except (binascii.Error, ValueError):
        raise Invalid(f"{what} is not base64url") from None


def thumbprint(jwk):
    # RFC 7638: the required members, sorted, no whitespace.
    canonical = json.dumps({"crv": jwk["crv"], "kty": jwk["kty"], "x": jwk["x"]},
                           separators=(",", ":"), sort_keys=True)
    return base64.urlsafe_b64encode(hashlib.sha256(canonical.encode()).digest()).rstrip(b"=").decode()


def read(path, what):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except (OSError, UnicodeDecodeError) as e:
        raise Invalid(f"cannot read the {what} {path}: {e}") from None


def need(claims, name, kinds, what):
    value = claims.get(name)
    if not isinstance(value, kinds) or isinstance(value, bool) or value == "":
        raise Invalid(f"the {what} has no valid {name} claim ({value!r})")
    return value


def decode(jws, what):
    """The parts, header and claims of a compact JWS, with the claims this script reads checked."""
    parts = jws.split(".")
    if len(parts) != 3 or not jws.isascii():
        raise Invalid(f"the {what} is not a JWS in compact form (three base64url parts)")
    try:
        header = json.loads(b64url(parts[0], f"the {what}'s header"))
        claims = json.loads(b64url(parts[1], f"the {what}'s payload"))
    except ValueError:
        raise Invalid(f"the {what} has a header or payload that is not JSON") from None
    if not isinstance(header, dict) or not isinstance(claims, dict):
        raise Invalid(f"the {what} has a header or payload that is not a JSON object")
    if header.get("alg") != "EdDSA":
        raise Invalid(f"the {what}'s alg {header.get('alg')!r} is not EdDSA")
    if not isinstance(header.get("kid"), str) or header["kid"] == "":
        raise Invalid(f"the {what} names no key (kid)")
    if claims.get("kid") != header["kid"]:
        raise Invalid(f"the {what} names key {header.get('kid')!r} in its header and {claims.get('kid')!r} in its claims")
    for name in ("host", "address", "action", "started_at", "ended_at"):
        need(claims, name, (str,), what)
    need(claims, "seq", (int,), what)
    need(claims, "prev", (str, type(None)), what)
    media = need(claims, "media", (dict,), what)
    need(media, "key", (str,), f"{what}'s media")
    need(claims, "tenant", (dict, type(None)), what)
    need(claims, "nist_800_88", (dict, type(None)), what)
    return parts, header, claims


def trusted_keys(path):
    """(thumbprint, x, host or None) for each Ed25519 key of a JWK or a JWK Set."""
    try:
        doc = json.loads(read(path, "key file"))
    except ValueError:
        raise Invalid(f"the key file {path} is not JSON (a JWK, or a JWK Set {{\"keys\": [...]}})") from None
    entries = doc.get("keys", [doc]) if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise Invalid(f"the key file {path} is neither a JWK nor a JWK Set")
    keys = []
    for i, k in enumerate(entries):
        if not isinstance(k, dict) or k.get("kty") != "OKP" or k.get("crv") != "Ed25519":
            continue  # not an Ed25519 key: it verifies nothing here
        if not isinstance(k.get("x"), str) or not re.fullmatch(r"[A-Za-z0-9_-]{43}", k["x"]):
            raise Invalid(f"key {i} of the key file has no 32-byte x")
        host = k.get("host")
        if host is not None and (not isinstance(host, str) or host == ""):
            raise Invalid(f"key {i} of the key file has host {host!r}, not a host name")
        keys.append((thumbprint(k), k["x"], host))
    return keys


def verify(cert_file, keys_file, previous_file=None, allow_keys_without_host=False):
    jws = read(cert_file, "certificate")
    (header_b64, payload_b64, signature_b64), header, claims = decode(jws, "certificate")
    kid, claimed = header["kid"], claims["host"]
    # A key is known by its thumbprint, whatever kid the file gives it.
    matching = [(x, host) for (t, x, host) in trusted_keys(keys_file) if t == kid]
    if not matching:
        raise Invalid(f"signed with key {kid}, which is not among the trusted keys")
    # The key must be the key of the host the certificate claims.
    hosts = sorted({host for (_, host) in matching if host is not None})
    if claimed not in hosts:
        if hosts:
            raise Invalid(f"claims host {claimed}, but it is signed with key {kid}, "
                          f"which is host {', '.join(hosts)}'s key, not host {claimed}'s")
        if not allow_keys_without_host:
            raise Invalid(f"signed with key {kid}, which the key set names no host for, so it cannot be "
                          f"checked that the key is host {claimed}'s: save the key set again with "
                          "`berth host keys --save FILE`, or pass --allow-keys-without-host")
    public_key = Ed25519PublicKey.from_public_bytes(b64url(matching[0][0], "the key's x"))
    try:
        public_key.verify(b64url(signature_b64, "the signature"), f"{header_b64}.{payload_b64}".encode("ascii"))
    except InvalidSignature:
        raise Invalid("the signature does not verify") from None
    handover = None
    if previous_file:
        previous = read(previous_file, "previous certificate")
        _, _, previous_claims = decode(previous, "previous certificate")
        previous_hash = "sha256:" + hashlib.sha256(previous.encode("ascii")).hexdigest()
        if claims["media"]["key"] != previous_claims["media"]["key"]:
            raise Invalid("the previous certificate is of another media")
        if claims["prev"] != previous_hash or claims["seq"] != previous_claims["seq"] + 1:
            raise Invalid("it does not follow the previous certificate (chain broken)")
        if previous_claims["host"] != claimed:
            handover = f"{previous_claims['host']} -> {claimed}"
    return {
        "valid": True,
        "hash": "sha256:" + hashlib.sha256(jws.encode("ascii")).hexdigest(),
        "host": claimed,
        "key": kid,
        "media": claims["media"]["key"],
        "address": claims["address"],
        "tenant": claims["tenant"],
        "action": claims["action"],
        "nist_800_88": (claims["nist_800_88"] or {}).get("category"),
        "started_at": claims["started_at"],
        "ended_at": claims["ended_at"],
        "seq": claims["seq"],
        "prev": claims["prev"],
        # The chain across hosts (decision 63): the host before this link, and
        # whether nothing is known of the media before it (no prev).
        "handover": handover,
        "gap": claims["prev"] is None,
    }


if __name__ == "__main__":
    flag = "--allow-keys-without-host"
    args = [a for a in sys.argv[1:] if a != flag]
    if len(args) not in (2, 3):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    try:
        print(json.dumps(verify(*args, allow_keys_without_host=flag in sys.argv[1:]), indent=2))
    except Invalid as why:
        print(f"INVALID: {why}", file=sys.stderr)
        sys.exit(1)
