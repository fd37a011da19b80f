"""A token provider named by module path (``oauth_cb``): it records each call in a file.

``sasl.oauthbearer.config`` reaches it as its argument: here the file to append to.
"""

import os
import time


def provide(config):
    with open(config, "a") as marker:
        marker.write(f"{os.getpid()}\n")
    return "not-a-real-token", time.time() + 3600
