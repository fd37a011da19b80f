"""A stand-in for the class archive's workload that never ends on its own.

It writes part of an archive where the JVM would, then the pid of a child of its own (as
Spark's JVM and workers are), and waits. Told to fail (``KAFKA_DIRECT_TEST_WORKLOAD=fail``),
it exits with 1 at once and leaves a straggler in its process group that writes a whole
"archive" where it was told to a second later (as a JVM that ends after its driver does).
"""

import os
import subprocess
import sys
import time

if __name__ == "__main__":
    from kafka_direct.runtime.jvm_archive import die_with_builder

    die_with_builder()
    if os.environ.get("KAFKA_DIRECT_TEST_WORKLOAD") == "fail":
        late = f"import time; time.sleep(1); open({sys.argv[1]!r}, 'wb').write(b'x' * 99)"
        subprocess.Popen([sys.executable, "-c", late])
        sys.exit(1)
    with open(sys.argv[1], "wb") as out:
        out.write(b"half an archive")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(os.environ["KAFKA_DIRECT_TEST_PIDS"], "w") as out:
        out.write(f"{os.getpid()} {child.pid}\n")
    time.sleep(600)
