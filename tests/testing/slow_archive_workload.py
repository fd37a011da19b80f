"""A stand-in for the class archive's workload that never ends on its own.

It writes part of an archive where the JVM would, then the pid of a child of its own (as
Spark's JVM and workers are), and waits; its exit code is 1 when told to fail instead
(``KAFKA_DIRECT_TEST_WORKLOAD=fail``).
"""

import os
import subprocess
import sys
import time

if __name__ == "__main__":
    with open(sys.argv[1], "wb") as out:
        out.write(b"half an archive")
    if os.environ.get("KAFKA_DIRECT_TEST_WORKLOAD") == "fail":
        sys.exit(1)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(os.environ["KAFKA_DIRECT_TEST_PIDS"], "w") as out:
        out.write(f"{os.getpid()} {child.pid}\n")
    time.sleep(600)
