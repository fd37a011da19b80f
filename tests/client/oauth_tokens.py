"""A token provider named by module path (``oauth_cb``): it records each call in a file.

``sasl.oauthbearer.config`` reaches it as its argument: here the file to append to. The
token is an unsecured JWT (``alg: none``), which Apache Kafka's default OAUTHBEARER
validator takes when it names a subject and is not expired.
"""

import base64
import json
import os
import time


def _part(claims):
    return base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()


def provide(config):
    with open(config, "a") as marker:
        marker.write(f"{os.getpid()}\n")
    now = time.time()
    token = f"{_part({'alg': 'none'})}.{_part({'sub': 'tester', 'iat': now, 'exp': now + 3600})}."
    return token, now + 3600, "tester"
