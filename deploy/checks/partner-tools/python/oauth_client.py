# (Not named token.py: that would shadow the standard library module of the same name.)
"""A partner's Python program: a client-credentials token from a standard OAuth library.

    python oauth_client.py LIBRARY MODE TOKEN_URL CLIENT_ID CLIENT_SECRET

LIBRARY is requests-oauthlib or authlib; MODE is default (each library's default client
authentication, HTTP Basic for both) or body (client_id and client_secret as form fields).
Prints the access token on stdout.
"""
import sys

library, mode, token_url, client_id, client_secret = sys.argv[1:6]

if library == "requests-oauthlib":
    from oauthlib.oauth2 import BackendApplicationClient
    from requests_oauthlib import OAuth2Session

    session = OAuth2Session(client=BackendApplicationClient(client_id=client_id))
    if mode == "default":
        # No auth given: requests-oauthlib sends HTTP Basic with the id and secret.
        token = session.fetch_token(token_url=token_url, client_id=client_id, client_secret=client_secret)
    else:
        token = session.fetch_token(token_url=token_url, client_id=client_id, client_secret=client_secret, include_client_id=True)
elif library == "authlib":
    from authlib.integrations.requests_client import OAuth2Session

    method = "client_secret_basic" if mode == "default" else "client_secret_post"
    session = OAuth2Session(client_id, client_secret, token_endpoint_auth_method=method)
    token = session.fetch_token(token_url, grant_type="client_credentials")
else:
    sys.exit(f"unknown library {library}")
print(token["access_token"])
