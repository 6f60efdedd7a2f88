"""Verifies webhook deliveries with Stripe's official Python verifier (stripe.Webhook.construct_event),
which implements the same `t=…,v1=…` scheme as Service-Signature (several v1 values allowed).

Reads a JSON list of {"body", "header", "secret"} on stdin; prints a JSON list of
{"ok": bool, "id": event id or null, "error": message or null}.
"""
import json
import sys

import stripe

results = []
for case in json.load(sys.stdin):
    try:
        event = stripe.Webhook.construct_event(case["body"], case["header"], case["secret"], tolerance=300)
        results.append({"ok": True, "id": event["id"], "error": None})
    except stripe.SignatureVerificationError as err:
        results.append({"ok": False, "id": None, "error": str(err)})
print(json.dumps(results))
