"""A stand-in for the class archive's workload: writes a small file where the JVM would."""

import sys

if __name__ == "__main__":
    from kafka_direct.runtime.jvm_archive import die_with_builder

    die_with_builder()
    with open(sys.argv[1], "wb") as out:
        out.write(b"archive" * 10)
