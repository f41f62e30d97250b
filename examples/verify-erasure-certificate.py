#!/usr/bin/env python3
"""Verify a Berth erasure certificate without Berth.

Usage: verify-erasure-certificate.py CERT KEYS [PREVIOUS]

CERT is a certificate (a compact JWS, as `berth cleanup certificate --save`
writes it), KEYS the agents' public keys as a JWK Set (`berth host keys
--save`), PREVIOUS optionally the previous certificate of the same media.
Needs only Python 3 and the `cryptography` package (Debian: python3-cryptography).
Exit 0 and the claims on stdout when valid; exit 1 with the reason otherwise.
"""
import base64
import hashlib
import json
import sys

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey


def b64url(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def thumbprint(jwk):
    # RFC 7638: the required members, sorted, no whitespace.
    canonical = json.dumps({"crv": jwk["crv"], "kty": jwk["kty"], "x": jwk["x"]},
                           separators=(",", ":"), sort_keys=True)
    return base64.urlsafe_b64encode(hashlib.sha256(canonical.encode()).digest()).rstrip(b"=").decode()


def fail(why):
    print(f"INVALID: {why}", file=sys.stderr)
    sys.exit(1)


def main(cert_file, keys_file, previous_file=None):
    jws = open(cert_file).read().strip()
    header_b64, payload_b64, signature_b64 = jws.split(".")
    header = json.loads(b64url(header_b64))
    claims = json.loads(b64url(payload_b64))
    if header.get("alg") != "EdDSA":
        fail(f"alg {header.get('alg')!r} is not EdDSA")
    keys = json.load(open(keys_file))
    keys = keys["keys"] if "keys" in keys else [keys]
    # A key is known by its thumbprint, whatever kid the file gives it.
    by_kid = {thumbprint(k): k for k in keys if k.get("kty") == "OKP" and k.get("crv") == "Ed25519"}
    key = by_kid.get(header["kid"])
    if key is None:
        fail(f"signed with key {header['kid']}, which is not among the trusted keys")
    public_key = Ed25519PublicKey.from_public_bytes(b64url(key["x"]))
    try:
        public_key.verify(b64url(signature_b64), f"{header_b64}.{payload_b64}".encode("ascii"))
    except InvalidSignature:
        fail("the signature does not verify")
    handover = None
    if previous_file:
        previous = open(previous_file).read().strip()
        previous_claims = json.loads(b64url(previous.split(".")[1]))
        previous_hash = "sha256:" + hashlib.sha256(previous.encode("ascii")).hexdigest()
        if claims["media"]["key"] != previous_claims["media"]["key"]:
            fail("the previous certificate is of another media")
        if claims["prev"] != previous_hash or claims["seq"] != previous_claims["seq"] + 1:
            fail("it does not follow the previous certificate (chain broken)")
        if previous_claims["host"] != claims["host"]:
            handover = f"{previous_claims['host']} -> {claims['host']}"
    print(json.dumps({
        "valid": True,
        "hash": "sha256:" + hashlib.sha256(jws.encode("ascii")).hexdigest(),
        "host": claims["host"],
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
    }, indent=2))


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    main(*sys.argv[1:])
