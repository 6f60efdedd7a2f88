"""A partner's Python program for a key-pair credential (SMART Backend Services): it discovers the
token endpoint from the authorization server's metadata (RFC 8414, Authlib's well-known URL and
metadata model), then gets a token with Authlib's PrivateKeyJWT (RFC 7523).

    python private_key_jwt.py ISSUER CLIENT_ID PRIVATE_KEY_PEM_FILE KID ALG

Prints the access token on stdout.
"""
import os
import sys
import time

issuer, client_id, key_file, kid, alg = sys.argv[1:6]
if issuer.startswith("http://127.0.0.1"):
    # Authlib wants https; the local stack is http, production https.
    os.environ.setdefault("AUTHLIB_INSECURE_TRANSPORT", "1")

import requests
from authlib.integrations.requests_client import OAuth2Session
from authlib.oauth2.rfc7523 import PrivateKeyJWT
from authlib.oauth2.rfc8414 import AuthorizationServerMetadata, get_well_known_url
from joserfc.jwk import ECKey, RSAKey

res = requests.get(get_well_known_url(issuer, external=True), timeout=10)
res.raise_for_status()
metadata = AuthorizationServerMetadata(res.json())
# What a client-credentials client relies on. (validate() as a whole also wants a non-empty
# response_types_supported, which describes an authorization endpoint this server does not have.)
for check in (
    metadata.validate_issuer,
    metadata.validate_token_endpoint,
    metadata.validate_grant_types_supported,
    metadata.validate_token_endpoint_auth_methods_supported,
    metadata.validate_token_endpoint_auth_signing_alg_values_supported,
    metadata.validate_scopes_supported,
):
    check()
if metadata["issuer"] != issuer:
    sys.exit(f"metadata issuer {metadata['issuer']} is not {issuer}")
if "private_key_jwt" not in metadata["token_endpoint_auth_methods_supported"]:
    sys.exit("private_key_jwt is not offered")
if alg not in metadata["token_endpoint_auth_signing_alg_values_supported"]:
    sys.exit(f"{alg} is not offered")
token_url = metadata["token_endpoint"]

with open(key_file) as f:
    key = (RSAKey if alg.startswith("RS") else ECKey).import_key(f.read())
# SMART: exp at most five minutes ahead (Authlib's default is an hour). A new PrivateKeyJWT per
# token request: Authlib keeps the jti it adds in the claims it was given.
auth = PrivateKeyJWT(token_url, claims={"exp": int(time.time()) + 300}, headers={"kid": kid}, alg=alg)
session = OAuth2Session(client_id, key, token_endpoint_auth_method="private_key_jwt")
session.register_client_auth_method(auth)
token = session.fetch_token(token_url, grant_type="client_credentials")
print(token["access_token"])
